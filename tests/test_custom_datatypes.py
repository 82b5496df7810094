"""Datatypes numpy has no type for. Those registered with TVM's Bring Your Own Datatype framework
(``tvm.target.datatype``): relay_aot computes on them as TVM's executors do -- constants of them
kept as their bits, kernels on them scalar (TVM does not lower vectors of them) -- and agrees
with numpy. And ``bfloat16``, whose constants TVM hands numpy as ``uint16``.

The datatype is TVM's own test type, a float32 under another type code whose operations are
functions built into libtvm (``FloatToCustom32``, ``Custom32Add``, ...), as in TVM's
tests/python/relay/test_custom_datatypes.py."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from conftest import BACKENDS
from tvm import relay
from tvm.target import datatype

import relay_aot

NAME, CODE = "relayaotfloat", 151
DTYPE = f"custom[{NAME}]32"


@pytest.fixture(scope="module", autouse=True)
def _registered():
    try:
        datatype.get_type_code(NAME)
        return
    except tvm.TVMError:
        pass
    datatype.register(NAME, CODE)
    lower = datatype.create_lower_func
    datatype.register_op(lower({(32, 32): "FloatToCustom32"}), "Cast", "llvm", "float", NAME)
    datatype.register_op(lower({(32, 32): "Custom32ToFloat"}), "Cast", "llvm", NAME, "float")
    datatype.register_op(lower({32: "FloatToCustom32"}), "FloatImm", "llvm", NAME)
    for op in ("Add", "Sub", "Mul", "Div", "Max"):
        datatype.register_op(lower({32: f"Custom32{op}"}), op, "llvm", NAME)
    datatype.register_op(lower({32: "Custom32Exp"}), "Call", "llvm", NAME, intrinsic_name="tir.exp")
    datatype.register_min_func(datatype.create_min_lower_func({32: "MinCustom32"}, NAME), NAME)


@pytest.mark.parametrize("backend", BACKENDS)
def test_constants_and_kernels_of_a_custom_datatype_agree_with_numpy(backend):
    rng = np.random.default_rng(0)
    weight = rng.uniform(0.5, 1.5, (4, 64)).astype("float32")
    bias = rng.uniform(-1, 1, (4, 64)).astype("float32")
    # The constants are cast to the custom type by TVM itself, as ChangeDatatype leaves them.
    to_custom = relay.create_executor("graph", target="llvm")
    with tvm.transform.PassContext(config={"tir.disable_vectorize": True}):
        w_custom, b_custom = (
            to_custom.evaluate(relay.Function([v], v.astype(DTYPE)))(value)
            for v, value in [(relay.var("w", shape=(4, 64)), weight), (relay.var("b", shape=(4, 64)), bias)]
        )
    x = relay.var("x", shape=(4, 64))
    y = relay.exp(relay.add(relay.multiply(x.astype(DTYPE), relay.const(w_custom)), relay.const(b_custom)))
    mod = tvm.IRModule.from_expr(relay.Function([x], y.astype("float32")))
    data = rng.uniform(-1, 1, (4, 64)).astype("float32")
    got = relay_aot.compile(mod, backend=backend)(data).numpy()
    np.testing.assert_allclose(got, np.exp(data * weight + bias), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bfloat16_constants_keep_their_dtype(backend):
    """TVM gives numpy a ``bfloat16`` array as ``uint16``; the constant stays bfloat16 (TVM's
    test_to_mixed_precision: a kernel's dtype assertion refused the uint16 constant)."""
    x = relay.var("x", shape=(2, 8))
    scale = relay.const(np.array(0.75, "float32")).astype("bfloat16")
    scale = relay.const(relay.create_executor("debug").evaluate(scale))
    assert scale.data.dtype == "bfloat16"
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.multiply(x.astype("bfloat16"), scale).astype("float32")))
    data = (np.arange(16, dtype="float32") - 8).reshape(2, 8) / 4  # exact in bfloat16, as are their products by 0.75
    got = relay_aot.compile(mod, backend=backend)(data).numpy()
    np.testing.assert_array_equal(got, data * 0.75)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bfloat16_argument_given_as_its_uint16_bits(backend):
    """A numpy uint16 array for a bfloat16 parameter is its bits -- what a bfloat16 NDArray's
    ``numpy()`` gives and how ONNX stores bfloat16 (ONNX's test_castlike_FLOAT_to_BFLOAT16)."""
    x = relay.var("x", shape=(4,), dtype="bfloat16")
    mod = tvm.IRModule.from_expr(relay.Function([x], x.astype("float32")))
    values = np.array([1.0, -2.5, 0.15625, 3.0], "float32")
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact: these values fit bfloat16
    np.testing.assert_array_equal(relay_aot.compile(mod, backend=backend)(bits).numpy(), values)

"""float32 ``tanh`` runs as TVM's vectorized ``fast_tanh`` (passes/rational_tanh.py): at least
as accurate as TVM's own ``tanh`` against float64, with NaN and infinities kept; other dtypes
are left alone."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot.compiler import generate_source


def _tanh_module(dtype: str, n: int) -> tvm.IRModule:
    x = relay.var("x", shape=(n,), dtype=dtype)
    return tvm.IRModule.from_expr(relay.Function([x], relay.tanh(x)))


def _values() -> np.ndarray:
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-7, 3e-4, 5e-4, 8.99, 9.01, -50.0, 1e30]
    return np.concatenate([np.linspace(-10, 10, 20001), edges]).astype("float32")


def test_float32_tanh_is_rational_and_accurate():
    x = _values()
    mod = _tanh_module("float32", x.size)
    assert "fused_fast_tanh" in generate_source(mod, name="t") and "fused_tanh" not in generate_source(mod, name="t")
    got = relay_aot.compile(mod)(x).numpy().astype("float64")
    ref = np.tanh(x.astype("float64"))
    assert np.isnan(got[np.isnan(ref)]).all()
    finite = ~np.isnan(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=4e-7, atol=0)
    # TVM's own tanh, for comparison, is no better: 1 - exp(-2x) cancels near zero
    with tvm.transform.PassContext(opt_level=0):
        theirs = relay.create_executor("debug", mod=mod, target="llvm").evaluate()(x).numpy().astype("float64")
    small = finite & (np.abs(ref) < 1e-2) & (ref != 0)
    assert (np.abs(theirs - ref) / np.abs(ref))[small].max() > (np.abs(got - ref) / np.abs(ref))[small].max()


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_other_dtypes_keep_tanh(dtype):
    source = generate_source(_tanh_module(dtype, 8), name="t")
    assert "fused_tanh" in source and "fast_tanh" not in source

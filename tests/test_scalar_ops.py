"""Every row of the scalar-operator table (relay_aot/kernels/scalar_ops.py), on every dtype it
accepts, computed natively by both backends and by TVM's kernels (the interpreter): adding a row
adds its cases here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot import testing
from relay_aot.kernels.scalar_ops import SCALAR_OPS, accepts

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "uint32", "float32", "float64"]

#: Operand pairs per dtype: signs, rounding directions, overflow, NaN, signed zero. No zero
#: divisor (TVM's kernels trap on it) and no INT_MIN / -1 (LLVM's sdiv traps on it).
PAIRS = {
    "bool": [(True, False), (True, True), (False, False)],
    "int8": [(-7, 2), (9, -4), (127, 3), (-128, 5)],
    "int32": [(-7, 2), (9, -4), (2**31 - 1, 2), (-(2**31), 7)],
    "int64": [(-7, 2), (9, -4), (2**62, -3), (-(2**63), 7)],
    "uint8": [(7, 2), (200, 3), (255, 255), (0, 9)],
    "uint32": [(7, 2), (2**32 - 1, 3), (0, 9)],
    "float32": [(-7.5, 2.0), (0.1, -0.0), (float("nan"), 1.0), (1e38, 1e-38)],
    "float64": [(-7.5, 2.0), (0.1, -0.0), (float("nan"), 1.0), (1e308, -3.0)],
}


SHIFTS = ("left_shift", "right_shift")


def _applications(a, b, c, dtype: str) -> list:
    """Every operator of the table applicable to operands of ``dtype``, applied."""
    out = []
    for spec in SCALAR_OPS.values():
        if spec.name == "cast":
            out += [relay.cast(a, target) for target in DTYPES if target != dtype]
            continue
        if spec.name in SHIFTS:  # amounts within the width only (beyond it LLVM's result is poison)
            if np.dtype(dtype).kind in "iu":
                bits = np.iinfo(dtype).bits
                out += [relay.Call(tvm.ir.Op.get(spec.name), [a, relay.const(k, dtype)]) for k in (0, 1, bits - 1)]
            continue
        operands = {1: [a], 2: [a, b], 3: [c, a, b]}[spec.arity]
        result = (
            "bool" if spec.name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal") else dtype
        )
        # applied even where the table leaves it to TVM's kernels (kernel_only): that is checked too
        if accepts(dataclasses.replace(spec, kernel_only=()), [o.type_annotation.dtype for o in operands], result):
            out.append(relay.Call(tvm.ir.Op.get(spec.name), operands))
    return out


def _module(dtype: str) -> tvm.IRModule:
    a, b = relay.var("a", shape=(), dtype=dtype), relay.var("b", shape=(), dtype=dtype)
    c = relay.var("c", shape=(), dtype="bool")
    return tvm.IRModule.from_expr(relay.Function([a, b, c], relay.Tuple(_applications(a, b, c, dtype))))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_scalar_operator_matches_tvm_kernels(dtype):
    mod = _module(dtype)
    compiled = {backend: relay_aot.compile(mod, backend=backend) for backend in ("cpp", "python")}
    left_to_kernels = any(dtype in spec.kernel_only for spec in SCALAR_OPS.values())
    assert left_to_kernels or "call_kernel(" not in compiled["cpp"].source, "an operator was not computed natively"
    interpreter = testing.reference(mod, "interpreter")
    for a, b in PAIRS[dtype]:
        for c in (True, False):
            args = (np.array(a, dtype), np.array(b, dtype), np.array(c))
            with np.errstate(all="ignore"):
                expected = testing.normalize(interpreter(*args))
            for backend, module in compiled.items():
                testing.assert_same(
                    testing.normalize(module(*args)),
                    expected,
                    rtol=1e-6,
                    atol=0,
                    names=(f"relay_aot {backend}", "TVM kernels"),
                )


def test_integer_division_by_zero_raises_on_both_backends():
    mod = _module("int32")
    for backend in ("cpp", "python"):
        with pytest.raises(ZeroDivisionError, match="integer division by zero"):
            relay_aot.compile(mod, backend=backend)(np.int32(1), np.int32(0), np.bool_(True))

"""Float divisions by a constant that TVM's simplifier refuses to build.

Relay's float ``divide`` (and ``floor_divide``, ``trunc_divide``, the ``mod`` family) by zero is
IEEE's: ``x / 0.0`` is an infinity or NaN. A scalar constant that FuseOps leaves in a kernel
becomes an immediate of the kernel's expression, and TVM's constant folding checks every
division by an immediate (``Check failed: fb->value != 0 : Divide by zero``) and rewrites the
others into a product by the reciprocal, which for a denormal divisor overflows the dtype
(``Literal value 7.13624e+44 exceeds maximum of float32``): the kernel did not build at
``opt_level`` 2 and up, where the divisor is a constant by then (both found by the fuzz
campaign). :func:`zero_divisors_loaded` gives such a divisor -- one whose reciprocal is not
finite -- to the kernel as a one-element constant reshaped to a scalar, which the kernel loads
and divides by; the values are IEEE's. Other constant divisors are left to TVM's product by the
reciprocal, as its executors compute them. Run just before FuseOps, after the last constant
folding (which would fold it back).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay

from .walk import CallRewriter, calls_any, rewrite_functions

#: Operators whose second operand divides.
DIVISIONS = ("divide", "floor_divide", "trunc_divide", "floor_mod", "mod", "trunc_mod")


def _unfoldable(expr: relay.Expr) -> bool:
    """Whether ``expr`` is a float scalar constant whose reciprocal is not finite in its dtype:
    zero, or a denormal below the reciprocal of the largest value."""
    if not isinstance(expr, relay.Constant) or expr.data.shape != ():
        return False
    value = expr.data.numpy()
    if value.dtype.kind != "f":
        return False
    with np.errstate(divide="ignore", over="ignore"):
        return not np.isfinite(np.reciprocal(value))


class _Loaded(CallRewriter):
    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in DIVISIONS or len(new.args) != 2:
            return None
        divisor = new.args[1]
        if not _unfoldable(divisor):
            return None
        loaded = relay.reshape(relay.const(divisor.data.numpy().reshape(1)), [])
        return relay.Call(new.op, [new.args[0], loaded], new.attrs, new.type_args, new.span)


@tvm.transform.module_pass(opt_level=0, name="ZeroDivisorsLoaded")
def zero_divisors_loaded(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """``mod`` with each float scalar constant that divides and has no finite reciprocal (zero, a
    small denormal) given to its kernel as a loaded value (module docstring)."""
    return rewrite_functions(mod, lambda func: _Loaded() if calls_any(func, set(DIVISIONS)) else None)

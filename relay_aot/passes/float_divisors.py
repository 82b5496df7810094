"""Float divisions by a constant zero that TVM's simplifier refuses to build.

Relay's float ``divide`` (and ``floor_divide``, ``trunc_divide``, the ``mod`` family) by zero is
IEEE's: ``x / 0.0`` is an infinity or NaN. A scalar constant that FuseOps leaves in a kernel
becomes an immediate of the kernel's expression, and TVM's constant folding checks every
division by an immediate (``Check failed: fb->value != 0 : Divide by zero``): the kernel of
``divide(x, 0f)`` did not build at ``opt_level`` 2 and up, where the zero is a constant by then
(found by the fuzz campaign). :func:`zero_divisors_loaded` gives such a divisor to the kernel as
a one-element constant reshaped to a scalar, which the kernel loads; the values are IEEE's.
Run just before FuseOps, after the last constant folding (which would fold it back).
"""

from __future__ import annotations

import tvm
from tvm import relay

from .walk import CallRewriter, calls_any, rewrite_functions

#: Operators whose second operand divides.
DIVISIONS = ("divide", "floor_divide", "trunc_divide", "floor_mod", "mod", "trunc_mod")


def _float_zero_scalar(expr: relay.Expr) -> bool:
    if not isinstance(expr, relay.Constant) or expr.data.shape != ():
        return False
    value = expr.data.numpy()
    return value.dtype.kind == "f" and value == 0


class _Loaded(CallRewriter):
    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in DIVISIONS or len(new.args) != 2:
            return None
        divisor = new.args[1]
        if not _float_zero_scalar(divisor):
            return None
        loaded = relay.reshape(relay.const(divisor.data.numpy().reshape(1)), [])
        return relay.Call(new.op, [new.args[0], loaded], new.attrs, new.type_args, new.span)


@tvm.transform.module_pass(opt_level=0, name="ZeroDivisorsLoaded")
def zero_divisors_loaded(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """``mod`` with each float scalar constant zero that divides given to its kernel as a loaded
    value (module docstring)."""
    return rewrite_functions(mod, lambda func: _Loaded() if calls_any(func, set(DIVISIONS)) else None)

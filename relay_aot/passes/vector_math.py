"""float32 ``tanh``, ``exp`` and ``sigmoid`` computed in vector registers.

TVM lowers ``exp`` for LLVM to ``llvm.exp``, which LLVM cannot vectorize without a vector math
library: a kernel extracts each lane and calls the C library's ``expf``. ``sigmoid`` is
``1 / (1 + exp(-x))``, and ``tanh`` ``(1 - exp(-2x)) / (1 + exp(-2x))`` (or its mirror): two
calls per element. On an AVX-512 Xeon, one thread, that is about 1 us per 256 values for
``exp`` or ``sigmoid`` and 2.1 us for ``tanh``, where a 256 x 256 matrix-vector product takes
2.4 us: an RNN's ``tanh(x W + b)`` at 256 units spent half its step there, where onnxruntime's
vectorized functions cost next to nothing.

So, for float32 only:

* ``tanh`` becomes TVM's ``fast_tanh`` (Eigen's rational polynomial of degree 13/6 on [-9, 9],
  ``x`` itself below 0.0004): 0.1 us for the same 256 units. Over [-10, 10] its largest
  relative error is 2.7e-7, where TVM's ``tanh`` loses digits near zero (``1 - exp(-2x)``
  cancels: 6.8e-5); NaN stays NaN and +-inf give +-1.
* ``exp`` becomes Cephes' ``expf`` written in Relay's elementwise operators: ``x = n ln2 + r``
  with ``|r| <= ln2 / 2`` (``ln2`` in two parts, so ``n ln2`` is exact), a polynomial of degree
  6 in ``r``, and the scale ``2^n`` applied as two powers of two built from their bits, so that
  results near overflow (``exp(88.72)``) and in the denormal range (``exp(-103.9)``) are those
  of the C library, and overflow gives inf. At most 1.4 ulp from the exact value over
  [-110, 95] (the C library: 1.0); NaN stays NaN, ``exp(-inf)`` is 0.
* ``sigmoid`` becomes ``1 / (1 + exp(-x))`` with that ``exp``, as TVM computes it (2.3 ulp;
  TVM's 2.2).

From ``opt_level=1``, where kernels fuse: fused with their neighbours as before, all of it
vectorizes (unfused, ``exp``'s twenty operators would be twenty kernels). TVM's ``fast_exp``
is not used: it clamps its argument to +-88.38, so ``exp(88.7)`` came out as inf and
``exp(-100)`` as 1e-39.
"""

from __future__ import annotations

import tvm
from tvm import relay

from .walk import CallRewriter, calls_any, op_name, rewrite_functions

_FAST_TANH = tvm.ir.Op.get("fast_tanh")

#: Cephes' expf: log2(e), ln 2 in two parts (the first exact in few bits), the polynomial's
#: coefficients from the highest degree.
_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                   5.0000001201e-1)
#: Beyond these exp is inf or 0 in float32; inside them 2^n splits into two normal powers of 2.
_EXP_MIN, _EXP_MAX = -104.0, 89.0


def _f32(value: float) -> relay.Constant:
    return relay.const(value, "float32")


def _i32(value: int) -> relay.Constant:
    return relay.const(value, "int32")


def _power_of_two(k: relay.Expr) -> relay.Expr:
    """2^k for int32 ``k`` in [-126, 127], from the bits of a float32."""
    return relay.reinterpret(relay.left_shift(k + _i32(127), _i32(23)), "float32")


def vector_exp(x: relay.Expr) -> relay.Expr:
    """``exp(x)`` of float32 ``x`` in elementwise operators that vectorize (module docstring)."""
    clipped = relay.clip(x, _EXP_MIN, _EXP_MAX)
    n = relay.round(clipped * _f32(_LOG2E))
    r = clipped - n * _f32(_LN2_HI) - n * _f32(_LN2_LO)
    p = _f32(_EXP_POLYNOMIAL[0])
    for coefficient in _EXP_POLYNOMIAL[1:]:
        p = p * r + _f32(coefficient)
    mantissa = p * (r * r) + r + _f32(1.0)
    whole = relay.cast(n, "int32")
    half = relay.right_shift(whole, _i32(1))  # n = half + rest, each within a float32's exponents
    scaled = mantissa * _power_of_two(half) * _power_of_two(whole - half)
    return relay.where(relay.isnan(x), x, scaled)


def _tanh(x):
    return relay.Call(_FAST_TANH, [x])


def _sigmoid(x):
    return _f32(1.0) / (_f32(1.0) + vector_exp(relay.negative(x)))


_REWRITES = {"tanh": _tanh, "exp": vector_exp, "sigmoid": _sigmoid}


class _Vectorized(CallRewriter):
    def rewrite_call(self, call, new):
        name = op_name(call)
        if name not in _REWRITES or getattr(call.checked_type, "dtype", None) != "float32":
            return None
        return _REWRITES[name](new.args[0])


def rewrite(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every float32 ``tanh``, ``exp`` and ``sigmoid`` in vector form (see the
    module)."""
    return rewrite_functions(mod, lambda func: _Vectorized() if calls_any(func, set(_REWRITES)) else None)

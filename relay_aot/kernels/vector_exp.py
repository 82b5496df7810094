"""float32 ``exp`` in vector registers, where relay_aot builds kernels with LLVM.

TVM lowers TIR's ``exp`` for LLVM to ``llvm.exp``, which LLVM cannot vectorize without a
vector math library: a kernel extracts each lane and calls the C library's ``expf``.
``sigmoid`` is ``1 / (1 + exp(-x))`` in TIR, so it calls it too. On an AVX-512 Xeon, one
thread, that is about 1 us per 256 values, where a 256 x 256 matrix-vector product takes
2.4 us. With ``exp``, ``sigmoid`` and ``tanh`` (``passes/vector_math.py``) in vectors, one
thread: ``lstm_h128`` 486 -> 308 us, ``treelstm_h16`` 306 -> 250 us.

So, while relay_aot builds kernels (:func:`building`), TIR's float32 ``exp`` -- scalar or a
vector of any width -- is lowered to Cephes' ``expf`` in TIR arithmetic, which vectorizes:
``x = n ln2 + r`` with ``|r| <= ln2 / 2`` (``ln2`` in two parts, so ``n ln2`` is exact), a
polynomial of degree 6 in ``r``, and the scale ``2^n`` applied as two powers of two built from
their bits, so that results near overflow (``exp(88.72)``) and in the denormal range
(``exp(-103.9)``) are those of the C library, and overflow gives inf. At most 1.4 ulp from the
exact value over [-110, 95] (the C library: 1.0); NaN stays NaN, ``exp(-inf)`` is 0. TVM's
``fast_exp`` is not used: it clamps its argument to +-88.38, so ``exp(88.7)`` came out as inf
and ``exp(-100)`` as 1e-39.

It is a rule of TVM's ``LowerIntrin`` (``llvm.FLowerIntrinsic`` of ``tir.exp``, above TVM's
own level), registered once and in force only inside :func:`building`: ``relay.build`` and
TVM's executors in the same process keep ``llvm.exp``. Rewriting the Relay ``exp`` into its
twenty elementwise operators instead (as relay_aot first did) gave the same kernels, but the TE
compiler lowered each of those operators: an LSTM's compile took 45% longer.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import tir

from ..gate import Gate

#: Cephes' expf: log2(e), ln 2 in two parts (the first exact in few bits), the polynomial's
#: coefficients from the highest degree.
_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
#: Beyond these exp is inf or 0 in float32; inside them 2^n splits into two normal powers of 2.
_EXP_MIN, _EXP_MAX = -104.0, 89.0

#: TVM's own lowering of ``tir.exp``, kept by :func:`_register` for the calls this rule leaves to it.
_original: Callable[[tir.Call], tir.PrimExpr] | None = None


def vector_exp(x: tir.PrimExpr) -> tir.PrimExpr:
    """``exp(x)`` of float32 ``x`` (a scalar or a vector) in TIR arithmetic (module docstring)."""
    lanes = tvm.DataType(str(x.dtype)).lanes
    suffix = f"x{lanes}" if lanes > 1 else ""

    def const(value, dtype: str) -> tir.PrimExpr:
        scalar = tir.const(value, dtype)
        return tir.Broadcast(scalar, lanes) if lanes > 1 else scalar

    def f32(value: float) -> tir.PrimExpr:
        return const(value, "float32")

    def i32(value: int) -> tir.PrimExpr:
        return const(value, "int32")

    def power_of_two(k: tir.PrimExpr) -> tir.PrimExpr:  # 2^k for int32 k in [-126, 127]
        return tir.reinterpret("float32" + suffix, tir.shift_left(k + i32(127), i32(23)))

    clipped = tir.Max(tir.Min(x, f32(_EXP_MAX)), f32(_EXP_MIN))
    n = tir.round(clipped * f32(_LOG2E))
    r = clipped - n * f32(_LN2_HI) - n * f32(_LN2_LO)
    p = f32(_EXP_POLYNOMIAL[0])
    for coefficient in _EXP_POLYNOMIAL[1:]:
        p = p * r + f32(coefficient)
    mantissa = p * (r * r) + r + f32(1.0)
    whole = tir.Cast("int32" + suffix, n)
    half = tir.shift_right(whole, i32(1))  # n = half + rest, each within a float32's exponents
    scaled = mantissa * power_of_two(half) * power_of_two(whole - half)
    return tir.Select(tir.isnan(x), x, scaled)


def _lower_exp(call: tir.Call) -> tir.PrimExpr:
    """The ``llvm.FLowerIntrinsic`` of ``tir.exp``: :func:`vector_exp` for float32 inside
    :func:`building`, else TVM's own rule."""
    dtype = str(call.dtype)
    if _GATE.active() and (dtype == "float32" or dtype.startswith("float32x")):
        return vector_exp(call.args[0])
    assert _original is not None  # _register sets it before it registers this rule
    return _original(call)


def _register() -> None:
    global _original
    _original = tvm.ir.Op.get("tir.exp").get_attr("llvm.FLowerIntrinsic")
    tvm.ir.register_intrin_lowering("tir.exp", target="llvm", f=_lower_exp, level=99)


_GATE = Gate(_register)
#: Within the block (on this thread), LLVM kernels compute float32 ``exp`` in vectors.
building = _GATE.building

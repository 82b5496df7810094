"""Requantizations of lowered x86 kernels computed on the even and odd int32 lanes in place.

relay_aot's requantization (``passes/requantization.py``) is, per vector of ``N`` int32 lanes,
``cast(int32, (cast(int64, x) * cast(int64, m) + r - (x < 0) * 2^31) >> s)`` (the last term
where rounding below zero matters; ``r`` negative where an output zero point joined it, the terms
in any order). LLVM computes an
``int64 x N`` vector as two halves: it widens the low and the high half of ``x`` (``vpmovzxdq`` and
``vextracti64x4``), multiplies, shifts, and narrows and joins the halves again (``vpmovqd``,
``vinserti64x4``): ten lane-crossing moves per sixteen values. ``vpmuldq`` multiplies the even
int32 lanes of two vectors into int64 lanes as they lie, so the same values come from the vector
read as ``N/2`` int64 lanes: the even lanes are its low halves, the odd ones its high halves
shifted down; the two results join with a shift and a blend. The per-channel multipliers, rounding
terms and shifts split the same way, once per block of channels (outside the loop over columns). A
requantization of 16K int32 values by 16 channels' parameters (C with intrinsics, Zen 5): 1.60 ->
1.15 us; it is the epilogue of every int8 convolution, dense layer and ADD. Where the int64 lanes
fit in one register (eight with AVX-512) LLVM's widening is one move each way, and the pairs
measured slower (ResNet-8's family of eight filters: 6.55 -> 6.77 us).

:func:`apply` rewrites the lowered kernels: each vector ``cast(int32, shift_right(...))`` of that
form, else nothing. Exact: the same 64-bit products, sums and shifts of every lane, and the cast to
int32 takes the low 32 bits of each as the join does.
"""

from __future__ import annotations

import tvm
from tvm import tir

from .scratch import rewrite_each

_AWAY = 2**31


def _int64_lanes(dtype) -> int | None:
    dtype = tvm.DataType(str(dtype))
    return dtype.lanes if dtype.type_code == tvm.DataTypeCode.INT and dtype.bits == 64 and dtype.lanes > 1 else None


def _widened(expr: tir.PrimExpr) -> tir.PrimExpr | None:
    """``x`` where ``expr`` is ``cast(int64 x N, x)`` of an int32 vector ``x``."""
    if isinstance(expr, tir.Cast) and str(expr.value.dtype).startswith("int32x"):
        return expr.value
    return None


def _small_constant(expr: tir.PrimExpr) -> bool:
    """Whether ``expr`` is a broadcast int64 constant that fits in int32."""
    return (
        isinstance(expr, tir.Broadcast) and isinstance(expr.value, tir.IntImm) and -(2**31) <= expr.value.value < 2**31
    )


def _match(cast: tir.Cast):
    """(x, m, r, s, away) of a requantization ``cast`` (module docstring), or None. ``m``: an
    int32 vector or a broadcast constant; ``away``: the int64 vector ``a`` of the term
    ``(x < 0) * a`` subtracted (``2^31``, or per channel ``2^31`` or 0), or None."""
    if not str(cast.dtype).startswith("int32x") or not isinstance(cast.value, tir.Call):
        return None
    call = cast.value
    lanes = _int64_lanes(call.dtype)
    if call.op.name != "tir.shift_right" or lanes is None or lanes % 2:
        return None
    total, shift = call.args
    product = below = rounding = None
    for sign, term in _terms(total, 1):
        if product is None and sign > 0 and isinstance(term, tir.Mul) and _widened(term.a) is not None:
            product = term
        elif below is None and sign < 0 and isinstance(term, tir.Mul) and _below_zero(term.a) is not None:
            below = term
        elif rounding is None and sign > 0:
            rounding = term
        elif rounding is None and isinstance(term, tir.Broadcast) and isinstance(term.value, tir.IntImm):
            # a negative rounding term (an output zero point below zero folded into it), which
            # TVM's simplifier writes as the subtraction of its magnitude
            rounding = tir.Broadcast(tir.IntImm(term.value.dtype, -term.value.value), term.lanes)
        else:
            return None
    if product is None or rounding is None:
        return None
    away, compared = (below.b, _below_zero(below.a)) if below is not None else (None, None)
    x = _widened(product.a)
    if x is None:
        return None
    m = _widened(product.b)
    if m is None:
        if not _small_constant(product.b):
            return None
        m = product.b
    if away is not None and not tvm.ir.structural_equal(compared, x):
        return None
    return x, m, rounding, shift, away


def _terms(expr: tir.PrimExpr, sign: int) -> list[tuple[int, tir.PrimExpr]]:
    """The terms of a sum of ``Add`` and ``Sub`` nodes, each with its sign (+1 or -1), in
    whatever order TVM's simplifier left them."""
    if isinstance(expr, tir.Add):
        return _terms(expr.a, sign) + _terms(expr.b, sign)
    if isinstance(expr, tir.Sub):
        return _terms(expr.a, sign) + _terms(expr.b, -sign)
    return [(sign, expr)]


def _below_zero(expr: tir.PrimExpr) -> tir.PrimExpr | None:
    """``v`` where ``expr`` is ``cast(v < 0)``."""
    if not (isinstance(expr, tir.Cast) and isinstance(expr.value, tir.LT)):
        return None
    zero = expr.value.b
    if not (isinstance(zero, tir.Broadcast) and isinstance(zero.value, tir.IntImm) and zero.value.value == 0):
        return None
    return expr.value.a


def _halves(vector: tir.PrimExpr, lanes: int) -> tuple[tir.PrimExpr, tir.PrimExpr]:
    """The even and odd lanes of an int64 vector (``lanes`` of them) as two vectors of half as
    many: a broadcast's halves are broadcasts, other vectors' are shuffles (of loop-invariant
    per-channel parameters in the kernels this rewrites)."""
    if isinstance(vector, tir.Broadcast):
        half = tir.Broadcast(vector.value, lanes // 2)
        return half, half
    even = tir.Shuffle([vector], [tir.IntImm("int32", i) for i in range(0, lanes, 2)])
    odd = tir.Shuffle([vector], [tir.IntImm("int32", i) for i in range(1, lanes, 2)])
    return even, odd


def _int32_pairs(vector: tir.PrimExpr, lanes: int) -> tuple[tir.PrimExpr, tir.PrimExpr]:
    """An int32 vector's even and odd lanes, sign-extended into the int64 lanes of a vector of
    half as many, in place: ``(v << 32) >> 32`` and ``v >> 32`` of the vector read as int64."""
    pairs = tir.call_intrin(f"int64x{lanes // 2}", "tir.reinterpret", vector)
    thirty_two = tir.Broadcast(tir.IntImm("int64", 32), lanes // 2)
    even = tir.call_intrin(
        pairs.dtype, "tir.shift_right", tir.call_intrin(pairs.dtype, "tir.shift_left", pairs, thirty_two), thirty_two
    )
    odd = tir.call_intrin(pairs.dtype, "tir.shift_right", pairs, thirty_two)
    return even, odd


def _rewritten(cast: tir.Cast) -> tir.PrimExpr | None:
    found = _match(cast)
    if found is None:
        return None
    x, m, rounding, shift, away = found
    lanes = int(tvm.DataType(str(cast.dtype)).lanes)
    half = f"int64x{lanes // 2}"
    xs = _int32_pairs(x, lanes)
    ms = _halves(m, lanes) if isinstance(m, tir.Broadcast) else _int32_pairs(m, lanes)
    rs, ss = _halves(rounding, lanes), _halves(shift, lanes)
    aways = _halves(away, lanes) if away is not None else (None, None)
    uniform = isinstance(away, tir.Broadcast) and isinstance(away.value, tir.IntImm) and away.value.value == _AWAY
    sign = tir.Broadcast(tir.IntImm("int64", _AWAY), lanes // 2)
    sixty_three = tir.Broadcast(tir.IntImm("int64", 63), lanes // 2)
    parts = []
    for value, multiplier, r, s, a in zip(xs, ms, rs, ss, aways):
        total = value * multiplier + r
        if uniform:
            # (value < 0) * 2^31: bit 31 of the sign-extended value
            total = total - tir.call_intrin(half, "tir.bitwise_and", value, sign)
        elif a is not None:
            # (value < 0) * a: a where the value's sign bits (value >> 63) are all ones
            below = tir.call_intrin(half, "tir.shift_right", value, sixty_three)
            total = total - tir.call_intrin(half, "tir.bitwise_and", below, a)
        parts.append(tir.call_intrin(half, "tir.shift_right", total, s))
    even, odd = parts
    low = tir.call_intrin(half, "tir.bitwise_and", even, tir.Broadcast(tir.IntImm("int64", 2**32 - 1), lanes // 2))
    high = tir.call_intrin(half, "tir.shift_left", odd, tir.Broadcast(tir.IntImm("int64", 32), lanes // 2))
    return tir.call_intrin(str(cast.dtype), "tir.reinterpret", tir.call_intrin(half, "tir.bitwise_or", low, high))


def _rewrite(func: tir.PrimFunc, vector_bits: int) -> tir.PrimFunc:
    def post(node):
        # an int64 vector in one register: LLVM widens and narrows it with one move each way
        if isinstance(node, tir.Cast) and 64 * tvm.DataType(str(node.dtype)).lanes > vector_bits:
            return _rewritten(node)
        return None

    body = tir.stmt_functor.ir_transform(func.body, None, post, ["tir.Cast"])
    return func if body.same_as(func.body) else func.with_body(body)


def apply(merged: tvm.IRModule, vector_bits: int) -> tvm.IRModule:
    """``merged`` (lowered kernels for an x86 LLVM target whose vector registers hold
    ``vector_bits``) with its vector requantizations on paired lanes (module docstring) where
    their int64 lanes take more than one register."""
    return rewrite_each(merged, lambda func: _rewrite(func, vector_bits))

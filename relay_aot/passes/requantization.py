"""TFLite's requantization (``MultiplyByQuantizedMultiplier``) as relay_aot's TFLite importer
writes it, recognised, and in a cheaper exact form for host CPUs.

The importer (``frontends/tflite_exact.py``) follows gemmlowp step by step: the high half of an
int64 product rounded (``SaturatingRoundingDoublingHighMul``), then a rounding division by a
power of two (``RoundingDivideByPOT``), per channel in int64 when the channels' exponents
differ. :func:`match` finds that expression; ``arm_dsp`` gives it to a C function on cores with
the DSP extension, and :func:`single_rounding` rewrites it for every other target.

The two roundings compose into one. With ``h = (x*m + 2^30) >> 31`` and an exponent ``e >= 1``,
gemmlowp's division rounds half away from zero: ``(h + 2^(e-1) - [h < 0]) >> e``, and a floor
of a floor by powers of two is one floor, so the result is
``(x*m + 2^30 + 2^(30+e) - [x < 0] * 2^31) >> (31 + e)`` (``h < 0`` only where ``x < 0``, and
where ``x < 0`` but ``h = 0`` both forms give 0). That is one int64 product of two int32 (one
``vpmuldq`` per eight lanes on x86, ``smull`` on Arm), an addition, a select and one shift, where
the importer's form computes a second int64 product, shift and comparison per channel: about
half the work of every requantized kernel's epilogue. Where ``x`` is known to be small (an int8
less its zero point, which TFLite's ADD shifts left by 20 before rescaling it) the same value is
computed in int32 (:func:`_narrow_form`).

Every requantized TFLite operator ends in ``clip(requantization + zero point)``; there the zero
point joins the rounding term and, under a clamp at or above the zero point (a fused ReLU), the
term below zero goes (:func:`single_rounding_form`). A convolution's epilogue on x86 goes from 17
instructions per 16 values to 10 (no int32 addition for LLVM to move through the clamp, one
saturating narrowing): MLPerf Tiny's ResNet-8 82 -> 76 us, visual wake words 107 -> 94, keyword
spotting 38 -> 35 (one thread, Zen 4; A/B in one process).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay

from .walk import CallRewriter, calls_any, op_name, rewrite_functions


def _constant(expr: relay.Expr) -> np.ndarray | None:
    """The value of a constant, or of casts and reshapes of one (before constant folding)."""
    if isinstance(expr, relay.Constant):
        return expr.data.numpy()
    if op_name(expr) == "cast":
        inner = _constant(expr.args[0])
        return None if inner is None else inner.astype(str(expr.attrs.dtype))
    if op_name(expr) == "reshape":
        return _constant(expr.args[0])
    return None


def _is(expr: relay.Expr, name: str, dtype: str | None = None) -> bool:
    return op_name(expr) == name and (dtype is None or str(expr.attrs.dtype) == dtype)


def constant_equals(expr: relay.Expr, value: int) -> bool:
    """Whether ``expr`` is a one-element constant (or a cast or reshape of one) equal to ``value``."""
    found = _constant(expr)
    return found is not None and found.size == 1 and int(found.reshape(-1)[0]) == value


def _power_of_two(values: np.ndarray) -> np.ndarray | None:
    values = values.astype(np.int64).reshape(-1)
    if np.any(values <= 0) or np.any(values & (values - 1)):
        return None
    return np.log2(values).astype(np.int64)


def _high_mul(expr: relay.Expr) -> tuple[relay.Expr, np.ndarray, np.ndarray] | None:
    """``x``, the multipliers and the left shifts of the importer's
    ``cast((cast(x << left, int64) * M + 2^30) >> 31, int32)`` (or ``x * 2^left``)."""
    if not _is(expr, "cast", "int32") or not _is(expr.args[0], "right_shift"):
        return None
    shifted = expr.args[0]
    if (
        not constant_equals(shifted.args[1], 31)
        or not _is(shifted.args[0], "add")
        or not constant_equals(shifted.args[0].args[1], 1 << 30)
    ):
        return None
    product = shifted.args[0].args[0]
    if not _is(product, "multiply") or not _is(product.args[0], "cast", "int64"):
        return None
    multipliers = _constant(product.args[1])
    if multipliers is None or multipliers.min() < 0 or multipliers.max() > 2**31 - 1:
        return None
    x, left = product.args[0].args[0], np.zeros(1, np.int64)
    if _is(x, "left_shift"):  # the importer's x * 2^left
        shifts = _constant(x.args[1])
        if shifts is None or shifts.min() < 0 or shifts.max() > 30:
            return None
        x, left = x.args[0], shifts.astype(np.int64).reshape(-1)
    elif _is(x, "multiply"):  # the same, as a product (a program written by hand)
        factors = _constant(x.args[1])
        found = None if factors is None else _power_of_two(factors)
        if factors is not None and (found is None or found.max() > 30):
            return None
        if found is not None:
            x, left = x.args[0], found
    return x, multipliers.reshape(-1), left


def match(expr: relay.Expr) -> tuple[relay.Expr, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(x, multipliers, left shifts, right shifts)`` where ``expr`` is the importer's
    ``MultiplyByQuantizedMultiplier`` of ``x`` (``frontends/tflite_exact.py``: the high product,
    then the rounding division by a power of two in its three forms: none, one shift, or
    per-channel exponents scaled to one shift in int64); else None."""
    high = _high_mul(expr)
    if high is not None:
        return (*high, np.zeros(1, np.int64))
    if _is(expr, "add") and _is(expr.args[0], "right_shift") and _is(expr.args[1], "cast", "int32"):
        # one shift, in int32: (h >> e) + ((h & mask) > (mask >> 1) + (h < 0)), gemmlowp's form
        quotient, carry = expr.args
        h, shift = quotient.args[0], _constant(quotient.args[1])
        high = _high_mul(h)
        if high is None or shift is None or shift.size != 1 or not 0 < int(shift.reshape(-1)[0]) < 31:
            return None
        e = int(shift.reshape(-1)[0])
        mask = (1 << e) - 1
        greater = carry.args[0]
        if not _is(greater, "greater"):
            return None
        remainder, threshold = greater.args
        if not (
            _is(remainder, "bitwise_and") and remainder.args[0].same_as(h) and constant_equals(remainder.args[1], mask)
        ):
            return None
        if not (_is(threshold, "add") and constant_equals(threshold.args[0], mask >> 1)):
            return None
        if not _negative_of(threshold.args[1], h, "int32"):
            return None
        return (*high, np.array([e]))
    if _is(expr, "cast", "int32") and _is(expr.args[0], "right_shift"):  # per-channel, in int64
        shifted = expr.args[0]
        top = _constant(shifted.args[1])
        if top is None or top.size != 1 or not _is(shifted.args[0], "subtract"):
            return None
        t = int(top.reshape(-1)[0])
        rounded, negative = shifted.args[0].args
        if (
            not _is(rounded, "add")
            or not constant_equals(rounded.args[1], 1 << (t - 1))
            or not _is(rounded.args[0], "multiply")
        ):
            return None
        scaled, scales = rounded.args[0].args
        factors = _constant(scales)
        if not _is(scaled, "cast", "int64") or factors is None:
            return None
        high = _high_mul(scaled.args[0])
        exponents = _power_of_two(factors)
        if high is None or exponents is None or not _negative_of(negative, scaled.args[0], "int64"):
            return None
        right = t - exponents
        if right.min() < 0 or right.max() > 31:
            return None
        return (*high, right)
    return None


def _negative_of(expr: relay.Expr, value: relay.Expr, dtype: str) -> bool:
    """Whether ``expr`` is ``cast(less(value, 0), dtype)``."""
    return (
        _is(expr, "cast", dtype)
        and _is(expr.args[0], "less")
        and expr.args[0].args[0].same_as(value)
        and constant_equals(expr.args[0].args[1], 0)
    )


def _const(values: np.ndarray, dtype: str) -> relay.Expr:
    """A scalar constant if every channel's value is the same, else the vector (broadcast along
    the last axis, as the importer's are)."""
    values = np.asarray(values).reshape(-1)
    if values.size == 1 or np.all(values == values[0]):
        return relay.const(np.asarray(values[0], dtype=dtype), dtype=dtype)
    return relay.const(values.astype(dtype), dtype=dtype)


#: Integer dtypes whose values bound an int32 made of them (:func:`magnitude`).
_NARROW = {"int8": 128, "uint8": 255, "int16": 2**15, "uint16": 2**16 - 1}


def magnitude(x: relay.Expr) -> int | None:
    """A bound on ``|x|`` for a type-checked int32 ``x`` cast from an 8- or 16-bit tensor, plus
    or minus a scalar constant (a zero point); None where it is not such an expression."""
    if _is(x, "cast") and x.args[0].checked_type.dtype in _NARROW:
        return _NARROW[x.args[0].checked_type.dtype]
    if op_name(x) in ("add", "subtract"):
        inner, offset = magnitude(x.args[0]), _constant(x.args[1])
        if inner is not None and offset is not None and offset.size == 1:
            return inner + abs(int(offset.reshape(-1)[0]))
    return None


def _narrow_form(
    x: relay.Expr, m: np.ndarray, left: np.ndarray, e: np.ndarray, rounding: np.ndarray, away: np.ndarray, bound: int
) -> relay.Expr | None:
    """The single-rounding form of an ``x`` of at most ``bound`` in magnitude shifted left
    (TFLite's ADD: an int8 less its zero point, by 20) in int32 arithmetic, or None where its
    terms would not fit. With ``K = 31 + e``, ``s = K - left`` and ``m = mh 2^s + ml``:
    ``floor((x 2^L m + c) / 2^K) = x mh + floor((x ml + c / 2^L) / 2^s)``, ``c`` the rounding
    terms (``rounding`` and ``away``, divisible by ``2^L``, ``L <= 30``). Sixteen int32 lanes a vector where the int64 form
    has eight, and no 64-bit products: ResNet-8's residual ADDs rescale each operand this way."""
    s = 31 + e - left
    if np.any(left <= 0) or np.any(left > 30) or np.any(s < 1) or np.any(s > 30):
        return None
    mh, ml = m >> s, m & ((np.int64(1) << s) - 1)
    rounding, away = rounding >> left, away >> left
    limit = np.int64(2**31 - 1)
    if np.any(bound * (mh + 1) > limit) or np.any(bound * (ml + 1) + rounding + away > limit):
        return None
    low = x * _const(ml, "int32") + _const(rounding, "int32")
    if np.any(away):
        low = low - relay.cast(relay.less(x, relay.const(0, "int32")), "int32") * _const(away, "int32")
    return x * _const(mh, "int32") + relay.right_shift(low, _const(s, "int32"))


def _whole(x: relay.Expr) -> relay.Expr:
    """``x`` through two bit casts (int32 to float32 and back), which LLVM removes. TVM's
    simplifier widens a sum term by term where it can bound the terms (``cast(a + b, int64) ->
    cast(a) + cast(b)``) and then multiplies each by the multiplier: a 64-bit product per term,
    by a constant folded to 64 bits (``vpmullq``), where the sum widened whole is one ``vpmuldq``
    by the int32 multiplier. TFLite's ADD sums two rescaled operands (MLPerf Tiny's ResNet-8,
    its residual ADDs 6.1 -> 4.7 us); a convolution's sums and its bias are such a sum too. The
    simplifier neither bounds nor splits a bit cast."""
    return relay.reinterpret(relay.reinterpret(x, "float32"), "int32")


def single_rounding_form(
    x: relay.Expr,
    multipliers: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    bound: int | None = None,
    whole: bool = False,
    offset: int = 0,
    floor_at_offset: bool = False,
) -> relay.Expr:
    """``MultiplyByQuantizedMultiplier`` of int32 ``x`` with one rounding (module docstring):
    ``(x' * m + a - [x' < 0] * b) >> (31 + e)`` in int64, ``x' = x * 2^left`` in int32 as
    TFLite computes it; the same int32 result as gemmlowp's two roundings, for every ``x``.
    ``bound``: a bound on ``|x|`` (:func:`magnitude`), where known: then ``x'`` cannot wrap, and
    the form may be computed in int32 (:func:`_narrow_form`). ``whole``: ``x'`` is widened
    whole (:func:`_whole`; for LLVM's x86 code).

    ``offset``: the result plus this (an output zero point), added as ``offset * 2^(31 + e)`` to
    the int64 rounding term: the same int32 value, wrapped alike, and no int32 addition after
    the shift, which LLVM then moves through the clamp that follows into three instructions
    where a saturating narrowing (``vpmovsdb``) is one. ``floor_at_offset``: the caller clamps
    the result to at least ``offset`` (a fused ReLU at the zero point; an offset small enough
    that adding it cannot wrap int32): then ``[x' < 0] * b`` is left out. Below zero
    (``x' < 0``, so ``h <= 0``) both roundings give at most 0 and the clamp makes both
    ``offset``; above it the term is 0."""
    channels = max(multipliers.size, left.size, right.size)
    m, left, e = (np.broadcast_to(np.asarray(v, np.int64).reshape(-1), (channels,)) for v in (multipliers, left, right))
    rounding = np.where(e > 0, (np.int64(1) << 30) + (np.int64(1) << (30 + e)), np.int64(1) << 30)
    away = np.where(e > 0, np.int64(1) << 31, 0)  # half away from zero below zero
    if floor_at_offset:
        away = np.zeros_like(away)
    if bound is not None and np.all(np.int64(bound) << left <= 2**31 - 1):
        narrow = _narrow_form(x, m, left, e, rounding, away, bound)
        if narrow is not None:
            return narrow + relay.const(offset, "int32") if offset else narrow
    # |x' m| < 2^62 and the rounding terms < 2^(31 + e): with the offset's term within 2^62 too,
    # the sum cannot wrap. A channel of a tiny scale (e near 31) keeps the int32 addition.
    folded = all((abs(offset) + 1) << (31 + int(shift)) <= 2**62 for shift in e)
    if folded:
        rounding = rounding + (np.int64(offset) << (31 + e))
    if np.any(left > 0):
        # a shift, not a product by 2^left: TVM's LLVM code multiplies int32 with "no signed
        # wrap", so LLVM may widen x before the product and not wrap it as TFLite's int32 does
        # (x = -2^31 doubled: 0 in TFLite, -2^32 there); a shift it keeps as it is
        x = relay.left_shift(x, _const(left, "int32"))
    if whole:
        x = _whole(x)
    # the multipliers as int32, widened in the kernel: a product of two sign-extended int32 is
    # one vpmuldq / smull, where LLVM multiplies an int64 array's values as full 64-bit ones
    product = relay.cast(x, "int64") * relay.cast(_const(m, "int32"), "int64")
    product = product + _const(rounding, "int64")
    if np.any(away):
        # a product by the 0/1 of the sign rather than a where: ConvertLayout carries binary
        # operators (and the NCHW layout past them), not where
        negative = relay.cast(relay.less(x, relay.const(0, "int32")), "int64")
        product = product - negative * _const(away, "int64")
    result = relay.cast(relay.right_shift(product, _const(31 + e, "int64")), "int32")
    return result + relay.const(offset, "int32") if offset and not folded else result


class _SingleRounding(CallRewriter):
    def __init__(self, whole: bool):
        super().__init__()
        self.whole = whole

    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        if op_name(call) == "clip":
            return self._clamped(call)
        if op_name(call) not in ("cast", "add"):
            return None
        found = match(call)  # the typed original; its operand as rewritten is visit(x)
        if found is None:
            return None
        x, multipliers, left, right = found
        return single_rounding_form(self.visit(x), multipliers, left, right, magnitude(x), self.whole)

    def _clamped(self, clip: relay.Call) -> relay.Expr | None:
        """``clip(requantization + zero point)``, the end of every requantized TFLite operator,
        with the zero point in the rounding term and, where the clamp's floor is at least the
        zero point, no rounding below zero (:func:`single_rounding_form`)."""
        shifted = clip.args[0]
        if not _is(shifted, "add"):
            return None
        offset = _constant(shifted.args[1])
        if offset is None or offset.size != 1 or str(shifted.checked_type.dtype) != "int32":
            return None
        found = match(shifted.args[0])
        if found is None:
            return None
        x, multipliers, left, right = found
        zero_point = int(offset.reshape(-1)[0])
        form = single_rounding_form(
            self.visit(x),
            multipliers,
            left,
            right,
            magnitude(x),
            self.whole,
            offset=zero_point,
            # |result| < 2^30 where the term matters (e >= 1): with a small offset no sum wraps
            floor_at_offset=float(clip.attrs.a_min) >= zero_point and abs(zero_point) <= 2**16,
        )
        return relay.clip(form, clip.attrs.a_min, clip.attrs.a_max)


def single_rounding(mod: tvm.IRModule, whole: bool = False) -> tvm.IRModule:
    """``mod`` with the importer's requantizations (:func:`match`) in the single-rounding form
    (:func:`single_rounding_form`; ``whole``: its int64 products of whole sums): the same values,
    about half the instructions."""
    return rewrite_functions(mod, lambda func: _SingleRounding(whole) if calls_any(func, {"right_shift"}) else None)


class _NarrowMultipliers(CallRewriter):
    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        if not isinstance(call.op, tvm.ir.Op) or call.op.name != "multiply" or call.checked_type.dtype != "int64":
            return None
        args = list(new.args)
        changed = False
        for index, arg in enumerate(args):
            if isinstance(arg, relay.Constant) and arg.data.dtype == "int64":
                values = arg.data.numpy()
                if values.size and values.min() >= -(2**31) and values.max() < 2**31:
                    args[index] = relay.cast(relay.const(values.astype(np.int32)), "int64")
                    changed = True
        return relay.Call(new.op, args, new.attrs) if changed else None


def narrow_multipliers(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with the int64 constants of its int64 products that fit in int32 written as
    ``cast(int32 constant, int64)``.

    The requantizations of relay_aot's TFLite importer multiply an int32 value widened to int64
    by an int64 constant (a 31-bit multiplier, a power of two). Folded into an int64 array, the
    constant's upper word is not known to be its sign: GCC multiplies 64 by 64 bits
    (``umull``, ``mul``, ``mla``) where one ``smull`` gives the product of two int32, LLVM on
    x86 uses ``vpmullq`` where ``vpmuldq`` would do (with :func:`_whole`'s sums). Run after the
    last constant folding (which would fold the cast again), the cast is fused into the kernel
    with the constant's int32 array. The values are the same.
    """
    return rewrite_functions(mod, lambda func: _NarrowMultipliers() if calls_any(func, {"multiply"}) else None)

"""TFLite's requantization in the single-rounding form (passes/requantization.py) and the int8
kernel boundaries relay_aot moves on x86 (passes/int8_boundaries.py, kernels/dense_int8.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot import cpu
from relay_aot.frontends.tflite_exact import _multiply_by_quantized_multiplier, quantize_multiplier
from relay_aot.passes import requantization
from relay_aot.passes.walk import operator_calls
from relay_aot.request import Request

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _gemmlowp(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier step by step, in Python integers (the reference)."""
    out = np.empty(x.shape, np.int64)
    for index, value in np.ndenumerate(x):
        c = index[-1]
        m, s = int(multiplier[c]), int(shift[c])
        left, right = max(s, 0), max(-s, 0)
        v = int(np.int32(np.int64(value) << left))  # int32 multiplication, as TFLite's
        product = v * m
        nudged = product + ((1 << 30) if product >= 0 else 1 - (1 << 30))
        quotient = abs(nudged) // (1 << 31)  # gemmlowp's division truncates towards zero
        high = quotient if nudged >= 0 else -quotient
        mask = (1 << right) - 1
        remainder = high & mask
        threshold = (mask >> 1) + (1 if high < 0 else 0)
        out[index] = (high >> right) + (1 if remainder > threshold else 0)
    return out.astype(np.int32)


def _values(rng: np.random.Generator, channels: int) -> np.ndarray:
    edges = [INT32_MAX, INT32_MAX - 1, INT32_MIN, INT32_MIN + 1, 0, 1, -1, 2**30, -(2**30), 12345, -12345]
    rows = [np.full(channels, v) for v in edges]
    rows += [rng.integers(INT32_MIN, INT32_MAX, channels, endpoint=True) for _ in range(40)]
    rows += [rng.integers(-(2**16), 2**16, channels) for _ in range(40)]
    return np.stack(rows).astype(np.int32)


CASES = {
    "per-tensor": [0.0123],
    "per-channel": [0.0123, 0.5, 0.00071, 0.25, 3e-6, 0.9999],
    "at least one": [1.0, 2.5, 17.0],
    "no division": [0.75, 0.51],
}


@pytest.mark.parametrize("scales", list(CASES.values()), ids=list(CASES))
def test_the_single_rounding_form_is_gemmlowps_two_roundings(scales):
    pairs = [quantize_multiplier(s) for s in scales]
    multipliers = np.array([p[0] for p in pairs], np.int64)
    shifts = np.array([p[1] for p in pairs], np.int64)
    x = _values(np.random.default_rng(len(scales)), len(scales))
    var = relay.var("x", shape=x.shape, dtype="int32")
    importer = _multiply_by_quantized_multiplier(var, multipliers, shifts)
    found = requantization.match(relay.transform.InferType()(tvm.IRModule.from_expr(importer))["main"].body)
    assert found is not None, "the importer's form is recognised"
    _, m, left, right = found
    single = requantization.single_rounding_form(var, m, left, right)
    for expr in (importer, single):
        compiled = relay_aot.compile(tvm.IRModule.from_expr(relay.Function([var], expr)), opt_level=0)
        np.testing.assert_array_equal(compiled(x).numpy(), _gemmlowp(x, multipliers, shifts))


def test_the_pass_rewrites_the_importers_requantization_and_keeps_its_values():
    multipliers, shifts = zip(*(quantize_multiplier(s) for s in (0.004, 0.0007, 0.03)))
    x = _values(np.random.default_rng(3), 3)
    var = relay.var("x", shape=x.shape, dtype="int32")
    y = relay.clip(_multiply_by_quantized_multiplier(var, np.array(multipliers), np.array(shifts)), -128.0, 127.0)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([var], relay.cast(y, "int8"))))
    rewritten = requantization.single_rounding(mod)
    # gemmlowp's two roundings (two shifts: the high half, then the division), now one
    shifts_of = lambda m: sum(c.op.name == "right_shift" for c in operator_calls(m))  # noqa: E731
    assert (shifts_of(mod), shifts_of(rewritten)) == (2, 1)
    expected = np.clip(_gemmlowp(x, np.array(multipliers), np.array(shifts)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(relay_aot.compile(mod)(x).numpy(), expected)


@pytest.mark.parametrize("rows", [9, 40])
@pytest.mark.parametrize("opt_level", [0, 3])
def test_a_left_shift_wraps_in_int32_in_every_lane(rows, opt_level):
    """A scale above one shifts x left in int32 first, wrapping as TFLite's ``x * (1 << left)``
    does (INT32_MIN doubled is 0), in the vector lanes and in the scalar ones after them alike.
    Written as a product by 2^left, LLVM widened x before the product in the scalar code (TVM's
    LLVM code multiplies int32 "without signed wrap"): 127 where gemmlowp gives -125, found by
    a hostile campaign (seed 60011, nine values)."""
    multiplier, shift = quantize_multiplier(1.3488)
    assert shift == 1
    edges = np.array([1, INT32_MAX, -(2**30), 0, INT32_MIN, -1, 2**30, 1, INT32_MIN], np.int32)
    x = np.resize(edges, (rows, 1)).astype(np.int32)
    var = relay.var("x", shape=x.shape, dtype="int32")
    y = _multiply_by_quantized_multiplier(var, np.array([multiplier]), np.array([shift]))
    y = relay.cast(relay.clip(y + relay.const(-128, "int32"), -125.0, 127.0), "int8")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([var], y)))
    expected = np.clip(_gemmlowp(x, np.array([multiplier]), np.array([shift])).astype(np.int64) - 128, -125, 127)
    for target in (None, "llvm"):  # the host's vectors, and SSE2's four lanes
        got = relay_aot.compile(mod, target=target, opt_level=opt_level)(x).numpy()
        np.testing.assert_array_equal(got, expected.astype(np.int8), err_msg=str(target))


@pytest.mark.parametrize(
    "scales,zero_point,floor",
    [
        ([0.004, 0.0007, 0.03], -128, -128),  # a ReLU at the zero point: no rounding below zero
        ([0.004, 0.0007, 0.03], -5, -5),
        ([0.004, 0.0007, 0.03], -5, -128),  # no activation: the floor is below the zero point
        ([0.012], 17, 20),  # a ReLU6-like floor above the zero point
        ([0.004, 3e-9, 0.03], -128, -128),  # a channel of a tiny scale: the zero point added in int32
    ],
)
def test_the_zero_point_and_the_clamp_join_the_rounding_and_keep_its_values(scales, zero_point, floor):
    """The end of every requantized TFLite operator, ``clip(requantization + zero point)``: the
    zero point goes into the int64 rounding term (where the sum cannot wrap) and, with the clamp
    at or above the zero point, the rounding below zero is left out; the values are gemmlowp's,
    clamped, for int32 values of either sign and every magnitude."""
    multipliers, shifts = (np.array(v) for v in zip(*(quantize_multiplier(s) for s in scales)))
    x = _values(np.random.default_rng(7), len(scales))
    var = relay.var("x", shape=x.shape, dtype="int32")
    y = _multiply_by_quantized_multiplier(var, multipliers, shifts) + relay.const(zero_point, "int32")
    y = relay.cast(relay.clip(y, float(floor), 127.0), "int8")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([var], y)))
    rewritten = relay.transform.InferType()(requantization.single_rounding(mod))
    names = [c.op.name for c in operator_calls(rewritten)]
    assert ("less" in names) == (floor < zero_point)
    tiny = min(scales) < 1e-8
    assert names.count("add") == 1 + tiny  # the rounding term, and the zero point only for a tiny scale
    expected = _gemmlowp(x, multipliers, shifts).astype(np.int64) + zero_point
    expected = np.clip(expected, floor, 127).astype(np.int8)
    np.testing.assert_array_equal(relay_aot.compile(mod)(x).numpy(), expected)


@pytest.mark.parametrize(
    "scale,narrow", [(0.0004, True), (0.37, True), (0.9999, True), (0.03125, True), (2.6e-6, False)]
)
def test_a_left_shifted_8_bit_value_is_requantized_in_int32_exactly(scale, narrow):
    """TFLite's ADD rescales each operand, an int8 less its zero point shifted left by 20: with
    that bound known (requantization.magnitude), the form is computed in int32 where its terms
    fit (no 64-bit product; not for a scale so small that the multiplier's low part times the
    value would not), the same as gemmlowp's for every int8 value and zero point either way. A
    value without such a bound keeps the int64 form and TFLite's int32 shift
    (test_the_single_rounding_form_is_gemmlowps_two_roundings: it wraps at the extremes)."""
    x = relay.var("x", shape=(256,), dtype="int8")
    multiplier, shift = quantize_multiplier(scale)
    for zero_point in (-128, -3, 0, 127):
        shifted = relay.cast(x, "int32") - relay.const(zero_point, "int32")
        shifted = relay.multiply(shifted, relay.const(1 << 20, "int32"))
        y = _multiply_by_quantized_multiplier(shifted, np.array([multiplier]), np.array([shift]))
        mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
        rewritten = relay.transform.InferType()(requantization.single_rounding(mod))
        dtypes = {str(call.checked_type.dtype) for call in operator_calls(rewritten)}
        assert ("int64" not in dtypes) == narrow, (scale, zero_point, dtypes)
        values = np.arange(-128, 128).astype(np.int8)
        shifted_values = ((values.astype(np.int64) - zero_point) << 20).astype(np.int32)[:, None]
        expected = _gemmlowp(shifted_values, [multiplier], [shift]).ravel()
        np.testing.assert_array_equal(relay_aot.compile(mod)(values).numpy(), expected, f"{scale}, {zero_point}")


def _kernel_names(mod: tvm.IRModule, params=None) -> list[str]:
    program, table = Request.make(mod, None, params).lower()
    return [gvar.name_hint for gvar in table.lower_all(report=False).functions.keys()]


def _int8_mlp(rows: int, sizes: list[int]):
    """int8 matrix products as relay_aot's TFLite importer writes FULLY_CONNECTED: the products,
    the requantization, a stop_fusion after each layer, a reshape to the matrix it is already."""
    rng = np.random.default_rng(11)
    x = relay.var("x", shape=(rows, sizes[0]), dtype="int8")
    y, weights = x, []
    for k, n in zip(sizes, sizes[1:]):
        w = rng.integers(-128, 128, (n, k)).astype(np.int8)
        b = rng.integers(-5000, 5000, n).astype(np.int32)
        weights.append((w, b))
        acc = relay.nn.dense(relay.reshape(y, (rows, k)), relay.const(w), out_dtype="int32") + relay.const(b)
        m, s = quantize_multiplier(1 / (k * 40))
        y = relay.cast(relay.clip(_multiply_by_quantized_multiplier(acc, m, s), -128.0, 127.0), "int8")
        y = relay.annotation.stop_fusion(y)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))

    def reference(xv: np.ndarray) -> np.ndarray:
        out = xv
        for w, b in weights:
            acc = out.astype(np.int64) @ w.astype(np.int64).T + b
            m, s = quantize_multiplier(1 / (w.shape[1] * 40))
            out = np.clip(
                _gemmlowp(acc.astype(np.int32), np.array([m] * w.shape[0]), np.array([s] * w.shape[0])), -128, 127
            )
        return out.astype(np.int8)

    return mod, reference


def _avx512_vnni() -> bool:
    features = cpu.host_features()
    return all(features.get(f, False) for f in ("avx512f", "avx512bw", "avx512vnni"))


@pytest.mark.parametrize("rows,sizes", [(1, [640, 128, 48, 640]), (3, [96, 64, 160])])
def test_int8_products_keep_several_output_blocks_in_flight_and_are_exact(rows, sizes):
    mod, reference = _int8_mlp(rows, sizes)
    x = np.random.default_rng(12).integers(-128, 128, (rows, sizes[0])).astype(np.int8)
    np.testing.assert_array_equal(relay_aot.compile(mod)(x).numpy(), reference(x))
    if not _avx512_vnni():
        return  # the products are TVM's plain kernels, their operands int8: no shift into uint8
    names = _kernel_names(mod)
    # the shift into uint8 of each layer's input ends the previous layer's kernel (only the
    # model's input is shifted by a kernel of its own)
    assert sum("dense" not in n for n in names) <= 1, names

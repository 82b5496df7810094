"""Requantizations on paired int32 lanes (``kernels/paired_lanes.py``), sums widened whole
(``requantization._whole``) and int8 register blocks of two channel blocks
(``conv_epilogue._register_block``): exact against gemmlowp's steps and numpy's int64, and present
in the code relay_aot builds for this x86 host."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from int8_support import conv2d_reference, extremes
from test_requantization import _gemmlowp, _values
from tvm import relay

import relay_aot
from relay_aot import cpu
from relay_aot.frontends.tflite_exact import quantize_multiplier
from relay_aot.kernels import paired_lanes
from relay_aot.passes import requantization
from relay_aot.request import Request

HOST = tvm.target.Target(cpu.host_target())

#: sixteen channels, each its own multiplier and exponent: a swap of even and odd lanes, or of
#: the halves of a per-channel vector, changes every other value. Scales from one up round
#: without the term below zero (per channel then); all below a half, with it in every channel.
SCALES = {
    "mixed": [0.0123, 0.5, 0.00071, 0.25, 3e-6, 0.9999, 1.0, 2.5, 17.0, 0.75, 0.51, 0.004, 0.0007, 0.03, 1e-4, 0.3],
    "below_half": [0.0123, 0.49, 0.00071, 0.25, 3e-6, 0.37, 0.41, 0.2, 0.017, 0.33, 0.45, 0.004, 7e-4, 0.03, 1e-4, 0.3],
    "per_tensor": [0.0123] * 16,
}


def _lowered_text(mod: tvm.IRModule) -> str:
    """The kernels as relay_aot builds them for the host (after its rewrites of lowered code)."""
    _, table = Request.make(mod, None, None).lower()
    return str(table.lowered()[0])


@pytest.mark.parametrize("scales", list(SCALES.values()), ids=list(SCALES))
@pytest.mark.parametrize("bias", [False, True], ids=["sums", "sums_and_bias"])
@pytest.mark.parametrize("offset", [0, -128], ids=["no_zero_point", "zero_point"])
def test_per_channel_requantizations_on_paired_lanes_are_gemmlowps(bias, scales, offset):
    """With an output zero point in the rounding term (``offset``), a negative one where every
    channel's exponent is the same, which TVM's simplifier writes as a subtraction."""
    pairs = [quantize_multiplier(s) for s in scales]
    multipliers = np.array([p[0] for p in pairs], np.int64)
    shifts = np.array([p[1] for p in pairs], np.int64)
    x = _values(np.random.default_rng(7), len(scales)).reshape(-1, 1, len(scales))
    var = relay.var("x", shape=x.shape, dtype="int32")
    value, expected_in = var, x
    if bias:  # a sum of terms, which the simplifier would widen term by term
        offsets = np.arange(len(scales), dtype=np.int32) * 1000 - 7000
        value = var + relay.const(offsets)
        expected_in = (x.astype(np.int64) + offsets).astype(np.int32)  # int32 wraps, as the kernel's
    left, right = np.maximum(shifts, 0), np.maximum(-shifts, 0)
    expr = requantization.single_rounding_form(value, multipliers, left, right, whole=True, offset=offset)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([var], expr)))
    expected = (_gemmlowp(expected_in, multipliers, shifts).astype(np.int64) + offset).astype(np.int32)
    np.testing.assert_array_equal(relay_aot.compile(mod)(x).numpy(), expected)
    if cpu._is_x86():
        assert 'reinterpret("int64x' in _lowered_text(mod), "the requantization is computed on paired lanes"


def test_lanes_that_fit_one_register_are_left_to_llvm():
    """int64 lanes in one register (``vector_bits`` of them): no rewrite; in two: rewritten."""
    x = tvm.te.placeholder((64,), "int32", name="x")
    m = tvm.tir.IntImm("int64", 1 << 30)

    def requantize(v):
        wide = v.astype("int64")
        return ((wide * m + tvm.tir.IntImm("int64", 1 << 40)) >> tvm.tir.IntImm("int64", 41)).astype("int32")

    y = tvm.te.compute((64,), lambda i: requantize(x[i]), name="y")
    s = tvm.te.create_schedule(y.op)
    outer, inner = s[y].split(y.op.axis[0], factor=16)
    s[y].vectorize(inner)
    mod = tvm.lower(s, [x, y], name="requantize")
    assert paired_lanes.apply(mod, 1024) is mod
    assert 'reinterpret("int64x8"' in str(paired_lanes.apply(mod, 512)["requantize"])
    built = tvm.build(paired_lanes.apply(mod, 512), target="llvm")
    values = np.array([2**31 - 1, -(2**31), 12345, -12345, 0, -1, 1, 2**30] * 8, np.int32)
    out = tvm.nd.empty((64,), "int32")
    built(tvm.nd.array(values), out)
    want = ((values.astype(np.int64) * (1 << 30) + (1 << 40)) >> 41).astype(np.int32)
    np.testing.assert_array_equal(out.numpy(), want)


def _vnni_avx512() -> bool:
    return cpu.int32_lanes(HOST) == 16 and cpu.has_vnni(HOST)


@pytest.mark.parametrize("side", [8, 16], ids=["8x8", "16x16"])
def test_int8_register_blocks_take_two_channel_blocks_and_are_exact(side):
    """32 filters (two blocks of 16): 16 accumulators, 8 columns of both blocks. ResNet-8's last
    stage (8x8: 8 columns of one block are too few in flight) and its middle one (16x16: 16
    columns of one block would issue a broadcast load per vpdpbusd)."""
    rng = np.random.default_rng(11)
    channels, filters = 32, 32
    w = extremes(rng, (filters, channels, 3, 3))
    xv = extremes(rng, (1, channels, side, side))
    expected = np.clip(conv2d_reference(xv, w, (1, 1), (1, 1, 1, 1)) >> 12, -128, 127).astype(np.int8)
    x = relay.var("x", shape=xv.shape, dtype="int8")
    y = relay.nn.conv2d(x, relay.const(w), padding=(1, 1), channels=filters, kernel_size=3, out_dtype="int32")
    y = relay.cast(relay.clip(relay.right_shift(y, relay.const(12, "int32")), -128, 127), "int8")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    np.testing.assert_array_equal(relay_aot.compile(mod)(xv).numpy(), expected)
    if _vnni_avx512():
        text = _lowered_text(mod)
        assert 'T.allocate([16], "int32x16"' in text, "two blocks of 8 columns' accumulators"
        assert "ax1_inner, ax3_inner in T.grid(2, 8)" in text, "the output loop over both blocks' 8 columns"

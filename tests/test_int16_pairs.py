"""int8 convolutions on x86 without VNNI: int16 operands, ``vpmaddwd`` (``passes/int16_pairs.py``,
``kernels/int16_pairs.py``).

Every case is checked exactly against numpy's int64 on mostly extreme values (the largest sums
of products), int8 and uint8 data, in the layouts the TFLite import writes (NHWC/HWIO) and in
NCHW, for CPUs without VNNI named by ``-mcpu`` (Haswell: AVX2, eight lanes; Skylake-AVX512:
sixteen) and the generic ``llvm`` target (SSE2, four lanes), each run where the host can; the
``vpmaddwd`` of the target's lanes is looked for in the lowered code, ``vpmaddubsw`` (which
saturates) is not. The rule's limits, and TVM's layout choice outside relay_aot.
"""

import numpy as np
import pytest
import tvm
from int8_support import conv2d_reference, extremes
from tvm import relay

import relay_aot
from relay_aot.passes import int16_pairs
from relay_aot.request import Request

#: target, vpmaddwd's int32 lanes there
TARGETS = [("llvm -mcpu=haswell", 8), ("llvm -mcpu=skylake-avx512", 16), ("llvm", 4)]


def _lowered(mod: tvm.IRModule, target) -> dict[str, str]:
    """Per kernel symbol, the TIR relay_aot builds."""
    _, table = Request.make(mod, target, None).lower()
    return {gvar.name_hint: str(func) for gvar, func in table.lower_all(report=False).functions.items()}


#: (input channels, map, kernel, strides, padding, filters): ResNet-8-like blocks, a 1x1 layer
#: of a row narrower than a register run (keyword spotting's 25 x 5), filters blocked by fewer
#: lanes than the target's (12: by four), input channels in twos only, many products per
#: output (1152: float32 would not hold them exactly), a strided 5x5, an image's first layer
#: (three channels: padded to four).
CASES = [
    (16, (16, 16), 3, (1, 1), (1, 1, 1, 1), 32),
    (64, (25, 5), 1, (1, 1), (0, 0, 0, 0), 64),
    (16, (9, 40), 3, (1, 2), (1, 1, 1, 1), 12),
    (6, (7, 7), 5, (2, 2), (2, 2, 2, 2), 8),
    (128, (6, 6), 3, (1, 1), (0, 0, 0, 0), 16),
    (3, (33, 32), 3, (2, 2), (0, 0, 1, 1), 16),
]


def _model(channels, size, kernel, strides, padding, filters, layout: str, dtype: str, seed: int):
    """One convolution (``dtype`` data, int8 weights, int32 sums), then a shift into int8 (as a
    requantization would): the module, its input and the expected output."""
    rng = np.random.default_rng(seed)
    w = extremes(rng, (filters, channels, kernel, kernel), "int8")  # OIHW
    xv = extremes(rng, (1, channels, *size), dtype)  # NCHW
    expected = np.clip(conv2d_reference(xv, w, strides, padding) >> 10, -128, 127).astype(np.int8)
    if layout == "NHWC":
        x = relay.var("x", shape=(1, *size, channels), dtype=dtype)
        weights, layouts = relay.const(w.transpose(2, 3, 1, 0)), {"data_layout": "NHWC", "kernel_layout": "HWIO"}
        xv, expected = xv.transpose(0, 2, 3, 1).copy(), expected.transpose(0, 2, 3, 1)
    else:
        x = relay.var("x", shape=(1, channels, *size), dtype=dtype)
        weights, layouts = relay.const(w), {}
    y = relay.nn.conv2d(
        x, weights, strides=strides, padding=padding, channels=filters, kernel_size=kernel, out_dtype="int32", **layouts
    )
    y = relay.cast(relay.clip(relay.right_shift(y, relay.const(10, "int32")), -128, 127), "int8")
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y))), xv, expected


def _check(mod, xv, expected, target: str, lanes: int | None) -> None:
    """The convolution's kernel calls vpmaddwd of ``lanes`` lanes (None: not looked for) and
    never vpmaddubsw; exact where the host runs the target's code."""
    convolutions = [text for name, text in _lowered(mod, target).items() if "conv2d" in name]
    assert len(convolutions) == 1 and "pmadd.ub" not in convolutions[0]
    if lanes is not None:
        assert int16_pairs.PMADDWD[lanes] in convolutions[0], convolutions
    try:
        got = relay_aot.compile(mod, target=target)(xv).numpy()
    except relay_aot.CpuFeatureError:
        return
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "case,layout",
    [(case, "NCHW") for case in CASES] + [(CASES[0], "NHWC"), (CASES[1], "NHWC")],
    ids=lambda c: f"{c[0]}ch_{c[1][0]}x{c[1][1]}_k{c[2]}_s{c[3][1]}_f{c[5]}" if isinstance(c, tuple) else c,
)
def test_int8_convolutions_without_vnni_are_exact(case, layout):
    """int8 for an AVX2 CPU: blocks of eight filters, or four. NHWC (a TFLite model's) is
    exact either way; the kernel is looked for in NCHW (one NHWC convolution alone may stay
    NHWC, where converting it does not pay: passes/nchw.py). The first layer of a network is
    test_first_layer_is_padded_to_four_channels'."""
    mod, xv, expected = _model(*case, layout=layout, dtype="int8", seed=sum(case[1]) + case[0])
    # three channels alone: the layout choice's transforms would cost more than they serve
    looked_for = layout == "NCHW" and case[0] % 2 == 0
    _check(mod, xv, expected, TARGETS[0][0], int16_pairs.block(case[5], 8) if looked_for else None)


@pytest.mark.parametrize("target,lanes", TARGETS, ids=["avx2", "avx512", "sse2"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_each_vector_width_and_operand_type_is_exact(target, lanes, dtype):
    """NCHW, int8 and uint8 data (an ONNX QDQ model's), each target's widest vpmaddwd."""
    mod, xv, expected = _model(*CASES[0], layout="NCHW", dtype=dtype, seed=3)
    _check(mod, xv, expected, target, lanes)


def test_first_layer_is_padded_to_four_channels():
    """An image's first layer (three channels, stride 2) and the layer after it, NHWC as the
    TFLite import writes them, for an AVX2 CPU: both vpmaddwd kernels, the first one's input
    padded with a zero channel; exact on extreme values."""
    rng = np.random.default_rng(9)
    x = relay.var("x", shape=(1, 33, 32, 3), dtype="int8")
    w1, w2 = extremes(rng, (3, 3, 3, 16), "int8"), extremes(rng, (3, 3, 16, 32), "int8")
    y = x
    for w, strides in ((w1, (2, 2)), (w2, (1, 1))):
        y = relay.nn.conv2d(
            y,
            relay.const(w),
            strides=strides,
            padding=(1, 1),
            channels=w.shape[3],
            kernel_size=(3, 3),
            data_layout="NHWC",
            kernel_layout="HWIO",
            out_dtype="int32",
        )
        y = relay.cast(relay.clip(relay.right_shift(y, relay.const(9, "int32")), -128, 127), "int8")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    xv = extremes(np.random.default_rng(10), (1, 33, 32, 3), "int8")
    expected = xv.transpose(0, 3, 1, 2)
    for w, strides in ((w1, (2, 2)), (w2, (1, 1))):
        expected = conv2d_reference(expected, w.transpose(3, 2, 0, 1), strides, (1, 1, 1, 1))
        expected = np.clip(expected >> 9, -128, 127)
    convolutions = [text for name, text in _lowered(mod, TARGETS[0][0]).items() if "conv2d" in name]
    assert len(convolutions) == 2 and all(int16_pairs.PMADDWD[8] in text for text in convolutions)
    try:
        got = relay_aot.compile(mod, target=TARGETS[0][0])(xv).numpy()
    except relay_aot.CpuFeatureError:
        return
    np.testing.assert_array_equal(got, expected.astype(np.int8).transpose(0, 2, 3, 1))


#: (rows, depth, outputs): anomaly detection's widest layers, a batch, outputs by four
DENSE = [(1, 640, 128), (1, 128, 640), (5, 130, 12)]


@pytest.mark.parametrize("target,lanes", TARGETS, ids=["avx2", "avx512", "sse2"])
@pytest.mark.parametrize("shape", DENSE, ids=lambda d: "x".join(map(str, d)))
def test_matrix_products_without_vnni_are_exact(shape, target, lanes):
    """nn.dense of int8 (or uint8) data by int8 weights: int16 data, the weights int8 in their
    packed layout, vpmaddwd; exact on extreme values."""
    rows, depth, outputs = shape
    dtype = "uint8" if rows == 5 else "int8"
    rng = np.random.default_rng(rows + depth)
    w, xv = extremes(rng, (outputs, depth), "int8"), extremes(rng, (rows, depth), dtype)
    x = relay.var("x", shape=(rows, depth), dtype=dtype)
    y = relay.nn.dense(x, relay.const(w), units=outputs, out_dtype="int32")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    products = [text for name, text in _lowered(mod, target).items() if "dense" in name]
    assert len(products) == 1 and int16_pairs.PMADDWD[min(lanes, int16_pairs.block(outputs, lanes))] in products[0]
    assert 'T.Cast("int16x' in products[0] and "pmadd.ub" not in products[0]  # int8 weights, widened as loaded
    try:
        got = relay_aot.compile(mod, target=target)(xv).numpy()
    except relay_aot.CpuFeatureError:
        return
    np.testing.assert_array_equal(got, xv.astype(np.int64) @ w.astype(np.int64).T)


def test_the_rule():
    """Convolutions of one group, no dilation, even input channels and filters in fours, on x86
    without VNNI; int16 ones too (made by exact_int8 or by a user). Not with VNNI (the int8
    kernels), not on other CPUs."""
    x = relay.var("x", shape=(1, 4, 8, 8), dtype="int8")
    attrs = relay.nn.conv2d(x, relay.var("w", shape=(8, 4, 3, 3), dtype="int8"), out_dtype="int32").attrs
    haswell = tvm.target.Target("llvm -mcpu=haswell")
    rule = int16_pairs.applies
    for dtypes in (("int8", "int8"), ("uint8", "int8"), ("int16", "int16")):
        assert rule(attrs, dtypes[0], (1, 4, 8, 8), dtypes[1], (8, 4, 3, 3), haswell)
    assert rule(attrs, "int8", (1, 3, 8, 8), "int8", (8, 3, 3, 3), haswell)  # padded to four
    assert not rule(attrs, "int16", (1, 3, 8, 8), "int16", (8, 3, 3, 3), haswell)  # odd int16
    assert not rule(attrs, "int8", (1, 4, 8, 8), "int8", (6, 4, 3, 3), haswell)  # filters
    assert not rule(attrs, "float32", (1, 4, 8, 8), "int8", (8, 4, 3, 3), haswell)
    assert not rule(attrs, "int16", (1, 4, 8, 8), "int8", (8, 4, 3, 3), haswell)
    for other in ("llvm -mcpu=cascadelake", "llvm -mcpu=alderlake", "llvm -mtriple=aarch64-linux-gnu"):
        assert not rule(attrs, "int8", (1, 4, 8, 8), "int8", (8, 4, 3, 3), tvm.target.Target(other))
    dilated = relay.nn.conv2d(x, relay.var("w", shape=(8, 4, 3, 3), dtype="int8"), dilation=(2, 2), out_dtype="int32")
    assert not rule(dilated.attrs, "int8", (1, 4, 8, 8), "int8", (8, 4, 3, 3), haswell)
    assert [int16_pairs.block(n, 8) for n in (64, 12, 6, 3)] == [8, 4, 2, 0]


def test_outside_relay_aot_the_layout_choice_is_tvms():
    """The layout choice packs an int16 convolution in pairs of input channels within
    relay_aot's gate only: relay.build's in the same process leaves it to TVM's."""
    x, w = relay.var("x", shape=(1, 16, 16, 16), dtype="int16"), relay.var("w", shape=(32, 16, 3, 3), dtype="int16")
    y = relay.nn.conv2d(x, w, padding=(1, 1), channels=32, kernel_size=3, out_dtype="int32")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, w], y)))

    def kernel_layout(inside: bool) -> str:
        with tvm.transform.PassContext(opt_level=3), tvm.target.Target("llvm -mcpu=haswell"):
            if inside:
                with int16_pairs.building():
                    return relay.transform.AlterOpLayout()(mod).astext()
            return relay.transform.AlterOpLayout()(mod).astext()

    assert 'kernel_layout="OIHW4i8o2i"' in kernel_layout(inside=True)
    assert "o2i" not in kernel_layout(inside=False)

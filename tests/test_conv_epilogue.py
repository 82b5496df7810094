"""x86 packed convolutions apply their fused bias and activation in registers
(``kernels/conv_epilogue.py``): outputs against the graph executor's (TVM's own schedule), and
the kernel's structure (no scratch row of the convolution's output) against TVM's."""

import re

import numpy as np
import pytest
import tvm
from tvm import relay, te, topi
from tvm.autotvm.task.space import ConfigEntity, OtherOptionEntity, SplitEntity
from tvm.contrib import graph_executor

import relay_aot
from relay_aot import cpu
from relay_aot.cpu import host_target
from relay_aot.kernels import conv_epilogue, vnni
from relay_aot.request import Request


def _conv_net(channels, width, filters, kernel, stride, epilogue):
    """One convolution (NCHW, as a user writes it) and the operators fused after it."""
    rng = np.random.default_rng(channels * 1000 + width)
    data = relay.var("data", shape=(1, channels, width, width))
    weight = relay.const(rng.normal(0, 0.3, (filters, channels, kernel, kernel)).astype("float32"))
    bias = relay.const(rng.normal(0, 0.3, (filters,)).astype("float32"))
    y = relay.nn.conv2d(
        data,
        weight,
        strides=(stride, stride),
        padding=(kernel // 2, kernel // 2),
        channels=filters,
        kernel_size=(kernel, kernel),
    )
    y = relay.nn.bias_add(y, bias)
    if epilogue == "relu":
        y = relay.nn.relu(y)
    elif epilogue == "clip":
        y = relay.clip(y, 0.0, 6.0)
    elif epilogue == "residual":  # a second input read in the epilogue
        out_width = (width + 2 * (kernel // 2) - kernel) // stride + 1
        y = relay.nn.relu(y + relay.var("skip", shape=(1, filters, out_width, out_width)))
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    params = relay.transform.InferType()(mod)["main"].params
    return mod, {
        v.name_hint: rng.normal(0, 1, [int(d) for d in v.checked_type.shape]).astype("float32") for v in params
    }


@pytest.mark.parametrize(
    "channels,width,filters,kernel,stride,epilogue",
    [
        (3, 45, 32, 3, 2, "relu"),  # few channels; 22 columns: a partial last block
        (16, 22, 32, 3, 1, "relu"),  # columns that divide the row
        (32, 13, 64, 1, 1, "relu"),  # the 1x1 schedule
        (48, 17, 32, 1, 1, "clip"),  # 1x1, a width with no wide divisor
        (16, 14, 32, 3, 1, "residual"),  # an epilogue reading another tensor
        (16, 15, 16, 3, 1, "none"),  # bias only
    ],
)
def test_fused_convolutions_equal_the_graph_executors(channels, width, filters, kernel, stride, epilogue):
    mod, args = _conv_net(channels, width, filters, kernel, stride, epilogue)
    target = host_target()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    graph = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    graph.run(**args)
    got = relay_aot.compile(mod, target=target)(*args.values())
    expected = graph.get_output(0).numpy()
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)


def _fused_kernel_text(width: int, kernel: int) -> str:
    """TIR of TVM's x86 packed convolution + bias + relu, scheduled with an explicit blocking."""
    target = tvm.target.Target("llvm -mcpu=skylake-avx512")
    data = te.placeholder((1, 1, width, width, 16), name="data")
    weight = te.placeholder((2, 1, kernel, kernel, 16, 16), name="weight")
    bias = te.placeholder((1, 2, 1, 1, 16), name="bias")
    entities = {"tile_ic": SplitEntity([1, 16]), "tile_oc": SplitEntity([2, 16]), "tile_ow": SplitEntity([-1, 7])}
    entities["tile_oh" if kernel == 1 else "unroll_kw"] = OtherOptionEntity(1 if kernel == 1 else False)

    class Fixed(tvm.autotvm.task.DispatchContext):
        def _query_inside(self, target, workload):
            return ConfigEntity(-1, None, entities, [])

    with target, Fixed():
        conv = topi.x86.conv2d_NCHWc(data, weight, (1, 1), (kernel // 2,) * 2, (1, 1), "NCHW16c", "NCHW16c", "float32")
        out = topi.nn.relu(conv + bias)
        schedule = topi.x86.schedule_conv2d_NCHWc([out])
        return str(tvm.lower(schedule, [data, weight, bias, out]))


def _conv_buffers(text: str) -> dict:
    """The convolution's buffers a kernel allocates (name: vectors)."""
    return {name: int(size) for name, size in re.findall(r"(conv2d_NCHWc\w*) = T.allocate\(\[(\d+)\]", text)}


@pytest.mark.parametrize(
    "kernel,tvms_buffers",
    [
        (3, {"conv2d_NCHWc": 14, "conv2d_NCHWc_global": 7}),  # a scratch row, read back
        (1, {"conv2d_NCHWc_global": 14}),  # the whole row's accumulators, then the epilogue
    ],
)
def test_the_epilogue_reads_one_register_block(kernel, tvms_buffers):
    """TVM's schedule keeps a row of the convolution's output and applies the epilogue to it
    afterwards; within ``building`` each block of 7 accumulators (the configuration's columns)
    feeds the epilogue directly. Outside it (relay.build, AutoTVM) TVM's schedule is unchanged."""
    assert _conv_buffers(_fused_kernel_text(14, kernel)) == tvms_buffers
    with conv_epilogue.building():
        assert _conv_buffers(_fused_kernel_text(14, kernel)) == {"conv2d_NCHWc_global": 7}
    assert _conv_buffers(_fused_kernel_text(14, kernel)) == tvms_buffers


def _fused_int8_kernel_text(width: int, kernel: int) -> str:
    """TIR of TVM's x86 uint8 x int8 packed convolution + an int32 bias (cascadelake: VNNI),
    scheduled with an explicit blocking of 7 columns, with relay_aot's vpdpbusd."""
    target = tvm.target.Target("llvm -mcpu=cascadelake")
    data = te.placeholder((1, 1, width, width, 16), dtype="uint8", name="data")
    weight = te.placeholder((2, 1, kernel, kernel, 4, 16, 4), dtype="int8", name="weight")
    bias = te.placeholder((1, 2, 1, 1, 16), dtype="int32", name="bias")
    entities = {"tile_ic": SplitEntity([1, 16]), "tile_oc": SplitEntity([2, 16]), "tile_ow": SplitEntity([-1, 7])}
    entities["tile_oh" if kernel == 1 else "unroll_kw"] = OtherOptionEntity(1 if kernel == 1 else False)

    class Fixed(tvm.autotvm.task.DispatchContext):
        def _query_inside(self, target, workload):
            return ConfigEntity(-1, None, entities, [])

    with target, Fixed(), vnni.building():
        padding = (kernel // 2,) * 2
        conv = topi.x86.conv2d_NCHWc_int8(data, weight, (1, 1), padding, (1, 1), "NCHW16c", "NCHW16c", "int32")
        schedule = topi.x86.schedule_conv2d_NCHWc_int8([conv + bias])
        return str(tvm.lower(schedule, [data, weight, bias, schedule.outputs[0].output(0)]))


def _int8_accumulators(text: str) -> dict:
    return {name: int(size) for name, size in re.findall(r"(conv2d_NCHWc_int8\w*) = T.allocate\(\[(\d+)\]", text)}


@pytest.mark.parametrize(
    "kernel,tvms_buffers,tvms_calls,ours",
    [
        # one column at a time: one dependent vpdpbusd chain; ours: the 7 columns of both
        # channel blocks (7 accumulators are too few in flight, conv_epilogue._channel_pairs)
        (3, {"conv2d_NCHWc_int8_global": 1}, 1, 14),
        (1, {"conv2d_NCHWc_int8_global": 14}, 7, 7),  # the row's accumulators, then the epilogue
    ],
)
def test_int8_epilogue_reads_a_register_block_of_accumulators(kernel, tvms_buffers, tvms_calls, ours):
    """TVM's fused int8 3x3 schedule computes the convolution one output column at a time (one
    int32x16 accumulator, each vpdpbusd waiting for the one before), its 1x1 schedule a row of
    accumulators in memory; within ``building`` the configuration's 7 columns have an
    accumulator each (of both channel blocks, 3x3), independent vpdpbusd per step, read by the
    epilogue directly."""
    text = _fused_int8_kernel_text(14, kernel)
    assert (_int8_accumulators(text), text.count("vpdpbusd")) == (tvms_buffers, tvms_calls)
    with conv_epilogue.building():
        text = _fused_int8_kernel_text(14, kernel)
    assert (_int8_accumulators(text), text.count("vpdpbusd")) == ({"conv2d_NCHWc_int8_global": ours}, ours)
    assert _int8_accumulators(_fused_int8_kernel_text(14, kernel)) == tvms_buffers


def _int8_conv_reference(x, w, padding) -> np.ndarray:
    """NCHW x OIHW, stride 1, in int64."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    w = w.astype(np.int64)
    k, _, r, s = w.shape
    oh, ow = x.shape[2] - r + 1, x.shape[3] - s + 1
    out = np.zeros((x.shape[0], k, oh, ow), np.int64)
    for i in range(r):
        for j in range(s):
            out += np.einsum("nchw,kc->nkhw", x[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out


@pytest.mark.parametrize("data_dtype", ["int8", "uint8"])
@pytest.mark.parametrize(
    "channels,width,filters,kernel",
    [
        (16, 15, 32, 3),  # the common schedule, a partial last block of columns
        (64, 12, 64, 1),  # the 1x1 schedule
        (8, 25, 16, 3),  # KWS-like: few channels, a long row
    ],
)
def test_fused_int8_convolutions_are_exact(channels, width, filters, kernel, data_dtype):
    """An int8 convolution with an int32 bias and TFLite-like requantization after it (fused into
    its kernel): equal to numpy's int64 on extreme values; with VNNI, the fused kernel has
    several accumulators and calls vpdpbusd."""
    rng = np.random.default_rng(channels + width + kernel)
    info = np.iinfo(data_dtype)
    x = np.where(rng.random((1, channels, width, width)) < 0.5, info.min, info.max).astype(data_dtype)
    x = np.where(rng.random(x.shape) < 0.3, rng.integers(info.min, info.max, x.shape, endpoint=True), x)
    x = x.astype(data_dtype)
    w = rng.integers(-128, 127, (filters, channels, kernel, kernel), endpoint=True).astype("int8")
    b = rng.integers(-(2**20), 2**20, (filters,)).astype("int32")
    data = relay.var("x", shape=x.shape, dtype=data_dtype)
    y = relay.nn.conv2d(
        data,
        relay.const(w),
        padding=(kernel // 2,) * 2,
        channels=filters,
        kernel_size=(kernel, kernel),
        out_dtype="int32",
    )
    y = relay.nn.bias_add(y, relay.const(b))
    y = relay.right_shift(y, relay.const(9, "int32"))
    y = relay.cast(relay.clip(y, -128, 127), "int8")
    mod = tvm.IRModule.from_expr(relay.Function([data], y))
    expected = np.clip((_int8_conv_reference(x, w, kernel // 2) + b.reshape(1, -1, 1, 1)) >> 9, -128, 127)
    np.testing.assert_array_equal(relay_aot.compile(mod)(x).numpy(), expected)
    target = tvm.target.Target(host_target())
    if cpu.has_vnni(target):
        _, table = Request.make(mod, None, None).lower()
        kernels = {g.name_hint: str(f) for g, f in table.lower_all(report=False).functions.items()}
        fused = [text for name, text in kernels.items() if "vpdpbusd" in text and re.search("conv2d_NCHWc.*_add", name)]
        assert len(fused) == 1 and max(_int8_accumulators(fused[0]).values()) > 1, sorted(kernels)

"""Grouped 1x1 convolutions as register-blocked matrix products (``kernels/grouped_pointwise.py``):
which convolutions get the kernel (and only while relay_aot builds), its blocks, and its results
against the graph executor's (TVM's ``group_conv2d_nchw.x86``), fused with batch norm, a
residual and relu or not."""

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.contrib import graph_executor
from tvm.relay.backend import te_compiler

import relay_aot
from relay_aot.cpu import host_target
from relay_aot.kernels import grouped_pointwise

OURS = "grouped_pointwise_nchw.relay_aot"


def _grouped_net(channels, filters, height, width, groups, epilogue, batch=1, kernel=1, stride=1):
    """One grouped convolution and, by ``epilogue``: "bn_relu" (batch norm's scale and shift,
    relu), "residual" (those and a second input added before relu), "none"."""
    rng = np.random.default_rng(channels * 100 + height)
    data = relay.var("data", shape=(batch, channels, height, width))
    weight = rng.normal(0, 1 / np.sqrt(channels // groups), (filters, channels // groups, kernel, kernel))
    y = relay.nn.conv2d(
        data,
        relay.const(weight.astype("float32")),
        strides=(stride, stride),
        padding=(kernel // 2, kernel // 2),
        groups=groups,
        channels=filters,
        kernel_size=(kernel, kernel),
    )
    if epilogue != "none":
        y = y * relay.const(rng.uniform(0.5, 1.5, (filters, 1, 1)).astype("float32"))
        y = y + relay.const(rng.normal(0, 1, (filters, 1, 1)).astype("float32"))
        if epilogue == "residual":
            y = y + relay.var("skip", shape=(batch, filters, height // stride, width // stride))
        y = relay.nn.relu(y)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y)))
    args = {
        v.name_hint: rng.normal(0, 1, [int(d) for d in v.checked_type.shape]).astype("float32")
        for v in mod["main"].params
    }
    return mod, args


def _implementation(mod, target) -> str:
    """The name of the implementation TVM's strategy picks for the module's convolution."""
    found = []
    relay.analysis.post_order_visit(
        mod["main"], lambda n: found.append(n) if isinstance(n, relay.Call) and n.op.name == "nn.conv2d" else None
    )
    (call,) = found
    inputs = [tvm.te.placeholder([int(d) for d in a.checked_type.shape], a.checked_type.dtype) for a in call.args]
    with target:
        impl, _ = te_compiler.select_implementation(call.op, call.attrs, inputs, call.checked_type, target)
    return impl.name


@pytest.mark.parametrize(
    "case,ours",
    [
        (dict(channels=136, filters=136, height=28, width=28, groups=4), True),  # ShuffleNet's
        (dict(channels=24, filters=112, height=56, width=56, groups=4), True),  # more filters than channels
        (dict(channels=32, filters=32, height=14, width=14, groups=32), False),  # depthwise: TVM's
        (dict(channels=32, filters=32, height=14, width=14, groups=4, kernel=3), False),  # 3x3: TVM's
        (dict(channels=32, filters=32, height=14, width=14, groups=4, stride=2), False),  # strided: TVM's
    ],
)
def test_the_kernel_is_chosen_only_for_grouped_pointwise_convolutions_while_relay_aot_builds(case, ours):
    mod, _ = _grouped_net(**case, epilogue="none")
    target = tvm.target.Target(host_target())
    assert _implementation(mod, target) != OURS  # relay.build, TVM's executors: TVM's schedule
    with grouped_pointwise.building():
        assert (_implementation(mod, target) == OURS) == ours
    assert _implementation(mod, target) != OURS


@pytest.mark.parametrize(
    "channels,filters,height,width,groups,epilogue,batch",
    [
        (136, 136, 28, 28, 4, "bn_relu", 1),  # ShuffleNet's shapes
        (272, 272, 14, 14, 4, "residual", 1),
        (544, 544, 7, 7, 4, "bn_relu", 1),
        (24, 112, 56, 56, 4, "bn_relu", 1),  # 6 channels per group
        (12, 18, 10, 6, 3, "none", 2),  # unfused; not square; two images
        (16, 8, 5, 9, 2, "residual", 1),  # fewer filters than channels; a 9-wide row (blocks of 9)
        (8, 8, 3, 17, 2, "bn_relu", 1),  # a prime width above the lanes: TVM's kernel
        (64, 32, 7, 7, 4, "residual", 1),  # a small map's whole vectors, the last overlapping (AVX-512)
        (32, 48, 5, 5, 2, "none", 2),  # unfused, two images: 25 positions, two vectors
        (16, 16, 8, 8, 4, "bn_relu", 1),  # 64 positions: whole vectors without overlap
        (16, 16, 4, 4, 2, "residual", 1),  # one vector
    ],
)
def test_grouped_pointwise_convolutions_equal_the_graph_executors(
    channels, filters, height, width, groups, epilogue, batch
):
    mod, args = _grouped_net(channels, filters, height, width, groups, epilogue, batch)
    target = host_target()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    graph = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    graph.run(**args)
    got = relay_aot.compile(mod, target=target)(*args.values()).numpy()
    np.testing.assert_allclose(got, graph.get_output(0).numpy(), rtol=1e-5, atol=1e-5)


def test_blocks_are_many_filters_by_one_run_of_a_row():
    """AVX-512 (16 lanes, 32 registers), ShuffleNet's groups (filters, map): 17 or 28 filters by
    the widest run of a row one vector holds; AVX2 (8 lanes, 16 registers): at most 12
    accumulators. Every block divides its extents."""
    assert grouped_pointwise.blocking(34, 28, 28, 16, 32) == (17, 1, 14)
    assert grouped_pointwise.blocking(68, 14, 14, 16, 32) == (17, 1, 14)
    assert grouped_pointwise.blocking(136, 7, 7, 16, 32) == (17, 1, 7)
    assert grouped_pointwise.blocking(28, 56, 56, 16, 32) == (28, 1, 14)
    assert grouped_pointwise.blocking(64, 32, 32, 16, 32)[2] == 16
    for filters, height, width in [(34, 28, 28), (68, 14, 14), (136, 7, 7), (28, 56, 56), (5, 3, 17)]:
        for lanes, registers in [(16, 32), (8, 16)]:
            rows, block_height, block_width = grouped_pointwise.blocking(filters, height, width, lanes, registers)
            assert filters % rows == 0 and height % block_height == 0 and width % block_width == 0
            assert block_width <= lanes and rows * block_height <= registers - grouped_pointwise.SPARE_REGISTERS


def test_small_maps_are_whole_vectors_the_last_overlapping():
    """A 7 x 7 map on AVX-512: 4 vectors (at 0, 16, 32, 33) instead of 7 runs of 7 of 16 lanes,
    4 filters a block; a 14 x 14 map keeps its rows (13 vectors would be more than 4), as does
    a map smaller than a vector, and AVX2's 8 lanes (7 vectors)."""
    assert grouped_pointwise.map_blocks(7, 7, 16) == 4
    assert grouped_pointwise.block_rows(136, 4, 32) == 4
    assert grouped_pointwise.map_blocks(14, 14, 16) == 0
    assert grouped_pointwise.map_blocks(3, 3, 16) == 0
    assert grouped_pointwise.map_blocks(7, 7, 8) == 0
    assert grouped_pointwise.map_blocks(4, 16, 16) == 0  # rows of 16 are whole vectors already
    assert grouped_pointwise.map_blocks(5, 5, 16) == 2


@pytest.mark.parametrize(
    "target,height,ours",
    [
        ("llvm -mcpu=skylake-avx512", 7, True),  # a small map's whole vectors
        ("llvm -mcpu=haswell", 14, True),  # runs of 7 of 8 lanes
        ("llvm -mcpu=haswell", 7, False),  # AVX2, fewer positions than 8 x 8: TVM's kernel was faster
        ("llvm", 14, False),  # SSE2: 14-wide rows have no run of 4 values
    ],
)
def test_the_kernel_choice_depends_on_the_targets_vectors(target, height, ours):
    mod, _ = _grouped_net(64, 64, height, height, 4, "none")
    with grouped_pointwise.building():
        assert (_implementation(mod, tvm.target.Target(target)) == OURS) == ours

"""Depthwise convolutions kept in ``NCHW`` between grouped ones (``passes/depthwise_nchw.py``,
``kernels/depthwise_nchw.py``): which convolutions are marked, that the layout choice then leaves
them (and only them) in ``NCHW``, that relay_aot's kernel computes them only while it builds, and
its results against the graph executor's on ShuffleNet's shapes and others."""

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.contrib import graph_executor
from tvm.relay.backend import te_compiler

import relay_aot
from relay_aot import passes
from relay_aot.cpu import host_target
from relay_aot.kernels import grouped_pointwise
from relay_aot.passes import depthwise_nchw

OURS = "depthwise_nchw.relay_aot"

#: The layout choice is the target's: an AVX-512 one (16 lanes), whatever this machine is.
AVX512 = tvm.target.Target("llvm -mcpu=skylake-avx512")


def _host_lanes() -> int:
    with tvm.target.Target(host_target()):
        return tvm.target.x86.get_simd_32bit_lanes()


def _prepared_text(mod, target) -> str:
    return passes.prepare(mod, target=target).astext(show_meta_data=False)


def _unit(channels, size, groups=4, kernel=3, padding=1, stride=1, before="grouped", after="grouped", batch=1):
    """A ShuffleNet unit: ``before`` (a grouped 1x1 convolution with batch norm and relu, an
    ungrouped one, or nothing), the channel shuffle, the depthwise convolution with batch norm's
    shift, then ``after`` (a grouped 1x1 convolution, an ungrouped one, or nothing)."""
    rng = np.random.default_rng(channels + size)

    def const(*shape):
        return relay.const(rng.normal(0, 0.3, shape).astype("float32"))

    def pointwise(y, kind):
        per_group = channels // (groups if kind == "grouped" else 1)
        return relay.nn.conv2d(y, const(channels, per_group, 1, 1), groups=groups if kind == "grouped" else 1)

    data = relay.var("data", shape=(batch, channels, size, size))
    y = data
    if before != "none":
        y = relay.nn.relu(pointwise(y, before) * const(channels, 1, 1) + const(channels, 1, 1))
        shuffled = relay.reshape(y, (batch, groups, channels // groups, size, size))
        y = relay.reshape(relay.transpose(shuffled, (0, 2, 1, 3, 4)), (batch, channels, size, size))
    y = relay.nn.conv2d(
        y, const(channels, 1, kernel, kernel), strides=(stride, stride), padding=padding, groups=channels
    )
    y = y + const(channels, 1, 1)
    if after != "none":
        y = pointwise(y, after) + const(channels, 1, 1)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([data], y)))
    return mod, rng.normal(0, 1, (batch, channels, size, size)).astype("float32")


def _depthwise_calls(mod) -> list:
    found = []

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and node.op.name.startswith("nn."):
            if "depthwise" in node.op.name or (node.op.name == "nn.conv2d" and int(node.attrs.groups) > 4):
                found.append(node)

    relay.analysis.post_order_visit(mod["main"], visit)
    return found


@pytest.mark.parametrize(
    "case,marked",
    [
        (dict(channels=136, size=28), True),  # ShuffleNet's
        (dict(channels=272, size=14), True),
        (dict(channels=64, size=16, before="none"), False),  # the model's input: nothing to spare
        (dict(channels=64, size=16, after="none"), False),  # the function's result
        (dict(channels=64, size=16, before="dense"), False),  # MobileNet's: packed neighbours
        (dict(channels=64, size=16, after="dense"), False),
        (dict(channels=64, size=16, stride=2), False),  # strided: stays packed
        (dict(channels=64, size=7), False),  # 7-wide rows: under MIN_RUN
    ],
)
def test_depthwise_convolutions_are_marked_only_between_grouped_ones(case, marked):
    mod, _ = _unit(**case)
    out = depthwise_nchw.mark(mod, lanes=16)
    layouts = [str(call.attrs.out_layout) for call in _depthwise_calls(out)]
    assert layouts == (["NCHW"] if marked else [""])
    assert (out is mod) == (not marked)


def test_the_layout_choice_leaves_marked_convolutions_in_nchw_and_packs_the_others():
    """x86's layout choice packs a depthwise convolution into NCHWc, with a transform on each
    side; a marked one stays as it is while ``kept`` is entered, and its neighbours too (the
    pipeline: no transform is left)."""
    shufflenet, _ = _unit(136, 28)
    marked = depthwise_nchw.mark(shufflenet, lanes=16)

    def altered(mod):
        return relay.transform.AlterOpLayout()(mod).astext(show_meta_data=False)

    with AVX512:
        with depthwise_nchw.kept():
            assert "NCHWc" not in altered(marked)
            assert "contrib_depthwise_conv2d_NCHWc" in altered(shufflenet)
        assert "contrib_depthwise_conv2d_NCHWc" in altered(marked)  # relay.build's own choice
    text = _prepared_text(shufflenet, AVX512)
    assert "layout_transform(" not in text and "NCHWc" not in text


def _implementation(mod, target) -> str:
    (call,) = _depthwise_calls(mod)
    inputs = [tvm.te.placeholder([int(d) for d in a.checked_type.shape], a.checked_type.dtype) for a in call.args]
    with target:
        impl, _ = te_compiler.select_implementation(call.op, call.attrs, inputs, call.checked_type, target)
    return impl.name


def test_the_kernel_computes_marked_convolutions_only_while_relay_aot_builds():
    target = AVX512
    mod, _ = _unit(136, 28)
    marked = depthwise_nchw.mark(mod, lanes=16)
    assert _implementation(marked, target) != OURS  # relay.build, TVM's executors: TVM's kernel
    with grouped_pointwise.building():
        assert _implementation(marked, target) == OURS
        assert _implementation(mod, target) != OURS  # not marked
    assert _implementation(marked, target) != OURS


@pytest.mark.parametrize(
    "case",
    [
        dict(channels=136, size=28),  # ShuffleNet's: runs of 14, blocks of 4 rows
        dict(channels=272, size=14),
        dict(channels=112, size=56),
        dict(channels=24, size=10, groups=3),  # runs of 10: rows of one block each
        dict(channels=16, size=12, kernel=5, padding=2),
        dict(channels=16, size=12, padding=(0, 1, 2, 1)),  # padding on some sides only
        dict(channels=16, size=16, padding=0, groups=2, batch=2),  # no padding; two images
    ],
)
def test_depthwise_convolutions_in_nchw_equal_the_graph_executors(case):
    mod, data = _unit(**case)
    target = host_target()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    graph = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    graph.run(data=data)
    if _host_lanes() == 16:  # relay_aot's kernel computes it here (AVX2's runs are too short)
        assert "layout_transform(" not in _prepared_text(mod, tvm.target.Target(target))
    compiled = relay_aot.compile(mod, target=target)
    np.testing.assert_allclose(compiled(data).numpy(), graph.get_output(0).numpy(), rtol=1e-5, atol=1e-5)


def test_the_kernel_on_an_avx2_target_equals_the_graph_executors():
    """AVX2's vectors hold 8 float32: a 16-wide map takes runs of 8 (ShuffleNet's 28- and 14-wide
    ones, runs of 7, stay packed)."""
    mod, data = _unit(32, 16)
    target = "llvm -mcpu=haswell"
    assert "layout_transform(" not in _prepared_text(mod, tvm.target.Target(target))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    graph = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    graph.run(data=data)
    np.testing.assert_allclose(
        relay_aot.compile(mod, target=target)(data).numpy(), graph.get_output(0).numpy(), rtol=1e-5, atol=1e-5
    )

"""relay_aot's rewrites around global pools, against TVM's graph executor: pointwise
convolutions that only a global pool reads (relay_aot/passes/pooled_pointwise.py: which ones are
rewritten, how, by target) and global pools as pools of one window (passes/global_pools.py)."""

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot import passes
from relay_aot.passes import pooled_pointwise

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"
SHAPE = (2, 32, 5, 7)
FLAT, KEPT = (2, 32, 1, 35), SHAPE


def _module() -> tuple[tvm.IRModule, dict]:
    """Six convolutions of 100 filters over ``%x``, their weights bound as parameters (constants
    when prepared): four pooled pointwise ones, with a bias and a relu; a residual of the
    convolution's own shape; a per-channel scale and a clip; and one whose result is also
    returned whole. A strided one and a 3x3 one (the residual) are not pointwise."""
    x = relay.var("x", shape=SHAPE)
    rng = np.random.default_rng(7)
    params, weights = {}, []
    for index, kernel in enumerate([1, 1, 1, 1, 1, 3]):
        params[f"w{index}"] = rng.uniform(-1, 1, (100, 32, kernel, kernel)).astype("float32")
        weights.append(relay.var(f"w{index}", shape=(100, 32, kernel, kernel)))
    params["bias"] = rng.uniform(-1, 1, 100).astype("float32")
    params["scale"] = rng.uniform(-1, 1, (100, 1, 1)).astype("float32")
    bias, scale = relay.var("bias", shape=(100,)), relay.var("scale", shape=(100, 1, 1))

    def conv(weight, **attrs):
        return relay.nn.conv2d(x, weight, channels=100, kernel_size=weight.type_annotation.shape[2:], **attrs)

    avg = relay.nn.global_avg_pool2d(relay.nn.relu(relay.nn.bias_add(conv(weights[0]), bias)))
    residual = relay.nn.global_max_pool2d(relay.add(conv(weights[1]), conv(weights[5], padding=(1, 1))))
    scaled = relay.nn.global_avg_pool2d(relay.clip(relay.multiply(scale, conv(weights[2])), -2.0, 2.0))
    shared = conv(weights[3])
    strided = relay.nn.global_avg_pool2d(conv(weights[4], strides=(2, 2)))
    body = relay.Tuple([avg, residual, scaled, relay.nn.global_avg_pool2d(shared), shared, strided])
    return tvm.IRModule.from_expr(relay.Function([x, *weights, bias, scale], body)), params


def _convolutions(target: str) -> list[tuple]:
    """(data shape, filters, strides) of each convolution the prepared module computes, before
    the layout choice."""
    mod, params = _module()
    mod = passes.layout_graph(mod, params, target=tvm.target.Target(target))
    found = []

    def visit(node):
        if isinstance(node, relay.Call) and getattr(node.op, "name", None) == "nn.conv2d":
            found.append(
                (
                    tuple(int(d) for d in node.args[0].checked_type.shape),
                    int(node.checked_type.shape[1]),
                    tuple(int(s) for s in node.attrs.strides),
                )
            )

    relay.analysis.post_order_visit(mod["main"], visit)
    return sorted(found)


def test_pooled_pointwise_convolutions_run_over_one_row_padded_on_avx2():
    assert _convolutions(AVX2) == sorted(
        [
            (FLAT, 100, (1, 1)),  # residual operand: flattened, not padded
            (FLAT, 112, (1, 1)),  # bias and relu
            (FLAT, 112, (1, 1)),  # per-channel scale and clip
            (KEPT, 100, (1, 1)),  # also returned whole
            (KEPT, 100, (1, 1)),  # the 3x3 residual
            (KEPT, 100, (2, 2)),  # strided
        ]
    )


@pytest.mark.parametrize("target", ["llvm", AVX512])
def test_filters_are_padded_only_by_an_eighth_and_for_avx(target):
    # generic x86-64 (SSE): not padded; AVX-512: 128 filters (two vectors) would add over an eighth
    assert [c for c in _convolutions(target) if c[0] == FLAT] == [(FLAT, 100, (1, 1))] * 3


@pytest.mark.parametrize(
    "target, filters, padded",
    [
        (AVX2, 1000, 1008),
        (AVX512, 1000, 1024),
        ("llvm", 1000, 1000),
        (AVX512, 100, 100),
        (AVX512, 2048, 2048),
        ("llvm -mtriple=aarch64-linux-gnu", 1000, 1000),
    ],
)
def test_filters_are_padded_to_two_vectors(target, filters, padded):
    with tvm.target.Target(target):
        assert pooled_pointwise._block_padding(filters) == padded


@pytest.mark.parametrize("target", [AVX2, "llvm"])
def test_pooled_pointwise_values_equal_the_graph_executors(target):
    if target == AVX2 and not relay_aot.cpu.host_features().get("avx2"):
        pytest.skip("the host has no AVX2")
    mod, params = _module()
    x = np.random.default_rng(1).uniform(-3, 3, SHAPE).astype("float32")
    expected = _graph_executor_outputs(mod, params, x)
    for value, want in zip(relay_aot.compile(mod, params=params, target=target)(x), expected):
        np.testing.assert_allclose(value.numpy(), want, rtol=1e-4, atol=1e-4)


def _graph_executor_outputs(mod, params, *args) -> list:
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    graph = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu()))
    for index, arg in enumerate(args):
        graph.set_input(index, arg)
    graph.run()
    return [graph.get_output(i).numpy() for i in range(graph.get_num_outputs())]


@pytest.mark.parametrize("layout,shape", [("NCHW", (2, 24, 6, 5)), ("NHWC", (2, 6, 5, 24)), ("NCHW", (1, 8, 1, 1))])
def test_global_pools_are_windows_of_the_whole_image(layout, shape):
    x = relay.var("x", shape=shape)
    body = relay.Tuple(
        [relay.nn.global_avg_pool2d(relay.nn.relu(x), layout=layout), relay.nn.global_max_pool2d(x, layout=layout)]
    )
    mod = tvm.IRModule.from_expr(relay.Function([x], body))
    prepared = passes.layout_graph(mod, target=tvm.target.Target("llvm")).astext()
    assert "global_" not in prepared and "nn.avg_pool2d" in prepared and "nn.max_pool2d" in prepared
    data = np.random.default_rng(2).uniform(-2, 2, shape).astype("float32")
    expected = _graph_executor_outputs(mod, {}, data)
    for value, want in zip(relay_aot.compile(mod)(data), expected):
        np.testing.assert_allclose(value.numpy(), want, rtol=1e-5, atol=1e-6)

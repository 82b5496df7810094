"""Layouts and dataflow passes: relay_aot fuses a static model into the kernels ``relay.build``
makes (so a user switching executors loses no time), and refuses a layout change whose
run-time transforms would cost as much as the layer they feed.

Differential: outputs against the graph executor (and onnxruntime for an ONNX model-zoo graph);
kernels compared by their operators, attributes and types with ``relay.optimize``'s.
"""

import collections
from unittest import mock

import numpy as np
import pytest
import tvm
import tvm.relay.testing  # noqa: F401 (relay.testing.resnet)
from tvm import relay
from tvm.contrib import graph_executor

import relay_aot
from relay_aot import passes
from relay_aot.passes import depthwise_nchw, global_pools, pooled_pointwise, vector_math

TARGET = tvm.target.Target("llvm")


def _small_conv_net():
    """conv-bn-relu, conv-bn-relu, global pool, dense: a conv net small enough for CI."""
    rng = np.random.default_rng(0)
    data = relay.var("data", shape=(1, 3, 32, 32))
    params = {}

    def conv_bn_relu(x, name, cin, cout):
        weight = relay.var(f"{name}_w", shape=(cout, cin, 3, 3))
        params[f"{name}_w"] = rng.normal(0, np.sqrt(2 / (cin * 9)), (cout, cin, 3, 3)).astype("float32")
        bn = [relay.var(f"{name}_{p}", shape=(cout,)) for p in ("gamma", "beta", "mean", "var")]
        for var, (low, high) in zip(bn, [(0.5, 1.5), (-0.1, 0.1), (-0.1, 0.1), (0.5, 1.5)]):
            params[var.name_hint] = rng.uniform(low, high, cout).astype("float32")
        y = relay.nn.conv2d(x, weight, channels=cout, kernel_size=(3, 3), padding=(1, 1))
        return relay.nn.relu(relay.nn.batch_norm(y, *bn)[0])

    y = conv_bn_relu(conv_bn_relu(data, "c1", 3, 16), "c2", 16, 32)
    y = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(y))
    w = relay.var("fc_w", shape=(10, 32))
    params["fc_w"] = rng.normal(0, 0.2, (10, 32)).astype("float32")
    y = relay.nn.dense(y, w)
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    return relay.transform.InferType()(mod), params


def _kernels(mod):
    """The fused primitive functions of ``mod``: operators with attributes, and type."""
    found = collections.Counter()

    def describe(func):
        ops = []

        def visit(node):
            if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op):
                attrs = {k: str(node.attrs[k]) for k in node.attrs.keys()} if hasattr(node.attrs, "keys") else {}
                ops.append(f"{node.op.name}{sorted(attrs.items())}")

        relay.analysis.post_order_visit(func.body, visit)
        return f"{','.join(ops)} :: {func.checked_type}"

    def visit(node):
        if isinstance(node, relay.Function) and node.attrs and int(node.attrs.get("Primitive", 0)) == 1:
            found[describe(node)] += 1

    for func in mod.functions.values():
        if isinstance(func, relay.Function):
            relay.analysis.post_order_visit(func, visit)
    return found


def _same_kernels_as_relay_build(make):
    mod, params = make()
    with tvm.transform.PassContext(opt_level=3):
        built, _ = relay.optimize(mod, target=TARGET, params={k: tvm.nd.array(v) for k, v in params.items()})
    mod, params = make()  # relay.optimize binds the weights into the module it was given
    # relay_aot's own rewrites around global pools (test_pools), of tanh, exp, sigmoid
    # (test_vector_math) and of depthwise convolutions between grouped ones (test_depthwise_nchw)
    # aside
    with (
        mock.patch.object(depthwise_nchw, "mark", lambda m, lanes: m),
        mock.patch.object(pooled_pointwise, "rewrite", lambda m: m),
        mock.patch.object(global_pools, "rewrite", lambda m: m),
        mock.patch.object(vector_math, "rewrite", lambda m: m),
    ):
        prepared = passes.prepare(mod, params, 3, TARGET)
    ours, theirs = _kernels(prepared), _kernels(built)
    assert ours == theirs, (ours - theirs, theirs - ours)
    return prepared


def _graph_executor(mod, params, *args):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=TARGET, params=params)
    module = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    for i, arg in enumerate(args):
        module.set_input(i, arg)
    module.run()
    return module.get_output(0).numpy()


def test_conv_net_gets_relay_builds_kernels_and_packed_layouts():
    prepared = _same_kernels_as_relay_build(_small_conv_net)
    assert "nn.contrib_conv2d_NCHWc" in str(list(_kernels(prepared)))
    mod, params = _small_conv_net()
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 32, 32)).astype("float32")
    got = relay_aot.compile(mod, params=params)(x).numpy()
    np.testing.assert_allclose(got, _graph_executor(*_small_conv_net(), x), rtol=1e-5, atol=1e-6)


def test_weights_passed_as_arguments_keep_their_layout():
    """A dense layer whose weights are an argument of @main: packing them would run at every
    call, as many elements as the layer multiplies, so the layout change is refused."""
    x = relay.var("x", shape=(1, 16))
    w = relay.var("w", shape=(64, 16))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, w], relay.tanh(relay.nn.dense(x, w)))))
    prepared = passes.prepare(mod, None, 3, TARGET)
    assert passes._runtime_transform_elements(prepared) == 0
    assert "contrib_dense_pack" not in prepared.astext()
    # With the weights bound, packing happens once, at compile time: kept.
    bound = passes.prepare(mod, {"w": np.ones((64, 16), "float32")}, 3, TARGET)
    assert "contrib_dense_pack" in bound.astext() and passes._runtime_transform_elements(bound) == 0


def test_multiply_accumulates_skip_unknown_extents():
    """TVM's count crashes on a ``?`` extent; such a call counts nothing (no layout change)."""
    x = relay.var("x", shape=(relay.Any(), 16))
    w = relay.var("w", shape=(8, 16))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, w], relay.nn.dense(x, w))))
    assert passes._multiply_accumulates(mod) == 0
    x = relay.var("x", shape=(2, 16))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, w], relay.nn.dense(x, w))))
    assert passes._multiply_accumulates(mod) == 2 * 8 * 16


def test_multiply_accumulates_agree_with_tvms_count_and_survive_calls_it_aborts_on():
    """The count equals TVM's where TVM's counters work (ResNet-18, a transposed convolution, a
    batched product) and is a number where they abort the pass: a ``conv2d`` without
    ``kernel_size`` (what Legalize makes of ``conv2d_backward_weight``, TVM's test_op_grad_level2)
    and an N-d ``dense``."""

    def typed(expr):
        return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(expr), expr)))

    resnet = relay.transform.InferType()(relay.testing.resnet.get_workload(num_layers=18)[0])
    transposed = typed(
        relay.nn.conv2d_transpose(
            relay.var("x", shape=(1, 4, 8, 8)), relay.var("w", shape=(4, 3, 3, 3)), kernel_size=(3, 3), channels=3
        )
    )
    batched = typed(relay.nn.batch_matmul(relay.var("x", shape=(2, 5, 7)), relay.var("y", shape=(2, 3, 7))))
    for mod in (resnet, transposed, batched):
        assert passes._multiply_accumulates(mod) == relay.analysis.get_total_mac_number(mod["main"])

    # Depthwise, 16 channels: a 3x3 output, each a 32x32 reduction known only from the weight.
    no_kernel_size = typed(
        relay.nn.conv2d(relay.var("x", shape=(1, 16, 34, 34)), relay.var("w", shape=(16, 1, 32, 32)), groups=16)
    )
    assert no_kernel_size.astext().count("kernel_size") == 0
    assert passes._multiply_accumulates(no_kernel_size) == 16 * 3 * 3 * 32 * 32
    nd_dense = typed(relay.nn.dense(relay.var("x", shape=(2, 3, 16)), relay.var("w", shape=(8, 16))))
    assert passes._multiply_accumulates(nd_dense) == 2 * 3 * 8 * 16


def test_conv2d_backward_weight_depthwise_compiles_and_agrees_with_numpy():
    """TVM's test_op_grad_level2 case that aborted relay_aot's layout rule: the gradient of a
    depthwise convolution's weight, legalized into a conv2d without ``kernel_size``."""
    dy, x = relay.var("dy", shape=(1, 4, 8, 8)), relay.var("x", shape=(1, 4, 8, 8))
    grad = relay.nn.conv2d_backward_weight(dy, x, padding=(1, 1), kernel_size=(3, 3), groups=4, channels=4)
    mod = relay.transform.Legalize()(relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([dy, x], grad))))
    rng = np.random.default_rng(0)
    dy_np, x_np = rng.normal(size=(2, 1, 4, 8, 8)).astype("float32")
    padded = np.pad(x_np, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((4, 1, 3, 3), "float32")
    for i in range(3):
        for j in range(3):
            expected[:, 0, i, j] = (dy_np * padded[:, :, i : i + 8, j : j + 8]).sum(axis=(0, 2, 3))
    np.testing.assert_allclose(relay_aot.compile(mod)(dy_np, x_np).numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet", "squeezenet", "dcgan", "inception_v3"])
def test_vision_models_get_relay_builds_kernels(name):
    from benchmarks import workloads

    def make():
        mod, params = workloads._zoo_workload(name)
        return mod, dict(params)

    _same_kernels_as_relay_build(make)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_onnx_model_zoo_graphs_agree_with_onnxruntime(name):
    onnxruntime = pytest.importorskip("onnxruntime")
    from relay_aot.testing.onnx_models import model_zoo_graph

    model = model_zoo_graph(name)

    def make():
        mod, params = relay.frontend.from_onnx(model, freeze_params=True)
        return mod, {key: value.numpy() for key, value in params.items()}

    # ShuffleNet's channel shuffles need layout transforms around them: 1.95% of its
    # multiply-accumulates, a layout change relay.build makes and the cost rule keeps.
    _same_kernels_as_relay_build(make)
    mod, params = relay.frontend.from_onnx(model, freeze_params=True)
    x = np.random.default_rng(2).uniform(-1, 1, (1, 3, 224, 224)).astype("float32")
    got = relay_aot.compile(mod, params=params)(x).numpy()
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {model.graph.input[0].name: x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_te_compiler_reads_library_info_once_and_gets_it_back():
    """Within a compile TVM's per-dimension ``libinfo()`` query is answered from one copy; after
    it (also after an error, and nested) TVM's own function is back, so relay.build in the same
    process is measured unchanged."""
    from tvm.relay.backend import te_compiler

    from relay_aot.passes.te_compiler_speed import faster_te_compiler

    original = te_compiler.libinfo
    with faster_te_compiler():
        inside = te_compiler.libinfo
        assert inside is not original and inside() == dict(original())
        with faster_te_compiler():
            assert te_compiler.libinfo is inside
        assert te_compiler.libinfo is inside
    assert te_compiler.libinfo is original
    with pytest.raises(ZeroDivisionError):
        with faster_te_compiler():
            _ = 1 / 0
    assert te_compiler.libinfo is original


def test_remembered_workload_lookups_answer_as_tvms_walk():
    """Within a compile AutoTVM's ``get_workload`` remembers each operation's answer; for every
    tensor of a conv net's fused computes (a workload deep inside, elementwise ones after it,
    none at all) it is what TVM's own walk finds, and TVM's function is back afterwards."""
    from tvm import autotvm, te, topi

    from relay_aot.passes.te_compiler_speed import faster_te_compiler

    original = autotvm.task.get_workload
    with tvm.target.Target("llvm"):
        data = te.placeholder((1, 8, 12, 12), name="data")
        plain = topi.exp(topi.nn.relu(data))
        conv = topi.x86.conv2d_nchw(data, te.placeholder((8, 8, 3, 3), name="w"), 1, 1, 1, "float32")
        chain = [conv]
        for _ in range(5):
            chain.append(topi.add(topi.exp(chain[-1]), plain))
    tensors = [data, plain, *chain, [plain, chain[-1]], [chain[-1], plain]]
    expected = [original(t) for t in tensors]
    assert expected[0] is None and expected[-1] is not None and expected[1] is None
    with faster_te_compiler():
        assert autotvm.task.get_workload is not original
        assert [autotvm.task.get_workload(t) for t in tensors] == expected
        assert [autotvm.task.get_workload(t) for t in reversed(tensors)] == expected[::-1]
        assert autotvm.task.get_workload(conv, "no such task") is None
    assert autotvm.task.get_workload is original

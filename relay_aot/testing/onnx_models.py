"""Small ONNX models with control flow, built with ``onnx.helper``: the tests' and benchmarks'.

* :func:`loop_rnn` -- a ``Loop`` whose body carries a hidden state and emits it as a scan output
  (the whole sequence of states, what RNN-style models return): ``Tensor[(?, 1, H)]`` in Relay;
* :func:`scan_cumulative` -- a ``Scan`` summing rows of a sequence into a running state;
* :func:`if_branches` -- an ``If`` choosing between two computations on a run-time condition;
* :func:`quantized_conv_net` -- ``QLinearConv`` and ``QLinearMatMul`` between ``QuantizeLinear``
  and ``DequantizeLinear`` (a quantized model in ONNX's operator form);
* :func:`qdq_conv_net`, :func:`model_zoo_qdq` -- float models quantized by onnxruntime's
  ``quantize_static`` into QDQ form (:func:`quantize_qdq`);
* :func:`mlp` -- a multilayer perceptron of ``Gemm`` and ``Relu`` (no control flow: the
  benchmarks' like-for-like comparison with onnxruntime).

Each returns ``(model, make_inputs)`` where ``make_inputs(...)`` gives a dict of inputs by name.
Needs the ``onnx`` package (``pip install 'onnx<1.17'``, what TVM 0.19's importer supports).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

OPSET = 13


def _onnx():
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("relay_aot.testing.onnx_models needs the onnx package: pip install 'onnx<1.17'") from err
    return onnx, helper, TensorProto, numpy_helper


def loop_rnn(hidden: int = 4, seed: int = 0) -> tuple[object, Callable]:
    """``h_{t+1} = tanh(h_t W + b)`` for ``M`` steps in an ONNX ``Loop``; outputs the last state
    and the scan output of every state, ``(M, 1, hidden)``. Inputs: ``M`` (int64), ``cond``
    (bool), ``h0`` (``(1, hidden)`` float32)."""
    onnx, helper, TensorProto, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype("float32"), "W")
    bias = numpy_helper.from_array((rng.standard_normal((1, hidden)) * 0.1).astype("float32"), "b")
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["h_in", "W"], ["mm"]),
            helper.make_node("Add", ["mm", "b"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("Identity", ["h_out"], ["scan_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, hidden]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, hidden]),
            helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [1, hidden]),
        ],
        [weight, bias],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "h0"], ["h_final", "hs"], body=body)],
        "loop_rnn",
        [
            helper.make_tensor_value_info("M", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, hidden]),
        ],
        [
            helper.make_tensor_value_info("h_final", TensorProto.FLOAT, [1, hidden]),
            helper.make_tensor_value_info("hs", TensorProto.FLOAT, [None, 1, hidden]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)

    def inputs(steps: int, scale: float = 0.3) -> dict:
        return {"M": np.array(steps, "int64"), "cond": np.array(True), "h0": np.full((1, hidden), scale, "float32")}

    return model, inputs


def mlp(batch: int, sizes: tuple = (784, 512, 512, 10), seed: int = 0) -> tuple[object, Callable]:
    """A multilayer perceptron as an exporter writes one: ``Gemm`` (weights transposed,
    ``transB=1``) and ``Relu`` per hidden layer, a ``Gemm`` last. Input ``x``: ``(batch,
    sizes[0])`` float32."""
    onnx, helper, TensorProto, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    nodes, weights, previous = [], [], "x"
    for layer, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        w, b, out = f"w{layer}", f"b{layer}", f"y{layer}"
        weights.append(
            numpy_helper.from_array(rng.uniform(-1, 1, (n_out, n_in)).astype("float32") / np.float32(np.sqrt(n_in)), w)
        )
        weights.append(numpy_helper.from_array(rng.uniform(-0.1, 0.1, n_out).astype("float32"), b))
        nodes.append(helper.make_node("Gemm", [previous, w, b], [out], transB=1))
        previous = out
        if layer < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [out], [f"r{layer}"]))
            previous = f"r{layer}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [batch, sizes[-1]])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)

    def inputs() -> dict:
        return {"x": np.random.default_rng(seed + 1).uniform(-1, 1, (batch, sizes[0])).astype("float32")}

    return model, inputs


def quantized_conv_net(seed: int = 0) -> tuple[object, Callable]:
    """A small quantized conv net in ONNX's operator form, as a quantizer writes one:
    ``QuantizeLinear`` (uint8), two ``QLinearConv`` (int8 weights, int32 biases; the second
    strided), ``QLinearGlobalAveragePool``-free flattening by ``Reshape``, a ``QLinearMatMul``
    and ``DequantizeLinear`` to float32 logits. Input ``x``: ``(1, 3, 16, 16)`` float32."""
    onnx, helper, TensorProto, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    consts = []

    def const(name, value):
        consts.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    x_scale, x_zero = const("x_scale", np.float32(0.02)), const("x_zero", np.uint8(128))
    nodes = [helper.make_node("QuantizeLinear", ["x", x_scale, x_zero], ["xq"])]
    previous, scale, zero, channels = "xq", 0.02, x_zero, 3
    for i, (out_channels, stride) in enumerate([(8, 1), (16, 2)]):
        w = rng.integers(-60, 60, (out_channels, channels, 3, 3), dtype=np.int8)
        w_scale = np.float32(0.01)
        bias = rng.integers(-500, 500, out_channels).astype(np.int32)
        y_scale = np.float32(0.05 * (i + 1))
        operands = [
            previous,
            const(f"s{i}", np.float32(scale)),
            zero,
            const(f"w{i}", w),
            const(f"ws{i}", w_scale),
            const(f"wz{i}", np.int8(0)),
            const(f"ys{i}", y_scale),
            const(f"yz{i}", np.uint8(0)),
            const(f"b{i}", bias),
        ]
        nodes.append(helper.make_node("QLinearConv", operands, [f"c{i}"], pads=[1, 1, 1, 1], strides=[stride, stride]))
        previous, scale, zero, channels = f"c{i}", float(y_scale), f"yz{i}", out_channels
    nodes.append(helper.make_node("Reshape", [previous, const("flat", np.array([1, 16 * 8 * 8], np.int64))], ["f"]))
    fc = rng.integers(-40, 40, (16 * 8 * 8, 10), dtype=np.int8)
    nodes.append(
        helper.make_node(
            "QLinearMatMul",
            [
                "f",
                const("fs", np.float32(scale)),
                zero,
                const("fc", fc),
                const("fcs", np.float32(0.002)),
                const("fcz", np.int8(0)),
                const("os", np.float32(0.1)),
                const("oz", np.uint8(128)),
            ],
            ["o"],
        )
    )
    nodes.append(helper.make_node("DequantizeLinear", ["o", "os", "oz"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "quantized_conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)

    def inputs() -> dict:
        return {"x": np.random.default_rng(seed + 1).uniform(-1, 1, (1, 3, 16, 16)).astype("float32")}

    return model, inputs


def quantize_qdq(model: Any, calibration: Sequence[np.ndarray]) -> Any:
    """``model`` quantized by onnxruntime's ``quantize_static`` as a user quantizes one: QDQ
    format (``QuantizeLinear``/``DequantizeLinear`` pairs around the float operators), int8
    weights per output channel, uint8 activations, calibrated on ``calibration`` (values of its
    one input). ``Softmax`` stays float: onnxruntime fixes a quantized softmax's scale at 1/256,
    which rounds the nearly even probabilities of a network with random weights all to zero.
    Needs onnxruntime."""
    import tempfile

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    onnx, *_ = _onnx()
    (name,) = [i.name for i in model.graph.input]
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"node{i}"

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{name: value} for value in calibration])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        float_path, quantized_path = f"{tmp}/float.onnx", f"{tmp}/qdq.onnx"
        onnx.save(model, float_path)
        quantize_static(
            float_path,
            quantized_path,
            Calibration(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=[node.name for node in model.graph.node if node.op_type == "Softmax"],
        )
        return onnx.load(quantized_path)


def model_zoo_qdq(name: str, seed: int = 0) -> Any:
    """:func:`model_zoo_graph` converted to opset 13 (per-channel ``DequantizeLinear`` needs it),
    its ``Dropout`` nodes (the identity in inference; TVM's importer reads opset 12's ratio
    input as an attribute and fails) removed, and quantized by :func:`quantize_qdq` on eight
    seeded images in [0, 1). Needs onnxruntime."""
    onnx, *_ = _onnx()
    from onnx import version_converter

    model = version_converter.convert_version(model_zoo_graph(name, seed), OPSET)
    graph = model.graph
    renamed = {}
    for node in [node for node in graph.node if node.op_type == "Dropout"]:
        renamed[node.output[0]] = node.input[0]
        graph.node.remove(node)
    for node in graph.node:
        for i, value in enumerate(node.input):
            node.input[i] = renamed.get(value, value)
    if any(output.name in renamed for output in graph.output):
        raise ValueError(f"{name}: a Dropout's result is an output of the graph")
    (image,) = graph.input
    shape = tuple(d.dim_value or 1 for d in image.type.tensor_type.shape.dim)
    rng = np.random.default_rng(seed + 1)
    return quantize_qdq(model, [rng.uniform(0, 1, shape).astype("float32") for _ in range(8)])


def qdq_conv_net(seed: int = 0) -> tuple[object, Callable]:
    """A small float conv net (two 3x3 convolutions with relu, the second strided, a global
    average pool and a ``Gemm``) quantized by onnxruntime's own ``quantize_static`` as a user
    quantizes a model: QDQ format (``QuantizeLinear``/``DequantizeLinear`` pairs around float
    operators), int8 weights per output channel, uint8 activations, calibrated on eight seeded
    inputs. Input ``x``: ``(1, 3, 16, 16)`` float32 in [0, 1). Needs onnxruntime."""
    onnx, helper, TensorProto, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    weights = []

    def weight(name, *shape, fan_in):
        weights.append(numpy_helper.from_array(rng.normal(0.0, np.sqrt(2.0 / fan_in), shape).astype("float32"), name))
        return name

    nodes = [
        helper.make_node(
            "Conv", ["x", weight("w0", 8, 3, 3, 3, fan_in=27), weight("b0", 8, fan_in=27)], ["c0"], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node(
            "Conv",
            ["r0", weight("w1", 16, 8, 3, 3, fan_in=72), weight("b1", 16, fan_in=72)],
            ["c1"],
            pads=[1, 1, 1, 1],
            strides=[2, 2],
        ),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node(
            "Gemm", ["f", weight("w2", 10, 16, fan_in=16), weight("b2", 10, fan_in=16)], ["logits"], transB=1
        ),
    ]
    for i, node in enumerate(nodes):
        node.name = f"n{i}"
    graph = helper.make_graph(
        nodes,
        "qdq_conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])

    quantized = quantize_qdq(model, [rng.uniform(0, 1, (1, 3, 16, 16)).astype("float32") for _ in range(8)])

    def inputs(index: int = 0) -> dict:
        return {"x": np.random.default_rng(seed + 1 + index).uniform(0, 1, (1, 3, 16, 16)).astype("float32")}

    return quantized, inputs


def scan_cumulative(rows: int = 4, width: int = 3) -> tuple[object, Callable]:
    """An ONNX ``Scan`` over the rows of ``xs`` (``(rows, width)``): the state adds each row, the
    scan output is ``state * row``. Outputs the final state and ``(rows, width)`` scan outputs.
    (TVM 0.19's importer needs the sequence length to be static for ``Scan``.)"""
    onnx, helper, TensorProto, _ = _onnx()
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"]), helper.make_node("Mul", ["s_out", "x"], ["y"])],
        "body",
        [
            helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [width]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [width]),
        ],
        [
            helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [width]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [width]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Scan", ["s0", "xs"], ["s_final", "ys"], body=body, num_scan_inputs=1)],
        "scan",
        [
            helper.make_tensor_value_info("s0", TensorProto.FLOAT, [width]),
            helper.make_tensor_value_info("xs", TensorProto.FLOAT, [rows, width]),
        ],
        [
            helper.make_tensor_value_info("s_final", TensorProto.FLOAT, [width]),
            helper.make_tensor_value_info("ys", TensorProto.FLOAT, [rows, width]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)

    def inputs(scale: float) -> dict:
        return {
            "s0": np.linspace(-1, 1, width, dtype="float32"),
            "xs": np.linspace(-2, 2, rows * width, dtype="float32").reshape(rows, width) * np.float32(scale),
        }

    return model, inputs


def if_branches(width: int = 4) -> tuple[object, Callable]:
    """An ONNX ``If``: ``relu(x) * 2`` when ``sum(x) > 0``, else ``x - 1``."""
    onnx, helper, TensorProto, _ = _onnx()
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["then_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [width])],
        [two],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["x", "one"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [width])],
        [one],
    )
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
            helper.make_node("Greater", ["total", "zero"], ["positive"]),
            helper.make_node("If", ["positive"], ["y"], then_branch=then_branch, else_branch=else_branch),
        ],
        "if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [width])],
        [zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)

    def inputs(sign: float) -> dict:
        return {"x": (np.linspace(-1, 2, width, dtype="float32") * sign).astype("float32")}

    return model, inputs


def model_zoo_graph(name: str, seed: int = 0) -> Any:
    """The onnx package's "light" copy of a model-zoo network, with random weights.

    ``onnx/backend/test/data/light/light_<name>.onnx`` (``squeezenet``, ``shufflenet``,
    ``resnet50``, ...) keeps the real graph but replaces every weight by a ``ConstantOfShape``
    of 0.02. Here each of those becomes an initializer of seeded random values instead (scaled
    by fan-in; batch-norm scales small and variances positive), so activations neither vanish nor
    overflow and a wrong kernel shows in the output. The only graph input left is the image.
    """
    import os

    onnx, helper, _, numpy_helper = _onnx()
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
    if not os.path.exists(path):
        raise FileNotFoundError(f"the onnx package has no light model {name!r} ({path})")
    model = onnx.load(path)
    graph = model.graph
    rng = np.random.default_rng(seed)
    shapes = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    bn_scales = {node.input[1] for node in graph.node if node.op_type == "BatchNormalization"}
    bn_variances = {node.input[4] for node in graph.node if node.op_type == "BatchNormalization"}
    weights, nodes = [], []
    for node in graph.node:
        if node.op_type != "ConstantOfShape":
            nodes.append(node)
            continue
        out = node.output[0]
        shape = tuple(int(d) for d in shapes[node.input[0]])
        if out in bn_scales:
            values = rng.uniform(0.2, 0.6, shape)
        elif out in bn_variances:
            values = rng.uniform(0.5, 1.5, shape)
        elif len(shape) > 1:
            values = rng.normal(0.0, np.sqrt(1.0 / np.prod(shape[1:])), shape)
        else:
            values = rng.uniform(-0.1, 0.1, shape)
        weights.append(numpy_helper.from_array(values.astype(np.float32), out))
    used = {name for node in nodes for name in node.input}
    kept = [init for init in graph.initializer if init.name in used] + weights
    initialized = {init.name for init in kept}
    inputs = [i for i in graph.input if i.name not in initialized and i.name in used]
    new_graph = helper.make_graph(nodes, graph.name, inputs, list(graph.output), kept)
    result = helper.make_model(new_graph, opset_imports=list(model.opset_import))
    result.ir_version = max(model.ir_version, 4)
    onnx.checker.check_model(result)
    return result

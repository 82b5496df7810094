"""Small TFLite models written here, and TFLite's reference kernels to run them: the tests' oracle.

* :class:`ModelBuilder` writes a ``.tflite`` flatbuffer with the ``tflite`` package's builders:
  tensors (quantized per tensor or per channel, constant or not) and operators with their
  options, or layers (:meth:`~ModelBuilder.conv_2d`, :meth:`~ModelBuilder.fully_connected`, ...)
  that make their weights' tensors and compute their output's shape;
* :func:`reference` runs LiteRT's reference kernels (``OpResolverType.BUILTIN_REF``, the plain C++
  of ``tflite/kernels/internal/reference``) on a model file, returning its outputs or every tensor;
* held-out int8 networks of the four MLPerf Tiny families, small and with random weights
  (:data:`HELD_OUT_FAMILIES`: :func:`kws_family`, :func:`resnet_family`, :func:`vww_family`,
  :func:`ad_family`), their scales keeping every layer's output unsaturated.

Needs the ``tflite`` package (``pip install 'relay_aot[tflite]'``) to write models and
``ai-edge-litert`` to run them (both in the test extra).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: TFLite's TensorType numbers of the dtypes a model here may hold.
TENSOR_TYPES = {"float32": 0, "int32": 2, "uint8": 3, "int64": 4, "int16": 7, "int8": 9}

#: Operator versions written (what TFLite's converter writes for int8 kernels of these options).
VERSIONS = {
    "CONV_2D": 3,
    "DEPTHWISE_CONV_2D": 3,
    "FULLY_CONNECTED": 4,
    "ADD": 2,
    "AVERAGE_POOL_2D": 2,
    "MAX_POOL_2D": 2,
    "SOFTMAX": 2,
    "QUANTIZE": 2,
    "DEQUANTIZE": 2,
    "MEAN": 2,
}

#: TFLite's builtin options table of an operator, when it has one: name and fields written.
_OPTIONS = {
    "CONV_2D": (
        "Conv2DOptions",
        ("Padding", "StrideW", "StrideH", "DilationWFactor", "DilationHFactor", "FusedActivationFunction"),
    ),
    "DEPTHWISE_CONV_2D": (
        "DepthwiseConv2DOptions",
        (
            "Padding",
            "StrideW",
            "StrideH",
            "DepthMultiplier",
            "DilationWFactor",
            "DilationHFactor",
            "FusedActivationFunction",
        ),
    ),
    "AVERAGE_POOL_2D": (
        "Pool2DOptions",
        ("Padding", "StrideW", "StrideH", "FilterWidth", "FilterHeight", "FusedActivationFunction"),
    ),
    "MAX_POOL_2D": (
        "Pool2DOptions",
        ("Padding", "StrideW", "StrideH", "FilterWidth", "FilterHeight", "FusedActivationFunction"),
    ),
    "FULLY_CONNECTED": ("FullyConnectedOptions", ("FusedActivationFunction", "KeepNumDims")),
    "ADD": ("AddOptions", ("FusedActivationFunction",)),
    "SOFTMAX": ("SoftmaxOptions", ("Beta",)),
    "MEAN": ("ReducerOptions", ("KeepDims",)),
    "QUANTIZE": ("QuantizeOptions", ()),
    "DEQUANTIZE": ("DequantizeOptions", ()),
}

ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
PADDINGS = {"SAME": 0, "VALID": 1}


def _tflite(module: str):
    try:
        return importlib.import_module(f"tflite.{module}")
    except ImportError:
        raise ImportError("writing TFLite models needs the tflite package: pip install 'relay_aot[tflite]'") from None


def output_size(size: int, kernel: int, stride: int, dilation: int, padding: str) -> int:
    """The output extent of a window along one axis, as TFLite computes it."""
    extent = (kernel - 1) * dilation + 1
    return -(-size // stride) if padding == "SAME" else (size - extent) // stride + 1


class ModelBuilder:
    """A one-subgraph TFLite model, tensor by tensor and operator by operator.

    Tensors are numbered in the order they are added; each method returns its tensor's number.
    ``scale``/``zero_point`` quantize a tensor (a sequence of them, along ``quantized_dimension``,
    per channel). :meth:`write` makes the flatbuffer.
    """

    def __init__(self, description: str = "relay_aot.testing.tflite_models"):
        self.description = description
        self.tensors: list[dict[str, Any]] = []
        self.operators: list[dict[str, Any]] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    # -- tensors and operators ------------------------------------------------------------
    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str,
        scale=None,
        zero_point=None,
        quantized_dimension: int = 0,
        data: np.ndarray | None = None,
    ) -> int:
        """A tensor; with ``data``, a constant (stored in the model's buffers)."""
        if dtype not in TENSOR_TYPES:
            raise ValueError(f"dtype {dtype} is not one of {sorted(TENSOR_TYPES)}")
        if data is not None:
            data = np.ascontiguousarray(data, dtype=dtype)
            if data.shape != tuple(shape):
                raise ValueError(f"{name}: data of shape {data.shape} for a tensor of shape {tuple(shape)}")
        if (scale is None) != (zero_point is None):
            raise ValueError(f"{name}: a quantized tensor has both a scale and a zero point")
        self.tensors.append(
            {
                "name": name,
                "shape": tuple(int(d) for d in shape),
                "dtype": dtype,
                "scale": None if scale is None else np.atleast_1d(np.asarray(scale, np.float32)),
                "zero_point": None if zero_point is None else np.atleast_1d(np.asarray(zero_point, np.int64)),
                "quantized_dimension": quantized_dimension,
                "data": data,
            }
        )
        return len(self.tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype: str, scale=None, zero_point=None) -> int:
        """A tensor the model takes as an input."""
        self.inputs.append(self.tensor(name, shape, dtype, scale, zero_point))
        return self.inputs[-1]

    def output(self, *tensors: int) -> None:
        """Make tensors outputs of the model (in this order)."""
        self.outputs.extend(tensors)

    def operator(self, code: str, inputs: Sequence[int], outputs: Sequence[int], **options) -> None:
        """An operator (TFLite's builtin name) and its options, by the field names of TFLite's
        options table (``Padding=0, StrideW=2, FusedActivationFunction=3, ...``)."""
        self.operators.append({"code": code, "inputs": list(inputs), "outputs": list(outputs), "options": options})

    def like(self, index: int, name: str, shape: Sequence[int] | None = None, scale=None, zero_point=None) -> int:
        """A tensor of the dtype of tensor ``index``, and of its shape and quantization unless given."""
        t = self.tensors[index]
        quantized = t["scale"] is not None
        return self.tensor(
            name,
            t["shape"] if shape is None else shape,
            t["dtype"],
            (t["scale"] if quantized else None) if scale is None else scale,
            (t["zero_point"] if quantized else None) if zero_point is None else zero_point,
        )

    # -- layers: their weights' tensors and output's shape made here --------------------------
    def _output(self, x: int, name: str, shape: Sequence[int], scale, zero_point) -> int:
        if self.tensors[x]["scale"] is None:
            return self.tensor(name, shape, self.tensors[x]["dtype"])
        return self.tensor(name, shape, self.tensors[x]["dtype"], scale, zero_point)

    def _filter_and_bias(self, x: int, name: str, weights: np.ndarray, weight_scales, bias, axis: int):
        """The weights' and bias's tensors: quantized int8 (per channel when there are several
        scales) with an int32 bias of scale s_in * s_w, or float32 for a float input."""
        channels = weights.shape[axis]
        if weight_scales is None:
            w = self.tensor(f"{name}/weights", weights.shape, "float32", data=weights)
            b = self.tensor(f"{name}/bias", (channels,), "float32", data=np.zeros(channels) if bias is None else bias)
            return w, b
        scales = np.atleast_1d(np.asarray(weight_scales, np.float32))
        zeros = np.zeros(scales.size, np.int64)
        w = self.tensor(f"{name}/weights", weights.shape, "int8", scales, zeros, axis, weights)
        bias_scale = (np.float32(self.tensors[x]["scale"][0]) * scales).astype(np.float32)
        data = np.zeros(channels, np.int32) if bias is None else bias
        b = self.tensor(f"{name}/bias", (channels,), "int32", bias_scale, zeros, 0, data)
        return w, b

    def conv_2d(
        self,
        x: int,
        weights: np.ndarray,
        weight_scales=None,
        bias: np.ndarray | None = None,
        scale=None,
        zero_point=None,
        stride: tuple[int, int] = (1, 1),
        dilation: tuple[int, int] = (1, 1),
        padding: str = "SAME",
        activation: str = "NONE",
        name: str = "conv",
    ) -> int:
        """CONV_2D of ``weights`` (OHWI); quantized when ``weight_scales`` is given (one, or one
        per output channel), the output then of ``scale``/``zero_point``."""
        n, h, w, _ = self.tensors[x]["shape"]
        oc, kh, kw, _ = weights.shape
        oh = output_size(h, kh, stride[0], dilation[0], padding)
        ow = output_size(w, kw, stride[1], dilation[1], padding)
        wt, bt = self._filter_and_bias(x, name, weights, weight_scales, bias, 0)
        y = self._output(x, name, (n, oh, ow, oc), scale, zero_point)
        self.operator(
            "CONV_2D",
            [x, wt, bt],
            [y],
            Padding=PADDINGS[padding],
            StrideH=stride[0],
            StrideW=stride[1],
            DilationHFactor=dilation[0],
            DilationWFactor=dilation[1],
            FusedActivationFunction=ACTIVATIONS[activation],
        )
        return y

    def depthwise_conv_2d(
        self,
        x: int,
        weights: np.ndarray,
        weight_scales=None,
        bias: np.ndarray | None = None,
        scale=None,
        zero_point=None,
        stride: tuple[int, int] = (1, 1),
        dilation: tuple[int, int] = (1, 1),
        padding: str = "SAME",
        activation: str = "NONE",
        name: str = "depthwise",
    ) -> int:
        """DEPTHWISE_CONV_2D of ``weights`` (1, H, W, C * multiplier); the depth multiplier is
        the weights' channels over the input's."""
        n, h, w, c = self.tensors[x]["shape"]
        _, kh, kw, channels = weights.shape
        oh = output_size(h, kh, stride[0], dilation[0], padding)
        ow = output_size(w, kw, stride[1], dilation[1], padding)
        wt, bt = self._filter_and_bias(x, name, weights, weight_scales, bias, 3)
        y = self._output(x, name, (n, oh, ow, channels), scale, zero_point)
        self.operator(
            "DEPTHWISE_CONV_2D",
            [x, wt, bt],
            [y],
            Padding=PADDINGS[padding],
            StrideH=stride[0],
            StrideW=stride[1],
            DepthMultiplier=channels // c,
            DilationHFactor=dilation[0],
            DilationWFactor=dilation[1],
            FusedActivationFunction=ACTIVATIONS[activation],
        )
        return y

    def fully_connected(
        self,
        x: int,
        weights: np.ndarray,
        weight_scales=None,
        bias: np.ndarray | None = None,
        scale=None,
        zero_point=None,
        activation: str = "NONE",
        keep_num_dims: bool = False,
        name: str = "dense",
    ) -> int:
        """FULLY_CONNECTED of ``weights`` (units, depth) over the input's last axis."""
        shape = self.tensors[x]["shape"]
        units, depth = weights.shape
        out = (*shape[:-1], units) if keep_num_dims else (int(np.prod(shape)) // depth, units)
        wt, bt = self._filter_and_bias(x, name, weights, weight_scales, bias, 0)
        y = self._output(x, name, out, scale, zero_point)
        self.operator(
            "FULLY_CONNECTED",
            [x, wt, bt],
            [y],
            FusedActivationFunction=ACTIVATIONS[activation],
            KeepNumDims=keep_num_dims,
        )
        return y

    def add(self, a: int, b: int, scale=None, zero_point=None, activation: str = "NONE", name: str = "add") -> int:
        """ADD, broadcasting the inputs' shapes."""
        shape = np.broadcast_shapes(self.tensors[a]["shape"], self.tensors[b]["shape"])
        y = self._output(a, name, shape, scale, zero_point)
        self.operator("ADD", [a, b], [y], FusedActivationFunction=ACTIVATIONS[activation])
        return y

    def pool_2d(
        self,
        code: str,
        x: int,
        size: tuple[int, int],
        stride: tuple[int, int] = (1, 1),
        padding: str = "VALID",
        activation: str = "NONE",
        name: str = "pool",
    ) -> int:
        """AVERAGE_POOL_2D or MAX_POOL_2D; the output keeps the input's quantization."""
        n, h, w, c = self.tensors[x]["shape"]
        oh = output_size(h, size[0], stride[0], 1, padding)
        ow = output_size(w, size[1], stride[1], 1, padding)
        y = self.like(x, name, (n, oh, ow, c))
        self.operator(
            code,
            [x],
            [y],
            Padding=PADDINGS[padding],
            StrideH=stride[0],
            StrideW=stride[1],
            FilterHeight=size[0],
            FilterWidth=size[1],
            FusedActivationFunction=ACTIVATIONS[activation],
        )
        return y

    def softmax(self, x: int, beta: float = 1.0, name: str = "softmax") -> int:
        """SOFTMAX over the last axis; an int8 one's output has TFLite's required scale 1/256 and
        zero point -128."""
        quantized = self.tensors[x]["scale"] is not None
        y = self.like(x, name, scale=1 / 256 if quantized else None, zero_point=-128 if quantized else None)
        self.operator("SOFTMAX", [x], [y], Beta=beta)
        return y

    def reshape(self, x: int, shape: Sequence[int], name: str = "reshape") -> int:
        """RESHAPE to a static shape (given as the options' new shape and a constant input)."""
        target = self.tensor(f"{name}/shape", (len(shape),), "int32", data=np.array(shape, np.int32))
        y = self.like(x, name, shape)
        self.operator("RESHAPE", [x, target], [y])
        return y

    def mean(self, x: int, axes: Sequence[int], keep_dims: bool = True, name: str = "mean") -> int:
        """MEAN over ``axes`` (relay_aot has no exact conversion of it: the fallback's case)."""
        shape = [1 if i in axes else d for i, d in enumerate(self.tensors[x]["shape"])]
        if not keep_dims:
            shape = [d for i, d in enumerate(self.tensors[x]["shape"]) if i not in axes]
        reduced = self.tensor(f"{name}/axes", (len(axes),), "int32", data=np.array(axes, np.int32))
        y = self.like(x, name, shape)
        self.operator("MEAN", [x, reduced], [y], KeepDims=keep_dims)
        return y

    def quantize(self, x: int, scale: float, zero_point: int, dtype: str = "int8", name: str = "quantize") -> int:
        """QUANTIZE of a float tensor."""
        y = self.tensor(name, self.tensors[x]["shape"], dtype, scale, zero_point)
        self.operator("QUANTIZE", [x], [y])
        return y

    def dequantize(self, x: int, name: str = "dequantize") -> int:
        """DEQUANTIZE to float32."""
        y = self.tensor(name, self.tensors[x]["shape"], "float32")
        self.operator("DEQUANTIZE", [x], [y])
        return y

    # -- the flatbuffer -------------------------------------------------------------------
    def write(self, path: str | os.PathLike | None = None) -> bytes:
        """The model as a ``.tflite`` flatbuffer, also written to ``path`` if given."""
        data = _flatbuffer(self)
        if path is not None:
            Path(path).write_bytes(data)
        return data


def _flatbuffer(model: ModelBuilder) -> bytes:
    # the flatbuffers runtime comes with the tflite package (and has no type information)
    _tflite("Model")
    flatbuffers = importlib.import_module("flatbuffers")
    Buffer, Model, Operator, OperatorCode, Quantization, SubGraph, Tensor = (
        _tflite(n)
        for n in ("Buffer", "Model", "Operator", "OperatorCode", "QuantizationParameters", "SubGraph", "Tensor")
    )
    BuiltinOperator = _tflite("BuiltinOperator").BuiltinOperator
    BuiltinOptions = _tflite("BuiltinOptions").BuiltinOptions
    b = flatbuffers.Builder(1024)

    def vector(start, values, prepend) -> int:
        start(b, len(values))
        for v in reversed(list(values)):
            prepend(v)
        return b.EndVector()

    def int32s(start, values) -> int:
        return vector(start, [int(v) for v in values], b.PrependInt32)

    def offsets(start, values) -> int:
        return vector(start, values, b.PrependUOffsetTRelative)

    # buffer 0 is the empty one TFLite expects; then one per constant tensor
    empty = (Buffer.BufferStart(b), Buffer.BufferEnd(b))[1]
    buffers, buffer_of = [empty], []
    for t in model.tensors:
        if t["data"] is None:
            buffer_of.append(0)
            continue
        raw = t["data"].tobytes()
        b.StartVector(1, len(raw), 16)  # 16-byte aligned, as TFLite's writer aligns them
        b.head -= len(raw)
        b.Bytes[b.head : b.head + len(raw)] = raw
        content = b.EndVector()
        Buffer.BufferStart(b)
        Buffer.BufferAddData(b, content)
        buffer_of.append(len(buffers))
        buffers.append(Buffer.BufferEnd(b))
    tensors = []
    for t, buffer in zip(model.tensors, buffer_of):
        name = b.CreateString(t["name"])
        shape = int32s(Tensor.TensorStartShapeVector, t["shape"])
        quantization = None
        if t["scale"] is not None:
            scale = vector(Quantization.QuantizationParametersStartScaleVector, t["scale"], b.PrependFloat32)
            zero_point = vector(
                Quantization.QuantizationParametersStartZeroPointVector, t["zero_point"], b.PrependInt64
            )
            Quantization.QuantizationParametersStart(b)
            Quantization.QuantizationParametersAddScale(b, scale)
            Quantization.QuantizationParametersAddZeroPoint(b, zero_point)
            Quantization.QuantizationParametersAddQuantizedDimension(b, t["quantized_dimension"])
            quantization = Quantization.QuantizationParametersEnd(b)
        Tensor.TensorStart(b)
        Tensor.TensorAddShape(b, shape)
        Tensor.TensorAddType(b, TENSOR_TYPES[t["dtype"]])
        Tensor.TensorAddBuffer(b, buffer)
        Tensor.TensorAddName(b, name)
        if quantization is not None:
            Tensor.TensorAddQuantization(b, quantization)
        tensors.append(Tensor.TensorEnd(b))
    codes = sorted({op["code"] for op in model.operators})
    opcodes = []
    for code in codes:
        number = getattr(BuiltinOperator, code)
        OperatorCode.OperatorCodeStart(b)
        # codes above 127 live in the newer field only; the old one says "placeholder" (127)
        OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(b, min(number, 127))
        OperatorCode.OperatorCodeAddBuiltinCode(b, number)
        OperatorCode.OperatorCodeAddVersion(b, VERSIONS.get(code, 1))
        opcodes.append(OperatorCode.OperatorCodeEnd(b))
    operators = []
    for op in model.operators:
        inputs = int32s(Operator.OperatorStartInputsVector, op["inputs"])
        outputs = int32s(Operator.OperatorStartOutputsVector, op["outputs"])
        options = None
        if op["code"] in _OPTIONS:
            table_name, fields = _OPTIONS[op["code"]]
            table = _tflite(table_name)
            getattr(table, f"{table_name}Start")(b)
            for field in fields:
                if field in op["options"]:
                    getattr(table, f"{table_name}Add{field}")(b, op["options"][field])
            options = (getattr(BuiltinOptions, table_name), getattr(table, f"{table_name}End")(b))
        Operator.OperatorStart(b)
        Operator.OperatorAddOpcodeIndex(b, codes.index(op["code"]))
        Operator.OperatorAddInputs(b, inputs)
        Operator.OperatorAddOutputs(b, outputs)
        if options is not None:
            Operator.OperatorAddBuiltinOptionsType(b, options[0])
            Operator.OperatorAddBuiltinOptions(b, options[1])
        operators.append(Operator.OperatorEnd(b))
    tensor_vector = offsets(SubGraph.SubGraphStartTensorsVector, tensors)
    operator_vector = offsets(SubGraph.SubGraphStartOperatorsVector, operators)
    inputs = int32s(SubGraph.SubGraphStartInputsVector, model.inputs)
    outputs = int32s(SubGraph.SubGraphStartOutputsVector, model.outputs)
    name = b.CreateString("main")
    SubGraph.SubGraphStart(b)
    SubGraph.SubGraphAddTensors(b, tensor_vector)
    SubGraph.SubGraphAddInputs(b, inputs)
    SubGraph.SubGraphAddOutputs(b, outputs)
    SubGraph.SubGraphAddOperators(b, operator_vector)
    SubGraph.SubGraphAddName(b, name)
    subgraph = SubGraph.SubGraphEnd(b)
    subgraphs = offsets(Model.ModelStartSubgraphsVector, [subgraph])
    opcode_vector = offsets(Model.ModelStartOperatorCodesVector, opcodes)
    buffer_vector = offsets(Model.ModelStartBuffersVector, buffers)
    description = b.CreateString(model.description)
    Model.ModelStart(b)
    Model.ModelAddVersion(b, 3)
    Model.ModelAddOperatorCodes(b, opcode_vector)
    Model.ModelAddSubgraphs(b, subgraphs)
    Model.ModelAddDescription(b, description)
    Model.ModelAddBuffers(b, buffer_vector)
    b.Finish(Model.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


# --------------------------------------------------------------------------------------------
# Held-out int8 networks of the MLPerf Tiny families (not the models of tests/data/tinyml)
# --------------------------------------------------------------------------------------------
def scaled_filter(rng, builder: ModelBuilder, x: int, shape, channels: int, gain: float = 1.0, out_scale=None):
    """Random int8 weights with per-channel scales, a bias, and the output scale that keeps the
    output's spread near its input's in LSB (the weights' ~73 LSB times sqrt(taps)), times
    ``gain``. With ``out_scale``, the output has that scale: the weights' scales make up for it."""
    weights = rng.integers(-127, 128, size=shape).astype(np.int8)
    scales = rng.uniform(0.002, 0.02, size=channels).astype(np.float32)
    taps = int(np.prod(shape)) // channels if shape[0] == channels else int(np.prod(shape[1:3]))
    bias = rng.integers(-2000, 2000, size=channels).astype(np.int32)
    spread = float(builder.tensors[x]["scale"][0]) * float(scales.mean()) * np.sqrt(taps) * 73 / gain
    if out_scale is None:
        return weights, scales, bias, spread
    return weights, (scales * np.float32(out_scale / spread)).astype(np.float32), bias, float(out_scale)


#: The output scale of a layer with RELU6, as TFLite's converter chooses it: [0, 6] on 255 steps.
_RELU6_SCALE = 6 / 255

#: The scale of logits: a spread of some 60 LSB is a few units, and the softmax does not saturate.
_LOGITS_SCALE = 0.05

#: A layer whose input a RELU clamped (half its values at the zero point) has an output spread
#: smaller than its input's: its output scale is this much smaller (MobileNet's, the autoencoder's).
_GAIN_AFTER_RELU = {"vww": 1.6, "ad": 1.5}

#: The output scale of a residual ADD with RELU, in the larger input's scale (the RELU keeps half
#: the sum's values).
_RESIDUAL_SCALE = 0.6


def _conv(rng, model: ModelBuilder, x: int, filters: int, kernel: int, zero_point: int, name: str, **options) -> int:
    """CONV_2D of a square ``kernel``; the ``gain`` and ``out_scale`` options go to :func:`scaled_filter`."""
    channels = model.tensors[x]["shape"][3]
    scaling = {k: options.pop(k) for k in ("gain", "out_scale") if k in options}
    w, s, b, scale = scaled_filter(rng, model, x, (filters, kernel, kernel, channels), filters, **scaling)
    return model.conv_2d(x, w, s, b, scale, zero_point, name=name, **options)


def _classifier(rng, model: ModelBuilder, x: int, classes: int) -> int:
    """Average pool over the whole map, flatten, FULLY_CONNECTED logits (one weight scale, as
    MLPerf Tiny's), SOFTMAX (``Identity``)."""
    _, h, w, c = model.tensors[x]["shape"]
    y = model.reshape(model.pool_2d("AVERAGE_POOL_2D", x, (h, w), name="pool"), (1, c), name="flatten")
    w8, s, b, scale = scaled_filter(rng, model, y, (classes, c), classes, out_scale=_LOGITS_SCALE)
    y = model.fully_connected(y, w8, s[:1], b, scale, 0, name="logits")
    return model.softmax(y, name="Identity")


def kws_family(seed: int = 48) -> ModelBuilder:
    """A small network of the KWS (DS-CNN) family: conv, depthwise, pointwise, average pool, FC,
    softmax, int8, random weights."""
    rng = np.random.default_rng(seed)
    model = ModelBuilder()
    x = model.input("input_1", (1, 49, 10, 1), "int8", 0.5, 80)
    w, s, b, scale = scaled_filter(rng, model, x, (16, 10, 4, 1), 16)
    y = model.conv_2d(x, w, s, b, scale, -128, stride=(2, 2), activation="RELU", name="conv")
    w, s, b, scale = scaled_filter(rng, model, y, (1, 3, 3, 16), 16)
    y = model.depthwise_conv_2d(y, w, s, b, scale, -128, activation="RELU", name="depthwise")
    w, s, b, scale = scaled_filter(rng, model, y, (16, 1, 1, 16), 16)
    y = model.conv_2d(y, w, s, b, scale, -128, activation="RELU", name="pointwise")
    model.output(_classifier(rng, model, y, 12))
    return model


def _residual(model: ModelBuilder, a: int, b: int, name: str) -> int:
    """ADD with a fused RELU, as ResNet-8's."""
    scale = _RESIDUAL_SCALE * max(float(model.tensors[a]["scale"][0]), float(model.tensors[b]["scale"][0]))
    return model.add(a, b, scale, -128, activation="RELU", name=name)


def resnet_family(seed: int = 49) -> ModelBuilder:
    """A small network of the ResNet-8 family (image classification): a convolution, a residual
    block with an identity shortcut, one of stride 2 with a strided 1x1 convolution as its
    shortcut, ADD with RELU, average pool, FC, softmax; int8, random weights."""
    rng = np.random.default_rng(seed)
    model = ModelBuilder()
    x = model.input("input_1", (1, 16, 16, 3), "int8", 0.4, -5)
    y = _conv(rng, model, x, 8, 3, -128, "conv", activation="RELU")
    z = _conv(rng, model, y, 8, 3, -128, "block1/conv1", activation="RELU")
    z = _conv(rng, model, z, 8, 3, 4, "block1/conv2")
    y = _residual(model, y, z, "block1/add")
    z = _conv(rng, model, y, 16, 3, -128, "block2/conv1", stride=(2, 2), activation="RELU")
    z = _conv(rng, model, z, 16, 3, -3, "block2/conv2")
    shortcut = _conv(rng, model, y, 16, 1, 7, "block2/shortcut", stride=(2, 2))
    y = _residual(model, z, shortcut, "block2/add")
    model.output(_classifier(rng, model, y, 10))
    return model


def vww_family(seed: int = 50) -> ModelBuilder:
    """A small network of the Visual Wake Words (MobileNetV1) family: a convolution of stride 2,
    then depthwise 3x3 (stride 1, 2, 1) and pointwise convolutions, each with RELU6, average
    pool, FC, softmax of two classes; int8, random weights."""
    rng = np.random.default_rng(seed)
    model = ModelBuilder()
    x = model.input("input_1", (1, 24, 24, 3), "int8", 0.5, -1)
    y = _conv(rng, model, x, 8, 3, -128, "conv", stride=(2, 2), activation="RELU6", out_scale=_RELU6_SCALE)
    gain = _GAIN_AFTER_RELU["vww"]
    for k, (stride, filters) in enumerate([(1, 16), (2, 24), (1, 32)]):
        channels = model.tensors[y]["shape"][3]
        w, s, b, scale = scaled_filter(rng, model, y, (1, 3, 3, channels), channels, gain, _RELU6_SCALE)
        y = model.depthwise_conv_2d(
            y, w, s, b, scale, -128, stride=(stride, stride), activation="RELU6", name=f"block{k}/depthwise"
        )
        y = _conv(
            rng,
            model,
            y,
            filters,
            1,
            -128,
            f"block{k}/pointwise",
            activation="RELU6",
            gain=gain,
            out_scale=_RELU6_SCALE,
        )
    model.output(_classifier(rng, model, y, 2))
    return model


def ad_family(seed: int = 51) -> ModelBuilder:
    """A small network of the anomaly detection (dense autoencoder) family: FULLY_CONNECTED
    layers with RELU down to a bottleneck of 8 and back, the last one without activation; int8,
    random weights."""
    rng = np.random.default_rng(seed)
    model = ModelBuilder()
    y = model.input("input_1", (1, 96), "int8", 0.3, -10)
    units = [32, 32, 8, 32, 32, 96]
    for k, count in enumerate(units):
        last = k == len(units) - 1
        gain = _GAIN_AFTER_RELU["ad"] if 0 < k and not last else 1.0
        w, s, b, scale = scaled_filter(rng, model, y, (count, model.tensors[y]["shape"][1]), count, gain)
        activation, zero_point = ("NONE", 9) if last else ("RELU", -128)
        y = model.fully_connected(y, w, s, b, scale, zero_point, activation, name="Identity" if last else f"dense{k}")
    model.output(y)
    return model


#: The held-out families by the name of the MLPerf Tiny benchmark each stands for.
HELD_OUT_FAMILIES = {"kws": kws_family, "resnet": resnet_family, "vww": vww_family, "ad": ad_family}


def float_network(seed: int = 7) -> ModelBuilder:
    """A small float32 network: convolution (stride 2, RELU), depthwise (RELU6), average pool,
    FC, softmax; the logits and the probabilities out."""
    rng = np.random.default_rng(seed)
    model = ModelBuilder()
    x = model.input("image", (1, 16, 16, 3), "float32")
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    y = model.conv_2d(x, w, bias=rng.standard_normal(8).astype(np.float32), stride=(2, 2), activation="RELU")
    w = (rng.standard_normal((1, 3, 3, 8)) * 0.3).astype(np.float32)
    y = model.depthwise_conv_2d(y, w, bias=np.zeros(8, np.float32), activation="RELU6")
    y = model.reshape(model.pool_2d("AVERAGE_POOL_2D", y, (2, 2), (2, 2), "SAME"), (1, 128))
    logits = model.fully_connected(y, (rng.standard_normal((10, 128)) * 0.1).astype(np.float32), name="logits")
    model.output(logits, model.softmax(logits, name="probabilities"))
    return model


def quantized_island(seed: int = 9) -> ModelBuilder:
    """Float in, float out: QUANTIZE, int8 conv, depthwise, ADD, max pool, FC, DEQUANTIZE."""
    rng = np.random.default_rng(seed)
    model = ModelBuilder()
    x = model.input("features", (1, 12, 12, 4), "float32")
    q = model.quantize(x, 0.04, 3)
    w, s, b, scale = scaled_filter(rng, model, q, (8, 3, 3, 4), 8)
    y = model.conv_2d(q, w, s, b, scale, -128, activation="RELU", name="conv")
    w, s, b, scale = scaled_filter(rng, model, y, (1, 3, 3, 8), 8)
    y = model.depthwise_conv_2d(y, w, s, b, scale, 0, stride=(2, 2), name="depthwise")
    w, s, b, scale = scaled_filter(rng, model, y, (8, 1, 1, 8), 8)
    z = model.conv_2d(y, w, s, b, scale, 5, name="pointwise")
    y = model.add(y, z, 1.5 * max(float(model.tensors[y]["scale"][0]), scale), 0, name="residual")
    y = model.reshape(model.pool_2d("MAX_POOL_2D", y, (2, 2), (2, 2)), (1, 72))
    w, s, b, scale = scaled_filter(rng, model, y, (10, 72), 10)
    y = model.fully_connected(y, w, s, b, scale, 0, name="logits")
    model.output(model.dequantize(y, name="scores"))
    return model


#: The held-out networks beside the int8 families: float in and out, float32 throughout or
#: around QUANTIZE, int8 operators and DEQUANTIZE.
HELD_OUT_FLOAT = {"float": float_network, "island": quantized_island}


# --------------------------------------------------------------------------------------------
# TFLite's reference kernels
# --------------------------------------------------------------------------------------------
LITERT_MISSING = "running TFLite's reference kernels needs ai-edge-litert: pip install ai-edge-litert"


class Reference:
    """LiteRT's interpreter of a model file with TFLite's reference kernels (``BUILTIN_REF``);
    with ``every_tensor``, it keeps every intermediate tensor (``preserve_all_tensors``)."""

    def __init__(self, path: str | os.PathLike, every_tensor: bool = False):
        try:
            from ai_edge_litert.interpreter import Interpreter, OpResolverType
        except ImportError:
            raise ImportError(LITERT_MISSING) from None
        self.every_tensor = every_tensor
        self.interpreter = Interpreter(
            model_path=str(path),
            experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
            experimental_preserve_all_tensors=every_tensor,
        )
        self.interpreter.allocate_tensors()
        self.inputs = self.interpreter.get_input_details()
        self.outputs = self.interpreter.get_output_details()

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | dict[int, np.ndarray]:
        """The outputs for ``inputs`` (in the model's order), or with ``every_tensor`` every
        tensor the interpreter holds by its index in the model."""
        if len(inputs) != len(self.inputs):
            raise ValueError(f"the model takes {len(self.inputs)} inputs, not {len(inputs)}")
        for detail, value in zip(self.inputs, inputs):
            self.interpreter.set_tensor(detail["index"], np.asarray(value))
        self.interpreter.invoke()
        if not self.every_tensor:
            return [self.interpreter.get_tensor(d["index"]).copy() for d in self.outputs]
        tensors = {}
        for detail in self.interpreter.get_tensor_details():
            try:
                tensors[detail["index"]] = self.interpreter.get_tensor(detail["index"]).copy()
            except ValueError:  # a tensor without data (one LiteRT allocates lazily)
                continue
        return tensors


def reference(
    path: str | os.PathLike, inputs: Sequence[np.ndarray], every_tensor: bool = False
) -> list[np.ndarray] | dict[int, np.ndarray]:
    """TFLite's reference kernels (LiteRT, ``BUILTIN_REF``) on the model at ``path``: its outputs,
    or with ``every_tensor`` every tensor by its index in the model (what
    ``relay_aot.read_tflite(path, every_tensor=True).outputs[k].index`` names). For many inputs,
    :class:`Reference` keeps the interpreter."""
    return Reference(path, every_tensor)(inputs)

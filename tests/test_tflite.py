"""TFLite models in (issue 48): ``relay_aot.read_tflite`` and ``relay-aot compile M.tflite``.

The four MLPerf Tiny v1.0 int8 reference models are in ``tests/data/tinyml`` (Apache-2.0, see
its README). A file is recognised as TFLite by its flatbuffer identifier, whatever its name;
inputs and outputs are named, shaped and typed from the file, and the C API's fields are named
after them as TVM's AOT executor names them.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

import relay_aot
from relay_aot import cli
from relay_aot.errors import RelayAotError, UnsupportedError
from relay_aot.frontends import ImportedModel
from relay_aot.frontends.tflite import InexactConversionWarning
from relay_aot.testing.tflite_models import (
    HELD_OUT_FAMILIES,
    LITERT_MISSING,
    ModelBuilder,
    Reference,
    float_network,
    kws_family,
    quantized_island,
)

TINYML = Path(__file__).resolve().parent / "data" / "tinyml"
KWS = TINYML / "kws_ref_model.tflite"


def test_the_file_names_types_and_quantizes_the_inputs_and_outputs():
    model = relay_aot.read_tflite(KWS)
    ((x,), (y,)) = model.inputs, model.outputs
    assert (x.name, x.shape, x.dtype, x.zero_point) == ("input_1", (1, 49, 10, 1), "int8", (83,))
    assert (y.name, y.shape, y.dtype, y.zero_point) == ("Identity", (1, 12), "int8", (-128,))
    assert x.scale is not None and abs(x.scale[0] - 0.5847029) < 1e-6
    # the weights are parameters that model.params binds; the input is the one left
    main = model.mod["main"]
    assert [p.name_hint for p in main.params if p.name_hint not in model.params] == ["input_1"]


def test_the_command_line_recognises_a_model_by_its_identifier(tmp_path, capsys):
    """No suffix, no --format: the TFL3 identifier says it; the C header's fields are the
    model's input and output names (TVM's AOT interface: input_1, Identity)."""
    model = tmp_path / "ad"  # no .tflite suffix; anomaly detection: the quickest to build
    shutil.copyfile(TINYML / "ad01_int8.tflite", model)
    library, header = tmp_path / "ad.so", tmp_path / "tvmgen_ad.h"
    argv = ["compile", str(model), "-o", str(library), "--name", "ad", "--c-header", str(header)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "@main(%input_1: Tensor[(1, 640), int8]) -> Tensor[(1, 640), int8]" in capsys.readouterr().out
    text = header.read_text()
    assert re.search(r"void\* input_1;", text) and re.search(r"void\* Identity;", text), text
    compiled = relay_aot.load(library)
    out = compiled(np.zeros((1, 640), "int8")).numpy()
    assert out.shape == (1, 640) and out.dtype == np.int8


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["--format", "tflite"], r"not a TFLite model \(no TFL3 identifier at byte 4\)"),
        (["--input-shapes", "x:[1]"], r"--input-shapes applies to ONNX models; a TFLite model declares"),
    ],
)
def test_command_line_mistakes_are_one_line(argv_tail, message, tmp_path, capsys):
    model = tmp_path / ("x.relay" if "--format" in argv_tail else "kws.tflite")
    if "--format" in argv_tail:
        model.write_text('#[version = "0.0.5"]\ndef @main(%x: float32) { %x }\n')
    else:
        shutil.copyfile(KWS, model)
    status = cli.main(["compile", str(model), "-o", str(tmp_path / "x.so"), *argv_tail])
    err = capsys.readouterr().err.strip().splitlines()
    assert status != 0 and len(err) == 1 and re.search(message, err[0]), err


def test_without_the_tflite_package_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tflite", None)
    with pytest.raises(RelayAotError, match=r"pip install 'relay_aot\[tflite\]'"):
        relay_aot.read_tflite(KWS)


def test_a_damaged_model_is_a_clear_error(tmp_path):
    damaged = tmp_path / "damaged.tflite"
    damaged.write_bytes(KWS.read_bytes()[:64])
    with pytest.raises(RelayAotError, match="damaged.tflite"):
        relay_aot.read_tflite(damaged)


# --------------------------------------------------------------------------------------------
# Exactness (issue 48): int8 results equal to TFLite's reference kernels (LiteRT BUILTIN_REF)
# --------------------------------------------------------------------------------------------
needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason=LITERT_MISSING)

MLPERF_TINY = ["kws_ref_model", "pretrainedResnet_quant", "vww_96_int8", "ad01_int8"]

#: Ranges of int8 inputs drawn in turn: the full range, narrower ones, and each end alone.
RANGES = [(-128, 127), (-40, 40), (-10, 10), (-128, -100), (100, 127)]


def _values(compiled, inputs) -> list[np.ndarray]:
    result = compiled(*inputs)
    if hasattr(result, "numpy"):
        return [result.numpy()]
    return [result[i].numpy() for i in range(len(result))]


def _int8(rng, shape, low=-128, high=127) -> np.ndarray:
    return rng.integers(low, high + 1, size=shape).astype(np.int8)


def assert_bit_exact(ours, theirs, where: str) -> None:
    """Equal values, bit for bit (floats compared as their bits)."""
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (where, ours.shape, theirs.shape)
    if ours.dtype.kind == "f":
        ours, theirs = ours.view(f"int{8 * ours.itemsize}"), theirs.view(f"int{8 * theirs.itemsize}")
    wrong = ours != theirs
    if wrong.any():
        diff = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        pytest.fail(f"{where}: {int(wrong.sum())} of {wrong.size} values differ (at most by {int(diff.max())})")


@needs_litert
@pytest.mark.parametrize(
    # VWW's layers are the held-out VWW network's kinds, checked below (-m slow: CI time)
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "vww_96_int8" else n for n in MLPERF_TINY],
)
def test_mlperf_tiny_models_are_bit_exact_with_the_reference_kernels(name):
    """Three inputs that do not all saturate: the full int8 range, [-40, 40], the full range of
    another seed. KWS is compiled with every operator's output, each compared."""
    path = TINYML / f"{name}.tflite"
    every_tensor = name == "kws_ref_model"
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactConversionWarning)
        model = relay_aot.read_tflite(path, every_tensor=every_tensor)
    assert (model.importer, model.inexact) == ("exact", ())
    if every_tensor:
        assert len(model.outputs) == 13 and model.outputs[-1].name == "Identity"  # one per operator
    compiled = relay_aot.compile(model.mod, params=model.params)
    reference = Reference(path, every_tensor=every_tensor)
    for seed, (low, high) in enumerate([(-128, 127), (-40, 40), (-128, 127)]):
        x = _int8(np.random.default_rng(seed), model.inputs[0].shape, low, high)
        theirs = reference([x])
        for k, (info, ours) in enumerate(zip(model.outputs, _values(compiled, [x]), strict=True)):
            expected = theirs[info.index] if isinstance(theirs, dict) else theirs[k]
            assert_bit_exact(ours, expected, f"{name}, input {seed} in [{low}, {high}], tensor {info.name!r}")
        if every_tensor:  # the last layers' tensors take many values: the input did not saturate them
            assert len(np.unique(theirs[model.outputs[-3].index])) > 5


# Synthetic one-operator models ---------------------------------------------------------------
def _quantized_filter(rng, s_in: float, shape, channels: int, taps: int, per_channel: bool = True):
    """Random int8 weights (per-channel or one scale), a bias, and an output scale and zero point
    that keep the output's spread near 40 LSB: the weights' scale makes the accumulator's real
    spread about 3 (taps products of weights of ~73 LSB and inputs of ~60), 3 is mapped to 40 LSB."""
    weights = rng.integers(-127, 128, size=shape).astype(np.int8)
    base = 3.0 / (s_in * np.sqrt(taps) * 73 * 60)
    scales = (base * rng.uniform(0.5, 1.5, size=channels if per_channel else 1)).astype(np.float32)
    bias = rng.integers(-3000, 3000, size=channels).astype(np.int32)
    return weights, scales, bias, 3.0 / 40 * rng.uniform(0.8, 1.25), int(rng.integers(-30, 30))


def _convolution(kind, shape, out, kernel, stride, dilation, padding, activation, per_channel=True):
    def build(rng) -> ModelBuilder:
        model = ModelBuilder()
        s_in = rng.uniform(0.005, 0.1)
        x = model.input("x", shape, "int8", s_in, int(rng.integers(-60, 60)))
        common = dict(stride=stride, dilation=dilation, padding=padding, activation=activation)
        if kind == "conv":
            taps = kernel[0] * kernel[1] * shape[3]
            w, s, b, scale, zero_point = _quantized_filter(rng, s_in, (out, *kernel, shape[3]), out, taps, per_channel)
            model.output(model.conv_2d(x, w, s, b, scale, zero_point, **common))
        else:  # out: the depth multiplier
            channels, taps = shape[3] * out, kernel[0] * kernel[1]
            w, s, b, scale, zero_point = _quantized_filter(
                rng, s_in, (1, *kernel, channels), channels, taps, per_channel
            )
            model.output(model.depthwise_conv_2d(x, w, s, b, scale, zero_point, **common))
        return model

    return build


def _dense(shape, units, activation, keep_num_dims, per_channel=False):
    def build(rng) -> ModelBuilder:
        model = ModelBuilder()
        s_in = rng.uniform(0.01, 0.2)
        x = model.input("x", shape, "int8", s_in, int(rng.integers(-60, 60)))
        w, s, b, scale, zero_point = _quantized_filter(rng, s_in, (units, shape[-1]), units, shape[-1], per_channel)
        model.output(model.fully_connected(x, w, s, b, scale, zero_point, activation, keep_num_dims))
        return model

    return build


def _add(shape_a, shape_b, activation):
    def build(rng) -> ModelBuilder:
        model = ModelBuilder()
        (s_a, s_b), (zp_a, zp_b) = rng.uniform(0.01, 0.2, size=2), rng.integers(-60, 60, size=2)
        a = model.input("a", shape_a, "int8", s_a, int(zp_a))
        b = model.input("b", shape_b, "int8", s_b, int(zp_b))
        # the sum's range is about (s_a + s_b) * 255 LSB, centred on what zero inputs give
        scale = (s_a + s_b) * rng.uniform(0.6, 1.0)
        zero_point = int(np.clip(np.round((s_a * zp_a + s_b * zp_b) / scale), -100, 100))
        model.output(model.add(a, b, scale, zero_point, activation))
        return model

    return build


def _pool(code, shape, size, stride, padding, activation):
    def build(rng) -> ModelBuilder:
        model = ModelBuilder()
        x = model.input("x", shape, "int8", rng.uniform(0.01, 0.2), int(rng.integers(-128, 50)))
        model.output(model.pool_2d(code, x, size, stride, padding, activation))
        return model

    return build


def _softmax(shape, scale, beta=1.0):
    def build(rng) -> ModelBuilder:
        model = ModelBuilder()
        x = model.input("x", shape, "int8", scale, int(rng.integers(-128, 127)))
        model.output(model.softmax(x, beta))
        return model

    return build


def _quantize_dequantize(shape, scale, zero_point):
    def build(rng) -> ModelBuilder:
        model = ModelBuilder()
        x = model.input("x", shape, "float32")
        model.output(model.dequantize(model.quantize(x, scale, zero_point)))
        return model

    return build


SYNTHETIC = {
    "conv_same_stride2_relu6": _convolution("conv", (1, 9, 11, 5), 7, (3, 3), (2, 2), (1, 1), "SAME", "RELU6"),
    "conv_valid_dilation2": _convolution("conv", (2, 10, 9, 3), 4, (3, 2), (1, 1), (2, 2), "VALID", "NONE"),
    "conv_same_per_tensor_relu": _convolution("conv", (1, 8, 8, 4), 6, (5, 5), (1, 1), (1, 1), "SAME", "RELU", False),
    "depthwise_same_stride2_multiplier2_relu": _convolution(
        "depthwise", (1, 9, 9, 3), 2, (3, 3), (2, 2), (1, 1), "SAME", "RELU"
    ),
    "depthwise_one_channel_multiplier4": _convolution(
        "depthwise", (1, 7, 6, 1), 4, (3, 3), (1, 1), (1, 1), "SAME", "NONE"
    ),
    "depthwise_valid_dilation2_relu6": _convolution(
        "depthwise", (1, 11, 11, 8), 1, (3, 3), (1, 1), (2, 2), "VALID", "RELU6"
    ),
    "fully_connected_relu": _dense((3, 40), 9, "RELU", False),
    "fully_connected_keep_num_dims": _dense((2, 3, 16), 5, "NONE", True),
    "fully_connected_per_channel_relu6": _dense((1, 33), 7, "RELU6", False, per_channel=True),
    "fully_connected_per_channel_keep_num_dims": _dense((2, 2, 24), 6, "NONE", True, per_channel=True),
    "add_relu": _add((1, 5, 6, 3), (1, 5, 6, 3), "RELU"),
    "add_broadcast": _add((1, 4, 4, 3), (1, 1, 1, 3), "NONE"),
    "average_pool_same_stride2": _pool("AVERAGE_POOL_2D", (1, 9, 10, 4), (3, 3), (2, 2), "SAME", "NONE"),
    "average_pool_valid_relu": _pool("AVERAGE_POOL_2D", (2, 8, 8, 3), (2, 3), (2, 1), "VALID", "RELU"),
    "max_pool_same_stride2_relu6": _pool("MAX_POOL_2D", (1, 9, 10, 4), (3, 3), (2, 2), "SAME", "RELU6"),
    "softmax_scale0.17": _softmax((1, 10), 0.171854),
    "softmax_scale0.05": _softmax((4, 12), 0.05),
    "softmax_scale0.5": _softmax((3, 100), 0.5),
    "softmax_scale0.01_beta0.5": _softmax((2, 7), 0.01, beta=0.5),
    "softmax_one_column": _softmax((5, 1), 0.1),
    "softmax_depth400": _softmax((2, 3, 400), 0.02),
    "softmax_scale2": _softmax((1, 16), 2.0),
    # one row: the row's values 0-d, computed natively (the scalar fast path)
    "softmax_one_row_depth400": _softmax((1, 1, 400), 0.02),
    "softmax_one_value": _softmax((1, 1), 0.3),
    "quantize_dequantize": _quantize_dequantize((4, 50), 0.037, 5),
    "quantize_dequantize_exact_ties": _quantize_dequantize((4, 50), 0.375, -3),
}


def _synthetic_inputs(builder: ModelBuilder, rng, count: int = 20):
    """``count`` sets of inputs, each from the next of RANGES; a float input of a QUANTIZE is
    drawn at or near ties of its rounding (x / scale = k + 1/2, exactly or almost) half of the
    time."""
    quantize = [builder.tensors[op["outputs"][0]]["scale"][0] for op in builder.operators if op["code"] == "QUANTIZE"]
    for k in range(count):
        low, high = RANGES[k % len(RANGES)]
        inputs = []
        for index in builder.inputs:
            shape = builder.tensors[index]["shape"]
            if builder.tensors[index]["dtype"] == "int8":
                inputs.append(_int8(rng, shape, low, high))
                continue
            q = rng.integers(-140, 140, size=shape)
            if k % 2:
                offset = rng.choice([0.5, -0.5, 0.4999999, 0.5000001], size=shape)
            else:
                offset = rng.uniform(-0.5, 0.5, size=shape)
            inputs.append(((q + offset) * float(quantize[0])).astype(np.float32))
        yield inputs


def _check_on_inputs(path, builder: ModelBuilder, model: ImportedModel, seed: int, count: int = 20) -> None:
    compiled = relay_aot.compile(model.mod, params=model.params)
    reference = Reference(path)
    for k, inputs in enumerate(_synthetic_inputs(builder, np.random.default_rng(seed), count)):
        for info, ours, theirs in zip(model.outputs, _values(compiled, inputs), reference(inputs), strict=True):
            assert_bit_exact(ours, theirs, f"input {k} (range {RANGES[k % len(RANGES)]}), {info.name}")


#: Softmax cases whose regime another case covers (scales below and above one, a depth of 400):
#: run by -m slow (CI time)
SLOW_SYNTHETIC = {"softmax_scale0.05", "softmax_scale0.5", "softmax_one_row_depth400"}


@needs_litert
@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_SYNTHETIC else c for c in sorted(SYNTHETIC)]
)
def test_synthetic_operators_are_bit_exact(case, tmp_path):
    """One operator (two for QUANTIZE then DEQUANTIZE) on 20 inputs from five ranges."""
    builder = SYNTHETIC[case](np.random.default_rng(zlib.crc32(case.encode())))
    path = tmp_path / f"{case}.tflite"
    builder.write(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactConversionWarning)
        model = relay_aot.read_tflite(path)
    assert (model.importer, model.inexact) == ("exact", ())
    _check_on_inputs(path, builder, model, seed=11)


@needs_litert
def test_a_quantized_operator_without_an_exact_form_falls_back_with_a_warning(tmp_path):
    """MEAN has no exact conversion: TVM's converter makes it, a warning names it, and exact=True
    refuses the model. The convolution before it stays exact."""
    rng = np.random.default_rng(5)
    builder = ModelBuilder()
    x = builder.input("x", (1, 6, 6, 3), "int8", 0.05, -10)
    w, s, b, scale, zero_point = _quantized_filter(rng, 0.05, (4, 3, 3, 3), 4, 27)
    y = builder.conv_2d(x, w, s, b, scale, zero_point, activation="RELU")
    builder.output(builder.mean(y, (1, 2)))
    path = tmp_path / "mean.tflite"
    builder.write(path)
    with pytest.warns(InexactConversionWarning, match=r"1 quantized operator.*MEAN \(operator 1\)"):
        model = relay_aot.read_tflite(path, every_tensor=True)
    assert model.importer == "exact" and len(model.inexact) == 1 and model.inexact[0].startswith("MEAN (operator 1)")
    with pytest.raises(UnsupportedError, match=r"mean.tflite: .*MEAN \(operator 1\): relay_aot has no exact"):
        relay_aot.read_tflite(path, exact=True)
    compiled = relay_aot.compile(model.mod, params=model.params)
    reference = Reference(path, every_tensor=True)
    for k in range(6):
        x_value = _int8(np.random.default_rng(k), (1, 6, 6, 3), *RANGES[k % len(RANGES)])
        conv, mean = _values(compiled, [x_value])
        theirs = reference([x_value])
        assert_bit_exact(conv, theirs[model.outputs[0].index], f"input {k}, the convolution")
        # TVM's MEAN is its own arithmetic: near the reference, not necessarily equal
        assert np.abs(mean.astype(int) - theirs[model.outputs[1].index].astype(int)).max() <= 1
    # exact=False: TVM's importer for the whole model, and no tensor-by-tensor outputs
    assert relay_aot.read_tflite(path, exact=False).importer == "tvm"
    with pytest.raises(UnsupportedError, match="every_tensor needs relay_aot's importer"):
        relay_aot.read_tflite(path, exact=False, every_tensor=True)


def _convolution_quantized_off_its_channels(kind: str) -> ModelBuilder:
    """A CONV_2D of 4 -> 4 channels whose weights' scales lie along the input channels (``axis``:
    ``quantized_dimension`` 3, OHWI) or whose bias is one value (``bias``); ``ok``: neither."""
    rng = np.random.default_rng(3)
    builder = ModelBuilder()
    x = builder.input("x", (1, 5, 5, 4), "int8", 0.05, -3)
    w = rng.integers(-127, 128, (4, 3, 3, 4)).astype(np.int8)
    scales = np.linspace(0.002, 0.004, 4).astype(np.float32)
    axis = 3 if kind == "axis" else 0
    wt = builder.tensor("conv/weights", w.shape, "int8", scales, np.zeros(4, np.int64), axis, w)
    n = 1 if kind == "bias" else 4
    bias = rng.integers(-300, 300, n).astype(np.int32)
    bt = builder.tensor("conv/bias", (n,), "int32", 0.05 * scales[:n], np.zeros(n, np.int64), 0, bias)
    y = builder.tensor("conv", (1, 5, 5, 4), "int8", 0.1, 2)
    options = dict(Padding=0, StrideH=1, StrideW=1, DilationHFactor=1, DilationWFactor=1, FusedActivationFunction=0)
    builder.operator("CONV_2D", [x, wt, bt], [y], **options)
    builder.output(y)
    return builder


def test_weights_quantized_off_the_output_channels_and_a_short_bias_are_not_taken_as_exact(tmp_path):
    """relay_aot's convolution reads one scale and one bias per output channel: weights whose
    scales lie along another axis (``quantized_dimension``), or a bias of another length, have no
    exact conversion. The first goes to TVM's converter with a warning naming it (exact=True
    refuses it); the second is refused either way (TVM's converter makes a program that does not
    type-check), the message naming the bias."""
    paths = {}
    for kind in ("ok", "axis", "bias"):
        paths[kind] = tmp_path / f"{kind}.tflite"
        _convolution_quantized_off_its_channels(kind).write(paths[kind])
    assert relay_aot.read_tflite(paths["ok"], exact=True).inexact == ()
    axis = r"CONV_2D \(operator 0\): the weights 'conv/weights' have scales along another axis than the output channels"
    with pytest.raises(UnsupportedError, match=r"axis.tflite: .*" + axis):
        relay_aot.read_tflite(paths["axis"], exact=True)
    with pytest.warns(InexactConversionWarning, match=axis):
        model = relay_aot.read_tflite(paths["axis"])
    assert model.importer == "exact" and len(model.inexact) == 1
    bias = r"CONV_2D \(operator 0\): the bias 'conv/bias' is not one per output channel"
    with pytest.raises(UnsupportedError, match=r"bias.tflite: .*" + bias):
        relay_aot.read_tflite(paths["bias"], exact=True)
    with pytest.raises(UnsupportedError, match=r"bias.tflite: the model does not type-check; .*" + bias):
        relay_aot.read_tflite(paths["bias"])


# Held-out models: built here (relay_aot.testing.tflite_models), not in tests/data -------------
@needs_litert
def test_held_out_int8_network_of_the_kws_family_is_bit_exact_tensor_by_tensor(tmp_path):
    builder = kws_family()
    path = tmp_path / "kws_family.tflite"
    builder.write(path)
    model = relay_aot.read_tflite(path, every_tensor=True)
    assert (model.importer, model.inexact, len(model.outputs)) == ("exact", (), 7)
    compiled = relay_aot.compile(model.mod, params=model.params)
    reference = Reference(path, every_tensor=True)
    seen: dict[str, list] = {info.name: [] for info in model.outputs}
    for k, (x,) in enumerate(_synthetic_inputs(builder, np.random.default_rng(3))):
        theirs = reference([x])
        for info, ours in zip(model.outputs, _values(compiled, [x]), strict=True):
            assert_bit_exact(ours, theirs[info.index], f"input {k}, tensor {info.name!r}")
            seen[info.name].append(ours)
    for name, values in seen.items():  # the inputs exercised the network: no tensor saturated
        values = np.stack(values)
        assert len(np.unique(values)) > 40 and np.mean(values == 127) < 0.1, (name, np.unique(values))


@needs_litert
# ResNet's layers are the MLPerf ResNet-8's kinds, checked above (-m slow: CI time)
@pytest.mark.parametrize("family", [pytest.param("resnet", marks=pytest.mark.slow), "vww", "ad"])
def test_held_out_int8_networks_of_the_other_families_are_bit_exact(tmp_path, family):
    """The held-out ResNet-8, visual wake words and anomaly detection networks: their layers of
    eight filters take the kernel of blocks of eight (kernels/int8_by_eight.py) where the host
    has it."""
    builder = HELD_OUT_FAMILIES[family]()
    path = tmp_path / f"{family}_family.tflite"
    builder.write(path)
    model = relay_aot.read_tflite(path)
    assert (model.importer, model.inexact) == ("exact", ())
    compiled = relay_aot.compile(model.mod, params=model.params)
    reference = Reference(path)
    for k, inputs in enumerate(_synthetic_inputs(builder, np.random.default_rng(4), count=10)):
        for info, ours, theirs in zip(model.outputs, _values(compiled, inputs), reference(inputs), strict=True):
            assert_bit_exact(ours, theirs, f"input {k}, output {info.name!r}")


@needs_litert
def test_held_out_float_network_is_within_1e_4_of_the_reference(tmp_path):
    path = tmp_path / "float.tflite"
    float_network().write(path)
    model = relay_aot.read_tflite(path)
    assert model.importer == "tvm"  # a float model: TVM's importer
    compiled = relay_aot.compile(model.mod, params=model.params)
    reference = Reference(path)
    rng = np.random.default_rng(0)
    for k in range(5):
        x = (rng.standard_normal((1, 16, 16, 3)) * (1 + k)).astype(np.float32)
        for info, ours, theirs in zip(model.outputs, _values(compiled, [x]), reference([x]), strict=True):
            bound = 1e-4 * float(np.abs(theirs).max())
            assert np.abs(ours - theirs).max() <= bound, (k, info.name, np.abs(ours - theirs).max(), bound)


def test_a_small_float_networks_convolutions_are_nchwc_kernels(tmp_path):
    """Its layout transforms move more elements than 1/32 of its multiply-accumulates, but TVM's
    x86 NHWC kernels are untuned generic ones: the convolutions become NCHWc kernels
    (nchw.NHWC_TRANSFORM_SHARE)."""
    import tvm

    from relay_aot import cpu
    from relay_aot.passes import nchw
    from relay_aot.request import Request

    if not nchw.is_x86(tvm.target.Target(cpu.host_target())):
        pytest.skip("NHWC convolutions are converted on x86 only")
    path = tmp_path / "float.tflite"
    float_network().write(path)
    model = relay_aot.read_tflite(path)
    _, table = Request.make(model.mod, None, model.params).lower()
    names = [gvar.name_hint for gvar in table.lower_all(report=False).functions]
    convolutions = [name for name in names if "conv2d" in name]
    assert len(convolutions) == 2 and all("NCHWc" in name for name in convolutions), names


@needs_litert
def test_held_out_quantize_int8_dequantize_model_is_bit_exact(tmp_path):
    """The int8 interior tensor by tensor, and the float output bit for bit."""
    builder = quantized_island()
    path = tmp_path / "island.tflite"
    builder.write(path)
    model = relay_aot.read_tflite(path, every_tensor=True)
    assert (model.importer, model.inexact) == ("exact", ())
    assert model.outputs[-1].dtype == "float32" and model.outputs[0].dtype == "int8"
    compiled = relay_aot.compile(model.mod, params=model.params)
    reference = Reference(path, every_tensor=True)
    rng = np.random.default_rng(1)
    for k in range(12):
        x = rng.uniform(-4, 4, size=(1, 12, 12, 4)) / (1 + k % 3)
        if k % 4 == 3:  # at or next to ties of the quantization: x / 0.04 = n + 1/2
            x = (rng.integers(-90, 90, size=x.shape) + 0.5) * np.float32(0.04)
        x = x.astype(np.float32)
        theirs = reference([x])
        for info, ours in zip(model.outputs, _values(compiled, [x]), strict=True):
            assert_bit_exact(ours, theirs[info.index], f"input {k}, tensor {info.name!r}")


def _rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT, in int64 (TFLite's requantization's last step)."""
    x, exponent = x.astype(np.int64), exponent.astype(np.int64)
    mask = (np.int64(1) << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return ((x >> exponent) + ((x & mask) > threshold)).astype(np.int32)


@pytest.mark.parametrize("exponents", [[7], [1], [31], [3, 7, 0, 12]], ids=["7", "1", "31", "per-channel"])
def test_rounding_division_by_a_power_of_two_is_gemmlowps_at_the_int32_extremes(exponents):
    import tvm
    from tvm import relay

    from relay_aot.frontends.tflite_exact import _divide_by_pot

    values = np.array(
        [
            2**31 - 1,
            2**31 - 64,
            2**31 - 65,
            -(2**31),
            -(2**31) + 63,
            -(2**31) + 64,
            0,
            1,
            -1,
            64,
            -64,
            63,
            -63,
            65,
            -65,
        ],
        np.int32,
    )
    channels = len(exponents)
    x = np.repeat(values[:, None], channels, axis=1)
    var = relay.var("x", shape=x.shape, dtype="int32")
    compiled = relay_aot.compile(tvm.IRModule.from_expr(relay.Function([var], _divide_by_pot(var, exponents))))
    expected = _rounding_divide_by_pot(x, np.broadcast_to(np.array(exponents), x.shape))
    np.testing.assert_array_equal(compiled(x).numpy(), expected)

"""TFLite int8 models into integer-only Relay, bit-exact with TFLite's reference kernels.

:func:`convert` reads a ``.tflite`` flatbuffer and builds a Relay module whose int8 results equal
those of TFLite's reference kernels (LiteRT ``OpResolverType.BUILTIN_REF``) bit for bit, every
intermediate tensor included. TVM's own importer does not: it requantizes with one rounding where
TFLite rounds twice (and in float32 on x86 targets), divides average pools by truncation, ignores
the softmax's ``beta`` and computes it in float, so its int8 results differ by 1 LSB here and
there, and the differences grow through a network (tens of LSB at the output of KWS and
ResNet-8). An int8 operator below is written with integer Relay operators only (int8 and int32
tensors, int64 for the 32x32-bit products), each the arithmetic of the reference kernel:

=====================  ==========================================================================
operator               the reference kernel's arithmetic, reproduced
=====================  ==========================================================================
CONV_2D,               int32 sum of w*(x-zp_in) (padding taps skipped) + bias; per output channel
DEPTHWISE_CONV_2D      ``MultiplyByQuantizedMultiplier`` with the multiplier of
                       double(s_in)*double(s_w[c])/double(s_out) (frexp, 31 bits, round half away):
                       rounding doubling high multiply, then rounding divide by a power of two
                       (two roundings); + zp_out; clamp to the fused activation's range
FULLY_CONNECTED        ``round(double(acc) * double(s_in)*double(s_w)/double(s_out))``: one
                       rounding, in double, half away from zero (per tensor or per channel)
ADD                    both inputs shifted left by 20, each rescaled by s_i/(2*max(s_a, s_b)), their
                       sum by 2*max/(2^20*s_out), each with ``MultiplyByQuantizedMultiplier``
AVERAGE_POOL_2D        int32 sum over the window clipped to the image, divided by its size
                       rounding half away from zero
MAX_POOL_2D, RESHAPE   exact as they are (max, copy), then the activation's clamp
SOFTMAX                gemmlowp's fixed-point softmax: exp of x - max(row) in Q0.31, their sum in
                       Q12.19, the reciprocal by three Newton steps, output scale 1/256, zp -128
QUANTIZE               float32 to int8: ``round(x / float(scale)) + zp`` (IEEE float32 division,
                       round half away from zero), clamped
DEQUANTIZE             int8 to float32: ``float(double(scale) * (q - zp))``
=====================  ==========================================================================

The constants (multipliers, shifts, the activation clamps, the softmax's 256-entry exp tables)
are computed here in Python exactly as TFLite computes them. Any other operator, and any of these
whose tensors the table does not cover (float, uint8, int16 activations, ...), is converted with
TVM's converter for that operator: a float operator is then what TVM's importer makes of it, and
a quantized one is *inexact* (listed in :attr:`ImportedModel.inexact
<relay_aot.frontends.ImportedModel>`; ``exact=True`` refuses it instead).

Every operator's output ends a fused kernel (``annotation.stop_fusion``): chained into one kernel,
the rounding arithmetic of consecutive operators is inlined into expressions that grow
multiplicatively, and TVM's simplifier then takes minutes. TVM pitfalls avoided, each commented
where it matters: TIR rewrites float ``x / c`` into ``x * (1/c)`` (QUANTIZE); the bound TVM
infers for a shift by a tensor is wrong and let its simplifier delete a clamp (SOFTMAX); x86's
NHWC convolution schedules compute each stage of a fused epilogue as its own loop (the int32
accumulator is materialized); x86's int8 dense legalization re-creates ``nn.dense`` with a stale
``units`` (not set here).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import tflite
import tvm
from tflite.ActivationFunctionType import ActivationFunctionType
from tflite.BuiltinOperator import BuiltinOperator
from tflite.Padding import Padding
from tvm import relay
from tvm.runtime.name_transforms import sanitize_name

from ..errors import UnsupportedError
from .model import TFLITE_DTYPES as DTYPES
from .model import ImportedModel, TensorInfo

_OPERATOR_NAMES = {value: name for name, value in BuiltinOperator.__dict__.items() if not name.startswith("_")}
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class NoExactForm(Exception):
    """An operator this module converts in general, but not with these tensors or options."""


# --------------------------------------------------------------------------------------------
# The flatbuffer, read into tensors and operators
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Tensor:
    """A tensor of the model: its quantization as stored (float32 scales), its data if constant."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    data: np.ndarray | None = None
    #: the axis of a per-channel quantization's scales
    quantized_dimension: int = 0

    @property
    def quantized(self) -> bool:
        """Whether the tensor has a scale and zero point."""
        return self.scale is not None

    @property
    def s(self) -> np.float32:
        """The per-tensor scale, as the float32 the kernels read."""
        assert self.scale is not None, f"tensor {self.name} is not quantized"
        return np.float32(self.scale[0])

    @property
    def zp(self) -> int:
        """The per-tensor zero point."""
        assert self.zero_point is not None, f"tensor {self.name} is not quantized"
        return int(self.zero_point[0])

    def info(self) -> TensorInfo:
        """The tensor as relay_aot describes a model's inputs and outputs."""
        scale = zero_point = None
        if self.scale is not None and self.zero_point is not None:
            scale = tuple(float(v) for v in self.scale)
            zero_point = tuple(int(v) for v in self.zero_point)
        return TensorInfo(self.name, self.shape, self.dtype, scale, zero_point, self.index)


@dataclasses.dataclass
class Operator:
    """An operator of the model: its TFLite name, its tensors, the options the converters read."""

    index: int
    code: str
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.code} (operator {self.index})"


@dataclasses.dataclass
class Graph:
    """The model's one subgraph: its tensors, its operators in order, its inputs and outputs."""

    tensors: list[Tensor]
    operators: list[Operator]
    inputs: list[int]
    outputs: list[int]
    #: the flatbuffer's root table, for TVM's converters
    model: Any


def _options(operator, code: str) -> dict[str, Any]:
    """The builtin options the converters here read."""
    table = operator.BuiltinOptions()
    if table is None:
        return {}

    def load(name: str):
        options = getattr(importlib.import_module(f"tflite.{name}"), name)()
        options.Init(table.Bytes, table.Pos)
        return options

    if code in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        o = load("Conv2DOptions" if code == "CONV_2D" else "DepthwiseConv2DOptions")
        result = {
            "padding": o.Padding(),
            "stride": (o.StrideH(), o.StrideW()),
            "dilation": (o.DilationHFactor(), o.DilationWFactor()),
            "activation": o.FusedActivationFunction(),
        }
        if code == "DEPTHWISE_CONV_2D":
            result["depth_multiplier"] = o.DepthMultiplier()
        return result
    if code in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        o = load("Pool2DOptions")
        return {
            "padding": o.Padding(),
            "stride": (o.StrideH(), o.StrideW()),
            "filter": (o.FilterHeight(), o.FilterWidth()),
            "activation": o.FusedActivationFunction(),
        }
    if code == "FULLY_CONNECTED":
        o = load("FullyConnectedOptions")
        return {
            "activation": o.FusedActivationFunction(),
            "keep_num_dims": bool(o.KeepNumDims()),
            "weights_format": o.WeightsFormat(),
        }
    if code == "ADD":
        return {"activation": load("AddOptions").FusedActivationFunction()}
    if code == "SOFTMAX":
        return {"beta": load("SoftmaxOptions").Beta()}
    return {}


def parse(data: bytes) -> Graph:
    """The tensors and operators of the (one-subgraph) TFLite model in ``data``."""
    model = tflite.Model.GetRootAsModel(data, 0)
    if model.SubgraphsLength() != 1:
        raise UnsupportedError(f"the model has {model.SubgraphsLength()} subgraphs; relay_aot reads models of one")
    subgraph = model.Subgraphs(0)
    tensors = []
    for index in range(subgraph.TensorsLength()):
        t = subgraph.Tensors(index)
        name = t.Name().decode("utf-8", "replace")
        dtype = DTYPES.get(t.Type())
        if dtype is None:
            raise UnsupportedError(f"tensor {name!r} has TFLite type {t.Type()}, which relay_aot does not read")
        shape = tuple(int(v) for v in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        quantization = t.Quantization()
        scale = zero_point = None
        axis = 0
        if quantization is not None and quantization.ScaleLength():
            scale = quantization.ScaleAsNumpy().astype(np.float32)
            zero_point = quantization.ZeroPointAsNumpy().astype(np.int64)
            axis = quantization.QuantizedDimension()
        buffer = model.Buffers(t.Buffer())
        content = None
        if buffer is not None and buffer.Offset() > 1:
            raise UnsupportedError(f"tensor {name!r} is stored outside the flatbuffer (a model over 2 GB)")
        if buffer is not None and buffer.DataLength():
            content = np.frombuffer(buffer.DataAsNumpy().tobytes(), dtype=dtype).reshape(shape)
        tensors.append(Tensor(index, name, shape, dtype, scale, zero_point, content, axis))
    operators = []
    for index in range(subgraph.OperatorsLength()):
        op = subgraph.Operators(index)
        opcode = model.OperatorCodes(op.OpcodeIndex())
        code = _OPERATOR_NAMES.get(max(opcode.BuiltinCode(), opcode.DeprecatedBuiltinCode()), "UNKNOWN")
        if code == "CUSTOM":
            code = f"CUSTOM {opcode.CustomCode().decode('utf-8', 'replace')}"
        inputs = [int(v) for v in op.InputsAsNumpy()] if op.InputsLength() else []
        outputs = [int(v) for v in op.OutputsAsNumpy()] if op.OutputsLength() else []
        operators.append(Operator(index, code, inputs, outputs, _options(op, code)))
    return Graph(
        tensors,
        operators,
        [int(v) for v in subgraph.InputsAsNumpy()],
        [int(v) for v in subgraph.OutputsAsNumpy()],
        model,
    )


# --------------------------------------------------------------------------------------------
# TFLite's scalar arithmetic in Python, exactly, for the constants computed at import
# --------------------------------------------------------------------------------------------
def round_half_away(x: float) -> int:
    """``std::round``: half away from zero (exact for any float value)."""
    t = math.trunc(x)
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return int(t)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``tflite::QuantizeMultiplier``: ``(m, shift)`` with ``real == m * 2**(shift - 31)``, m of 31 bits."""
    if real == 0.0:
        return 0, 0
    fraction, shift = math.frexp(real)
    fixed = round_half_away(fraction * (1 << 31))
    if fixed == 1 << 31:
        fixed //= 2
        shift += 1
    assert fixed <= INT32_MAX
    if shift < -31:
        return 0, 0
    return fixed, shift


_ACTIVATIONS = {
    ActivationFunctionType.NONE: (None, None),
    ActivationFunctionType.RELU: (0.0, None),
    ActivationFunctionType.RELU6: (0.0, 6.0),
    ActivationFunctionType.RELU_N1_TO_1: (-1.0, 1.0),
}


def activation_range(activation: int, out: Tensor) -> tuple[int, int]:
    """``CalculateActivationRangeQuantized``: the clamp of a fused activation, in output units
    (``zp + round(f / scale)``, the division in float32)."""
    if activation not in _ACTIVATIONS:
        raise NoExactForm(f"fused activation {activation}")
    info = np.iinfo(out.dtype)
    lo, hi = int(info.min), int(info.max)
    f_lo, f_hi = _ACTIVATIONS[activation]
    if f_lo is not None:
        lo = max(lo, out.zp + round_half_away(float(np.float32(f_lo) / out.s)))
    if f_hi is not None:
        hi = min(hi, out.zp + round_half_away(float(np.float32(f_hi) / out.s)))
    return lo, hi


def padding(size: int, kernel: int, stride: int, dilation: int, mode: int) -> tuple[int, int, int]:
    """``ComputePaddingHeightWidth`` along one axis: ``(before, after, output size)``."""
    extent = (kernel - 1) * dilation + 1
    if mode == Padding.SAME:
        out = (size + stride - 1) // stride
    else:
        out = (size - extent + stride) // stride
    total = max(0, (out - 1) * stride + extent - size)
    return total // 2, total - total // 2, out


# gemmlowp's fixed point on Python integers, wrapping where C++ wraps int32 -------------------
def _wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def _srdhm(a: int, b: int) -> int:
    """``SaturatingRoundingDoublingHighMul`` of two int32."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    v = ab + nudge
    return v // 2**31 if v >= 0 else -((-v) // 2**31)  # C++'s division truncates


def _rdbpot(x: int, exponent: int) -> int:
    """``RoundingDivideByPOT`` of an int32."""
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if x & mask > threshold else 0)


def _saturating_shift_left(x: int, exponent: int) -> int:
    """``SaturatingRoundingMultiplyByPOT<exponent>`` for a positive exponent."""
    limit = (1 << (31 - exponent)) - 1
    if x > limit:
        return INT32_MAX
    if x < -limit:
        return INT32_MIN
    return _wrap32(x << exponent)


def _exp_on_negative_values(a: int, integer_bits: int) -> int:
    """``gemmlowp::exp_on_negative_values`` of a ``FixedPoint<int32, integer_bits>``, in Q0.31."""
    fractional_bits = 31 - integer_bits
    one_quarter = 1 << (fractional_bits - 2)
    a_mod_quarter_minus_quarter = _wrap32((a & (one_quarter - 1)) - one_quarter)
    x = _saturating_shift_left(a_mod_quarter_minus_quarter, integer_bits)  # Rescale<0>
    # exp_on_interval_between_negative_one_quarter_and_0_excl
    constant_term, one_third = 1895147668, 715827883
    x = _wrap32(x + (1 << 28))
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4_over_4 = _rdbpot(_srdhm(x2, x2), 2)
    polynomial = _rdbpot(_wrap32(_srdhm(_wrap32(x4_over_4 + x3), one_third) + x2), 1)
    result = _wrap32(constant_term + _srdhm(constant_term, _wrap32(x + polynomial)))
    remainder = _wrap32(a_mod_quarter_minus_quarter - a)
    barrel_shifter = (
        (-2, 1672461947),
        (-1, 1302514674),
        (0, 790015084),
        (1, 290630308),
        (2, 39332535),
        (3, 720401),
        (4, 242),
    )
    for exponent, multiplier in barrel_shifter:
        if integer_bits > exponent and remainder & (1 << (fractional_bits + exponent)):
            result = _srdhm(result, multiplier)
    if integer_bits > 5 and a < -(1 << (36 - integer_bits)):
        result = 0
    return INT32_MAX if a == 0 else result


#: TFLite's softmax computes exp on fixed point numbers with this many integer bits.
SOFTMAX_INTEGER_BITS = 5


def softmax_tables(beta: float, input_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """exp(x - max) of the int8 softmax for every difference d = x - max in [-255, 0], as
    ``(Q0.31, its RoundingDivideByPOT by 2^12)``: ``PreprocessSoftmaxScaling`` and
    ``CalculateInputRadius`` give the multiplier and the smallest difference whose exp is not 0."""
    bits = SOFTMAX_INTEGER_BITS
    real = min(float(beta) * float(input_scale) * (1 << (31 - bits)), float(INT32_MAX))
    if real <= 1.0:
        raise NoExactForm(f"beta * input scale = {beta * input_scale:g} is below TFLite's softmax range")
    multiplier, left_shift = quantize_multiplier(real)
    radius = math.floor(((1 << bits) - 1) * (1 << (31 - bits)) / (1 << left_shift))
    exp = np.zeros(256, np.int64)
    for d in range(max(-radius, -255), 1):
        exp[d + 255] = _exp_on_negative_values(_srdhm(_wrap32(d * (1 << left_shift)), multiplier), bits)
    return exp.astype(np.int32), np.array([_rdbpot(int(e), 12) for e in exp], np.int32)


def fc_multiplier(multipliers: Sequence[float], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """An integer form of the reference FULLY_CONNECTED's ``round(double(acc) * M[c])``.

    Returns vectors ``acc_lo``, ``acc_hi``, ``m`` and one shift ``s`` such that, for every int32
    ``acc`` of channel c, ``(clip(acc, acc_lo[c], acc_hi[c]) * m[c] + 2^(s-1) - (acc < 0)) >> s``
    clipped to ``[lo - 1, hi + 1]`` (the output range ``[lo, hi]`` minus the zero point, widened
    by one so that the final clamp decides) equals the reference's value clipped likewise.
    Checked here on every accumulator in ``[acc_lo, acc_hi]``; outside it both sides saturate,
    being monotonic."""
    cases = []
    for multiplier in multipliers:
        m = float(multiplier)
        assert m > 0, "checked by the caller"
        acc_lo = math.floor((lo - 1.5) / m) - 2
        acc_hi = math.ceil((hi + 1.5) / m) + 2
        acc = np.arange(acc_lo, acc_hi + 1, dtype=np.int64)
        product = acc.astype(np.float64) * np.float64(m)  # C++'s double product
        t = np.trunc(product)
        reference = (t + np.sign(product) * (np.abs(product - t) >= 0.5)).astype(np.int64)
        assert reference[0] < lo and reference[-1] > hi
        cases.append((m, acc_lo, acc_hi, acc, reference))
    for shift in range(31, 63):
        fixed = []
        for m, acc_lo, acc_hi, acc, reference in cases:
            mf = round(Fraction(m) * (1 << shift))
            if mf * max(abs(acc_lo), abs(acc_hi)) >= 2**62:
                raise NoExactForm(f"no 64-bit integer form of the multiplier {m!r}")
            if not np.array_equal((acc * mf + (1 << (shift - 1)) - (acc < 0)) >> shift, reference):
                break
            fixed.append(mf)
        else:
            return (
                np.array([c[1] for c in cases], np.int64),
                np.array([c[2] for c in cases], np.int64),
                np.array(fixed, np.int64),
                shift,
            )
    raise NoExactForm("no 64-bit integer form of the multipliers")


# --------------------------------------------------------------------------------------------
# Integer Relay for the fixed-point steps
# --------------------------------------------------------------------------------------------
def _const(value, dtype: str) -> relay.Expr:
    # relay.const narrows int64 and float64 numpy data unless given the dtype
    return relay.const(np.asarray(value, dtype=dtype), dtype=dtype)


def _per_channel(values, dtype: str) -> relay.Expr:
    """A scalar constant if all values are equal, else a vector (broadcast on the last axis)."""
    values = np.asarray(values)
    if values.size == 1 or np.all(values == values.flat[0]):
        return _const(values.flat[0], dtype)
    return _const(values, dtype)


def _high_mul(x: relay.Expr, m: relay.Expr, dtype: str = "int32") -> relay.Expr:
    """``SaturatingRoundingDoublingHighMul`` of int32 tensors, m >= 0 (or never INT32_MIN
    together with x: the saturating case). gemmlowp's nudged, truncating division of x*m by
    2^31 equals ``(x*m + 2^30) >> 31`` for either sign of the product."""
    product = relay.cast(x, "int64") * relay.cast(m, "int64")
    return relay.cast(relay.right_shift(product + _const(1 << 30, "int64"), _const(31, "int64")), dtype)


def _divide_by_pot(x: relay.Expr, exponents) -> relay.Expr:
    """``RoundingDivideByPOT`` of an int32 tensor by per-channel exponents >= 0 known at import.

    gemmlowp's ``(x >> e) + ((x & mask) > (mask >> 1) + (x < 0))`` rounds half away from zero
    and cannot overflow (``x + 2^(e-1)`` does, in int32, for x near 2^31: 2^31 - 1 by 2^7
    came out -16777216). Channels of different exponents are scaled by 2^(E - e) in int64 to
    one shift by 2^E (the same quotient, the same rounding) rather than shifted by a tensor:
    TVM's bound of a shift by a tensor is wrong (see :func:`softmax`)."""
    e = np.atleast_1d(np.asarray(exponents, np.int64))
    if np.all(e == 0):
        return x
    negative = relay.less(x, _const(0, "int32"))
    if np.all(e == e[0]):
        shift = int(e[0])
        mask = (1 << shift) - 1
        remainder = relay.bitwise_and(x, _const(mask, "int32"))
        threshold = _const(mask >> 1, "int32") + relay.cast(negative, "int32")
        quotient = relay.right_shift(x, _const(shift, "int32"))
        return quotient + relay.cast(relay.greater(remainder, threshold), "int32")
    top = int(e.max())
    scaled = relay.cast(x, "int64") * _const(np.int64(1) << (top - e), "int64")
    rounded = scaled + _const(1 << (top - 1), "int64") - relay.cast(negative, "int64")
    return relay.cast(relay.right_shift(rounded, _const(top, "int64")), "int32")


def _saturating_shift_left_tensor(x: relay.Expr, exponent: int) -> relay.Expr:
    """``SaturatingRoundingMultiplyByPOT<exponent>`` (exponent > 0) of an int32 tensor: the
    exact int64 product clipped to int32 saturates as gemmlowp's comparisons do."""
    shifted = relay.left_shift(relay.cast(x, "int64"), _const(exponent, "int64"))
    return relay.cast(_clip_integers(shifted, INT32_MIN, INT32_MAX, "int64"), "int32")


def _clip_integers(x: relay.Expr, lo: int, hi: int, dtype: str) -> relay.Expr:
    """``clip(x, lo, hi)`` of an integer tensor as TVM's kernel computes it (``max(min(x, hi),
    lo)``), spelled with operators the scalar fast path computes natively (``clip``'s bounds are
    attributes, which its table does not spell)."""
    return relay.maximum(relay.minimum(x, _const(hi, dtype)), _const(lo, dtype))


def _multiply_by_quantized_multiplier(x: relay.Expr, multipliers, shifts) -> relay.Expr:
    """``MultiplyByQuantizedMultiplier`` of an int32 tensor (per-channel constants)."""
    shifts = np.atleast_1d(np.asarray(shifts, np.int64))
    left = np.maximum(shifts, 0)
    if np.any(left > 0):
        # int32, wrapping as TFLite's x * (1 << left) does: a shift (TVM's LLVM code multiplies
        # int32 "without signed wrap", and LLVM may then widen x before the product)
        x = relay.left_shift(x, _per_channel(left, "int32"))
    return _divide_by_pot(_high_mul(x, _per_channel(multipliers, "int64")), np.maximum(-shifts, 0))


def _clamp(x: relay.Expr, lo: int, hi: int, dtype: str) -> relay.Expr:
    return relay.cast(relay.clip(x, float(lo), float(hi)), dtype)


# --------------------------------------------------------------------------------------------
# Converters: one per operator, each first checking that the reference arithmetic applies
# --------------------------------------------------------------------------------------------
class _Context:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.exprs: dict[int, relay.Expr] = {}
        self.params: dict[str, np.ndarray] = {}
        self.param_vars: dict[str, relay.Var] = {}

    def tensor(self, index: int) -> Tensor:
        return self.graph.tensors[index]

    def expr(self, index: int) -> relay.Expr:
        """The value of a tensor: an operator's output, an input, or a constant (a parameter)."""
        if index not in self.exprs:
            t = self.tensor(index)
            if t.data is None:
                raise UnsupportedError(f"tensor {t.name!r} is read before anything produces it")
            self.exprs[index] = self.param(f"t{index}", t.data)
        return self.exprs[index]

    def param(self, name: str, value: np.ndarray) -> relay.Var:
        value = np.ascontiguousarray(value)
        name = f"_param_{name}"
        assert name not in self.params, f"parameter {name} made twice"
        self.params[name] = value
        self.param_vars[name] = relay.var(name, shape=value.shape, dtype=str(value.dtype))
        return self.param_vars[name]


def _require(condition, reason: str) -> None:
    if not condition:
        raise NoExactForm(reason)


def _require_dtypes(ctx: _Context, op: Operator, dtype: str = "int8", inputs: int = 1) -> None:
    """The first ``inputs`` inputs and the output are quantized tensors of ``dtype``."""
    for index in op.inputs[:inputs] + op.outputs:
        t = ctx.tensor(index)
        _require(t.dtype == dtype and t.quantized, f"tensor {t.name!r} is {t.dtype}, not quantized {dtype}")
        _require(t.zero_point is not None and t.zero_point.size == 1, f"tensor {t.name!r} is quantized per channel")


def _weights(ctx: _Context, op: Operator, rank: int, channels_axis: int) -> Tensor:
    """The constant, symmetric int8 filter of a convolution or fully-connected operator."""
    w = ctx.tensor(op.inputs[1])
    _require(w.data is not None, f"the weights {w.name!r} are not a constant")
    _require(len(w.shape) == rank, f"the weights {w.name!r} are not of rank {rank}")
    _require(w.dtype == "int8" and w.quantized, f"the weights {w.name!r} are {w.dtype}, not quantized int8")
    assert w.scale is not None and w.zero_point is not None
    _require(np.all(w.zero_point == 0), f"the weights {w.name!r} have a non-zero zero point")
    channels = w.shape[channels_axis]
    _require(
        w.scale.size == 1 or (w.scale.size == channels and w.quantized_dimension == channels_axis),
        f"the weights {w.name!r} have scales along another axis than the output channels",
    )
    _require(np.all(w.scale > 0), f"the weights {w.name!r} have a scale that is not positive")
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        b = ctx.tensor(op.inputs[2])
        _require(b.data is not None and b.dtype == "int32", f"the bias {b.name!r} is not a constant int32 tensor")
        _require(b.data is None or b.data.size == channels, f"the bias {b.name!r} is not one per output channel")
    return w


def _folded_bias(ctx: _Context, op: Operator, weights: np.ndarray, sum_axes: tuple[int, ...], n: int) -> np.ndarray:
    """``bias - zp_in * sum(w)``: the input's zero point folded into the bias, so that the
    kernel sums products of the raw int8 values."""
    bias = np.zeros(n, np.int64)
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        data = ctx.tensor(op.inputs[2]).data
        assert data is not None, "checked by _weights"
        bias = data.astype(np.int64).reshape(n)
    folded = bias - ctx.tensor(op.inputs[0]).zp * weights.astype(np.int64).sum(axis=sum_axes).reshape(n)
    _require(folded.min() >= INT32_MIN and folded.max() <= INT32_MAX, "the bias with the zero point overflows int32")
    return folded.astype(np.int32)


def _requantize_convolution(ctx: _Context, op: Operator, acc: relay.Expr, weight_scales: np.ndarray) -> relay.Expr:
    inp, out = ctx.tensor(op.inputs[0]), ctx.tensor(op.outputs[0])
    # The int32 accumulator ends its kernel: TVM's x86 NHWC conv2d and depthwise schedules
    # compute each stage of a fused elementwise epilogue as a loop of its own over the whole
    # tensor, and the ~15 stages of the requantization then cost up to 7x the convolution; in
    # a kernel of their own, they are inlined into one loop.
    acc = relay.annotation.stop_fusion(acc)
    pairs = [quantize_multiplier(float(np.float64(inp.s) * np.float64(ws) / np.float64(out.s))) for ws in weight_scales]
    multipliers, shifts = zip(*pairs)
    y = _multiply_by_quantized_multiplier(acc, np.array(multipliers, np.int64), np.array(shifts, np.int64))
    lo, hi = activation_range(op.options["activation"], out)
    return _clamp(y + _const(out.zp, "int32"), lo, hi, out.dtype)


def _pad_with_zero_point(x: relay.Expr, inp: Tensor, pads: tuple[int, int, int, int]) -> relay.Expr:
    top, bottom, left, right = pads
    if not any(pads):
        return x
    # padded with the zero point, x - zp is 0 there: as if the tap were skipped, as TFLite does
    return relay.nn.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), pad_value=_const(inp.zp, "int8"))


def _convolution_padding(op: Operator, inp: Tensor, kh: int, kw: int) -> tuple[int, int, int, int]:
    o = op.options
    _require(len(inp.shape) == 4, f"the input {inp.name!r} is not NHWC")
    top, bottom, _ = padding(inp.shape[1], kh, o["stride"][0], o["dilation"][0], o["padding"])
    left, right, _ = padding(inp.shape[2], kw, o["stride"][1], o["dilation"][1], o["padding"])
    return top, bottom, left, right


def conv_2d(ctx: _Context, op: Operator) -> relay.Expr:
    _require_dtypes(ctx, op)
    inp, w = ctx.tensor(op.inputs[0]), _weights(ctx, op, 4, 0)
    assert w.data is not None and w.scale is not None
    oc, kh, kw, ic = w.data.shape  # OHWI
    _require(len(inp.shape) == 4 and inp.shape[3] == ic, "a grouped convolution")
    pads = _convolution_padding(op, inp, kh, kw)
    x = _pad_with_zero_point(ctx.expr(op.inputs[0]), inp, pads)
    kernel = ctx.param(f"{op.outputs[0]}_w", w.data.transpose(1, 2, 3, 0))  # HWIO
    acc = relay.nn.conv2d(
        x,
        kernel,
        strides=op.options["stride"],
        dilation=op.options["dilation"],
        padding=(0, 0),
        channels=oc,
        kernel_size=(kh, kw),
        data_layout="NHWC",
        kernel_layout="HWIO",
        out_dtype="int32",
    )
    acc = acc + ctx.param(f"{op.outputs[0]}_b", _folded_bias(ctx, op, w.data, (1, 2, 3), oc))
    return _requantize_convolution(ctx, op, acc, np.broadcast_to(w.scale, (oc,)))


def depthwise_conv_2d(ctx: _Context, op: Operator) -> relay.Expr:
    _require_dtypes(ctx, op)
    inp, w = ctx.tensor(op.inputs[0]), _weights(ctx, op, 4, 3)
    assert w.data is not None and w.scale is not None
    _, kh, kw, channels = w.data.shape  # 1 H W (C * multiplier)
    _require(len(inp.shape) == 4 and channels % inp.shape[3] == 0, "the filter's channels are not the input's")
    c = inp.shape[3]
    multiplier = channels // c
    pads = _convolution_padding(op, inp, kh, kw)
    x = _pad_with_zero_point(ctx.expr(op.inputs[0]), inp, pads)
    # TVM's grouped conv2d reads a depthwise filter of one input channel as HWIO, others as HWOI
    layout = "HWIO" if c == 1 else "HWOI"
    kernel = ctx.param(f"{op.outputs[0]}_w", w.data.reshape(kh, kw, c, multiplier))
    acc = relay.nn.conv2d(
        x,
        kernel,
        strides=op.options["stride"],
        dilation=op.options["dilation"],
        padding=(0, 0),
        channels=channels,
        groups=1 if c == 1 else c,
        kernel_size=(kh, kw),
        data_layout="NHWC",
        kernel_layout=layout,
        out_dtype="int32",
    )
    acc = acc + ctx.param(f"{op.outputs[0]}_b", _folded_bias(ctx, op, w.data, (0, 1, 2), channels))
    return _requantize_convolution(ctx, op, acc, np.broadcast_to(w.scale, (channels,)))


def fully_connected(ctx: _Context, op: Operator) -> relay.Expr:
    _require_dtypes(ctx, op)
    _require(op.options.get("weights_format", 0) == 0, "shuffled weights")
    inp, w, out = ctx.tensor(op.inputs[0]), _weights(ctx, op, 2, 0), ctx.tensor(op.outputs[0])
    assert w.data is not None and w.scale is not None
    units, depth = w.data.shape
    x = relay.reshape(ctx.expr(op.inputs[0]), (-1, depth))
    # No `units=`: TVM's x86 int8 dense legalization pads the weight rows to a multiple of 16
    # and re-creates the dense with the old attributes, which then fail to type-check.
    acc = relay.nn.dense(x, ctx.param(f"{op.outputs[0]}_w", w.data), out_dtype="int32")
    acc = acc + ctx.param(f"{op.outputs[0]}_b", _folded_bias(ctx, op, w.data, (1,), units))
    lo, hi = activation_range(op.options["activation"], out)
    multipliers = [np.float64(inp.s) * np.float64(ws) / np.float64(out.s) for ws in w.scale]
    acc_lo, acc_hi, fixed, shift = fc_multiplier(multipliers, lo - out.zp, hi - out.zp)
    # The accumulator is clipped to where the output is not yet saturated, so the int64
    # product below cannot overflow (fc_multiplier checked every value in that range).
    acc = relay.maximum(relay.minimum(acc, _per_channel(acc_hi, "int32")), _per_channel(acc_lo, "int32"))
    acc64 = relay.cast(acc, "int64")
    negative = relay.cast(relay.less(acc64, _const(0, "int64")), "int64")
    y = acc64 * _per_channel(fixed, "int64") + _const(1 << (shift - 1), "int64") - negative
    y = relay.cast(relay.right_shift(y, _const(shift, "int64")), "int32") + _const(out.zp, "int32")
    y = _clamp(y, lo, hi, "int8")
    batch = int(np.prod(inp.shape)) // depth if inp.shape else 1
    shape = (*inp.shape[:-1], units) if op.options.get("keep_num_dims") else (batch, units)
    return relay.reshape(y, shape) if shape != (batch, units) else y


def add(ctx: _Context, op: Operator) -> relay.Expr:
    _require(len(op.inputs) == 2, "ADD of other than two inputs")
    _require_dtypes(ctx, op, inputs=2)
    a, b, out = (ctx.tensor(i) for i in (*op.inputs, op.outputs[0]))
    left_shift = 20
    twice_max = np.float64(np.float32(2) * max(a.s, b.s))  # computed in float, then read as double
    m_a, s_a = quantize_multiplier(float(np.float64(a.s) / twice_max))
    m_b, s_b = quantize_multiplier(float(np.float64(b.s) / twice_max))
    m_out, s_out = quantize_multiplier(float(twice_max / np.float64(np.float32((1 << left_shift) * out.s))))
    _require(max(s_a, s_b, s_out) <= 0, "an ADD whose output scale is below 2^-20 of its inputs'")

    def rescaled(index: int, t: Tensor, m: int, s: int) -> relay.Expr:
        shifted = (relay.cast(ctx.expr(index), "int32") - _const(t.zp, "int32")) * _const(1 << left_shift, "int32")
        return _multiply_by_quantized_multiplier(shifted, m, s)

    total = rescaled(op.inputs[0], a, m_a, s_a) + rescaled(op.inputs[1], b, m_b, s_b)
    y = _multiply_by_quantized_multiplier(total, m_out, s_out) + _const(out.zp, "int32")
    lo, hi = activation_range(op.options["activation"], out)
    return _clamp(y, lo, hi, "int8")


def _pool_geometry(op: Operator, inp: Tensor) -> tuple[int, int, int, int, int, int, int, int]:
    """``(fh, fw, sh, sw, top, left, out_h, out_w)`` of a pooling operator."""
    _require(len(inp.shape) == 4, f"the input {inp.name!r} is not NHWC")
    (fh, fw), (sh, sw) = op.options["filter"], op.options["stride"]
    top, _, out_h = padding(inp.shape[1], fh, sh, 1, op.options["padding"])
    left, _, out_w = padding(inp.shape[2], fw, sw, 1, op.options["padding"])
    return fh, fw, sh, sw, top, left, out_h, out_w


def average_pool_2d(ctx: _Context, op: Operator) -> relay.Expr:
    _require_dtypes(ctx, op)
    inp, out = ctx.tensor(op.inputs[0]), ctx.tensor(op.outputs[0])
    fh, fw, sh, sw, top, left, out_h, out_w = _pool_geometry(op, inp)
    _, ih, iw, c = inp.shape
    x = relay.cast(ctx.expr(op.inputs[0]), "int32")
    # TFLite divides by the number of taps inside the image, which varies near the edges
    rows, columns = np.arange(out_h) * sh - top, np.arange(out_w) * sw - left
    taps_h = np.minimum(rows + fh, ih) - np.maximum(rows, 0)
    taps_w = np.minimum(columns + fw, iw) - np.maximum(columns, 0)
    count = np.outer(taps_h, taps_w).astype(np.int32)
    if out_h == out_w == 1 and top == left == 0 and fh >= ih and fw >= iw:
        acc = relay.sum(x, axis=[1, 2], keepdims=True)
    else:
        bottom = max(0, (out_h - 1) * sh + fh - ih - top)
        right = max(0, (out_w - 1) * sw + fw - iw - left)
        padded = relay.nn.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
        acc = relay.nn.conv2d(
            padded,
            relay.const(np.ones((fh, fw, c, 1), np.int32)),
            strides=(sh, sw),
            channels=c,
            groups=c,
            kernel_size=(fh, fw),
            data_layout="NHWC",
            kernel_layout="HWOI",
            out_dtype="int32",
        )
    if np.all(count == count.flat[0]):
        n, half = _const(count.flat[0], "int32"), _const(count.flat[0] // 2, "int32")
    else:
        n, half = (
            _const(count.reshape(1, out_h, out_w, 1), "int32"),
            _const(count.reshape(1, out_h, out_w, 1) // 2, "int32"),
        )
    # C's division truncates: (acc +- n/2) / n rounds half away from zero
    y = relay.trunc_divide(relay.where(relay.greater(acc, _const(0, "int32")), acc + half, acc - half), n)
    lo, hi = activation_range(op.options["activation"], out)
    return _clamp(y, lo, hi, "int8")


def max_pool_2d(ctx: _Context, op: Operator) -> relay.Expr:
    # the reference takes the maximum of the raw values whatever the quantization says
    _require_dtypes(ctx, op)
    inp, out = ctx.tensor(op.inputs[0]), ctx.tensor(op.outputs[0])
    fh, fw, sh, sw, top, left, out_h, out_w = _pool_geometry(op, inp)
    bottom = max(0, (out_h - 1) * sh + fh - inp.shape[1] - top)
    right = max(0, (out_w - 1) * sw + fw - inp.shape[2] - left)
    y = relay.nn.max_pool2d(
        ctx.expr(op.inputs[0]), pool_size=(fh, fw), strides=(sh, sw), padding=(top, left, bottom, right), layout="NHWC"
    )
    lo, hi = activation_range(op.options["activation"], out)
    return y if (lo, hi) == (-128, 127) else relay.clip(y, float(lo), float(hi))


def reshape(ctx: _Context, op: Operator) -> relay.Expr:
    # a copy of the values, of any type (the reference ignores the quantization)
    out = ctx.tensor(op.outputs[0])
    _require(all(d >= 0 for d in out.shape), f"the output {out.name!r} has an unknown extent")
    return relay.reshape(ctx.expr(op.inputs[0]), out.shape)


def softmax(ctx: _Context, op: Operator) -> relay.Expr:
    _require_dtypes(ctx, op)
    inp, out = ctx.tensor(op.inputs[0]), ctx.tensor(op.outputs[0])
    _require(
        out.zp == -128 and abs(float(out.s) - 1 / 256) <= 0.001 / 256,
        "an int8 SOFTMAX whose output is not quantized with scale 1/256 and zero point -128",
    )
    _require(len(inp.shape) >= 1, "a SOFTMAX of a scalar")
    exp_table, exp_acc_table = softmax_tables(op.options["beta"], float(inp.s))
    x = relay.cast(ctx.expr(op.inputs[0]), "int32")
    # One row (a classifier's head): the row's values are 0-d, and the arithmetic on them below
    # is computed natively rather than in a dozen kernel calls of one value each (the scalar
    # fast path, kernels/scalars.py).
    one_row = all(d == 1 for d in inp.shape[:-1])
    axis, keepdims = (None, False) if one_row else (-1, True)
    index = x - relay.max(x, axis=axis, keepdims=keepdims) + _const(255, "int32")  # d + 255, in [0, 255]
    exp = relay.take(relay.const(exp_table), index)  # Q0.31; 0 below the input radius
    total = relay.sum(relay.take(relay.const(exp_acc_table), index), axis=axis, keepdims=keepdims)  # Q12.19
    # GetReciprocal(total, 12). CountLeadingZeros(total) = 32 - #{k : total >= 2^k}; total >= 2^19
    # (the row's max contributes exp(0)). Counted by a broadcast comparison and a sum, or for
    # one row by a sum of 31 scalar comparisons.
    if one_row:
        bits = _const(0, "int32")
        for k in range(31):
            bits = bits + relay.cast(relay.greater_equal(total, _const(1 << k, "int32")), "int32")
    else:
        powers = _const(np.int64(1) << np.arange(31), "int32")
        bits = relay.sum(relay.cast(relay.greater_equal(total, powers), "int32"), axis=-1, keepdims=True)
    # The clips of the shift amounts (which hold already) matter: TVM bounds a shift by a tensor
    # by evaluating C++ shifts at the corners of the amount's range, out-of-range ones included;
    # with that wrong bound, its simplifier deleted the final clamp (127 came out as -128).
    leading_zeros = _clip_integers(_const(32, "int32") - bits, 0, 31, "int32")
    shifted = relay.left_shift(relay.cast(total, "int64"), relay.cast(leading_zeros, "int64"))
    # shifted - 2^31 is in [0, 2^31); RoundingHalfSum of it and One is (shifted - 2^31 + 2^31) >> 1
    half_denominator = relay.cast(relay.right_shift(shifted, _const(1, "int64")), "int32")
    # one_over_one_plus_x_for_x_in_0_1: 48/17 - 32/17 * half_denominator, then 3 Newton steps.
    # Each step's (rows x 1) value ends its kernel: inlined, the three uses of the estimate per
    # step make the expression, and TVM's simplifier's time, grow exponentially.
    estimate = _const(1515870810, "int32") + _high_mul(half_denominator, _const(-1010580540, "int32"))
    half_denominator = relay.annotation.stop_fusion(half_denominator)
    for _ in range(3):
        estimate = relay.annotation.stop_fusion(estimate)
        one_minus = _const(1 << 29, "int32") - _high_mul(half_denominator, estimate)
        estimate = estimate + _saturating_shift_left_tensor(_high_mul(estimate, one_minus), 2)
    estimate = relay.annotation.stop_fusion(estimate)
    reciprocal = _saturating_shift_left_tensor(estimate, 1)  # Rescale<0> of ExactMulByPot<-1>
    # RoundingDivideByPOT by num_bits_over_unit + 31 - 8 (>= 23: the product is >= 0 and the
    # half below is never 0)
    exponent = relay.cast(_clip_integers(_const(35, "int32") - leading_zeros, 0, 31, "int32"), "int64")
    product = relay.cast(_high_mul(reciprocal, exp), "int64")
    half = relay.right_shift(relay.left_shift(_const(1, "int64"), exponent), _const(1, "int64"))
    y = relay.right_shift(product + half, exponent)
    return _clamp(relay.cast(y, "int32") - _const(128, "int32"), -128, 127, "int8")


def quantize(ctx: _Context, op: Operator) -> relay.Expr:
    inp, out = ctx.tensor(op.inputs[0]), ctx.tensor(op.outputs[0])
    _require(inp.dtype == "float32", f"a QUANTIZE of {inp.dtype} (a requantization)")
    _require(out.dtype == "int8" and out.quantized, f"a QUANTIZE to {out.dtype}")
    assert out.scale is not None
    _require(out.scale.size == 1, "a QUANTIZE per channel")
    # The divisor is a tensor of shape (1,), not a scalar: a scalar becomes a constant in TIR,
    # which TVM's simplifier turns from x / c into x * (1/c), rounding otherwise than IEEE's
    # division, which the reference performs.
    v = ctx.expr(op.inputs[0]) / _const(np.array([out.s], np.float32), "float32")
    t = relay.trunc(v)
    # std::round: trunc, plus the sign when the (exact) fraction is at least a half
    half_or_more = relay.greater_equal(relay.abs(v - t), _const(0.5, "float32"))
    rounded = t + relay.where(half_or_more, relay.sign(v), _const(0.0, "float32"))
    # clipped in float first: a float out of int32's range casts to anything
    rounded = relay.clip(rounded, -(2.0**31), 2.0**31 - 256)
    return _clamp(relay.cast(rounded, "int32") + _const(out.zp, "int32"), -128, 127, "int8")


def dequantize(ctx: _Context, op: Operator) -> relay.Expr:
    inp, out = ctx.tensor(op.inputs[0]), ctx.tensor(op.outputs[0])
    _require(inp.dtype == "int8" and inp.quantized, f"a DEQUANTIZE of {inp.dtype}")
    assert inp.scale is not None
    _require(inp.scale.size == 1, "a DEQUANTIZE per channel")
    _require(out.dtype == "float32", f"a DEQUANTIZE to {out.dtype}")
    v = relay.cast(relay.cast(ctx.expr(op.inputs[0]), "int32") - _const(inp.zp, "int32"), "float64")
    return relay.cast(v * _const(np.float64(inp.s), "float64"), "float32")


#: The operators converted exactly, by TFLite's name.
CONVERTERS: dict[str, Callable[[_Context, Operator], relay.Expr]] = {
    "CONV_2D": conv_2d,
    "DEPTHWISE_CONV_2D": depthwise_conv_2d,
    "FULLY_CONNECTED": fully_connected,
    "ADD": add,
    "AVERAGE_POOL_2D": average_pool_2d,
    "MAX_POOL_2D": max_pool_2d,
    "RESHAPE": reshape,
    "SOFTMAX": softmax,
    "QUANTIZE": quantize,
    "DEQUANTIZE": dequantize,
}


# --------------------------------------------------------------------------------------------
# The other operators: TVM's converters
# --------------------------------------------------------------------------------------------
class _TvmConverters:
    """TVM's TFLite converters, one operator at a time, on the values converted so far.

    One instance for the whole model: TVM's converters keep state between operators (an
    operator may be "prefetched" into the next one's constants)."""

    def __init__(self, ctx: _Context):
        from tvm.relay.frontend.common import ExprTable
        from tvm.relay.frontend.tflite import OperatorConverter

        self.ctx = ctx
        self.table = ExprTable()
        self.converter = OperatorConverter(ctx.graph.model, ctx.graph.model.Subgraphs(0), self.table)

    def __call__(self, op: Operator) -> list[relay.Expr | None]:
        ctx = self.ctx
        for index in op.inputs:
            if index >= 0 and index in ctx.exprs:
                self.table.set_expr(ctx.tensor(index).name, ctx.exprs[index], force_override=True)
        flat = ctx.graph.model.Subgraphs(0).Operators(op.index)
        name = self.converter.get_op_code_str(flat)
        if name not in self.converter.convert_map:
            raise UnsupportedError(f"{op}: neither relay_aot nor TVM converts the TFLite operator {name}")
        known = set(self.table.params)
        try:
            result = self.converter.convert_map[name](flat)
        except Exception as err:  # noqa: BLE001 - TVM's converters raise anything, from asserts on
            lines = [line for line in str(err).splitlines() if line.strip()]
            detail = f"{type(err).__name__}: {lines[-1] if lines else ''}"
            raise UnsupportedError(f"{op}: TVM's converter failed ({detail})") from None
        if result is None:  # prefetched: TVM's converter of the next operator reads it
            return [None] * len(op.outputs)
        # TVM's constants become parameters of the module under names of our own
        renamed = {}
        for param in set(self.table.params) - known:
            value = self.table.params[param]
            value = value.numpy() if isinstance(value, tvm.nd.NDArray) else np.asarray(value)
            renamed[param] = ctx.param(f"tvm_{op.index}_{param}", value)
        if renamed:
            binds = {
                v: renamed[v.name_hint] for v in relay.analysis.free_vars(_as_expr(result)) if v.name_hint in renamed
            }
            result = relay.bind(_as_expr(result), binds)
        if len(op.outputs) == 1:
            return [_as_expr(result)]
        return [relay.TupleGetItem(_as_expr(result), k) for k in range(len(op.outputs))]


def _as_expr(value) -> relay.Expr:
    return value.astuple() if isinstance(value, relay.expr.TupleWrapper) else value


def _quantized(ctx: _Context, op: Operator) -> bool:
    return any(ctx.tensor(i).quantized for i in op.inputs + op.outputs if i >= 0)


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------
def convert(graph: Graph, every_tensor: bool = False, exact: bool = False) -> ImportedModel:
    """The TFLite model :func:`parse` read, each operator converted exactly where it can be.

    :param every_tensor: ``@main`` returns every operator's output, in the order of the
        operators (a tuple), rather than the model's outputs; ``outputs`` describes them (each
        :class:`~relay_aot.frontends.TensorInfo` has its ``index`` in the model, as LiteRT's
        ``get_tensor`` takes it), to compare a model with the reference tensor by tensor.
    :param exact: refuse the model if a quantized operator has no exact conversion.
    :returns: the model, ``importer`` ``"exact"``; ``inexact`` names the quantized operators
        converted with TVM's converter instead (not bit-exact).
    :raises UnsupportedError: ``exact`` and such operators (each named), an operator that
        neither this module nor TVM converts, or a model of several subgraphs.
    """
    ctx = _Context(graph)
    inputs = []
    for index in graph.inputs:
        t = graph.tensors[index]
        inputs.append(relay.var(t.name, shape=t.shape, dtype=t.dtype))
        ctx.exprs[index] = inputs[-1]
    tvm_converters: _TvmConverters | None = None
    inexact: list[str] = []
    produced: list[int] = []
    for op in graph.operators:
        converter = CONVERTERS.get(op.code)
        reason = "relay_aot has no exact conversion of it"
        results: list[relay.Expr | None] = []
        if converter is not None:
            try:
                results = [converter(ctx, op)]
            except NoExactForm as err:
                reason = str(err)
        if not results:
            if _quantized(ctx, op):
                inexact.append(f"{op}: {reason}")
            if exact and _quantized(ctx, op):
                # stand-ins for its outputs, to go on and name every operator refused
                results = [
                    relay.var(f"refused_{i}", shape=ctx.tensor(i).shape, dtype=ctx.tensor(i).dtype) for i in op.outputs
                ]
            else:
                tvm_converters = tvm_converters or _TvmConverters(ctx)
                results = tvm_converters(op)
        for index, result in zip(op.outputs, results):
            if result is None:
                continue
            # an operator's output ends its kernel: see the module's docstring
            ctx.exprs[index] = result if op.code == "RESHAPE" else relay.annotation.stop_fusion(result)
            produced.append(index)
    if exact and inexact:
        raise UnsupportedError(
            "quantized operators without a conversion bit-exact with TFLite's reference kernels: " + "; ".join(inexact)
        )
    outputs = produced if every_tensor else graph.outputs
    values = [ctx.expr(i) for i in outputs]
    body = values[0] if len(values) == 1 else relay.Tuple(values)
    used = {v.name_hint for v in relay.analysis.free_vars(body)}
    params = [ctx.param_vars[name] for name in ctx.param_vars if name in used]
    attrs = {"output_tensor_names": [sanitize_name(graph.tensors[i].name) for i in outputs]}
    func = relay.Function(inputs + params, body, attrs=tvm.ir.make_node("DictAttrs", **attrs))
    try:
        mod = relay.transform.InferType()(tvm.IRModule.from_expr(func))
    except tvm.TVMError as err:
        # TVM's converters of operators relay_aot refused (a bias of the wrong length) can
        # make a program that does not type-check; relay_aot's own converters check first.
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        converted = "; ".join(inexact) if inexact else "none"
        detail = f"{type(err).__name__}: {lines[-1] if lines else ''}"
        raise UnsupportedError(
            f"the model does not type-check; quantized operators TVM converted: {converted} ({detail})"
        ) from None
    return ImportedModel(
        mod,
        {name: ctx.params[name] for name in ctx.param_vars if name in used},
        tuple(graph.tensors[i].info() for i in graph.inputs),
        tuple(graph.tensors[i].info() for i in outputs),
        "exact",
        tuple(inexact),
    )

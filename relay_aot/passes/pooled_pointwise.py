"""Pointwise convolutions that only a global pool reads, over their pixels as one row.

A conv net's classifier is often a 1x1 convolution followed by a global average pool
(SqueezeNet: 512 -> 1000 channels over 13x13 pixels, a quarter of the net's time), and
ResNet's last block ends the same way. x86's ``NCHWc`` schedule computes a few output columns
of one row at a time; a 13-pixel row is three blocks of 4 and a partial one, in which most
accumulators idle. A pointwise convolution with unit strides and no padding treats every pixel
alike, and a global pool does not care where a pixel was: so the pixels can be one row of
169, whose blocks are all full but the last. And 1000 output channels are no multiple of two
AVX2 vectors (16), so TVM blocks them by one vector, each broadcast input feeding one
multiply-add; padded with zero filters to 1008, the block is two vectors. Measured alone, one
thread, Zen 3: SqueezeNet's classifier 2.39 ms with its best of 155 AutoTVM trials, 2.0 ms as
one row of 1008 filters (onnxruntime: 1.8 ms). On AVX-512 TVM blocks 1000 channels by 10
lanes of a 16-lane vector; 1024 filters, blocked by two vectors
(:mod:`relay_aot.kernels.schedule_rules`), take 1.06 ms where 1000 took 1.82 (onnxruntime:
1.07 ms; kernels alone, one thread, Xeon "emeraldrapids").

:func:`rewrite` finds ``global_{avg,max}_pool2d`` (``NCHW``) of a chain of elementwise
operators over ``nn.conv2d`` (1x1, unit strides and dilation, no padding, one group, static
shapes, each value used once), and computes the same pool of the convolution of
``reshape(data, [n, c, 1, h * w])``. Operands of the chain are scalars, per-channel values
(``[c, 1, 1]``, ``bias_add``'s vector) or tensors of the convolution's own shape (flattened
too). Where the target has AVX2 or AVX-512 and the channels are no multiple of two vectors,
the filters (and constant per-channel operands) are padded with zeros, at most an eighth more,
and the pool's result sliced back. Each output is the same sum of the same
products as before.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay

from .gradient_cleanup import static_shape
from .walk import calls_any, op_name, rewrite_functions

_POOLS = ("nn.global_avg_pool2d", "nn.global_max_pool2d")
_UNARY = ("nn.relu", "clip", "sigmoid", "tanh", "copy")
_BINARY = ("add", "subtract", "multiply", "maximum", "minimum")

#: Padding is kept to at most this share of the filters.
PADDING_SHARE = 1 / 8


def _pointwise(conv: relay.Call) -> bool:
    """Whether ``conv`` is a 1x1 convolution with unit strides, no padding, static shapes."""
    attrs = conv.attrs
    data, weight, out = static_shape(conv.args[0]), static_shape(conv.args[1]), static_shape(conv)
    return (
        data is not None
        and weight is not None
        and out is not None
        and len(data) == 4
        and attrs.data_layout == "NCHW"
        and attrs.kernel_layout == "OIHW"
        and attrs.out_layout in ("", "NCHW")
        and int(attrs.groups) == 1
        and weight[2:] == [1, 1]
        and all(int(v) == 1 for v in attrs.strides)
        and all(int(v) == 1 for v in attrs.dilation)
        and all(int(v) == 0 for v in attrs.padding)
        and conv.checked_type.dtype == conv.args[0].checked_type.dtype
    )


class _Uses(relay.ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.count: dict = {}

    def visit(self, expr):
        self.count[expr] = self.count.get(expr, 0) + 1
        return super().visit(expr)


def _operand_kind(operand: relay.Expr, out: list[int]) -> str | None:
    """How a non-chain operand of an elementwise operator over the convolution's output
    (``out``: n, c, h, w) broadcasts: ``"full"`` (its own shape), ``"channel"`` (one value per
    channel), ``"scalar"``; None where flattening the pixels would change its meaning."""
    shape = static_shape(operand)
    if shape is None or len(shape) > 4:
        return None
    if shape == out:
        return "full"
    aligned = [1] * (4 - len(shape)) + shape
    if aligned[2:] != [1, 1] or aligned[0] != 1:
        return None
    return "channel" if aligned[1] == out[1] and out[1] != 1 else "scalar" if aligned[1] == 1 else None


def _kind_in(call: relay.Call, operand: relay.Expr, out: list[int]) -> str | None:
    """:func:`_operand_kind` of an operand of ``call``; ``"bias"`` for ``bias_add``'s vector."""
    return "bias" if op_name(call) == "nn.bias_add" else _operand_kind(operand, out)


def _block_padding(channels: int) -> int:
    """Output channels the target's schedules block best: a multiple of two vectors on an x86
    target with AVX2 or AVX-512, when that adds at most :data:`PADDING_SHARE`; else as is."""
    target = tvm.target.Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm" or "x86" not in str(target.attrs.get("mtriple", "x86")):
        return channels
    lanes = tvm.target.x86.get_simd_32bit_lanes()
    if lanes < 8:
        return channels
    block = 2 * lanes
    padded = -(-channels // block) * block
    return padded if padded - channels <= PADDING_SHARE * channels else channels


def _padded_constant(const: relay.Constant, axis: int, size: int) -> relay.Constant:
    value = const.data.numpy()
    widths = [(0, 0)] * value.ndim
    widths[axis] = (0, size - value.shape[axis])
    return relay.const(np.pad(value, widths), dtype=str(value.dtype))


class _Rewriter(relay.ExprMutator):
    def __init__(self, uses: dict) -> None:
        super().__init__()
        self.uses = uses
        self.changed = False

    def visit_call(self, call):
        if op_name(call) in _POOLS and call.attrs.layout == "NCHW" and call.attrs.out_layout in ("", "NCHW"):
            rewritten = self._pooled(call)
            if rewritten is not None:
                self.changed = True
                return rewritten
        return super().visit_call(call)

    def _chain(self, expr: relay.Expr, out: list[int]) -> list[relay.Call] | None:
        """The calls from ``expr`` down to the pointwise convolution, or None."""
        if self.uses.get(expr, 0) != 1 or static_shape(expr) != out:
            return None
        name = op_name(expr)
        if name == "nn.conv2d":
            return [expr] if _pointwise(expr) else None
        if name in _UNARY:
            below = self._chain(expr.args[0], out)
        elif name == "nn.bias_add" and int(expr.attrs.axis) in (1, -3):
            below = self._chain(expr.args[0], out)
        elif name in _BINARY:
            below = None
            for index in range(2):
                if _operand_kind(expr.args[1 - index], out) is not None:
                    below = self._chain(expr.args[index], out)
                    if below is not None:
                        break
        else:
            return None
        return None if below is None else [expr, *below]

    def _pooled(self, pool: relay.Call) -> relay.Expr | None:
        out = static_shape(pool.args[0])
        if out is None or len(out) != 4 or out[2] * out[3] == 1:
            return None
        chain = self._chain(pool.args[0], out)
        if chain is None:
            return None
        conv, elementwise = chain[-1], chain[-2::-1]
        n, channels, height, width = out
        flat = [n, channels, 1, height * width]
        # the operands other than the chain's own values, by how they broadcast
        others = [(call, a) for call in elementwise for a in call.args if not any(a.same_as(c) for c in chain)]
        kinds = [_kind_in(call, a, out) for call, a in others]
        per_channel = [a for (_, a), kind in zip(others, kinds) if kind in ("bias", "channel")]
        padded = _block_padding(channels)
        if "full" in kinds or not all(isinstance(a, relay.Constant) for a in [conv.args[1], *per_channel]):
            padded = channels  # padding a value computed at run time would cost a kernel

        def operand(call: relay.Call, expr: relay.Expr) -> relay.Expr:
            kind = _kind_in(call, expr, out)
            if kind == "full":
                return relay.reshape(self.visit(expr), flat)
            if kind in ("channel", "bias") and padded != channels:
                shape = static_shape(expr)
                assert shape is not None  # padded only when every per-channel operand is a constant
                axis = 0 if kind == "bias" else len(shape) - 3
                return _padded_constant(expr, axis, padded)
            return self.visit(expr)

        data_shape = static_shape(conv.args[0])
        assert data_shape is not None  # _pointwise: static shapes
        data = relay.reshape(self.visit(conv.args[0]), [n, data_shape[1], 1, height * width])
        weight = _padded_constant(conv.args[1], 0, padded) if padded != channels else self.visit(conv.args[1])
        attrs = {key: conv.attrs[key] for key in conv.attrs.keys()}
        attrs["channels"] = padded
        value = relay.nn.conv2d(data, weight, **attrs)
        below = conv
        for call in elementwise:
            args = [value if a.same_as(below) else operand(call, a) for a in call.args]
            value = relay.Call(call.op, args, call.attrs, call.type_args, call.span)
            below = call
        pooled = relay.Call(pool.op, [value], pool.attrs, pool.type_args, pool.span)
        if padded != channels:
            pooled = relay.strided_slice(pooled, begin=[0, 0, 0, 0], end=[n, channels, 1, 1])
        return pooled


def rewrite(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each pooled pointwise convolution over flattened pixels (see the module)."""

    def mutator_for(func: relay.Function) -> _Rewriter | None:
        if not calls_any(func, set(_POOLS)):
            return None
        uses = _Uses()
        uses.visit(func)
        return _Rewriter(uses.count)

    return rewrite_functions(mod, mutator_for)

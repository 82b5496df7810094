"""Depthwise convolutions in ``NCHW``, for those kept there between grouped ones.

``passes/depthwise_nchw.py`` keeps a ShuffleNet unit's depthwise convolution in ``NCHW`` (its
neighbours, grouped convolutions, are computed there) and marks it ``out_layout="NCHW"``; x86's
own ``NCHW`` depthwise kernel is the packed one with the transforms inside it. This one works a
channel at a time, as the layout lays it out: the channel's padded map is written once into a
buffer (the padding as zeros), then each register block -- a few output rows by a run of one
row, the widest that divides the row and fits one vector -- accumulates its ``KH x KW`` taps,
each a broadcast weight times a run read from the buffer, and the operators fused after it (the
batch norm's shift) are applied before its only store.

Both buffers are ``global`` arrays inside the loop over channels: the accumulators are small
enough for the kernel's stack (in ``local`` scope TVM asks the workspace for them, two calls
per channel: ShuffleNet's 14 x 14 layer of 272 channels took 19 instead of 13 us), the padded
map is one workspace block per channel.
"""

from __future__ import annotations

import tvm
from tvm import te
from tvm.topi.nn.utils import get_pad_tuple
from tvm.topi.utils import get_const_tuple

from ..passes.depthwise_nchw import is_marked, run_width, shape_fits
from .te_stages import anchored_schedule

#: The kernel's tag: the schedule finds the convolution's stage by it.
TAG = "relay_aot_depthwise_nchw"

#: Output rows per register block, at most: enough independent accumulators for the
#: multiply-adds' latency (ShuffleNet's 28 x 28 layer: 28 us by 2 rows, 25 by 4, 27 by 7).
MAX_BLOCK_ROWS = 4


def compute(data: te.Tensor, weight: te.Tensor, padding, out_dtype: str) -> te.Tensor:
    """``conv2d(data, weight, groups=channels)`` for ``NCHW`` data and ``OIHW`` weights of one
    filter per channel, unit strides, no dilation: the padded input, then each output the sum of
    its window's taps."""
    batch, channels, height, width = get_const_tuple(data.shape)
    _, _, kh, kw = get_const_tuple(weight.shape)
    top, left, bottom, right = get_pad_tuple([int(p) for p in padding], (kh, kw))
    out_h = height + top + bottom - kh + 1
    out_w = width + left + right - kw + 1

    def padded_value(n, c, y, x):
        row, column = y - top, x - left
        inside = tvm.tir.all(row >= 0, row < height, column >= 0, column < width)
        return tvm.tir.if_then_else(inside, data[n, c, row, column], tvm.tir.const(0, data.dtype))

    padded = te.compute((batch, channels, out_h + kh - 1, out_w + kw - 1), padded_value, name="depthwise_padded")
    r = te.reduce_axis((0, kh), name="r")
    s = te.reduce_axis((0, kw), name="s")
    return te.compute(
        (batch, channels, out_h, out_w),
        lambda n, c, h, w: te.sum(
            padded[n, c, h + r, w + s].astype(out_dtype) * weight[c, 0, r, s].astype(out_dtype), axis=[r, s]
        ),
        name="depthwise_nchw",
        tag=TAG,
    )


def schedule(outs) -> te.Schedule:
    """The schedule of :func:`compute` and the elementwise operators fused after it (module
    docstring)."""
    s, conv, last = anchored_schedule(outs, TAG, "depthwise")
    (padded,) = conv.op.input_tensors[:1]
    _, _, out_h, out_w = get_const_tuple(conv.shape)
    run = run_width(out_w, _lanes(tvm.target.Target.current()))
    block_rows = max(d for d in range(1, MAX_BLOCK_ROWS + 1) if out_h % d == 0)

    # "global": arrays on the kernel's stack (module docstring)
    accumulators = s.cache_write(conv, "global") if last.op.same_as(conv.op) else conv
    n, c, h, w = s[last].op.axis
    ho, hi = s[last].split(h, block_rows)
    wo, wi = s[last].split(w, run)
    s[last].reorder(n, c, ho, wo, hi, wi)
    channel = s[last].fuse(n, c)
    s[last].parallel(channel)
    s[last].unroll(hi)
    s[last].vectorize(wi)

    s[accumulators].compute_at(s[last], wo)
    an, ac, ah, aw = s[accumulators].op.axis
    r, t = s[accumulators].op.reduce_axis
    s[accumulators].reorder(an, ac, r, t, ah, aw)
    s[accumulators].unroll(r)
    s[accumulators].unroll(t)
    s[accumulators].unroll(ah)
    s[accumulators].vectorize(aw)

    # the channel's padded map, once per channel: it stays in L1 for all of its blocks
    s[padded].compute_at(s[last], channel)
    return s


def _lanes(target: tvm.target.Target) -> int:
    from .schedule_rules import _vector_registers

    return _vector_registers(target)[0]


def applies(attrs, data_type, weight_type, target: tvm.target.Target) -> bool:
    """Whether :func:`compute` computes this ``nn.conv2d`` call for ``target``: a float32
    depthwise convolution ``passes/depthwise_nchw.py`` marked, whose shapes its kernel takes."""
    shapes = (data_type.shape, weight_type.shape)
    if not all(isinstance(d, (int, tvm.tir.IntImm)) for shape in shapes for d in shape):
        return False
    if not is_marked(attrs, data_type.shape, weight_type.shape):
        return False
    out_dtype = str(attrs.out_dtype) or data_type.dtype
    if data_type.dtype != "float32" or weight_type.dtype != "float32" or out_dtype != "float32":
        return False
    data = [int(d) for d in data_type.shape]
    weight = [int(d) for d in weight_type.shape]
    return shape_fits(data, weight, attrs.strides, attrs.dilation, attrs.padding, _lanes(target))


def compute_for(attrs, inputs, out_type):
    """The strategy's compute function."""
    return [compute(inputs[0], inputs[1], attrs.padding, out_type.dtype)]


def schedule_for(attrs, outs, target):
    """The strategy's schedule function."""
    with target:
        return schedule(outs)

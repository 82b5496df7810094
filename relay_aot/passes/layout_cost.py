"""What a layout change costs at run time against what it serves: the elements its
``layout_transform`` calls move per call, the multiply-accumulates of the module's convolutions
and matrix products (read by ``alter_layout`` and ``nchw.nchw_convolutions``)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay

from .gradient_cleanup import static_tensor
from .layouts import preserves_order
from .walk import operator_calls


def _runtime_transform_elements(mod: tvm.IRModule) -> int:
    """Elements moved per call by ``mod``'s ``layout_transform`` calls of non-constant tensors.

    A transform whose input is a constant folds away at compile time and costs nothing at run
    time; one that moves nothing (``layouts.preserves_order``) is a view of its input. A ``?``
    extent counts as 1: the shape is not known, and the rule below should not take a risk on it.
    """
    total = 0
    for node in operator_calls(mod):
        if (
            node.op.name == "layout_transform"
            and not isinstance(node.args[0], relay.Constant)
            and not preserves_order(node)  # it moves nothing (an image's NCHW as NCHW1c)
        ):
            extents = [int(d) if isinstance(d, tvm.tir.IntImm) else 1 for d in node.args[0].checked_type.shape]
            total += int(np.prod(extents, dtype=np.int64))
    return total


def _multiply_accumulates(mod: tvm.IRModule) -> int:
    """The multiply-accumulates of ``mod``'s convolutions and matrix products.

    The operators that register TVM's ``FMacCount`` are counted, but by :func:`_call_macs`
    rather than TVM's counters: those abort on calls Relay accepts (a ``conv2d`` built without
    ``kernel_size``, as the Legalize of ``conv2d_backward_weight`` makes; an N-d ``dense``).
    A call with a ``?`` extent counts nothing: there is no evidence that a layout change pays.
    """
    return sum(
        _call_macs(node)
        for node in operator_calls(mod)
        if node.op.get_attr("FMacCount") is not None
        and all(static_tensor(arg.checked_type) for arg in [*node.args, node])
    )


def _call_macs(call: relay.Call) -> int:
    """Multiply-accumulates of one static convolution or matrix product: its output elements
    times the length of each one's reduction."""
    out = [int(d) for d in call.checked_type.shape]
    shapes = [[int(d) for d in arg.checked_type.shape] for arg in call.args]
    attrs = call.attrs
    outputs = int(np.prod(out, dtype=np.int64))
    if call.op.name in ("nn.conv2d", "nn.conv2d_transpose"):
        # Each output element reduces over (weight elements / output channels), whatever the
        # kernel layout: (O, I/g, kh, kw) for conv2d, (I, O/g, kh, kw) for its transpose.
        layout = str(attrs.out_layout or attrs.data_layout)
        channels = 1
        for axis, extent in zip(layout, out):
            if axis in "Cc":
                channels *= extent
        weights = int(np.prod(shapes[1], dtype=np.int64))
        return outputs * weights // max(channels, 1)
    if call.op.name == "nn.dense":
        return outputs * shapes[0][-1]
    if call.op.name == "nn.batch_matmul":
        return outputs * shapes[0][-2 if attrs.transpose_a else -1]
    return 0


#: A layout change is kept when the tensors it transforms at run time hold at most this share
#: of the multiply-accumulates of the convolutions and matrix products (one element moved
#: against one multiply-accumulate; see :func:`alter_layout`).
LAYOUT_TRANSFORM_SHARE = 1 / 32

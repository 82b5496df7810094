"""Depthwise convolutions kept in ``NCHW`` between grouped ones (ShuffleNet's units).

x86 keeps grouped convolutions in ``NCHW`` (``AlterOpLayout`` packs only ungrouped and depthwise
ones; relay_aot's grouped pointwise kernel computes them there), and packs a depthwise one into
``NCHWc``. In a ShuffleNet unit -- grouped 1x1 convolution, channel shuffle, 3x3 depthwise,
grouped 1x1 -- every depthwise convolution then sits between two ``layout_transform`` calls, each
moving the whole feature map through a gather: on Zen 5 (one thread) the light zoo's ShuffleNet
spent 0.48 of its 2.35 ms in them, against 0.22 ms in the depthwise convolutions themselves.

:func:`mark` finds the depthwise convolutions whose input comes from a grouped convolution and
whose every reader leads to one, through operators that keep channels apart (the batch norm's
scale and shift, ``relu``, the shuffle's reshapes and transpose), and writes their
``out_layout`` as ``"NCHW"`` -- the layout they compute anyway, so the program means the same.
While :func:`kept` is entered, TVM's x86 layout choice leaves such a convolution in ``NCHW``,
and relay_aot's kernel (``kernels/depthwise_nchw.py``) computes it; :func:`shape_fits` is
the shapes that kernel takes.
"""

from __future__ import annotations

import tvm
from tvm import relay
from tvm.topi.nn.utils import get_pad_tuple

from ..gate import Gate
from .gradient_cleanup import static_shape
from .walk import op_name, rewrite_functions

#: Operators a channel's values pass through on their own (or that only relabel channels):
#: between a grouped convolution and a depthwise one they need no layout of their own.
_CHANNEL_WISE = {
    "nn.relu",
    "clip",
    "add",
    "multiply",
    "subtract",
    "divide",
    "nn.bias_add",
    "reshape",
    "transpose",
    "copy",
}

#: Rows narrower than this (in a run that divides them) keep the packed kernel: a 7-wide row
#: fills under half of an AVX-512 vector, and ShuffleNet's 7 x 7 depthwise layer took 15 us in
#: ``NCHW`` against 6.5 us packed (Zen 5, one thread, the kernel alone).
MIN_RUN = 8


def run_width(width: int, lanes: int) -> int:
    """The widest run of an output row of ``width`` values that divides it and fits a vector of
    ``lanes``: the kernel's register blocks are runs of that many values."""
    return max(d for d in range(1, width + 1) if width % d == 0 and d <= lanes)


def shape_fits(data: list[int], weight: list[int], strides, dilation, padding, lanes: int) -> bool:
    """Whether relay_aot's ``NCHW`` depthwise kernel takes a float32 depthwise convolution of
    ``data`` (``NCHW``) by ``weight`` (``OIHW``, one filter per channel): unit strides, no
    dilation, and output rows with a run of at least :data:`MIN_RUN` values (a divisor of the
    row that fits a vector of ``lanes``). Strided ones stay packed: in ``NCHW`` their windows'
    rows are not contiguous, and the kernel that wrote the phases apart was no faster than the
    packed one with its transforms."""
    if len(data) != 4 or len(weight) != 4 or weight[0] != data[1] or weight[1] != 1:
        return False
    if any(int(d) != 1 for d in dilation) or any(int(s) != 1 for s in strides):
        return False
    top, left, bottom, right = get_pad_tuple([int(p) for p in padding], (weight[2], weight[3]))
    out_width = data[3] + left + right - weight[3] + 1
    out_height = data[2] + top + bottom - weight[2] + 1
    if out_width < 1 or out_height < 1:
        return False
    return run_width(out_width, lanes) >= MIN_RUN


def _depthwise(call: relay.Expr) -> bool:
    if op_name(call) != "nn.conv2d":
        return False
    attrs = call.attrs
    data, weight = static_shape(call.args[0]), static_shape(call.args[1])
    return (
        data is not None
        and weight is not None
        and attrs.data_layout == "NCHW"
        and attrs.kernel_layout == "OIHW"
        and str(attrs.out_layout) in ("", "NCHW")
        and int(attrs.groups) == data[1] > 1
        and weight[:2] == [data[1], 1]
        and call.args[0].checked_type.dtype == "float32"
        and call.args[1].checked_type.dtype == "float32"
        and (str(attrs.out_dtype) or "float32") == "float32"
    )


def _grouped(call: relay.Expr) -> bool:
    """A grouped (not depthwise) ``NCHW`` convolution: x86 keeps its layout."""
    if op_name(call) != "nn.conv2d" or call.attrs.data_layout != "NCHW":
        return False
    groups = int(call.attrs.groups)
    return groups > 1 and not _depthwise(call)


def _feature_map(call: relay.Call) -> relay.Expr | None:
    """The operand of a channel-wise call that carries the feature map (the others are
    constants: scales, shifts); None where two operands are not constants."""
    operands = [a for a in call.args if not isinstance(a, relay.Constant)]
    return operands[0] if len(operands) == 1 else None


def _comes_from_grouped(expr: relay.Expr) -> bool:
    while op_name(expr) in _CHANNEL_WISE:
        expr = _feature_map(expr)
        if expr is None:
            return False
    return _grouped(expr)


def _readers(func: relay.Function) -> dict:
    readers: dict = {}

    def visit(node):
        if isinstance(node, relay.Call):
            for arg in node.args:
                readers.setdefault(arg, []).append(node)
        elif isinstance(node, relay.Tuple):
            for field in node.fields:
                readers.setdefault(field, []).append(node)

    relay.analysis.post_order_visit(func.body, visit)
    return readers


def _leads_to_grouped(expr: relay.Expr, readers: dict, func: relay.Function) -> bool:
    """Whether every path from ``expr`` through channel-wise operators ends at a grouped
    convolution (the function's result, a tuple or any other operator end it otherwise)."""
    if expr.same_as(func.body):
        return False
    users = readers.get(expr, [])
    if not users:
        return False
    for user in users:
        if _grouped(user) and user.args[0].same_as(expr):
            continue
        feature_map = _feature_map(user) if op_name(user) in _CHANNEL_WISE else None
        if feature_map is not None and feature_map.same_as(expr) and _leads_to_grouped(user, readers, func):
            continue
        return False
    return True


class _Mark(relay.ExprMutator):
    def __init__(self, func: relay.Function, lanes: int) -> None:
        super().__init__()
        self.readers = _readers(func)
        self.func = func
        self.lanes = lanes
        self.changed = False

    def visit_call(self, call: relay.Call) -> relay.Expr:
        new = super().visit_call(call)
        if not (_depthwise(call) and str(call.attrs.out_layout) == ""):
            return new
        attrs = call.attrs
        data, weight = static_shape(call.args[0]), static_shape(call.args[1])
        assert data is not None and weight is not None  # _depthwise's
        fits = shape_fits(data, weight, attrs.strides, attrs.dilation, attrs.padding, self.lanes)
        if not (fits and _comes_from_grouped(call.args[0]) and _leads_to_grouped(call, self.readers, self.func)):
            return new
        self.changed = True
        return relay.nn.conv2d(
            *new.args,
            strides=attrs.strides,
            padding=attrs.padding,
            dilation=attrs.dilation,
            groups=attrs.groups,
            channels=attrs.channels,
            kernel_size=attrs.kernel_size,
            data_layout=str(attrs.data_layout),
            kernel_layout=str(attrs.kernel_layout),
            out_layout="NCHW",
            out_dtype=str(attrs.out_dtype),
        )


def mark(mod: tvm.IRModule, lanes: int) -> tvm.IRModule:
    """``mod`` (type-checked dataflow functions) with the depthwise convolutions between grouped
    ones marked ``out_layout="NCHW"`` (module docstring), for vectors of ``lanes`` float32."""
    return rewrite_functions(mod, lambda func: _Mark(func, lanes))


def is_marked(attrs, data_shape, weight_shape) -> bool:
    """Whether a ``nn.conv2d`` call's ``attrs`` and shapes are a depthwise convolution
    :func:`mark` kept in ``NCHW``."""
    return (
        str(attrs.out_layout) == "NCHW"
        and attrs.data_layout == "NCHW"
        and attrs.kernel_layout == "OIHW"
        and len(data_shape) == 4
        and len(weight_shape) == 4
        and int(attrs.groups) == int(data_shape[1]) > 1
        and int(weight_shape[1]) == 1
    )


def _install() -> None:
    from tvm.topi.nn import conv2d_alter_layout

    # TVM's x86 choice, or another of relay_aot's dispatchers in front of it
    tvm_choice = conv2d_alter_layout.dispatch_dict["cpu"]

    def choice(attrs, inputs, tinfos, out_type):
        data, weight = tinfos[0].shape, tinfos[1].shape
        if _GATE.active() and is_marked(attrs, data, weight):
            return None  # stays NCHW: relay_aot's kernel computes it
        return tvm_choice(attrs, inputs, tinfos, out_type)

    conv2d_alter_layout.register("cpu", choice, override=True)


_GATE = Gate(_install)
#: Within the block (on this thread), TVM's x86 layout choice leaves marked convolutions alone.
kept = _GATE.building

"""int8 convolutions whose filters come in eights, blocked by eight output channels on x86 with VNNI.

TVM's x86 int8 convolution (``conv2d_NCHWc_int8``) blocks output channels by sixteen, one
512-bit ``vpdpbusd`` per block and four input channels: its legalization pads the filters of any
other convolution to a multiple of sixteen and slices the padded channels off the sums, and
its layout choice asserts the sixteen. relay_aot computed a convolution of eight or 24 filters
in float32 or with int16 operands instead (``exact_int8.small_int8_convolutions``), at a fifth
of the int8 kernel's rate: the two 3x3 convolutions of eight filters in a small ResNet-8 of the
MLPerf Tiny kind took 2.5 us each, as long as the rest of the network.

On a target with ``vpdpbusd`` on 256-bit registers (:func:`eight_lanes`: AVX-512 VNNI with
``avx512vl``, or AVX-VNNI) such a convolution (:func:`applies`) is blocked by eight instead:
while relay_aot prepares a module (:func:`building`), the x86 legalization pads its filters to
eight (none: they are eights) and its input channels to four as TVM's does, the layout choice
makes it ``NCHW{ic}c`` data, ``OIHW{ic/4}i8o4i`` weights and ``NCHW8c`` output (:func:`choice`),
and ``kernels/int8_by_eight.py`` computes it with eight-lane ``vpdpbusd``. Outside
:func:`building` (``relay.build``, TVM's executors) TVM's legalization and layout choice are
unchanged.
"""

from __future__ import annotations

import tvm
from tvm import relay

from ..gate import Gate
from .gradient_cleanup import static_extents

#: ``vpdpbusd`` on eight int32 lanes as LLVM names it.
VPDPBUSD_256 = "llvm.x86.avx512.vpdpbusd.256"


def eight_lanes(target: tvm.target.Target | None = None) -> bool:
    """Whether x86 ``target`` (the one in scope if None) has ``vpdpbusd`` on 256-bit registers
    and this LLVM its intrinsic."""
    from tvm.target.codegen import llvm_lookup_intrinsic_id, target_has_features

    target = target if target is not None else tvm.target.Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm":
        return False
    if not (target_has_features("avxvnni", target) or target_has_features(["avx512vnni", "avx512vl"], target)):
        return False
    return bool(llvm_lookup_intrinsic_id(VPDPBUSD_256))


#: The layouts (data, weights) of the convolutions blocked by eight: TVM's x86 legalization's.
_LAYOUTS = (("NCHW", "OIHW"), ("NHWC", "HWIO"))


def applies(attrs, data_dtype: str, data_shape, weight_dtype: str, weight_shape, target=None) -> bool:
    """Whether an ``nn.conv2d`` of these attributes and operands is blocked by eight: int8 or
    uint8 data, int8 weights, int32 sums, ``NCHW``/``OIHW`` or ``NHWC``/``HWIO`` (a TFLite
    model's, until ``nchw_convolutions``), one group, no dilation, static shapes, eight
    filters, on a target with :func:`eight_lanes`.

    Not 24 or 40: their ``NCHW8c`` output then met depthwise convolutions blocked by twelve or
    by the twenty they divide into, and the layout transforms between them made the layout
    choice's cost rule drop every packed layout of a small visual wake words network (4.99 ->
    7.61 us a call)."""
    if not (data_dtype in ("int8", "uint8") and weight_dtype == "int8" and str(attrs.out_dtype) == "int32"):
        return False
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout))
    if layouts not in _LAYOUTS:
        return False
    if int(attrs.groups) != 1 or any(int(d) != 1 for d in attrs.dilation):
        return False
    data, weight = static_extents(data_shape), static_extents(weight_shape)
    if data is None or weight is None or len(data) != 4 or len(weight) != 4:
        return False
    return weight[layouts[1].index("O")] == 8 and eight_lanes(target)


def applies_to_call(call: relay.Call) -> bool:
    """:func:`applies` for a type-checked ``nn.conv2d`` call."""
    data, weight = (arg.checked_type for arg in call.args[:2])
    return applies(call.attrs, data.dtype, data.shape, weight.dtype, weight.shape)


def input_block(channels: int) -> int:
    """The input channels of a data block: TVM's choice for its int8 kernel (the largest of 16,
    12, 8, 4 that divides them)."""
    return next(bn for bn in (16, 12, 8, 4) if channels % bn == 0)


def legalized(attrs, data, weight, target=None) -> bool:
    """Whether an ``NCHW`` ``nn.conv2d`` of TE tensors (or types) ``data`` and ``weight`` is one
    this pass legalized: :func:`applies`, uint8 data whose channels come in fours. One left in
    ``NHWC`` (where ``nchw_convolutions`` found that it did not pay) keeps TVM's layout choice,
    which leaves it as it is, and TVM's ``NHWC`` kernel, which takes any number of filters."""
    return (
        data.dtype == "uint8"
        and str(attrs.data_layout) == "NCHW"
        and applies(attrs, data.dtype, data.shape, weight.dtype, weight.shape, target)
        and int(data.shape[1]) % 4 == 0
    )


def choice(attrs, inputs, tinfos) -> relay.Expr | None:
    """The layout choice for a convolution this pass :func:`legalized`: ``NCHW{ic}c``,
    ``OIHW{ic/4}i8o4i``, ``NCHW8c``. None for any other."""
    data, weight = tinfos[0], tinfos[1]
    if not legalized(attrs, data, weight):
        return None
    ic_bn = input_block(int(data.shape[1]))
    new_attrs = {key: attrs[key] for key in attrs.keys()}
    new_attrs["channels"] = int(weight.shape[0])
    new_attrs["data_layout"] = f"NCHW{ic_bn}c"
    new_attrs["kernel_layout"] = f"OIHW{ic_bn // 4}i8o4i"
    new_attrs["out_layout"] = "NCHW8c"
    return relay.nn.contrib_conv2d_nchwc(*inputs, **new_attrs)


def _install() -> None:
    from tvm.topi.generic.conv2d import conv2d_alter_int8_common
    from tvm.topi.nn import conv2d_alter_layout, conv2d_legalize

    # What is registered now (TVM's x86 functions, or another of relay_aot's dispatchers in
    # front of them): each dispatcher passes on what it does not handle.
    tvm_legalize = conv2d_legalize.dispatch_dict["cpu"]
    tvm_layout = conv2d_alter_layout.dispatch_dict["cpu"]

    def layout(attrs, inputs, tinfos, out_type):
        ours = choice(attrs, inputs, tinfos) if _GATE.active() else None
        return ours if ours is not None else tvm_layout(attrs, inputs, tinfos, out_type)

    def legalize(attrs, inputs, arg_types):
        data, weight, output = arg_types
        if _GATE.active() and applies(attrs, data.dtype, data.shape, weight.dtype, weight.shape):
            # TVM's x86 legalization with eight output channels a block instead of sixteen:
            # int8 data shifted into uint8 (vpdpbusd multiplies uint8 by int8), input
            # channels padded to four
            return conv2d_alter_int8_common(inputs[0], data, inputs[1], weight, output, attrs, "uint8", 4, 8)
        return tvm_legalize(attrs, inputs, arg_types)

    conv2d_legalize.register("cpu", legalize, override=True)
    conv2d_alter_layout.register("cpu", layout, override=True)


_GATE = Gate(_install)
#: Within the block (on this thread), convolutions :func:`applies` to are legalized and laid
#: out for blocks of eight output channels.
building = _GATE.building

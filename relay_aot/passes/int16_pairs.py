"""int8 convolutions on x86 CPUs without VNNI: int16 operands, two products summed per int32 lane.

Without VNNI no x86 instruction sums uint8 x int8 products into int32 lanes exactly:
``vpmaddubsw`` saturates its pairs in int16 (``exact_int8``). relay_aot widened the operands to
int16 and left them to TVM's ordinary kernels, which widen every int16 weight again to int32 and
multiply with ``vpmulld``: eight products an instruction, with two more around it. MLPerf Tiny's
ResNet-8 built for an AVX2 CPU (``-mcpu=znver3``) took 557 us where the VNNI build takes 76.

``vpmaddwd`` (SSE2; 256 bits with AVX2, 512 with AVX-512 BW) multiplies int16 lanes and sums
each pair of products into an int32 lane, exactly (the one sum out of int32's range,
``2 * (-32768)^2``, wraps as the int32 sums of TVM's kernels do; int8 operands are far from it).
So on an x86 target without VNNI (:func:`pair_lanes`), an int8 or uint8 by int8 convolution
:func:`applies` to is made int16 by int16 before the legalizations
(``exact_int8.small_int8_convolutions``), and the layout choice (:func:`choice`) packs any int16
one it applies to as ``NCHW{ic}c`` data, ``OIHW{ic/2}i{L}o2i`` weights and ``NCHW{L}c`` output,
L the int32 lanes of the target's vectors (8 with AVX2, 16 with AVX-512, 4 with SSE2 alone;
fewer where the filters do not divide by them); ``kernels/int16_pairs.py`` computes it with one
``vpmaddwd`` per output column, L filters and two input channels. Outside :func:`building`
(``relay.build``, TVM's executors) TVM's layout choice is unchanged.
"""

from __future__ import annotations

import tvm
from tvm import relay

from ..gate import Gate
from .gradient_cleanup import static_extents
from .nchw import is_x86

#: Per int32 lanes of a vector: LLVM's ``vpmaddwd`` on such vectors.
PMADDWD = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd", 16: "llvm.x86.avx512.pmaddw.d.512"}

#: The operand dtypes (data, weights) of the products computed in int16 pairs: int8 ones
#: before they are widened, int16 ones after.
_OPERANDS = (("int8", "int8"), ("uint8", "int8"), ("int16", "int16"))

#: The layouts (data, weights) of the convolutions made int16: TVM's x86 legalization's.
_LAYOUTS = (("NCHW", "OIHW"), ("NHWC", "HWIO"))


def pair_lanes(target: tvm.target.Target | None = None) -> int:
    """The int32 lanes of ``vpmaddwd`` for x86 ``target`` (the one in scope if None) where it has
    no VNNI at the width TVM's int8 kernels use; 0 where this kernel is not for it."""
    from tvm.target.codegen import llvm_lookup_intrinsic_id

    from ..cpu import has_vnni, int32_lanes

    target = target if target is not None else tvm.target.Target.current(allow_none=True)
    if not is_x86(target) or has_vnni(target):
        return 0
    lanes = int32_lanes(target)
    return lanes if llvm_lookup_intrinsic_id(PMADDWD.get(lanes, "")) else 0


def block(extent: int, lanes: int) -> int:
    """The most of ``lanes``, ``lanes / 2``, ... 2 dividing ``extent`` (0 if it is odd)."""
    while lanes >= 2 and extent % lanes:
        lanes //= 2
    return lanes if lanes >= 2 else 0


def applies(attrs, data_dtype: str, data_shape, weight_dtype: str, weight_shape, target=None) -> bool:
    """Whether an ``nn.conv2d`` of these attributes and operands is computed with ``vpmaddwd``:
    int8 or uint8 data and int8 weights (or both int16), int32 sums, ``NCHW``/``OIHW`` or
    ``NHWC``/``HWIO``, one group, no dilation, static shapes, filters in fours, an even number
    of input channels where they are int16 already (:func:`even_channels` pads the others), on a
    target with :func:`pair_lanes`."""
    if (data_dtype, weight_dtype) not in _OPERANDS or str(attrs.out_dtype) != "int32":
        return False
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout))
    if layouts not in _LAYOUTS or int(attrs.groups) != 1 or any(int(d) != 1 for d in attrs.dilation):
        return False
    data, weight = static_extents(data_shape), static_extents(weight_shape)
    if data is None or weight is None or len(data) != 4 or len(weight) != 4:
        return False
    channels, filters = data[layouts[0].index("C")], weight[layouts[1].index("O")]
    # odd int8 channels are padded to even ones as they are widened (even_channels)
    return (channels % 2 == 0 or data_dtype != "int16") and filters % 4 == 0 and pair_lanes(target) > 0


def even_channels(data: relay.Expr, weight: relay.Expr, attrs, channels: int) -> tuple[relay.Expr, relay.Expr]:
    """The int16 operands of a convolution :func:`applies` to, an odd number of ``channels``
    padded with a zero channel (an image's first layer: three channels, 33% more products, at
    ``vpmaddwd``'s rate; in float32, the other exact form, MLPerf Tiny's visual wake words
    network's first layer took 17.5 against 6 us)."""
    data, weight = relay.cast(data, "int16"), relay.cast(weight, "int16")
    if channels % 2 == 0:
        return data, weight

    def padded(expr: relay.Expr, layout: str, axis: str) -> relay.Expr:
        return relay.nn.pad(expr, [(0, 1) if name == axis else (0, 0) for name in layout])

    return padded(data, str(attrs.data_layout), "C"), padded(weight, str(attrs.kernel_layout), "I")


def dense_applies(data_dtype: str, data_shape, weight_dtype: str, weight_shape, out_dtype: str, target=None) -> bool:
    """Whether an ``nn.dense`` of these operands is computed with ``vpmaddwd``: :func:`applies`'
    dtypes, static 2-d operands, an even depth, outputs in fours."""
    if (data_dtype, weight_dtype) not in _OPERANDS or out_dtype != "int32":
        return False
    data, weight = static_extents(data_shape), static_extents(weight_shape)
    if data is None or weight is None or len(data) != 2 or len(weight) != 2:
        return False
    return data[1] % 2 == 0 and weight[0] % 4 == 0 and pair_lanes(target) > 0


def applies_to_call(call: relay.Call) -> bool:
    """:func:`applies` (:func:`dense_applies`) for a type-checked ``nn.conv2d`` (``nn.dense``)."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name in ("nn.conv2d", "nn.dense")):
        return False
    data, weight = (arg.checked_type for arg in call.args[:2])
    if call.op.name == "nn.dense":
        out_dtype = str(call.attrs.out_dtype) or data.dtype
        return dense_applies(data.dtype, data.shape, weight.dtype, weight.shape, out_dtype)
    return applies(call.attrs, data.dtype, data.shape, weight.dtype, weight.shape)


def choice(attrs, inputs, tinfos) -> relay.Expr | None:
    """The layout choice for an int16 ``NCHW`` convolution :func:`applies` to: ``NCHW{ic}c``,
    ``OIHW{ic/2}i{L}o2i``, ``NCHW{L}c``. None for any other."""
    data, weight = tinfos[0], tinfos[1]
    if not (data.dtype == "int16" and str(attrs.data_layout) == "NCHW"):
        return None
    if not applies(attrs, data.dtype, data.shape, weight.dtype, weight.shape):
        return None
    lanes = pair_lanes()
    ic_bn, oc_bn = block(int(data.shape[1]), lanes), block(int(weight.shape[0]), lanes)
    new_attrs = {key: attrs[key] for key in attrs.keys()}
    new_attrs["channels"] = int(weight.shape[0])
    new_attrs["data_layout"] = f"NCHW{ic_bn}c"
    new_attrs["kernel_layout"] = f"OIHW{ic_bn // 2}i{oc_bn}o2i"
    new_attrs["out_layout"] = f"NCHW{oc_bn}c"
    return relay.nn.contrib_conv2d_nchwc(*inputs, **new_attrs)


def dense_choice(attrs, inputs, tinfos, out_type) -> relay.Expr | None:
    """The layout choice for an ``nn.dense`` of int16 data and int8 or int16 weights
    :func:`dense_applies` to: its weights packed ``NC{L}n2c``. None for any other."""
    data, weight = tinfos
    widened = data.dtype == "int16" and weight.dtype in ("int8", "int16")
    if not (widened and dense_applies("int16", data.shape, "int16", weight.shape, out_type.dtype)):
        return None
    lanes = block(int(weight.shape[0]), pair_lanes())
    return relay.nn.contrib_dense_pack(inputs[0], inputs[1], f"NC{lanes}n2c", None, out_type.dtype)


def _install() -> None:
    from tvm.topi.nn import conv2d_alter_layout, dense_alter_layout

    # what is registered now: TVM's, or another dispatcher in front of it
    tvm_layout, tvm_dense_layout = conv2d_alter_layout.dispatch_dict["cpu"], dense_alter_layout.dispatch_dict["cpu"]

    def layout(attrs, inputs, tinfos, out_type):
        ours = choice(attrs, inputs, tinfos) if _GATE.active() else None
        return ours if ours is not None else tvm_layout(attrs, inputs, tinfos, out_type)

    def dense_layout(attrs, inputs, tinfos, out_type):
        ours = dense_choice(attrs, inputs, tinfos, out_type) if _GATE.active() else None
        return ours if ours is not None else tvm_dense_layout(attrs, inputs, tinfos, out_type)

    conv2d_alter_layout.register("cpu", layout, override=True)
    dense_alter_layout.register("cpu", dense_layout, override=True)


_GATE = Gate(_install)
#: Within the block (on this thread), int16 convolutions :func:`applies` to (and matrix products
#: :func:`dense_applies` to) are laid out for ``kernels/int16_pairs.py``.
building = _GATE.building

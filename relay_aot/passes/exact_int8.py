"""Products of ``uint8`` by ``int8`` computed exactly on x86 CPUs without VNNI.

TVM's x86 strategies compute a ``uint8`` x ``int8`` ``conv2d``, ``dense`` or ``batch_matmul``
(int32 out) with ``vpmaddubsw``, which adds each pair of products into an ``int16`` with
saturation: 255 * 127 * 2 does not fit, so a kernel over full-range values returns wrong numbers
(on a target with SSE4.2, which every x86 CPU named by ``-mcpu`` has; the generic ``llvm`` target
takes the plain kernels). TVM's QNN legalization makes exactly these products out of
``qnn.conv2d`` and ``qnn.dense`` on such targets, and its x86 legalization of ``nn.conv2d`` and
``nn.dense`` makes them out of int8 x int8 ones (the data shifted by 128 into uint8, the
weights' sums times 128 subtracted after), so a quantized network came back wrong. Only VNNI's
``vpdpbusd`` (``avx512vnni``, ``avxvnni``) sums them in ``int32``. Without it, the operands are
widened to ``int16`` first, which is what TVM's legalization does on CPUs it does not consider
fast at int8: the same values, computed by the ordinary kernels.

With VNNI the products are left to TVM's int8 kernels, which relay_aot builds with
``vpdpbusd`` called as the linked LLVM declares it (``kernels/vnni.py``: TVM 0.19's own call
has the signature LLVM had before 21, and aborts the build). They are widened there too where
the int8 kernels would still go wrong: on CPUs with AMX, whose tile kernels TVM picks for
``dense`` and ``batch_matmul`` (their LLVM intrinsics are not the ones relay_aot calls), and
for a convolution whose channels TVM's int8 kernel cannot block (input channels by 4, output
channels by 16; TVM's legalization pads them, but not for a dilated convolution, whose lowering
then failed with an ``IndexError``).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay
from tvm.target.codegen import target_has_features

from ..cpu import has_vnni
from . import int8_by_eight, int16_pairs
from .bounds import rewrite_functions

#: Operators TVM's x86 strategies compute with ``vpmaddubsw`` for uint8 data and int8 weights.
PRODUCTS = ("nn.conv2d", "nn.dense", "nn.batch_matmul", "nn.contrib_dense_pack")


def _needs_widening(target: tvm.target.Target) -> bool:
    """Whether x86 target ``target``'s uint8 x int8 kernels may saturate (no VNNI at the width
    TVM's kernels use) or take AMX's tiles (module docstring)."""
    return not has_vnni(target) or bool(target_has_features("amx-int8", target))


def _is_u8_by_s8(call: relay.Call) -> bool:
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name in PRODUCTS and len(call.args) >= 2):
        return False
    data, weight = (arg.checked_type for arg in call.args[:2])
    return (
        isinstance(data, relay.TensorType)
        and isinstance(weight, relay.TensorType)
        and data.dtype == "uint8"
        and weight.dtype == "int8"
    )


def _unblocked_convolution(call: relay.Call) -> bool:
    """Whether ``call`` is a uint8 x int8 ``conv2d`` (of one group) that TVM's int8 kernel cannot
    block: input channels not a multiple of 4 or output channels not of 16 (or not static)."""
    if not (_is_u8_by_s8(call) and call.op.name == "nn.conv2d" and int(call.attrs.groups) == 1):
        return False
    data_layout, kernel_layout = str(call.attrs.data_layout), str(call.attrs.kernel_layout)
    if "C" not in data_layout or "O" not in kernel_layout:
        return True
    channels = call.args[0].checked_type.shape[data_layout.index("C")]
    filters = call.args[1].checked_type.shape[kernel_layout.index("O")]
    if not all(isinstance(d, tvm.tir.IntImm) for d in (channels, filters)):
        return True
    if int(channels) % 4 == 0 and int8_by_eight.applies_to_call(call):
        return False  # blocked by eight
    return int(channels) % 4 != 0 or int(filters) % 16 != 0


class _Widen(relay.ExprMutator):
    """Widens the operands of the products ``wanted(call)`` picks to int16; with ``floats``, a
    convolution whose sums float32 holds exactly (:func:`_float_exact`) is computed in float32
    instead; with ``pairs`` (for ``int16_pairs``' kernels), a matrix product's weights stay int8."""

    def __init__(self, wanted, floats: bool = False, pairs: bool = False) -> None:
        super().__init__()
        self.wanted = wanted
        self.floats = floats
        self.pairs = pairs

    def visit_call(self, call):
        wanted = self.wanted(call)
        typed = call
        call = super().visit_call(call)
        if not wanted:
            return call
        if self.floats and _float_exact(call):
            data, weight = (relay.cast(arg, "float32") for arg in call.args[:2])
            attrs = {key: call.attrs[key] for key in call.attrs.keys()}
            attrs["out_dtype"] = "float32"
            return relay.cast(relay.nn.conv2d(data, weight, **attrs), "int32")
        data, weight = call.args[:2]
        if self.pairs and call.op.name == "nn.conv2d":
            channels = int(typed.args[0].checked_type.shape[str(call.attrs.data_layout).index("C")])
            data, weight = int16_pairs.even_channels(data, weight, call.attrs, channels)
        elif self.pairs:
            # int16_pairs' matrix products keep int8 weights (sign-extended as they are loaded)
            data = relay.cast(data, "int16")
        else:
            data, weight = relay.cast(data, "int16"), relay.cast(weight, "int16")
        return relay.Call(call.op, [data, weight, *call.args[2:]], call.attrs, call.type_args, call.span)


@tvm.transform.module_pass(opt_level=0, name="ExactInt8Products")
def exact_int8_products(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Widen the operands of uint8 x int8 products to int16 where the target in scope would
    compute them with saturation or could not compute them (module docstring); type-checked
    input, a no-op for targets other than x86 with SSE4.2."""
    target = tvm.target.Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm" or not target_has_features("sse4.2", target):
        return mod
    wanted = _is_u8_by_s8 if _needs_widening(target) else _unblocked_convolution
    return rewrite_functions(mod, wanted, lambda: _Widen(wanted))


def _small_int8_convolution(call: relay.Call) -> bool:
    """Whether ``call`` is an int8 x int8 ``conv2d`` (one group, into int32) whose filters TVM's
    x86 legalization would pad to sixteen for its int8 kernel (24 filters; eight where the
    target has no eight-lane ``vpdpbusd`` for ``int8_by_eight``'s kernel)."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "nn.conv2d" and int(call.attrs.groups) == 1):
        return False
    data, weight = (arg.checked_type for arg in call.args[:2])
    if not (data.dtype == weight.dtype == "int8" and str(call.attrs.out_dtype) == "int32"):
        return False
    data_layout, kernel_layout = str(call.attrs.data_layout), str(call.attrs.kernel_layout)
    if "C" not in data_layout or "O" not in kernel_layout:
        return False
    channels = data.shape[data_layout.index("C")]
    filters = weight.shape[kernel_layout.index("O")]
    if not all(isinstance(d, tvm.tir.IntImm) for d in (channels, filters)):
        return False
    return int(filters) % 16 != 0 and not int8_by_eight.applies_to_call(call)


def _unpaired_int8_convolution(call: relay.Call) -> bool:
    """Whether ``call`` is an int8 x int8 ``conv2d`` (one group, into int32) whose sums float32
    holds exactly, that ``int16_pairs`` does not take (dilated, or filters not in fours)."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "nn.conv2d" and int(call.attrs.groups) == 1):
        return False
    data, weight = (arg.checked_type for arg in call.args[:2])
    return data.dtype == weight.dtype == "int8" and str(call.attrs.out_dtype) == "int32" and _float_exact(call)


def _float_exact(call: relay.Call) -> bool:
    """Whether every partial sum of ``call``'s int8 products is an integer of at most 2^24 (exact
    in float32): at most 1024 products per output."""
    kernel_layout = str(call.attrs.kernel_layout)
    shape = [int(d) for d in call.args[1].checked_type.shape]
    terms = int(np.prod([d for axis, d in zip(kernel_layout, shape) if axis != "O"]))
    return terms * 128 * 128 <= 1 << 24


@tvm.transform.module_pass(opt_level=0, name="SmallInt8Convolutions")
def small_int8_convolutions(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """On x86 with VNNI, int8 convolutions whose filters TVM's int8 kernel cannot block
    (:func:`_small_int8_convolution`) computed in float32 where that is exact
    (:func:`_float_exact`: at most 1024 products per output, an image's first layer), else with
    their operands widened to int16, before the legalizations. TVM's would pad the filters to
    sixteen, then slice the padded outputs off the int32 sums through a layout transform to
    NCHW, which kept the requantization out of the convolution's kernel and stored the sums
    twice (on the visual wake words model, a fifth of the time). Either way the convolution is
    an ordinary ``NCHWc`` one of the filters it has; TVM's float32 kernel is its fastest (the
    int16 one took 3x as long on that layer). Eight filters take ``int8_by_eight``'s blocks of
    eight where the target has them (the first layer of MLPerf Tiny's visual wake words model:
    0.71 -> 0.49 us). Input channels are left to the legalization:
    padding them to four is cheap, and the int8 kernel then faster than the float one
    (MLPerf Tiny's ResNet-8, 5%).

    On x86 without VNNI (``int16_pairs.pair_lanes``), every int8 or uint8 by int8 convolution
    and matrix product ``int16_pairs`` takes gets int16 operands for its ``vpmaddwd`` kernels (a
    matrix product's weights stay int8), and the other int8 convolutions float32 where exact:
    ResNet-8 built for ``-mcpu=znver3`` 557 -> 184 us (Zen 4, one thread)."""
    target = tvm.target.Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm":
        return mod
    if int16_pairs.pair_lanes(target):
        # without VNNI: int16 where int16_pairs' kernel takes them, then float32 where exact
        mod = rewrite_functions(
            mod, int16_pairs.applies_to_call, lambda: _Widen(int16_pairs.applies_to_call, pairs=True)
        )
        mod = relay.transform.InferType()(mod)
        return rewrite_functions(
            mod, _unpaired_int8_convolution, lambda: _Widen(_unpaired_int8_convolution, floats=True)
        )
    if not has_vnni(target):
        return mod
    return rewrite_functions(mod, _small_int8_convolution, lambda: _Widen(_small_int8_convolution, floats=True))

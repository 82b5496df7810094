"""NHWC convolutions and pools in NCHW on x86 (:func:`nchw_convolutions`), so that the layout
choice makes them the packed ``NCHWc`` kernels TVM's x86 schedules are written for."""

from __future__ import annotations

import platform

import tvm
from tvm import relay

from . import constant_movement
from .layout_cost import LAYOUT_TRANSFORM_SHARE, _multiply_accumulates, _runtime_transform_elements
from .walk import operator_calls

#: The layouts NHWC operators are converted to on x86 (:func:`nchw_convolutions`): convolutions
#: (depthwise and grouped ones too) with their weights in TVM's default layout for NCHW (OIHW),
#: and pools (named, or TVM warns on stderr that it has no layout for them).
POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d", "nn.global_avg_pool2d")
NCHW_LAYOUTS = {"nn.conv2d": ["NCHW", "default"], **{pool: ["NCHW"] for pool in POOLS}}


class _FreePools(relay.ExprMutator):
    """Pools without the ``out_layout`` ``ConvertLayout`` gives them: it pins a pool's output to
    NCHW, and the layout choice then put a transform from ``NCHW16c`` back to ``NCHW`` before
    every pool; without it a pool's output follows its input's layout."""

    def visit_call(self, call):
        call = super().visit_call(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name in POOLS and str(call.attrs.out_layout)):
            return call
        fields = {key: call.attrs[key] for key in call.attrs.keys() if key != "out_layout"}
        return getattr(relay.nn, call.op.name.split(".")[1])(call.args[0], **fields)


def is_x86(target: tvm.target.Target | None) -> bool:
    """Whether ``target`` is an LLVM target that TVM's x86 strategies serve: a CPU target that is
    not an ARM one (``arm_cpu``), for an x86 triple or, without one, built on an x86 host."""
    if target is None or target.kind.name != "llvm" or "arm_cpu" in target.keys:
        return False
    triple = str(target.attrs.get("mtriple", "")) or platform.machine()  # no triple: this machine's
    return triple.split("-")[0].lower() in ("x86_64", "amd64", "i386", "i686")


#: The conversion is kept when the tensors it transforms at run time hold at most this share of
#: the multiply-accumulates: four times the layout choice's :data:`LAYOUT_TRANSFORM_SHARE`, whose
#: alternative is a good NCHW kernel, where here it is TVM's untuned NHWC one. A float TFLite
#: network of a 16 x 16 x 3 image (20 thousand multiply-accumulates, 900 elements transformed)
#: kept NHWC, its depthwise convolution at 7 and its convolution at 27 multiply-accumulates a
#: nanosecond: 3.48 -> 3.1 us a call in NCHWc (Zen 5).
NHWC_TRANSFORM_SHARE = 4 * LAYOUT_TRANSFORM_SHARE


def _nhwc_convolutions(mod: tvm.IRModule) -> bool:
    return any(node.op.name == "nn.conv2d" and str(node.attrs.data_layout) == "NHWC" for node in operator_calls(mod))


@tvm.transform.module_pass(opt_level=0, name="NchwConvolutions")
def nchw_convolutions(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """On x86, NHWC convolutions and pools in NCHW (TVM's ``ConvertLayout``, with
    :data:`NCHW_LAYOUTS`), so that the layout choice makes them the packed ``NCHWc`` kernels TVM's
    x86 schedules are written (and AutoTVM's templates registered) for: TVM's x86 strategy has
    one untuned NHWC convolution, whose loops it does not block, and no int8 one. TFLite's
    models are NHWC. The layouts ``ConvertLayout`` carries through the elementwise operators
    between the convolutions; what is left at run time is a ``layout_transform`` of the model's
    input and of what leaves the NCHW region (mostly a small tensor before a classifier; an
    NHWC image with one channel is already in NCHW order and moves nothing). The conversion is
    kept when the elements those transforms add are at most :data:`NHWC_TRANSFORM_SHARE` of the
    module's multiply-accumulates."""
    if not is_x86(tvm.target.Target.current(allow_none=True)) or not _nhwc_convolutions(mod):
        return mod
    try:
        converted = relay.transform.ConvertLayout(NCHW_LAYOUTS)(mod)
        for gvar, func in converted.functions.items():
            if isinstance(func, relay.Function):
                converted[gvar] = _FreePools().visit(func)
        # The weights' transforms are of constants: folded here (by numpy where they only move
        # bytes: FoldConstant builds each with LLVM), never run.
        converted = relay.transform.FoldConstant()(constant_movement.fold(converted))
    except Exception:  # noqa: BLE001 - like AlterOpLayout, ConvertLayout fails on some closures
        return mod
    added = _runtime_transform_elements(converted) - _runtime_transform_elements(mod)
    if added <= NHWC_TRANSFORM_SHARE * _multiply_accumulates(mod):
        return converted
    return mod

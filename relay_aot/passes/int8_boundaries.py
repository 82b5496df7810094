"""Kernel boundaries of int8 models that relay_aot moves on host CPUs.

relay_aot's TFLite importer ends a kernel after every operator (``annotation.stop_fusion``, see
``frontends/tflite_exact.py``: chained, the rounding arithmetic of consecutive operators makes
TVM's simplifier take minutes) and after a convolution's int32 sums. Two of those boundaries
cost a stored tensor and a kernel call for nothing on x86:

* :func:`requantizations_into_convolutions`: the one between an ``NCHWc`` convolution's sums
  and their requantization;
* :func:`shifts_into_producers`: the one before the shift by 128 into uint8 that TVM's x86
  legalization puts in front of an int8 convolution or matrix product (VNNI multiplies uint8 by
  int8): the shift is two elementwise operators, which then end the producer's kernel instead
  of making a kernel of their own.
"""

from __future__ import annotations

import tvm
from tvm import relay

from .gradient_cleanup import same_static_type
from .requantization import constant_equals
from .walk import CallRewriter, calls_any, op_name, rewrite_functions

_STOP_FUSION = "annotation.stop_fusion"


def _packed_convolution_sums(expr: relay.Expr) -> bool:
    """Whether ``expr`` is the int32 sums of an ``NCHWc`` convolution (TVM's x86 kernel after the
    layout choice), constants added or subtracted (the bias; the int8 legalization's correction
    for the input it shifted to uint8)."""
    while op_name(expr) in ("add", "subtract") and isinstance(expr.args[1], relay.Constant):
        expr = expr.args[0]
    if op_name(expr) == "cast" and str(expr.attrs.dtype) == "int32":
        expr = expr.args[0]  # exact_int8's float32 form of a small int8 convolution
        return op_name(expr) == "nn.contrib_conv2d_NCHWc" and str(expr.attrs.out_dtype) == "float32"
    return op_name(expr) == "nn.contrib_conv2d_NCHWc" and str(expr.attrs.out_dtype) == "int32"


class _Unsealed(CallRewriter):
    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        if op_name(call) == _STOP_FUSION and _packed_convolution_sums(call.args[0]):
            return new.args[0]
        return None


def requantizations_into_convolutions(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with the importer's ``stop_fusion`` between an ``NCHWc`` convolution's int32 sums
    and their requantization dropped (after the layout choice), so that the requantization
    fuses into the convolution's kernel.

    The importer ends the sums' kernel because TVM's x86 NHWC schedules compute each stage of a
    fused epilogue as a loop over the whole tensor. The ``NCHWc`` int8 schedule applies it to
    each block of output channels in registers, and the int32 tensor is then never stored: on
    MLPerf Tiny's ResNet-8 and visual wake words models, 5% less time. Depthwise ``NCHWc``
    kernels are left as they are: with the epilogue inlined, their loops ran slower than the
    two kernels apart."""
    return rewrite_functions(mod, lambda func: _Unsealed() if calls_any(func, {_STOP_FUSION}) else None)


def _shift_source(call: relay.Call) -> relay.Expr | None:
    """``x`` where ``call`` is TVM's int8 shift ``cast(cast(x, int32) + 128, uint8)`` (or -128
    into int8) of ``x = stop_fusion(y)`` or of a reshape of one; else None."""
    if op_name(call) != "cast" or str(call.attrs.dtype) not in ("uint8", "int8"):
        return None
    added = call.args[0]
    if op_name(added) != "add" or not any(constant_equals(added.args[1], shift) for shift in (128, -128)):
        return None
    widened = added.args[0]
    if op_name(widened) != "cast" or str(widened.attrs.dtype) != "int32":
        return None
    source = widened.args[0]
    inner = source.args[0] if op_name(source) == "reshape" else source
    return source if op_name(inner) == _STOP_FUSION else None


class _ShiftsUnsealed(CallRewriter):
    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        source = _shift_source(call)
        if source is None:
            return None
        # the same operators on the value before its stop_fusion; other users keep theirs
        unsealed = self.visit(source)
        if op_name(source) == "reshape":
            value = unsealed.args[0].args[0]
            # the importer's reshape of a matrix product's input to the shape it has already:
            # not an operator any more, so that the shift fuses into the producing product's
            # kernel (FuseOps fuses no reshape into one)
            same = same_static_type(source.checked_type, source.args[0].checked_type)
            unsealed = value if same else relay.Call(unsealed.op, [value], unsealed.attrs)
        else:
            unsealed = unsealed.args[0]
        added = new.args[0]
        widened = relay.cast(unsealed, "int32")
        return relay.cast(relay.add(widened, added.args[1]), str(call.attrs.dtype))


def shifts_into_producers(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with the kernel boundary before TVM's shifts of int8 data by 128 (module
    docstring) dropped: the shift ends the kernel that computes its input. On MLPerf Tiny's
    anomaly detection model, 8 of its 23 kernels were such shifts."""
    return rewrite_functions(mod, lambda func: _ShiftsUnsealed() if calls_any(func, {_STOP_FUSION}) else None)

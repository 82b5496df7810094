"""Products of ``uint8`` by ``int8`` computed exactly on x86 CPUs without VNNI.

TVM's x86 strategies compute a ``uint8`` x ``int8`` ``conv2d``, ``dense`` or ``batch_matmul``
(int32 out) with ``vpmaddubsw``, which adds each pair of products into an ``int16`` with
saturation: 255 * 127 * 2 does not fit, so a kernel over full-range values returns wrong numbers
(on a target with SSE4.2, which every x86 CPU named by ``-mcpu`` has; the generic ``llvm`` target
takes the plain kernels). TVM's QNN legalization makes exactly these products out of
``qnn.conv2d`` and ``qnn.dense`` on such targets, so a quantized network from ONNX came back wrong.
Only VNNI's ``vpdpbusd`` (``avx512vnni``, ``avxvnni``) sums them in ``int32``. Without it, the
operands are widened to ``int16`` first, which is what TVM's legalization does on CPUs it does
not consider fast at int8: the same values, computed by the ordinary kernels.

With VNNI the products are exact, but TVM 0.19's VNNI kernels do not build with the LLVM it is
linked to here: they call ``llvm.x86.avx512.vpdpbusd.512`` with ``int32x16`` operands, and
LLVM 21 changed that intrinsic to take ``int8x64`` -- LLVM's assertion aborts the build
("Calling a function with a bad signature!"). So from LLVM 21 on the operands are widened on
VNNI CPUs as well; a uint8 network is then exact and compiles, at the ordinary kernels' speed.
"""

from __future__ import annotations

import tvm
from tvm import relay
from tvm.target.codegen import target_has_features

from .bounds import rewrite_functions

#: Operators TVM's x86 strategies compute with ``vpmaddubsw`` for uint8 data and int8 weights.
PRODUCTS = ("nn.conv2d", "nn.dense", "nn.batch_matmul", "nn.contrib_dense_pack")


#: The first LLVM whose ``vpdpbusd`` intrinsics take int8 vectors, which TVM 0.19's VNNI
#: kernels do not (module docstring).
LLVM_VNNI_SIGNATURE_CHANGED = 21


def _needs_widening(target: tvm.target.Target) -> bool:
    """Whether ``target``'s uint8 x int8 kernels may saturate (x86 with SSE4.2, no VNNI) or, with
    VNNI, would not build (LLVM 21 or later: module docstring)."""
    if target is None or target.kind.name != "llvm" or not target_has_features("sse4.2", target):
        return False
    vnni = target_has_features("avx512vnni", target) or target_has_features("avxvnni", target)
    return not vnni or tvm.target.codegen.llvm_version_major() >= LLVM_VNNI_SIGNATURE_CHANGED


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


class _Widen(relay.ExprMutator):
    def visit_call(self, call):
        wanted = _is_u8_by_s8(call)
        call = super().visit_call(call)
        if not wanted:
            return call
        data, weight = (relay.cast(arg, "int16") for arg in call.args[:2])
        return relay.Call(call.op, [data, weight, *call.args[2:]], call.attrs, call.type_args, call.span)


@tvm.transform.module_pass(opt_level=0, name="ExactInt8Products")
def exact_int8_products(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Widen the operands of every uint8 x int8 product to int16 when the target in scope would
    compute it with saturation (module docstring); type-checked input, a no-op elsewhere."""
    if not _needs_widening(tvm.target.Target.current(allow_none=True)):
        return mod
    return rewrite_functions(mod, _is_u8_by_s8, _Widen)

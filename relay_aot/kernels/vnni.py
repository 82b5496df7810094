"""TVM's x86 int8 kernels with VNNI's ``vpdpbusd`` called as the linked LLVM declares it.

TVM 0.19's uint8 x int8 kernels (``conv2d_NCHWc_int8``, ``dense_int8``, ``batch_matmul_int8``)
tensorize their innermost loop with ``topi.x86.tensor_intrin.dot_16x1x16_uint8_int8_int32``:
sixteen int32 sums of four uint8 x int8 products, one ``vpdpbusd`` on a CPU with VNNI. TVM
calls ``llvm.x86.avx512.vpdpbusd.512`` with ``int32x16`` operands, the intrinsic's signature
before LLVM 21; LLVM 21 declares it with ``int8x64`` operands, and building such a kernel
aborts in LLVM's verifier ("Calling a function with a bad signature!"). TVM's intrinsic also
always takes sixteen lanes, so on a CPU with AVX-VNNI but not AVX-512 (whose kernels split the
output channels by eight) it could not tensorize at all.

While relay_aot lowers its kernels (:func:`building`), the modules that tensorize with it get
:func:`dot_uint8_int8_int32` instead: the same computation (four products summed into each of
the lanes ``topi.x86`` blocks by, ``get_simd_32bit_lanes``), its operands reinterpreted as the
int8 vectors the intrinsic takes, whatever LLVM's version: ``vpdpbusd`` on 512-bit registers
with AVX-512 VNNI, on 256-bit ones with AVX-VNNI (LLVM's ``vpdpbusd.256``, which it encodes
with VEX where only AVX-VNNI is there). ``vpdpbusd`` sums the four products and the
accumulator in 32 bits, without saturating: the kernel is exact for all uint8 and int8
values. Without VNNI TVM's own intrinsic is used: ``vpmaddubsw`` then ``vpmaddwd``, whose first
sum of two products saturates in 16 bits (``passes/exact_int8.py`` keeps such products off it).
Outside :func:`building`, TVM's intrinsic is returned, so ``relay.build`` and TVM's executors
in the same process are as they were.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import te, tir
from tvm.target.codegen import llvm_lookup_intrinsic_id
from tvm.target.x86 import get_simd_32bit_lanes
from tvm.topi.x86 import conv2d_avx_1x1, conv2d_avx_common, dense, tensor_intrin

from ..cpu import has_vnni
from ..gate import Gate
from .lane_sums import lane_sums

#: The modules of ``topi.x86`` that import TVM's intrinsic by name (their schedules call it).
_USERS = (conv2d_avx_1x1, conv2d_avx_common, dense)
_NAME = "dot_16x1x16_uint8_int8_int32"

#: Per number of int32 lanes: LLVM's ``vpdpbusd`` on registers of that many lanes.
_VPDPBUSD = {16: "llvm.x86.avx512.vpdpbusd.512", 8: "llvm.x86.avx512.vpdpbusd.256"}


def dot_uint8_int8_int32(lanes: int | None = None) -> te.TensorIntrin:
    """The tensor intrinsic ``topi.x86`` tensorizes its uint8 x int8 kernels with, for the target
    in scope: ``lanes`` int32 sums of four uint8 x int8 products each (``data[4]`` broadcast,
    ``kernel[lanes][4]``), one ``vpdpbusd`` where the target has VNNI (module docstring); TVM's
    own intrinsic elsewhere. ``lanes``: the target's vector width by default; 8 is the 256-bit
    ``vpdpbusd`` of :mod:`.int8_by_eight`'s kernel (for targets with
    :func:`~relay_aot.passes.int8_by_eight.eight_lanes`)."""
    if lanes is not None:
        if not llvm_lookup_intrinsic_id(_VPDPBUSD.get(lanes, "")):
            raise ValueError(f"no vpdpbusd of {lanes} int32 lanes in this LLVM")
    else:
        lanes = get_simd_32bit_lanes()
        if not has_vnni() or not llvm_lookup_intrinsic_id(_VPDPBUSD[lanes]):
            # Not TVM's dispatcher: it picks its VNNI intrinsic by features alone (a CPU with
            # AVX-512 VNNI but not AVX-512 BW would get sixteen lanes in kernels blocked by eight).
            return tensor_intrin.dot_16x1x16_uint8_int8_int32_skylake()
    vpdpbusd = _VPDPBUSD[lanes]
    int32s, int8s = f"int32x{lanes}", f"int8x{lanes * 4}"

    def instruction(data, kernel, lanes_now):
        # The four data bytes as one int32 broadcast to every lane, then seen as bytes: the
        # operand order vpdpbusd multiplies (unsigned bytes first, then signed).
        quad = tir.call_intrin("int32", "tir.reinterpret", data.vload([0], "uint8x4"))
        broadcast = tir.call_intrin(int8s, "tir.reinterpret", quad.astype(int32s))
        weights = kernel.vload([0, 0], int8s)
        acc = tir.const(0, int32s) if lanes_now is None else lanes_now
        return tir.call_llvm_pure_intrin(int32s, vpdpbusd, tir.const(3, "uint32"), acc, broadcast, weights)

    return lane_sums(lanes, 4, "uint8", "int8", instruction)


def _dispatch() -> te.TensorIntrin:
    """What ``topi.x86``'s schedules get for TVM's intrinsic: :func:`dot_uint8_int8_int32` inside
    :func:`building`, TVM's own outside."""
    if _GATE.active():
        return dot_uint8_int8_int32()
    assert _original is not None
    return _original()


_original: Callable[[], te.TensorIntrin] | None = None


def _install() -> None:
    global _original
    _original = getattr(tensor_intrin, _NAME)
    for module in _USERS:
        setattr(module, _NAME, _dispatch)


_GATE = Gate(_install)
#: Within the block (on this thread), TVM's uint8 x int8 kernels tensorize with VNNI as the
#: linked LLVM declares it.
building = _GATE.building

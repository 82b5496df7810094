"""The CPU kernels are compiled for: the host's by default, and what a library needs of it.

relay_aot's default target is the CPU the compiling process runs on, named explicitly:
``llvm -mcpu=<LLVM's name for it>``, plus ``-mattr=`` for the features this machine has or lacks
against LLVM's model of that CPU (a hypervisor may hide some), so that the target string -- part
of every cache key -- says exactly which instructions the kernels may use. ``target="llvm"``
is the portable build (any x86-64).

Every library records what its kernels need (:class:`CpuRequirement`: the target, and the
LLVM names of the features it enables that a CPU can lack, those LLVM detects on a host and
whose instructions generated code can contain) in
its metadata and in its entries, which check the running CPU before anything runs
(``runtime_cpp/relay_aot/cpu.h``).
"""

from __future__ import annotations

import dataclasses
import functools
import platform

import tvm
from tvm.target import codegen

#: The name of the default target, resolved by :func:`host_target`.
HOST = "host"

_X86 = ("x86_64", "amd64", "i386", "i686")


@dataclasses.dataclass(frozen=True)
class CpuRequirement:
    """What a library's kernels need of the CPU: their target and its checkable features."""

    target: str
    features: tuple[str, ...]

    def to_json(self) -> dict:
        """For the library's metadata (``relay_aot/ir/signature.py``)."""
        return {"target": self.target, "features": list(self.features)}

    @classmethod
    def from_json(cls, data: dict | None) -> CpuRequirement | None:
        """What :meth:`to_json` wrote (None for a library from before it was recorded)."""
        if data is None:
            return None
        return cls(str(data["target"]), tuple(str(f) for f in data["features"]))


@functools.cache
def host_features() -> dict[str, bool]:
    """LLVM's host features (``sys::getHostCPUFeatures``): every feature it can detect on this
    CPU, with whether the CPU has it (and the OS saves its registers). Empty if it detects none."""
    try:
        found = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
    except (AttributeError, tvm.error.TVMError):
        return {}
    return {str(name): bool(value) for name, value in found.items()}


def _is_x86() -> bool:
    return platform.machine().lower() in _X86


@functools.cache
def host_target() -> str:
    """This machine's CPU as a TVM target: ``llvm -mcpu=<cpu>``, with ``-mattr=`` listing the
    features the CPU has beyond LLVM's model of it (``+``) or lacks (``-``)."""
    cpu = codegen.llvm_get_system_cpu()
    target = f"llvm -mcpu={cpu}"
    detected = host_features()
    if not detected:
        return target
    has = {name for name, value in detected.items() if value}
    modelled = set(codegen.llvm_get_cpu_features(tvm.target.Target(target))) & set(detected)
    changes = [f"+{name}" for name in sorted(has - modelled)] + [f"-{name}" for name in sorted(modelled - has)]
    return f"{target} -mattr={','.join(changes)}" if changes else target


#: The x86 features whose instructions LLVM's code generator emits in ordinary code -- vector,
#: matrix, FMA, bit-manipulation, conversion, crypto and APX's register extensions (prefixes, or
#: whole names) -- and so the only ones a library can need. A CPU model's other features are
#: system instructions no kernel contains (``enqcmd``, ``pconfig``, ``ptwrite``, ``uintr``,
#: ``waitpkg``, ``sgx``, cache control, random numbers, transactional memory, XSAVE...), which a
#: hypervisor often hides: requiring them refused libraries built for the machine's own CPU name.
CODE_FEATURE_PREFIXES = (
    "sse",
    "ssse3",
    "avx",
    "amx",
    "fma",
    "f16c",
    "xop",
    "bmi",
    "tbm",
    "lzcnt",
    "popcnt",
    "movbe",
    "adx",
    "aes",
    "vaes",
    "pclmul",
    "vpclmulqdq",
    "gfni",
    "sha",
    "sm3",
    "sm4",
    "crc32",
    "cmov",
    "cx8",
    "cx16",
    "sahf",
    "mmx",
    "prfchw",
    "64bit",
    "egpr",
    "ndd",
    "ccmp",
    "nf",
    "cf",
    "zu",
    "ppx",
    "push2pop2",
)


def used_by_code(feature: str) -> bool:
    """Whether kernels compiled with ``feature`` enabled can contain its instructions (see
    :data:`CODE_FEATURE_PREFIXES`)."""
    return feature.startswith(CODE_FEATURE_PREFIXES)


@functools.cache
def _requirement(target: str) -> CpuRequirement:
    if not _is_x86():
        # The runtime's check knows x86 only: elsewhere nothing is recorded (docs/deployment.md).
        return CpuRequirement(target, ())
    enabled = codegen.llvm_get_cpu_features(tvm.target.Target(target))
    checkable = set(enabled) & set(host_features())
    return CpuRequirement(target, tuple(sorted(f for f in checkable if used_by_code(f))))


def requirement(target: tvm.target.Target) -> CpuRequirement:
    """What kernels compiled for ``target`` need of the CPU that runs them."""
    return _requirement(str(target))


def int32_lanes(target: tvm.target.Target | None = None) -> int:
    """The int32 lanes TVM's x86 schedules block their kernels by for ``target`` (the one in
    scope if None): 16 with AVX-512 BW, 8 with AVX2, 4 otherwise (``get_simd_32bit_lanes``,
    which reads the target in scope)."""
    from tvm.target.x86 import get_simd_32bit_lanes

    if target is None:
        return get_simd_32bit_lanes()
    with target:
        return get_simd_32bit_lanes()


def has_vnni(target: tvm.target.Target | None = None) -> bool:
    """Whether ``target`` (the one in scope if None) computes VNNI's ``vpdpbusd`` at the width TVM's
    x86 int8 kernels block by (:func:`int32_lanes`): 512 bits with ``avx512vnni``; 256 bits with
    AVX-VNNI or AVX-512 VNNI on 256-bit registers (``avx512vl``). ``vpdpbusd`` sums four
    uint8 x int8 products into an int32 without saturating (``vpmaddubsw``, the instruction
    without VNNI, saturates pairs of them in int16)."""
    from tvm.target.codegen import target_has_features

    lanes = int32_lanes(target)
    if lanes == 16:
        return bool(target_has_features("avx512vnni", target))
    if lanes == 8:
        return bool(target_has_features("avxvnni", target) or target_has_features(["avx512vnni", "avx512vl"], target))
    return False

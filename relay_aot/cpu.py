"""The CPU kernels are compiled for: the host's by default, and what a library needs of it.

relay_aot's default target is the CPU the compiling process runs on, named explicitly:
``llvm -mcpu=<LLVM's name for it>``, plus ``-mattr=`` for the features this machine has or lacks
against LLVM's model of that CPU (a hypervisor may hide some), so that the target string -- part
of every cache key -- says exactly which instructions the kernels may use. ``target="llvm"``
is the portable build (any x86-64).

Every library records what its kernels need (:class:`CpuRequirement`: the target, and the
LLVM names of the features it enables that a CPU can lack, those LLVM detects on a host) in
its metadata and in its entries, which check the running CPU before anything runs
(``runtime_cpp/relay_aot/cpu.h``).
"""

from __future__ import annotations

import dataclasses
import functools
import platform
from typing import Optional

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
    def from_json(cls, data: Optional[dict]) -> Optional["CpuRequirement"]:
        """What :meth:`to_json` wrote (None for a library from before it was recorded)."""
        if data is None:
            return None
        return cls(str(data["target"]), tuple(str(f) for f in data["features"]))


@functools.lru_cache(maxsize=None)
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


@functools.lru_cache(maxsize=None)
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


@functools.lru_cache(maxsize=None)
def _requirement(target: str) -> CpuRequirement:
    if not _is_x86():
        # The runtime's check knows x86 only: elsewhere nothing is recorded (docs/deployment.md).
        return CpuRequirement(target, ())
    enabled = codegen.llvm_get_cpu_features(tvm.target.Target(target))
    return CpuRequirement(target, tuple(sorted(set(enabled) & set(host_features()))))


def requirement(target: tvm.target.Target) -> CpuRequirement:
    """What kernels compiled for ``target`` need of the CPU that runs them."""
    return _requirement(str(target))


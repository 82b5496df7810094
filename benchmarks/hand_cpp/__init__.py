"""The hand-written C++ baseline: fib, list_scalars and list_tensors written by hand (``hand.cc``).

The programs use the value representation relay_aot's generated code uses (TVM's ``runtime.ADT``
cells with Relay's constructor tags, ``NDArray`` tensors, 0-d tensors for scalars in lists) and,
for list_tensors, the same fused TVM kernels: those of relay_aot's library of the same workload,
found by symbol in it (relay_aot exports its kernels as ``<model>_k<i>_<fused name>``). So the
only difference from relay_aot is how the program around the kernels is written: the floor of the
representation (see the comment at the top of ``hand.cc``).

Tensor headers are made with relay_aot's runtime header (``relay_aot/tensor.h``), which is how
this representation's objects are made; everything else is written here. The library is built
with relay_aot's compiler and flags (``relay_aot.builder.toolchain``) into relay_aot's cache
directory, keyed by the source, the flags and the runtime headers, and loaded with
``tvm.runtime.load_module``; TVM's symbols stay undefined in it (it is loaded into a process that
already has libtvm.so, never linked against libtvm_runtime.so).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import tvm

SOURCE = Path(__file__).with_name("hand.cc")

#: The fused kernels list_tensors calls, in the order ``hand_bind_kernels`` takes them: the suffix of
#: each one's symbol in relay_aot's library (after ``<model>_k<i>_``).
LIST_TENSORS_KERNELS = ("fused_zeros", "fused_cast_multiply", "fused_fast_tanh_multiply_add", "fused_add")


def program(workload_name: str) -> str | None:
    """The hand-written program of a workload (``fib``, ``list_scalars``, ``list_tensors``), or None."""
    if re.fullmatch(r"fib\d+", workload_name):
        return "fib"
    return workload_name if workload_name in ("list_scalars", "list_tensors") else None


@functools.cache
def library() -> tvm.runtime.Module:
    """Build (once per source and flags) and load the hand-written library."""
    from relay_aot.builder.toolchain import BuildFlags, runtime_sources_digest
    from relay_aot.config import Config
    from relay_aot.runtime.module import load_library

    config = Config.from_environment()
    flags = BuildFlags.default(config)
    source = SOURCE.read_bytes()
    # hand.cc makes tensor headers with relay_aot's runtime header: those are part of the key too.
    key = hashlib.sha256(source + flags.identity().encode() + runtime_sources_digest().encode()).hexdigest()[:20]
    directory = Path(config.cache_dir) / "hand_cpp"
    path = directory / f"hand-{key}.so"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f"hand-{key}.{os.getpid()}.tmp"
        # relay_aot's link flags but for the version script (this library exports hand_*).
        ldflags = [f for f in flags.ldflags if not f.startswith("-Wl,--version-script")]
        command = [flags.cxx, *flags.cxxflags, *ldflags, str(SOURCE), "-o", str(partial)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building {SOURCE.name} failed:\n{done.stderr[-3000:]}")
        os.replace(partial, path)
    return load_library(path)


def _kernel_addresses(compiled) -> list[int]:
    """Addresses of list_tensors' fused kernels in relay_aot's library ``compiled``."""
    from relay_aot.runtime.module import entry_address, exported_symbols

    symbols = exported_symbols(compiled.library_path)
    addresses = []
    for suffix in LIST_TENSORS_KERNELS:
        found = [s for s in symbols if re.fullmatch(rf"\w+_k\d+_{suffix}", s)]
        if len(found) != 1:
            raise RuntimeError(f"expected one kernel *_{suffix} in relay_aot's library, found {sorted(found)}")
        address = entry_address(compiled.library_path, found[0])
        if address is None:
            raise RuntimeError(f"kernel {found[0]} not found in {compiled.library_path}")
        addresses.append(address)
    return addresses


def prepare(workload_name: str, mod: tvm.IRModule, target: str) -> Callable:
    """The hand-written program of ``workload_name`` as a PackedFunc, bound to ``mod``'s List tags
    and (list_tensors) to the kernels of relay_aot's library of ``mod``."""
    name = program(workload_name)
    if name is None:
        raise ValueError(f"no hand-written program for workload {workload_name!r}")
    lib = library()
    if name != "fib":
        constructors = {c.name_hint: c.tag for c in mod[mod.get_global_type_var("List")].constructors}
        lib["hand_bind_list"](constructors["Cons"], constructors["Nil"])
    if name == "list_tensors":
        import relay_aot

        compiled = relay_aot.compile(mod, target=target, backend="cpp")
        lib["hand_bind_kernels"](*_kernel_addresses(compiled))
        _KEEP.append(compiled)  # its kernels must outlive every call (libraries are never unloaded anyway)
    return lib[f"hand_{name}"]


_KEEP: list = []

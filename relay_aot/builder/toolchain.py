"""The C++ toolchain: which compiler, which flags, which headers, and the commands they make.

:class:`BuildFlags` holds the compiler and every flag in one object; its :meth:`identity`
(compiler path and version, flags) is part of every cache key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import tvm

from ..config import Config
from ..errors import CompileError

#: The header every unit includes first; precompiled when the compiler supports it.
PCH_HEADER = "relay_aot/runtime.h"

#: The runtime's out-of-line functions (under runtime_include_dir()), compiled once per toolchain
#: into the runtime object every library links (cached like the precompiled header).
RUNTIME_SOURCE = "relay_aot/runtime.cc"

#: The runtime object's name in a build directory.
RUNTIME_OBJECT = "runtime.o"

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def runtime_include_dir() -> Path:
    """Directory holding ``relay_aot/runtime.h`` (a checkout's ``runtime_cpp`` or the installed copy)."""
    for candidate in (_PACKAGE_DIR.parent / "runtime_cpp", _PACKAGE_DIR / "runtime_cpp"):
        if (candidate / "relay_aot" / "runtime.h").is_file():
            return candidate
    raise CompileError("relay_aot's C++ runtime headers (runtime_cpp/) are missing from the installation")


@functools.cache
def runtime_sources_digest() -> str:
    """Hash of the C++ runtime headers (they are part of every build key).

    Computed once per process, like :func:`relay_aot.builder.cache.package_digest`: the headers a
    process compiles against are the ones it found first.
    """
    digest = hashlib.sha256()
    for path in sorted((runtime_include_dir() / "relay_aot").glob("*")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def tvm_include_dirs() -> tuple[str, ...]:
    """TVM's header directories, as shipped in the wheel (looked up once: it walks the disk)."""
    return tuple(tvm._ffi.libinfo.find_include_path())


@functools.cache
def _compiler_info(cxx: str) -> tuple[str, str]:
    """(resolved path, ``--version`` output) of compiler ``cxx``."""
    path = shutil.which(cxx)
    if path is None:
        raise CompileError(f"C++ compiler {cxx!r} not found (set CXX to choose another)")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise CompileError(f"cannot run the C++ compiler {path}: {err}") from None
    return os.path.realpath(path), out


def runtime_object_identity(flags: BuildFlags) -> str:
    """What the runtime object is built from: the toolchain (without the PCH, which only makes
    compiling it faster), the runtime sources and TVM. Its cache key is this text's hash."""
    return "\n".join([flags.with_pch(None).compile_identity(), runtime_sources_digest(), f"tvm {tvm.__version__}"])


def compiler_version(cxx: str) -> str:
    """The compiler's resolved path and the first line of ``cxx --version``."""
    path, out = _compiler_info(cxx)
    return f"{path}: {out.splitlines()[0] if out else '?'}"


def compiler_is_gcc(cxx: str) -> bool:
    """Whether ``cxx`` is GCC (whose ``.gch`` precompiled headers relay_aot knows how to use)."""
    return "Free Software Foundation" in _compiler_info(cxx)[1]


def _tls_flags(cxx: str) -> tuple[str, ...]:
    """TLS descriptors for GCC on x86-64: every generated function reads a thread-local (its
    stack limit, stack.h), and in a shared library the default model calls __tls_get_addr for
    it; a descriptor is an indirect load (fib(20): 117 -> 92 us). A compiler that cannot be
    found gets none: showing the source must not need one, and a build reports it missing."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return ()
    try:
        return ("-mtls-dialect=gnu2",) if compiler_is_gcc(cxx) else ()
    except CompileError:
        return ()


def pch_stub(directory: Path) -> Path:
    """Write ``directory/relay_aot/runtime.h``, the header a precompiled ``.gch`` sits beside.

    It names the real header by absolute path: if GCC rejects the ``.gch`` it reads the stub,
    which must then still find the runtime.
    """
    header = directory / PCH_HEADER
    header.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    header.write_text(f'#include "{runtime_include_dir() / PCH_HEADER}"\n')
    return header


def command_line(args: list[str]) -> str:
    """``args`` as one shell command line."""
    return " ".join(shlex.quote(a) for a in args)


def object_name(unit: str) -> str:
    """The object file of translation unit ``unit``."""
    return unit.rsplit(".", 1)[0] + ".o"


@dataclasses.dataclass(frozen=True)
class BuildFlags:
    """Compiler and flags of a build (one object, so the cache key sees all of them).

    ``pch_dir`` is the directory holding the precompiled ``relay_aot/runtime.h.gch`` (see
    :func:`relay_aot.builder.pch.pch_directory`), or None to compile without one.
    """

    cxx: str
    cxxflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    pch_dir: str | None = None

    @classmethod
    def default(cls, config: Config | None = None, opt: str = "-O1", extra: Iterable[str] = ()) -> BuildFlags:
        """Flags for generated code: C++17, PIC, hidden visibility, TVM's and our headers.

        ``-O1``: the generated code is calls into TVM's runtime and kernels; it runs as fast
        as at ``-O2`` and compiles 30-40% faster (measurements in ``docs/build.md``).

        ``config.cxx`` (``$CXX``) is the compiler and ``config.cxxflags``
        (``$RELAY_AOT_CXXFLAGS``) come after these flags (so ``-O2`` there overrides ``opt``).
        """
        config = config or Config.from_environment()
        includes = [f"-I{runtime_include_dir()}"] + [f"-I{d}" for d in tvm_include_dirs()]
        cxxflags = (
            "-std=c++17",
            opt,
            "-fPIC",
            "-fvisibility=hidden",
            "-fvisibility-inlines-hidden",
            # Relay integers wrap on overflow (TVM's kernels do); make C++ arithmetic agree.
            "-fwrapv",
            "-DDMLC_USE_LOGGING_LIBRARY=<tvm/runtime/logging.h>",
            *_tls_flags(config.cxx),
            *includes,
            *extra,
            *config.cxxflags,
        )
        # Libraries loaded into a process that has libtvm.so must leave TVM symbols undefined.
        # -Bsymbolic: a library's references to its own symbols bind to its own definitions.
        # Every library exports TVM's loader slots (__TVMBackendParallelLaunch, ...) under the
        # same names; without it, two libraries linked into one executable share the first
        # one's slots, which stay null until that one is loaded -- a crash (tests/test_deploy.py).
        # The version script (emit_cpp.version_script, a generated file) exports only the
        # model-prefixed symbols and TVM's loader protocol.
        # -z nodelete: values the library made (ADTs, closures: their code and deleters live in
        # it) may outlive the tvm.runtime.Module that loaded it; dlclose must not unmap it then.
        # -z now: every undefined symbol is resolved when the library is loaded, so one TVM does
        # not define fails dlopen (a Python exception) instead of killing the process at its
        # first call, as lazy binding does.
        ldflags = (
            "-shared",
            "-fPIC",
            "-Wl,-Bsymbolic",
            "-Wl,-z,nodelete",
            "-Wl,-z,now",
            "-Wl,--version-script=exports.map",
            *(("-fuse-ld=gold",) if shutil.which("ld.gold") else ()),
        )
        return cls(config.cxx, cxxflags, ldflags)

    def with_pch(self, pch_dir: Path | None) -> BuildFlags:
        """These flags, compiling with the precompiled header in ``pch_dir`` (None: without)."""
        return dataclasses.replace(self, pch_dir=str(pch_dir) if pch_dir is not None else None)

    def compile_command(self, source: str, output: str, prelude: str | None = None) -> list[str]:
        """The command compiling ``source`` to the object ``output`` (in the build directory);
        ``prelude``, the runtime source, is included with inline linkage when the build has no
        runtime object to link (each unit then generates the runtime functions it uses)."""
        # The PCH directory must come before runtime_cpp on the include path: GCC looks for
        # name.gch next to each candidate header, and uses the first header it finds.
        pch = ["-I" + self.pch_dir, "-Winvalid-pch", "-include", PCH_HEADER] if self.pch_dir else []
        extra = ["-DRELAY_AOT_RUNTIME_LINKAGE=inline", "-include", prelude] if prelude else []
        return [self.cxx, *pch, *extra, *self.cxxflags, "-c", source, "-o", output]

    def pch_command(self, header: str, output: str) -> list[str]:
        """The command precompiling ``header`` into ``output`` (same flags as every unit)."""
        return [self.cxx, *self.cxxflags, "-x", "c++-header", header, "-o", output]

    def link_command(self, objects: list[str], output: str) -> list[str]:
        """The command linking ``objects`` into the shared library ``output``."""
        return [self.cxx, *self.ldflags, "-o", output, *objects]

    def compile_identity(self) -> str:
        """Everything about the toolchain that changes an object file (the PCH directory
        included; not the link flags, so the PCH, the runtime object and unit objects are
        shared by builds that link differently, e.g. with or without ``ld.gold`` on ``PATH``)."""
        return "\n".join([compiler_version(self.cxx), *self.cxxflags, f"pch {self.pch_dir}"])

    def identity(self) -> str:
        """Everything about the toolchain that changes the library: compile and link flags."""
        return "\n".join([self.compile_identity(), "--", *self.ldflags])

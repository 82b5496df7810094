"""Stage 5: compile generated C++ and TVM kernels into one shared library, with a cache.

* :class:`BuildFlags` holds the compiler and every flag in one object; its :meth:`identity`
  (compiler path and version, flags) is part of the cache key.
* :func:`build_library` writes the sources into a fresh directory, writes a ``build.ninja``
  (one object per translation unit, compiled in parallel, then one link with the kernels'
  object file) and runs the ``ninja`` of the PyPI package.
* The cache lives in ``$RELAY_AOT_CACHE_DIR`` (default: the user cache directory). An entry is a
  directory named by the build key; it is built elsewhere and published with an atomic
  ``rename``, under an ``fcntl.flock`` lock per key, so concurrent processes build once and a
  build killed halfway leaves nothing that looks finished. The library's file name carries the
  key, because ``dlopen`` returns the already-loaded library for a path it has seen.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

import tvm

from .errors import CompileError

#: Seconds to wait for another process's build of the same key before giving up.
LOCK_TIMEOUT = float(os.environ.get("RELAY_AOT_LOCK_TIMEOUT", "600"))

_PACKAGE_DIR = Path(__file__).resolve().parent


def runtime_include_dir() -> Path:
    """Directory holding ``relay_aot/runtime.h`` (a checkout's ``runtime_cpp`` or the installed copy)."""
    for candidate in (_PACKAGE_DIR.parent / "runtime_cpp", _PACKAGE_DIR / "runtime_cpp"):
        if (candidate / "relay_aot" / "runtime.h").is_file():
            return candidate
    raise CompileError("relay_aot's C++ runtime headers (runtime_cpp/) are missing from the installation")


def runtime_sources_digest() -> str:
    """Hash of the C++ runtime headers (they are part of every build key)."""
    digest = hashlib.sha256()
    for path in sorted((runtime_include_dir() / "relay_aot").glob("*")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def tvm_include_dirs() -> list[str]:
    """TVM's header directories, as shipped in the wheel."""
    return list(tvm._ffi.libinfo.find_include_path())


@functools.lru_cache(maxsize=None)
def compiler_version(cxx: str) -> str:
    """The first line of ``cxx --version`` and the compiler's resolved path."""
    path = shutil.which(cxx)
    if path is None:
        raise CompileError(f"C++ compiler {cxx!r} not found (set CXX to choose another)")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise CompileError(f"cannot run the C++ compiler {path}: {err}") from None
    return f"{os.path.realpath(path)}: {out.splitlines()[0] if out else '?'}"


@dataclasses.dataclass(frozen=True)
class BuildFlags:
    """Compiler and flags of a build (one object, so the cache key sees all of them)."""

    cxx: str
    cxxflags: tuple[str, ...]
    ldflags: tuple[str, ...]

    @classmethod
    def default(cls, opt: str = "-O2", extra: Iterable[str] = ()) -> "BuildFlags":
        """Flags for generated code: C++17, PIC, hidden visibility, TVM's and our headers."""
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
            *includes,
            *extra,
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
        ldflags = ("-shared", "-fPIC", "-Wl,-Bsymbolic", "-Wl,-z,nodelete", "-Wl,--version-script=exports.map")
        return cls(os.environ.get("CXX", "g++"), cxxflags, ldflags)

    def compile_command(self, source: str, output: str) -> list[str]:
        """The command compiling ``source`` to the object ``output`` (in the build directory)."""
        return [self.cxx, *self.cxxflags, "-MMD", "-MF", output + ".d", "-c", source, "-o", output]

    def link_command(self, objects: list[str], output: str) -> list[str]:
        """The command linking ``objects`` into the shared library ``output``."""
        return [self.cxx, *self.ldflags, "-o", output, *objects]

    def identity(self) -> str:
        """Everything about the toolchain that changes the output."""
        return "\n".join([compiler_version(self.cxx), *self.cxxflags, "--", *self.ldflags])


def cache_dir() -> Path:
    """The cache directory: ``$RELAY_AOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/relay_aot`` or ``~/.cache/relay_aot``."""
    env = os.environ.get("RELAY_AOT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "relay_aot"


def clear_cache() -> None:
    """Delete every cached library (libraries already loaded in this process keep working)."""
    root = cache_dir()
    if root.exists():
        shutil.rmtree(root)


def _make_private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


@dataclasses.dataclass
class BuildInputs:
    """Everything a library is built from.

    ``files`` are generated sources by name, ``units`` the ones to compile, ``blobs`` binary
    inputs by name (the constants), ``kernel_digest`` identifies the kernels and
    ``build_kernels(path)`` writes their object file (called only on a cache miss).
    """

    model: str
    files: dict[str, str]
    units: list[str]
    blobs: dict[str, bytes]
    kernel_digest: str
    build_kernels: Callable[[Path], bool]
    flags: BuildFlags
    salt: str = ""

    def key(self) -> str:
        """The cache key: hash of sources, blobs, kernels, flags, toolchain and versions."""
        from . import __version__

        digest = hashlib.sha256()
        parts = [
            f"relay_aot {__version__}",
            f"tvm {tvm.__version__}",
            self.flags.identity(),
            runtime_sources_digest(),
            self.kernel_digest,
            self.salt,
        ]
        for part in parts:
            digest.update(part.encode() + b"\0")
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + self.files[name].encode() + b"\0")
        for name in sorted(self.blobs):
            digest.update(name.encode() + b"\0" + hashlib.sha256(self.blobs[name]).digest())
        return digest.hexdigest()


def library_name(model: str, key: str) -> str:
    """File name of a built library: the model name and the build key."""
    return f"{model}-{key[:24]}.so"


def command_line(args: list[str]) -> str:
    """``args`` as one shell command line."""
    return " ".join(shlex.quote(a) for a in args)


def object_name(unit: str) -> str:
    """The object file of translation unit ``unit``."""
    return unit.rsplit(".", 1)[0] + ".o"


def ninja_file(inputs: BuildInputs, has_kernels: bool, library: str) -> str:
    """The ``build.ninja`` for ``inputs`` (paths relative to the build directory).

    Each build statement carries its full command line, which is also the one quoted in the
    generated file's header comment.
    """
    flags = inputs.flags
    lines = [
        "# Generated by relay_aot: compiles the generated C++ and links it with TVM's kernels.",
        "ninja_required_version = 1.3",
        "",
        "rule cxx",
        "  command = $cmd",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = compile $in",
        "",
        "rule link",
        "  command = $cmd",
        "  description = link $out",
        "",
    ]
    headers = sorted(n for n in list(inputs.files) + list(inputs.blobs) if n not in inputs.units)
    objects = []
    for unit in inputs.units:
        obj = object_name(unit)
        lines.append(f"build {obj}: cxx {unit}" + (f" | {' '.join(headers)}" if headers else ""))
        lines.append(f"  cmd = {_ninja_escape(command_line(flags.compile_command(unit, obj)))}")
        objects.append(obj)
    if has_kernels:
        objects.append("kernels.o")
    lines.append(f"build {library}: link {' '.join(objects)}")
    lines.append(f"  cmd = {_ninja_escape(command_line(flags.link_command(objects, library)))}")
    lines += [f"default {library}", ""]
    return "\n".join(lines)


def _ninja_escape(text: str) -> str:
    """Escape text for a ninja variable (only ``$`` is special there)."""
    return text.replace("$", "$$")


def ninja_binary() -> str:
    """The ``ninja`` executable of the PyPI ``ninja`` package (or one on PATH)."""
    try:
        import ninja  # noqa: WPS433

        path = os.path.join(ninja.BIN_DIR, "ninja")
        if os.path.exists(path):
            return path
    except ImportError:
        pass
    found = shutil.which("ninja")
    if found is None:
        raise CompileError("ninja is not installed (pip install ninja)")
    return found


def default_jobs() -> int:
    """Parallel compile jobs: ``$RELAY_AOT_JOBS``, else the number of CPUs."""
    env = os.environ.get("RELAY_AOT_JOBS")
    if env:
        return max(1, int(env))
    return os.cpu_count() or 1


def _run_build(build_dir: Path, inputs: BuildInputs, library: str, verbose: bool, jobs: int) -> None:
    for name, text in inputs.files.items():
        (build_dir / name).write_text(text)
    for name, data in inputs.blobs.items():
        (build_dir / name).write_bytes(data)
    has_kernels = inputs.build_kernels(build_dir / "kernels.o")
    (build_dir / "build.ninja").write_text(ninja_file(inputs, has_kernels, library))
    command = [ninja_binary(), "-C", str(build_dir), "-j", str(jobs)]
    if verbose:
        command.append("-v")
        result = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.STDOUT)
        output = ""
    else:
        result = subprocess.run(command, capture_output=True, text=True)
        output = result.stdout + result.stderr
    if result.returncode != 0:
        raise CompileError(
            f"C++ compilation of the generated code failed (sources kept in {build_dir})",
            output=output.strip(),
            source_dir=str(build_dir),
        )


@dataclasses.dataclass
class BuildResult:
    """A built library: its path, its key, whether it came from the cache, and its sources' directory."""

    library: Path
    key: str
    cached: bool
    directory: Path


class _Lock:
    """An exclusive ``flock`` on a file, with a timeout; released by the OS if the holder dies."""

    def __init__(self, path: Path, timeout: float):
        self.path = path
        self.timeout = timeout
        self.fd: Optional[int] = None

    def __enter__(self) -> "_Lock":
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                os.close(self.fd)
                raise CompileError(
                    f"timed out after {self.timeout:.0f} s waiting for another process's build "
                    f"(lock file {self.path}); if no relay_aot build is running, delete it"
                )
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        assert self.fd is not None
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def build_library(inputs: BuildInputs, cache: bool = True, verbose: bool = False, jobs: Optional[int] = None) -> BuildResult:
    """Build (or find in the cache) the shared library for ``inputs``."""
    key = inputs.key()
    library = library_name(inputs.model, key)
    jobs = jobs or default_jobs()
    root = _make_private_dir(cache_dir())
    if not cache:
        build_dir = Path(tempfile.mkdtemp(prefix=f"{inputs.model}-", dir=_make_private_dir(root / "tmp")))
        _run_build(build_dir, inputs, library, verbose, jobs)
        return BuildResult(build_dir / library, key, False, build_dir)
    final = root / "lib" / key[:2] / key
    if (final / library).exists():
        return BuildResult(final / library, key, True, final)
    locks = _make_private_dir(root / "locks")
    with _Lock(locks / f"{key}.lock", LOCK_TIMEOUT):
        if (final / library).exists():  # another process built it while we waited
            return BuildResult(final / library, key, True, final)
        build_dir = Path(tempfile.mkdtemp(prefix=f"{key[:16]}-", dir=_make_private_dir(root / "tmp")))
        try:
            _run_build(build_dir, inputs, library, verbose, jobs)
        except BaseException:
            if not isinstance(sys.exc_info()[1], CompileError):
                shutil.rmtree(build_dir, ignore_errors=True)
            raise
        for leftover in build_dir.glob("*.o"):
            leftover.unlink()
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # a dead build's remains cannot be here: publish is a rename
            shutil.rmtree(final)
        os.rename(build_dir, final)
    return BuildResult(final / library, key, False, final)

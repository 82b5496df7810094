"""Stage 5: compile generated C++ and TVM kernels into one shared library, with a cache.

* :class:`BuildFlags` holds the compiler and every flag in one object; its :meth:`identity`
  (compiler path and version, flags) is part of the cache key.
* :func:`build_library` writes the sources into a fresh directory, writes a ``build.ninja``
  (one object per translation unit, compiled in parallel, then one link with the kernels'
  object file) and runs the ``ninja`` of the PyPI package. The C++ units compile while TVM
  builds the kernels in this process; the link waits for both.
* A precompiled header of ``relay_aot/runtime.h`` (TVM's runtime headers and ours) is shared by
  every build with the same compiler, flags and headers (GCC only). It is used through
  ``-include`` from a directory that comes first on the include path; when it is missing or
  unusable GCC silently reads the real header, so it can only make a build faster.
* A warm compile need not even run the Relay passes: :func:`module_key` hashes the input module's
  text, the parameters and the options (with a digest of relay_aot's own code, so an upgrade or
  an edit never reuses stale output), and an index maps it to the finished library.
* The cache lives in ``$RELAY_AOT_CACHE_DIR`` (default: the user cache directory), private to
  the user. An entry is a directory named by the build key; it is built elsewhere and published
  with an atomic ``rename``, under an ``fcntl.flock`` lock per key, so concurrent processes build
  once and a build killed halfway leaves nothing that looks finished. The library's file name
  carries the key, because ``dlopen`` returns the already-loaded library for a path it has seen.

Layout of the cache directory::

    lib/<key[:2]>/<key>/     finished entries: <model>-<key[:24]>.so and the sources it came from
    index/<k[:2]>/<k>.json   module key (Relay text, params, options) -> finished entry
    pch/<pch key>/           precompiled runtime headers (relay_aot/runtime.h{,.gch})
    tmp/                     builds in progress (and cache=False builds of running processes)
    failed/<model>-<key[:16]>/   the sources and build.ninja of the last failed build of a key
    locks/                   one lock file per key (never deleted while the cache is in use)

Environment: ``CXX`` (compiler, default ``g++``), ``RELAY_AOT_CXXFLAGS`` (extra compiler flags,
e.g. ``-O1``), ``RELAY_AOT_JOBS`` (parallel compile jobs), ``RELAY_AOT_PCH=0`` (no precompiled
header), ``RELAY_AOT_CACHE_DIR``, ``RELAY_AOT_LOCK_TIMEOUT`` (seconds) and
``RELAY_AOT_PROGRESS`` (``1``/``0``: force the progress line on or off; default: on when stderr
is a terminal). See ``docs/build.md``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import tvm

from .errors import CompileError

#: The header every unit includes first; precompiled when the compiler supports it.
PCH_HEADER = "relay_aot/runtime.h"

#: ``build_kernels(path, progress)`` writes the kernels' object file; ``progress(done, total)``.
KernelBuilder = Callable[[Path, Callable[[int, int], None]], None]

_PACKAGE_DIR = Path(__file__).resolve().parent
_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")


def lock_timeout() -> float:
    """Seconds to wait for another process's build of the same key (``$RELAY_AOT_LOCK_TIMEOUT``)."""
    return float(os.environ.get("RELAY_AOT_LOCK_TIMEOUT", "600"))


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


@functools.lru_cache(maxsize=None)
def tvm_include_dirs() -> tuple[str, ...]:
    """TVM's header directories, as shipped in the wheel (looked up once: it walks the disk)."""
    return tuple(tvm._ffi.libinfo.find_include_path())


@functools.lru_cache(maxsize=None)
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


def compiler_version(cxx: str) -> str:
    """The compiler's resolved path and the first line of ``cxx --version``."""
    path, out = _compiler_info(cxx)
    return f"{path}: {out.splitlines()[0] if out else '?'}"


def compiler_is_gcc(cxx: str) -> bool:
    """Whether ``cxx`` is GCC (whose ``.gch`` precompiled headers relay_aot knows how to use)."""
    return "Free Software Foundation" in _compiler_info(cxx)[1]


@dataclasses.dataclass(frozen=True)
class BuildFlags:
    """Compiler and flags of a build (one object, so the cache key sees all of them).

    ``pch_dir`` is the directory holding the precompiled ``relay_aot/runtime.h.gch`` (see
    :func:`pch_directory`), or None to compile without one.
    """

    cxx: str
    cxxflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    pch_dir: Optional[str] = None

    @classmethod
    def default(cls, opt: str = "-O1", extra: Iterable[str] = ()) -> "BuildFlags":
        """Flags for generated code: C++17, PIC, hidden visibility, TVM's and our headers.

        ``-O1``: the generated code is calls into TVM's runtime and kernels; it runs as fast
        as at ``-O2`` and compiles 30-40% faster (measurements in ``docs/build.md``).

        ``$CXX`` chooses the compiler and ``$RELAY_AOT_CXXFLAGS`` adds flags after these (so
        ``RELAY_AOT_CXXFLAGS=-O1`` overrides ``opt``).
        """
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
            *shlex.split(os.environ.get("RELAY_AOT_CXXFLAGS", "")),
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
        return cls(os.environ.get("CXX") or "g++", cxxflags, ldflags)

    def with_pch(self, pch_dir: Optional[Path]) -> "BuildFlags":
        """These flags, compiling with the precompiled header in ``pch_dir`` (None: without)."""
        return dataclasses.replace(self, pch_dir=str(pch_dir) if pch_dir is not None else None)

    def compile_command(self, source: str, output: str) -> list[str]:
        """The command compiling ``source`` to the object ``output`` (in the build directory)."""
        # The PCH directory must come before runtime_cpp on the include path: GCC looks for
        # name.gch next to each candidate header, and uses the first header it finds.
        pch = ["-I" + self.pch_dir, "-Winvalid-pch", "-include", PCH_HEADER] if self.pch_dir else []
        return [self.cxx, *pch, *self.cxxflags, "-c", source, "-o", output]

    def pch_command(self, header: str, output: str) -> list[str]:
        """The command precompiling ``header`` into ``output`` (same flags as every unit)."""
        return [self.cxx, *self.cxxflags, "-x", "c++-header", header, "-o", output]

    def link_command(self, objects: list[str], output: str) -> list[str]:
        """The command linking ``objects`` into the shared library ``output``."""
        return [self.cxx, *self.ldflags, "-o", output, *objects]

    def identity(self) -> str:
        """Everything about the toolchain that changes the output."""
        return "\n".join([compiler_version(self.cxx), *self.cxxflags, "--", *self.ldflags])


# -- the cache directory -------------------------------------------------------------------


def cache_dir() -> Path:
    """The cache directory: ``$RELAY_AOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/relay_aot`` or ``~/.cache/relay_aot``."""
    env = os.environ.get("RELAY_AOT_CACHE_DIR")
    if env:
        # Absolute: compile commands run inside build directories, libraries outlive a chdir.
        return Path(os.path.abspath(os.path.expanduser(env)))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.path.abspath(base)) / "relay_aot"


def cache_root() -> Path:
    """The cache directory, created private to the user (0700) if it does not exist.

    Libraries in it are loaded into this process, so a directory that another user owns or can
    write to is refused.
    """
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = root.stat()
    except OSError as err:
        raise CompileError(f"cannot create the relay_aot cache directory {root}: {err}") from None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CompileError(
            f"the relay_aot cache directory {root} is owned by another user or writable by others; "
            "libraries from it would be loaded into this process. Use a private directory "
            "(RELAY_AOT_CACHE_DIR) or `chmod 700` it."
        )
    return root


def _subdir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(exist_ok=True, mode=0o700)
    return path


def clear_cache() -> None:
    """Delete every cached library, precompiled header and failed build.

    Libraries already loaded keep working. Builds running in other processes are left alone
    (as are the lock files, which those builds may hold).
    """
    root = cache_dir()
    if not root.exists():
        return
    for name in ("index", "lib", "pch", "failed"):
        shutil.rmtree(root / name, ignore_errors=True)
    _sweep_tmp(root)


# -- build inputs and keys -----------------------------------------------------------------


@dataclasses.dataclass
class BuildInputs:
    """Everything a library is built from.

    ``files`` are generated sources by name, ``units`` the ones to compile, ``blobs`` binary
    inputs by name (the constants), ``kernel_digest`` identifies the kernels, ``has_kernels``
    says whether there are any, and ``build_kernels`` writes their object file (called only on
    a cache miss, while the C++ units compile).
    """

    model: str
    files: dict[str, str]
    units: list[str]
    blobs: dict[str, bytes]
    kernel_digest: str
    has_kernels: bool
    build_kernels: KernelBuilder
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
            str(self.flags.pch_dir),
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


_source_hook: Optional[Callable[[str, str], str]] = None


@contextlib.contextmanager
def source_hook(hook: Callable[[str, str], str]) -> Iterator[None]:
    """Testing aid: rewrite every generated file as ``hook(name, text)`` before it is built.

    Used by the tests to inject a syntax error into generated code; the rewritten text is part
    of the cache key, so a broken build never shares an entry with a good one.
    """
    global _source_hook
    previous, _source_hook = _source_hook, hook
    try:
        yield
    finally:
        _source_hook = previous


def library_name(model: str, key: str) -> str:
    """File name of a built library: the model name and the build key."""
    return f"{model}-{key[:24]}.so"


def command_line(args: list[str]) -> str:
    """``args`` as one shell command line."""
    return " ".join(shlex.quote(a) for a in args)


def object_name(unit: str) -> str:
    """The object file of translation unit ``unit``."""
    return unit.rsplit(".", 1)[0] + ".o"


def ninja_file(inputs: BuildInputs, library: str) -> str:
    """The ``build.ninja`` for ``inputs`` (paths relative to the build directory).

    Each build statement carries its full command line, which is also the one quoted in the
    generated file's header comment. ``kernels.o`` has no rule: relay_aot writes it (through
    TVM) before it asks ninja for the library.
    """
    flags = inputs.flags
    lines = [
        "# Generated by relay_aot: compiles the generated C++ and links it with TVM's kernels.",
        "# kernels.o is written by TVM; rerun with `ninja -C <this directory>`.",
        "ninja_required_version = 1.3",
        "",
        "rule cxx",
        "  command = $cmd",
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
    lines.append(f"build objects: phony {' '.join(objects)}")
    if inputs.has_kernels:
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
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"RELAY_AOT_JOBS must be a number of jobs, not {env!r}") from None
    return os.cpu_count() or 1


# -- locks and build directories -----------------------------------------------------------


class _Lock:
    """An exclusive ``flock`` on a file, with a timeout; released by the OS if the holder dies."""

    def __init__(self, path: Path, timeout: float, on_wait: Optional[Callable[[], None]] = None):
        self.path = path
        self.timeout = timeout
        self.on_wait = on_wait
        self.fd: Optional[int] = None

    def try_acquire(self, create: bool = True) -> bool:
        """Take the lock if it is free; never waits. ``create=False``: the file must exist."""
        fd = os.open(self.path, (os.O_CREAT if create else 0) | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        """Release the lock (closing the file releases the ``flock``)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "_Lock":
        deadline = time.monotonic() + self.timeout
        waited = False
        while not self.try_acquire():
            if not waited and self.on_wait is not None:
                self.on_wait()
            waited = True
            if time.monotonic() > deadline:
                raise CompileError(
                    f"timed out after {self.timeout:g} s waiting for another process's build "
                    f"(lock file {self.path}); if no relay_aot build is running, delete it"
                )
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_TMP_LOCK = ".relay_aot-building"

#: A build directory younger than this is never swept (its owner may not have locked it yet).
_SWEEP_MIN_AGE = 60.0

#: Locks of this process's cache=False build directories: held until the process exits.
_held: list[_Lock] = []


def _new_build_dir(root: Path, prefix: str) -> tuple[Path, _Lock]:
    """A fresh directory under ``tmp/``, locked while it is in use (a dead owner's lock is free)."""
    path = Path(tempfile.mkdtemp(prefix=prefix + "-", dir=_subdir(root, "tmp")))
    lock = _Lock(path / _TMP_LOCK, 0)
    lock.try_acquire()
    return path, lock


def _move_locked(build_dir: Path, lock: _Lock, dest: Path) -> None:
    """Rename ``build_dir`` to ``dest`` while still holding its lock, then drop the lock.

    Holding the lock through the rename keeps :func:`_sweep_tmp` away from a directory that is
    being published.
    """
    try:
        os.rename(build_dir, dest)
        (dest / _TMP_LOCK).unlink(missing_ok=True)
    finally:
        lock.release()


def _sweep_tmp(root: Path) -> None:
    """Delete build directories of dead processes (their lock is free) under ``tmp/``."""
    tmp = root / "tmp"
    if not tmp.is_dir():
        return
    now = time.time()
    for entry in tmp.iterdir():
        try:
            age = now - entry.stat().st_mtime
        except OSError:
            continue
        if age < _SWEEP_MIN_AGE:
            continue
        lock = _Lock(entry / _TMP_LOCK, 0)
        try:
            free = lock.try_acquire(create=False)
        except FileNotFoundError:  # its process died before it could lock it
            free = age > 3600
        except OSError:
            continue
        if free:
            shutil.rmtree(entry, ignore_errors=True)
        lock.release()


def _remove_private_dir_at_exit(path: Path, lock: _Lock) -> None:
    _held.append(lock)
    atexit.register(shutil.rmtree, path, True)


# -- output: verbose streaming and the progress line ---------------------------------------


def progress_enabled(verbose: bool) -> bool:
    """Whether to show a progress line: ``$RELAY_AOT_PROGRESS``, else when stderr is a terminal."""
    env = os.environ.get("RELAY_AOT_PROGRESS")
    if env is not None:
        return env not in ("", "0")
    if verbose:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Reporter:
    """Where a build talks: verbose lines, or one progress line that rewrites itself on stderr.

    The progress line appears only after ``delay`` seconds, so quick builds print nothing.
    Safe to use from the ninja reader threads and the main thread at once.
    """

    def __init__(self, verbose: bool, progress: bool, delay: float = 0.5):
        self.verbose = verbose
        self.progress = progress and not verbose
        self.delay = delay
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._phases: dict[str, str] = {}
        self._shown = False

    def _write(self, text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (AttributeError, OSError, ValueError):  # no stderr (pythonw), or closed
            pass

    def message(self, text: str) -> None:
        """A line shown in verbose mode."""
        if self.verbose:
            with self._lock:
                self._write(f"[relay_aot] {text}\n")

    def ninja_line(self, line: str) -> None:
        """One line of ninja's output: echoed when verbose, a progress step otherwise."""
        if self.verbose:
            with self._lock:
                self._write(line if line.endswith("\n") else line + "\n")
            return
        match = _NINJA_STATUS.match(line.rstrip("\n"))
        if match:
            done, total, what = match.groups()
            self.phase("C++", f"[{done}/{total}] {what}")

    def kernels(self, done: int, total: int) -> None:
        """Progress of TVM lowering the kernels."""
        self.phase("kernels", f"{done}/{total}" if done < total else f"{total}/{total}, generating code")

    def phase(self, name: str, state: str) -> None:
        """Set the state of one phase of the build and redraw the progress line."""
        if not self.progress:
            return
        with self._lock:
            self._phases[name] = state
            if time.monotonic() - self._start < self.delay:
                return
            text = "relay_aot: " + "  |  ".join(f"{k} {v}" for k, v in self._phases.items())
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self._write("\r\033[K" + text[:width])
            self._shown = True

    def close(self) -> None:
        """Erase the progress line."""
        with self._lock:
            if self._shown:
                self._write("\r\033[K")
                self._shown = False


class _Ninja:
    """One ``ninja`` run in the background; its output is collected and reported line by line."""

    def __init__(self, build_dir: Path, jobs: int, targets: list[str], reporter: Reporter):
        command = [ninja_binary(), "-C", str(build_dir), "-j", str(jobs)]
        if reporter.verbose:
            command.append("-v")
        env = dict(os.environ, NINJA_STATUS="[%f/%t] ")
        self.reporter = reporter
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            command + targets,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            self.reporter.ninja_line(line)

    def wait(self, build_dir: Path) -> None:
        """Wait for ninja; a failure raises :class:`CompileError` with its output."""
        code = self.proc.wait()
        self.thread.join()
        if code != 0:
            raise CompileError(
                "C++ compilation of the generated code failed",
                output="".join(self.lines).strip(),
                source_dir=str(build_dir),
            )

    def kill(self) -> None:
        """Stop ninja if it is still running; on SIGTERM it stops the compilers it started."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join()


# -- the precompiled header ----------------------------------------------------------------


def pch_enabled(flags: BuildFlags) -> bool:
    """Whether builds use a precompiled header: GCC, unless ``RELAY_AOT_PCH=0``."""
    return os.environ.get("RELAY_AOT_PCH", "1") not in ("", "0") and compiler_is_gcc(flags.cxx)


def pch_directory(flags: BuildFlags) -> Optional[Path]:
    """Where the precompiled header for ``flags`` lives in the cache (None: PCH disabled).

    Named by a hash of the compiler identity, the flags, our runtime headers and TVM's version
    and header location: GCC only uses a PCH built with the same flags, and it does not notice
    changed headers by itself.
    """
    if not pch_enabled(flags):
        return None
    digest = hashlib.sha256()
    for part in (flags.identity(), runtime_sources_digest(), tvm.__version__, *tvm_include_dirs()):
        digest.update(part.encode() + b"\0")
    return cache_dir() / "pch" / digest.hexdigest()[:32]


class _PchBuild:
    """Builds a missing precompiled header in the background and publishes it atomically.

    Only one process builds a given PCH (a non-blocking lock); others compile without it
    meanwhile rather than wait. A PCH that fails to build is simply not used: the units then
    compile from the real header and report any error in it themselves.
    """

    def __init__(self, flags: BuildFlags, root: Path, reporter: Reporter, lock: _Lock):
        self.final = Path(flags.pch_dir)  # type: ignore[arg-type]
        self.reporter = reporter
        self.lock = lock
        self.work, self.work_lock = _new_build_dir(root, "pch")
        header = self.work / PCH_HEADER
        header.parent.mkdir()
        # The stub names the real header by absolute path: if GCC rejects the .gch it reads
        # the stub, which must then still find the runtime.
        header.write_text(f'#include "{runtime_include_dir() / PCH_HEADER}"\n')
        self.command = flags.with_pch(None).pch_command(str(header), str(header) + ".gch")
        reporter.message("precompiling the runtime headers: " + command_line(self.command))
        reporter.phase("PCH", "building")
        # A session of its own, so that discard() stops the compiler driver and cc1plus alike.
        self.proc = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    @classmethod
    def start(cls, flags: BuildFlags, root: Path, reporter: Reporter) -> Optional["_PchBuild"]:
        """Start building the PCH of ``flags`` if it is enabled, missing and nobody builds it."""
        if flags.pch_dir is None or (Path(flags.pch_dir) / (PCH_HEADER + ".gch")).exists():
            return None
        lock = _Lock(_subdir(root, "locks") / f"pch-{Path(flags.pch_dir).name}.lock", 0)
        if not lock.try_acquire():
            return None
        if (Path(flags.pch_dir) / (PCH_HEADER + ".gch")).exists():  # finished while we looked
            lock.release()
            return None
        try:
            return cls(flags, root, reporter, lock)
        except BaseException:
            lock.release()
            raise

    def finish(self) -> None:
        """Wait for the compiler and publish the PCH (a failure only costs speed)."""
        output, _ = self.proc.communicate()
        if self.proc.returncode == 0:
            self.final.parent.mkdir(exist_ok=True, mode=0o700)
            shutil.rmtree(self.final, ignore_errors=True)  # an unusable earlier one
            _move_locked(self.work, self.work_lock, self.final)
        else:
            self.reporter.message("precompiled header failed; compiling without it:\n" + output.strip())
        self.reporter.phase("PCH", "done")
        self.discard()

    def discard(self) -> None:
        """Stop the compiler if it runs, and remove the work directory and locks."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
        if self.work.exists():
            shutil.rmtree(self.work, ignore_errors=True)
        self.work_lock.release()
        self.lock.release()


# -- building ------------------------------------------------------------------------------


@dataclasses.dataclass
class BuildResult:
    """A built library: its path, its key, whether it came from the cache, and its sources' directory."""

    library: Path
    key: str
    cached: bool
    directory: Path


@dataclasses.dataclass
class BuildStats:
    """What this process's builds did (read by tests and benchmarks)."""

    builds: int = 0  #: libraries compiled
    hits: int = 0  #: libraries found in the cache


stats = BuildStats()


def _run_build(build_dir: Path, inputs: BuildInputs, library: str, root: Path, reporter: Reporter, jobs: int) -> None:
    """Compile ``inputs`` in ``build_dir``: PCH (if missing) and units while TVM builds the kernels."""
    for name, text in inputs.files.items():
        (build_dir / name).write_text(text)
    for name, data in inputs.blobs.items():
        (build_dir / name).write_bytes(data)
    (build_dir / "build.ninja").write_text(ninja_file(inputs, library))
    stats.builds += 1
    pch = _PchBuild.start(inputs.flags, root, reporter)
    # Units wait for a PCH being built (they are faster with it); otherwise they start now.
    units = None if pch is not None else _Ninja(build_dir, jobs, ["objects"], reporter)
    try:
        if inputs.has_kernels:
            reporter.message("building the kernels with TVM")
            inputs.build_kernels(build_dir / "kernels.o", reporter.kernels)
            reporter.phase("kernels", "done")
        if pch is not None:
            pch.finish()
            pch = None
        if units is not None:
            units.wait(build_dir)
            units = None
        final = _Ninja(build_dir, jobs, [], reporter)
        try:
            final.wait(build_dir)
        finally:
            final.kill()
    finally:
        if pch is not None:
            pch.discard()
        if units is not None:
            units.kill()


def _keep_failed(
    build_dir: Path, lock: _Lock, root: Path, inputs: BuildInputs, key: str, err: CompileError
) -> CompileError:
    """Move a failed build to ``failed/<model>-<key>`` and say so in the error."""
    failed = _subdir(root, "failed") / f"{inputs.model}-{key[:16]}"
    shutil.rmtree(failed, ignore_errors=True)
    try:
        _move_locked(build_dir, lock, failed)
    except OSError:  # another process's failure of the same key got there first
        failed = build_dir
    message = str(err).split("\n", 1)[0]
    return CompileError(
        f"{message}; the sources and build.ninja are kept in {failed} "
        f"(rerun with `{command_line([ninja_binary(), '-C', str(failed)])}`)",
        output=err.output,
        source_dir=str(failed),
    )


def _build_in(root: Path, inputs: BuildInputs, key: str, library: str, reporter: Reporter, jobs: int):
    """Build in a fresh directory under ``tmp/``; returns it and its lock. Failures are kept."""
    _sweep_tmp(root)
    build_dir, lock = _new_build_dir(root, key[:16])
    try:
        _run_build(build_dir, inputs, library, root, reporter, jobs)
    except CompileError as err:
        raise _keep_failed(build_dir, lock, root, inputs, key, err) from None
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        lock.release()
        raise
    return build_dir, lock


def build_library(
    inputs: BuildInputs, cache: bool = True, verbose: bool = False, jobs: Optional[int] = None
) -> BuildResult:
    """Build (or find in the cache) the shared library for ``inputs``."""
    if _source_hook is not None:
        inputs = dataclasses.replace(inputs, files={n: _source_hook(n, t) for n, t in inputs.files.items()})
    key = inputs.key()
    library = library_name(inputs.model, key)
    jobs = jobs or default_jobs()
    root = cache_root()
    final = root / "lib" / key[:2] / key
    reporter = Reporter(verbose, progress_enabled(verbose))
    if cache and (final / library).exists():
        stats.hits += 1
        reporter.message(f"cache hit: {final / library}")
        return BuildResult(final / library, key, True, final)
    try:
        if not cache:
            build_dir, lock = _build_in(root, inputs, key, library, reporter, jobs)
            _remove_private_dir_at_exit(build_dir, lock)
            return BuildResult(build_dir / library, key, False, build_dir)
        def waiting() -> None:
            reporter.message(f"waiting for another process's build of {final} (lock {key}.lock)")
            reporter.phase("waiting", f"for another process's build of {library}")

        with _Lock(_subdir(root, "locks") / f"{key}.lock", lock_timeout(), on_wait=waiting):
            if (final / library).exists():  # another process built it while we waited
                stats.hits += 1
                return BuildResult(final / library, key, True, final)
            build_dir, lock = _build_in(root, inputs, key, library, reporter, jobs)
            for leftover in build_dir.glob("*.o"):
                leftover.unlink()
            _subdir(_subdir(root, "lib"), key[:2])
            if final.exists():  # remains of an entry whose library was deleted by hand
                shutil.rmtree(final)
            try:
                _move_locked(build_dir, lock, final)
            except OSError:
                # Only if the lock file was deleted under a running build: use the other build.
                shutil.rmtree(build_dir, ignore_errors=True)
                if not (final / library).exists():
                    raise
        return BuildResult(final / library, key, False, final)
    finally:
        reporter.close()


def evict(result: BuildResult) -> None:
    """Remove a cache entry that turned out to be unusable (e.g. a truncated library)."""
    root = cache_root()
    with _Lock(_subdir(root, "locks") / f"{result.key}.lock", lock_timeout()):
        shutil.rmtree(result.directory, ignore_errors=True)


# -- the module index: warm compiles without passes ----------------------------------------


@functools.lru_cache(maxsize=None)
def package_digest() -> str:
    """Hash of relay_aot's Python code and C++ runtime: what turns a module into a library."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(runtime_sources_digest().encode())
    return digest.hexdigest()


def module_key(parts: Iterable[str], flags: BuildFlags) -> str:
    """Key of an input (``parts``: module text, parameters, options) under ``flags``."""
    from . import __version__

    digest = hashlib.sha256()
    for part in (f"relay_aot {__version__}", package_digest(), f"tvm {tvm.__version__}", flags.identity(), str(flags.pch_dir), *parts):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


@dataclasses.dataclass
class IndexEntry:
    """A finished library found through the module index, with its generated files' names."""

    result: BuildResult
    files: list[str]
    units: list[str]

    def read_files(self) -> dict[str, str]:
        """The generated sources kept next to the library."""
        return {name: (self.result.directory / name).read_text() for name in self.files}


def _index_path(root: Path, key: str) -> Path:
    return root / "index" / key[:2] / f"{key}.json"


def lookup_index(key: str) -> Optional[IndexEntry]:
    """The library recorded for module key ``key``, if it is still in the cache."""
    if _source_hook is not None:
        return None
    root = cache_root()
    try:
        record = json.loads(_index_path(root, key).read_text())
        library = root / record["library"]
        entry = IndexEntry(BuildResult(library, record["key"], True, library.parent), record["files"], record["units"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not library.is_file():
        return None
    stats.hits += 1
    return entry


def record_index(key: str, result: BuildResult, files: Iterable[str], units: Iterable[str]) -> None:
    """Remember that module key ``key`` compiles to the cached library of ``result``."""
    root = cache_root()
    if _source_hook is not None or not result.library.is_relative_to(root / "lib"):
        return
    record = {"library": str(result.library.relative_to(root)), "key": result.key, "files": list(files), "units": list(units)}
    path = _index_path(root, key)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)

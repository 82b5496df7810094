"""What a toolchain's builds share, compiled in the background: the precompiled header and the
runtime object.

A precompiled header of ``relay_aot/runtime.h`` (TVM's runtime headers and ours) is used through
``-include`` from a directory that comes first on the include path; when it is missing or
unusable GCC silently reads the real header, so it can only make a build faster. The runtime
object (``relay_aot/runtime.cc``: the runtime's out-of-line functions) is linked into every
library; a build that finds none includes that source, inline, into its units.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import tvm

from ..config import Config
from . import prebuilt
from .cache import Lock, key_lock, move_locked, new_build_dir, private_dir, record_object
from .progress import Reporter
from .toolchain import (
    PCH_HEADER,
    RUNTIME_OBJECT,
    RUNTIME_SOURCE,
    BuildFlags,
    command_line,
    compiler_is_gcc,
    pch_stub,
    runtime_include_dir,
    runtime_sources_digest,
    tvm_include_dirs,
)


def pch_enabled(flags: BuildFlags, config: Config) -> bool:
    """Whether builds use a precompiled header: GCC, unless ``RELAY_AOT_PCH=0``."""
    return config.pch and compiler_is_gcc(flags.cxx)


def pch_directory(flags: BuildFlags, config: Config) -> Path | None:
    """Where the precompiled header for ``flags`` lives in the cache (None: PCH disabled).

    Named by a hash of the compiler identity, the flags, our runtime headers and TVM's version
    and header location: GCC only uses a PCH built with the same flags, and it does not notice
    changed headers by itself.
    """
    if not pch_enabled(flags, config):
        return None
    digest = hashlib.sha256()
    for part in (flags.compile_identity(), runtime_sources_digest(), tvm.__version__, *tvm_include_dirs()):
        digest.update(part.encode() + b"\0")
    return config.cache_dir / "pch" / digest.hexdigest()[:32]


def pch_ready(flags: BuildFlags) -> bool:
    """Whether the precompiled header of ``flags`` is there for a unit to use now."""
    return flags.pch_dir is not None and (Path(flags.pch_dir) / (PCH_HEADER + ".gch")).exists()


B = TypeVar("B", bound="BackgroundCompile")


class BackgroundCompile:
    """One compiler run for later builds: at the lowest priority, published when it succeeds.

    The build that creates it does not wait for it (its units do not use what it makes): it
    starts at once (:meth:`launch`) or when that build is done, and is published in the
    background (:meth:`finish_in_background`); the process waits for it on exit
    (:func:`wait_for_background`), so a short-lived process still leaves it behind. A failure
    only costs speed: nothing is published, and later builds try again.
    """

    def __init__(
        self, command: list[str], work: Path, work_lock: Lock, lock: Lock, reporter: Reporter, what: str, label: str
    ):
        self.command = command
        self.work, self.work_lock, self.lock = work, work_lock, lock
        self.reporter = reporter
        self.what = what  # for the verbose message
        self.label = label  # for the progress line
        self.proc: subprocess.Popen | None = None

    def launch(self) -> None:
        """Start the compiler."""
        self.reporter.message(f"{self.what}: " + command_line(self.command))
        self.reporter.phase(self.label, "building")
        # A session of its own, so that discard() stops the compiler driver and cc1plus alike;
        # at the lowest priority, so that a build running meanwhile is slowed down as little
        # as a machine with few cores allows.
        nice = shutil.which("nice")
        self.proc = subprocess.Popen(
            [nice, "-n", "19", *self.command] if nice else self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    @staticmethod
    def under_lock(root: Path, name: str, make: Callable[[Lock], B | None]) -> B | None:
        """``make(lock)`` holding lock ``name``, if no other process holds it (None otherwise,
        or if ``make`` finds nothing to do); the lock is released unless ``make`` returns a
        compile, which then owns it."""
        lock = key_lock(root, name, 0)
        if not lock.try_acquire():
            return None
        try:
            made = make(lock)
        except BaseException:
            lock.release()
            raise
        if made is None:
            lock.release()
        return made

    def publish(self) -> None:
        """Make the finished output available to later builds (the compiler succeeded)."""
        raise NotImplementedError

    def finish_in_background(self) -> None:
        """Publish the output when the compiler is done (starting it first if it was not
        started yet), without waiting for it here."""
        self.reporter.phase(self.label, "continues in the background")
        if self.proc is None:
            self.launch()
        thread = threading.Thread(target=self._publish, name="relay_aot-background", daemon=True)
        with _pending_lock:
            if not _pending:
                atexit.register(wait_for_background)
            _pending.append(thread)
        thread.start()

    def _publish(self) -> None:
        try:
            assert self.proc is not None
            self.proc.communicate()
            if self.proc.returncode == 0:
                self.publish()
        finally:
            self.discard()

    def discard(self) -> None:
        """Stop the compiler if it runs, and remove the work directory and locks."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
        if self.work.exists():
            shutil.rmtree(self.work, ignore_errors=True)
        self.work_lock.release()
        self.lock.release()


class PchBuild(BackgroundCompile):
    """Builds a missing precompiled header in the background and publishes it atomically.

    Only one process builds a given PCH (a non-blocking lock); others compile without it
    meanwhile rather than wait -- and so does the build that started it: its units start at
    once, and the PCH is published in the background for the builds after it. A PCH that
    fails to build is simply not used: the units then compile from the real header and report
    any error in it themselves.
    """

    def __init__(self, flags: BuildFlags, root: Path, reporter: Reporter, lock: Lock):
        assert flags.pch_dir is not None  # start builds a PCH only for flags that compile with one
        self.final = Path(flags.pch_dir)
        work, work_lock = new_build_dir(root, "pch")
        header = pch_stub(work)
        command = flags.with_pch(None).pch_command(str(header), str(header) + ".gch")
        super().__init__(command, work, work_lock, lock, reporter, "precompiling the runtime headers", "PCH")
        self.launch()

    @classmethod
    def start(cls, flags: BuildFlags, root: Path, reporter: Reporter, use_prebuilt: bool) -> PchBuild | None:
        """Start building the PCH of ``flags`` if it is enabled, missing and nobody builds it --
        unless ``use_prebuilt`` and the one ``pip install`` built is what this would build
        (``prebuilt.py``): then publish a copy of that, at once."""
        if flags.pch_dir is None or pch_ready(flags):
            return None
        final = Path(flags.pch_dir)

        def make(lock: Lock) -> PchBuild | None:
            # Checked again under the lock: another process may have finished it while we looked.
            if pch_ready(flags):
                return None
            if use_prebuilt and prebuilt.mismatch(flags) is None:
                work, work_lock = new_build_dir(root, "pch")
                shutil.copyfile(prebuilt.pch(), f"{pch_stub(work)}.gch")
                _publish(work, work_lock, final)
                return None
            return cls(flags, root, reporter, lock)

        return cls.under_lock(root, f"pch-{final.name}", make)

    def publish(self) -> None:
        _publish(self.work, self.work_lock, self.final)


def _publish(work: Path, work_lock: Lock, final: Path) -> None:
    """Move the PCH directory ``work`` to ``final``, replacing an unusable earlier one."""
    private_dir(final.parent)
    shutil.rmtree(final, ignore_errors=True)
    move_locked(work, work_lock, final)


class RuntimeObjectBuild(BackgroundCompile):
    """Compiles the runtime object (``runtime_cpp/relay_aot/runtime.cc``) for later builds.

    A build that finds none in the cache includes the runtime source into its units instead,
    with inline linkage (each unit generates only the runtime functions it uses, as fast as
    before there was a runtime object; compiling the whole object first would put a second
    compile on the first build's critical path), and this for the builds after it, once its
    library is built: on two cores even a compiler at the lowest priority slowed the first
    build down by a third.
    """

    def __init__(self, flags: BuildFlags, root: Path, reporter: Reporter, lock: Lock, key: str, identity: str):
        self.root, self.key, self.identity = root, key, identity
        work, work_lock = new_build_dir(root, "runtime")
        self.output = work / RUNTIME_OBJECT
        command = flags.compile_command(str(runtime_include_dir() / RUNTIME_SOURCE), str(self.output))
        super().__init__(command, work, work_lock, lock, reporter, "compiling the runtime object", "runtime")

    @classmethod
    def start(
        cls, flags: BuildFlags, root: Path, reporter: Reporter, key: str, identity: str
    ) -> RuntimeObjectBuild | None:
        """Start compiling the runtime object of ``key`` unless another process does."""
        return cls.under_lock(root, f"runtime-{key[:32]}", lambda lock: cls(flags, root, reporter, lock, key, identity))

    def publish(self) -> None:
        record_object(self.root, "runtime", self.key, self.output, self.identity)


#: Background compiles publishing their output (finish_in_background)
_pending: list[threading.Thread] = []
_pending_lock = threading.Lock()


def wait_for_background() -> None:
    """Wait until every background compile this process started is published (or failed)."""
    while True:
        with _pending_lock:
            if not _pending:
                return
            thread = _pending.pop()
        thread.join()

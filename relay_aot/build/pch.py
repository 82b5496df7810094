"""The precompiled runtime header, shared by every build with the same compiler and flags.

A precompiled header of ``relay_aot/runtime.h`` (TVM's runtime headers and ours) is used through
``-include`` from a directory that comes first on the include path; when it is missing or
unusable GCC silently reads the real header, so it can only make a build faster.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Optional

import tvm

from ..config import Config
from .cache import Lock, key_lock, move_locked, new_build_dir, private_dir
from .progress import Reporter
from .toolchain import (
    PCH_HEADER,
    BuildFlags,
    command_line,
    compiler_is_gcc,
    runtime_include_dir,
    runtime_sources_digest,
    tvm_include_dirs,
)


def pch_enabled(flags: BuildFlags, config: Config) -> bool:
    """Whether builds use a precompiled header: GCC, unless ``RELAY_AOT_PCH=0``."""
    return config.pch and compiler_is_gcc(flags.cxx)


def pch_directory(flags: BuildFlags, config: Config) -> Optional[Path]:
    """Where the precompiled header for ``flags`` lives in the cache (None: PCH disabled).

    Named by a hash of the compiler identity, the flags, our runtime headers and TVM's version
    and header location: GCC only uses a PCH built with the same flags, and it does not notice
    changed headers by itself.
    """
    if not pch_enabled(flags, config):
        return None
    digest = hashlib.sha256()
    for part in (flags.identity(), runtime_sources_digest(), tvm.__version__, *tvm_include_dirs()):
        digest.update(part.encode() + b"\0")
    return config.cache_dir / "pch" / digest.hexdigest()[:32]


class PchBuild:
    """Builds a missing precompiled header in the background and publishes it atomically.

    Only one process builds a given PCH (a non-blocking lock); others compile without it
    meanwhile rather than wait -- and so does the build that started it: its units start at
    once, and the PCH is published in the background for the builds after it. A PCH that
    fails to build is simply not used: the units then compile from the real header and report
    any error in it themselves.
    """

    def __init__(self, flags: BuildFlags, root: Path, reporter: Reporter, lock: Lock):
        self.final = Path(flags.pch_dir)  # type: ignore[arg-type]
        self.reporter = reporter
        self.lock = lock
        self.work, self.work_lock = new_build_dir(root, "pch")
        header = self.work / PCH_HEADER
        header.parent.mkdir(mode=0o700)
        # The stub names the real header by absolute path: if GCC rejects the .gch it reads
        # the stub, which must then still find the runtime.
        header.write_text(f'#include "{runtime_include_dir() / PCH_HEADER}"\n')
        self.command = flags.with_pch(None).pch_command(str(header), str(header) + ".gch")
        reporter.message("precompiling the runtime headers: " + command_line(self.command))
        reporter.phase("PCH", "building")
        # A session of its own, so that discard() stops the compiler driver and cc1plus alike;
        # at the lowest priority, so that the build that started it (its units and kernels,
        # which do not use it) is not slowed down by it on a machine with few cores.
        nice = shutil.which("nice")
        self.proc = subprocess.Popen(
            [nice, "-n", "19", *self.command] if nice else self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    @classmethod
    def start(cls, flags: BuildFlags, root: Path, reporter: Reporter) -> Optional["PchBuild"]:
        """Start building the PCH of ``flags`` if it is enabled, missing and nobody builds it."""
        if flags.pch_dir is None or (Path(flags.pch_dir) / (PCH_HEADER + ".gch")).exists():
            return None
        lock = key_lock(root, f"pch-{Path(flags.pch_dir).name}", 0)
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

    def finish_in_background(self) -> None:
        """Publish the PCH when the compiler is done, without waiting for it here: the build
        that started it did not use it, the next one will. The process waits for it on exit
        (:func:`wait_for_background`), so a short-lived process still leaves it behind."""
        self.reporter.phase("PCH", "continues in the background")
        thread = threading.Thread(target=self._publish, name="relay_aot-pch", daemon=True)
        with _pending_lock:
            if not _pending:
                atexit.register(wait_for_background)
            _pending.append(thread)
        thread.start()

    def _publish(self) -> None:
        """Wait for the compiler and publish the PCH (a failure only costs speed: the units
        then read the real headers and report any error in them themselves)."""
        try:
            self.proc.communicate()
            if self.proc.returncode != 0:
                return
            private_dir(self.final.parent)
            shutil.rmtree(self.final, ignore_errors=True)  # an unusable earlier one
            move_locked(self.work, self.work_lock, self.final)
        finally:
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


#: PCH builds publishing in the background (finish_in_background)
_pending: list[threading.Thread] = []
_pending_lock = threading.Lock()


def wait_for_background() -> None:
    """Wait until every precompiled header this process started is published (or failed)."""
    while True:
        with _pending_lock:
            if not _pending:
                return
            thread = _pending.pop()
        thread.join()

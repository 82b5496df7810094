"""Where a build talks: verbose command lines, or one progress line on a terminal."""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time

from ..config import Config

_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")


def progress_enabled(config: Config, verbose: bool) -> bool:
    """Whether to show a progress line: ``config.progress`` (``$RELAY_AOT_PROGRESS``), else
    when stderr is a terminal (and the build is not verbose)."""
    if config.progress is not None:
        return config.progress
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

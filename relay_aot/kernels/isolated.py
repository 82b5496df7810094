"""Run TVM's kernel build in a forked child, so that no failure inside TVM or LLVM ends this process.

TVM's LLVM code generator can fail halfway through a function (``erf`` of ``float16`` on x86
without ``Legalize``: "unknown intrinsic Op(tir.erf)"); with LLVM built with assertions, as in
TVM's wheels, the half-built module then fails an assertion while its context is destroyed
(``LLVMContextImpl::~LLVMContextImpl(): Assertion ... "DbgRecords in blocks not cleaned"``) and
the whole process aborts before the error reaches Python. A segfault or another assertion in
code generation would do the same. So the build runs in a child made by ``fork``: it shares
this process's memory copy-on-write (TVM, the lowered kernels: nothing is serialised or
imported again), writes its result to a file, and leaves with ``os._exit``, running no
destructor or ``atexit`` handler of the parent's. Its stderr goes through a pipe, so an abort's
message becomes part of the error.

A forked child has only the thread that forked. A lock another thread held at that moment stays
held in the child forever, so the child touches as little shared state as it can: the one
background thread relay_aot itself starts into TVM (``te_compiler_speed.warm_error_backtraces``)
is joined first; the child writes through fresh Python file objects on its own descriptors,
never the parent's ``sys.stderr`` (which the ninja reader thread writes to). Should it still
hang, it is stopped once it has used no CPU time for :data:`STALL_SECONDS` (a deadlock: a slow
build of a large model on a loaded machine still uses CPU), and the build is reported as
stalled. Where ``fork`` is missing (not POSIX), the build runs in this process, as before.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import select
import signal
import sys
import time
import warnings
from collections.abc import Callable

from ..passes.te_compiler_speed import join_background_threads

#: A child that has used no CPU time for this many seconds is stopped (a deadlock).
STALL_SECONDS = 60.0

#: Separates what the child wrote to stderr from the message of the Python error it raised.
_ERROR_MARK = b"\n\0relay_aot: the kernel build raised\0"

#: Exit status of a child whose build raised a Python exception (its message follows the mark).
_RAISED = 3


class ChildFailure(Exception):
    """The build in the child failed: ``verb`` says how ("failed to build", "crashed (SIGSEGV)
    building", ...), ``detail`` is the last line of its error or of its stderr, ``output`` all
    it wrote to stderr; ``stalled``: it hung and was killed; ``raised``: the function raised a
    Python exception (it neither crashed nor hung: calling it in this process is safe)."""

    def __init__(self, verb: str, detail: str, output: str, stalled: bool = False, raised: bool = False):
        self.verb, self.detail, self.output, self.stalled, self.raised = verb, detail, output, stalled, raised
        super().__init__(self.describe("kernels"))

    def describe(self, what: str) -> str:
        """The message, for a build of ``what`` ("kernels", "fused kernel of erf (symbol)")."""
        return f"TVM {self.verb} the {what}" + (f": {self.detail}" if self.detail else "")


def available() -> bool:
    """Whether builds can run in a child here (POSIX ``fork``)."""
    return hasattr(os, "fork")


def run(build: Callable[[], None], doing: str = "building") -> None:
    """Call ``build()`` in a forked child and wait for it; return when it succeeded.

    ``doing`` names the work in the failure's verb ("crashed (SIGSEGV) parsing").

    Whatever the child wrote to stderr is written to this process's stderr when it succeeds
    (TVM's warnings are not lost). Raises :class:`ChildFailure` when it raised, crashed or
    stalled; ``KeyboardInterrupt`` and other exceptions in the parent kill the child first.
    """
    run_all([build], doing)


def run_all(builds: list[Callable[[], None]], doing: str = "building") -> None:
    """:func:`run` of each of ``builds``, all at once, each in a child of its own; return when
    every one succeeded, else raise the :class:`ChildFailure` of the first that failed (in the
    order given) once all have ended."""
    if not available():
        for build in builds:
            try:
                build()
            except Exception as err:  # noqa: BLE001 - reported as the child's would be
                text = _error_text(err)
                raise ChildFailure("failed to build", last_line(text), text, raised=True) from None
        return
    join_background_threads()
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[int, int] = {}  # pid -> the read end of its stderr
    statuses: dict[int, int] = {}
    try:
        for build in builds:
            read_end, write_end = os.pipe()
            with warnings.catch_warnings():
                # Python 3.12 warns on any fork of a process with threads (the ninja reader's is
                # one); what the child may touch is limited as this module's docstring says.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the child: never returns
                os.close(read_end)
                for fd in children.values():  # its siblings' pipes are not its own
                    os.close(fd)
                _child(build, write_end)
            os.close(write_end)
            children[pid] = read_end
        outputs = _collect(children)
        for pid, output in outputs.items():
            if output is not None:
                statuses[pid] = os.waitpid(pid, 0)[1]
    finally:
        for fd in children.values():
            os.close(fd)
        for pid in children:
            if pid not in statuses:  # stalled, or this process was interrupted: no child outlives it
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    for pid in children:
        output = outputs[pid]
        if output is None:
            raise ChildFailure(
                f"made no progress (no CPU time for {STALL_SECONDS:g} s, killed) {doing}", "", "", stalled=True
            )
        _judge(statuses[pid], output, doing)


def _child(build: Callable[[], None], stderr_fd: int) -> None:
    """The child's whole life: redirect stderr into the pipe, build, leave without cleanup."""
    status = 1
    try:
        # A collection would write to the header of every Python object it visits: copies of
        # the parent's pages that this short life has no use for.
        gc.disable()
        # A fatal signal ends the child as it is: its stderr then ends with what failed, not
        # with the Python stack faulthandler (enabled by pytest, say) would print elsewhere.
        faulthandler.disable()
        os.dup2(stderr_fd, 2)
        os.close(stderr_fd)
        # Fresh file objects: the parent's may be locked by a thread that does not exist here.
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives until os._exit
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        with contextlib.suppress(ValueError):  # the parent handles ^C: it kills the child
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        build()
        sys.stdout.flush()
        sys.stderr.flush()
        status = 0
    except BaseException as err:  # noqa: BLE001 - everything goes to the parent
        try:
            os.write(2, _ERROR_MARK + _error_text(err).encode("utf-8", "replace"))
            status = _RAISED
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(status)


def _cpu_ticks(pid: int) -> int | None:
    """User plus system clock ticks the process ``pid`` has used (None: unknown, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    except (OSError, IndexError, ValueError):
        return None


def _collect(children: dict[int, int]) -> dict[int, bytes | None]:
    """Per child (pid -> the read end of its stderr), everything it writes there until it closes
    it; None for a child that has used no CPU time for :data:`STALL_SECONDS` (it is still
    running then). Returns when every child has closed its pipe or stalled."""
    chunks: dict[int, list[bytes]] = {pid: [] for pid in children}
    outputs: dict[int, bytes | None] = {}
    progress = {pid: (_cpu_ticks(pid), time.monotonic()) for pid in children}
    while len(outputs) < len(children):
        waiting = {fd: pid for pid, fd in children.items() if pid not in outputs}
        ready, _, _ = select.select(list(waiting), [], [], 1.0)
        for fd in ready:
            pid = waiting[fd]
            data = os.read(fd, 65536)
            if data:
                chunks[pid].append(data)
            else:
                outputs[pid] = b"".join(chunks[pid])
        now = time.monotonic()
        for pid in waiting.values():
            if pid in outputs:
                continue
            ticks, since = progress[pid]
            now_ticks = _cpu_ticks(pid)
            if now_ticks is None or now_ticks != ticks:
                progress[pid] = (now_ticks, now)
            elif now - since > STALL_SECONDS:
                outputs[pid] = None
    return outputs


def _judge(status: int, output: bytes, doing: str) -> None:
    """Return if the child succeeded; else raise :class:`ChildFailure` saying how it failed."""
    stderr, _, raised = output.partition(_ERROR_MARK)
    text = stderr.decode("utf-8", "replace")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        if text:
            sys.stderr.write(text)
        return
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _RAISED and raised:
        message = raised.decode("utf-8", "replace")
        raise ChildFailure("failed to build", last_line(message), text + message, raised=True)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        verb = f"crashed ({name}) {doing}"
    else:
        verb = f"ended with status {os.WEXITSTATUS(status)} {doing}"
    raise ChildFailure(verb, last_line(text), text)


def _error_text(err: BaseException) -> str:
    """What a Python error says: TVM's end with the failed check; others get their type."""
    text = str(err).strip()
    return text if "\n" in text else f"{type(err).__name__}: {text}" if text else type(err).__name__


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped (TVM's errors end with what failed)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""

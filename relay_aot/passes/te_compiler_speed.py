"""Three of TVM's costs that a compile need not wait for.

**Library info.** TVM's TE compiler without its per-dimension library-info query, while
relay_aot compiles.

``tvm.relay.backend.te_compiler.get_shape`` -- run for every output of every operator that
``AlterOpLayout`` or kernel lowering looks at -- calls ``tvm.support.libinfo()`` once per
dimension, and each call converts TVM's whole build-information map through the FFI (some 13 ms
on the development machine: 11 of the 37 seconds of a SqueezeNet compile). The map cannot change
in a process, so within :func:`faster_te_compiler` the TE compiler reads one copy. The original is
put back afterwards, so ``relay.build`` in the same process is measured as TVM ships it.

**Workload look-ups.** For every operator of a fused function the TE compiler asks
``autotvm.task.get_workload`` whether its compute carries a tunable workload, and that walks
every tensor operation the compute reads, back to the function's inputs: a chain of ``n``
operators costs ``n * n / 2`` steps through the FFI. With ``exp`` written as its twenty
elementwise operators in Relay (as relay_aot once vectorized it), an LSTM cell's three
sigmoids and two tanhs made the walks a third of its compile; ONNX's expanded functions and
gradients fuse long chains too. Within :func:`faster_te_compiler` the answer for each
operation is remembered: it is the first workload found among its inputs' answers, then its own,
which is what the walk finds (it returns at the first workload; an operation it skips as
visited had none). The operations are held, so none is freed and its address reused while
the answers are kept; they are dropped when the outermost block ends.

**The first error's backtrace.** TVM attaches a backtrace to every error it raises, including
the ones it catches itself, and the first in a process reads libtvm's compressed debug
information for it (0.15 s). ``AlterOpLayout`` raises and catches one on every compile of a
model with ``dense`` (x86's dense layout hook builds a placeholder from a shape tuple, which
TVM first tries to convert to a single expression). :func:`warm_error_backtraces` pays that in
a background thread, once per process, while the passes before it run (and is joined before the
kernel build forks: :func:`join_background_threads`, ``kernels/isolated.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_lock = threading.Lock()
_depth = 0
_original: tuple[Callable[[], Any], Callable[..., Any]] | None = None  # TVM's own, while a block runs
_warmed = False
_warming: list = []  # the thread of warm_error_backtraces, until joined


def warm_error_backtraces() -> None:
    """Have TVM load its debug information for backtraces in a background thread (once)."""
    global _warmed
    with _lock:
        if _warmed:
            return
        _warmed = True

    def raise_one() -> None:
        import tvm

        try:  # the FFI call releases the GIL: the passes go on meanwhile
            tvm.ir.Op.get("relay_aot.no_such_operator")
        except tvm.error.TVMError:
            pass

    thread = threading.Thread(target=raise_one, name="relay_aot-tvm-backtrace", daemon=True)
    thread.start()
    with _lock:
        _warming.append(thread)


def join_background_threads() -> None:
    """Wait for the thread of :func:`warm_error_backtraces`, if it runs.

    Before a ``fork``: a child has only the forking thread, and locks that this one held inside
    TVM (its backtrace state, its registry) would stay held in the child forever.
    """
    with _lock:
        threads, _warming[:] = list(_warming), []
    for thread in threads:
        thread.join()


def _remembering_get_workload(original: Callable, answers: dict) -> Callable:
    """``autotvm.task.get_workload`` answering from ``answers`` (operation -> (operation,
    workload)) where it can; the same results (see the module's docstring)."""
    from tvm import te
    from tvm.autotvm.task.topi_integration import args_to_workload

    def workload_of(op):
        known = answers.get(op)
        if known is not None:
            return known[1]
        found = None
        for tensor in op.input_tensors:
            found = workload_of(tensor.op)
            if found is not None:
                break
        if found is None and "workload" in op.attrs:
            found = args_to_workload(op.attrs["workload"])
        answers[op] = (op, found)
        return found

    def get_workload(outs, task_name=None):
        if task_name is not None:
            return original(outs, task_name)
        for tensor in [outs] if isinstance(outs, te.Tensor) else outs:
            found = workload_of(tensor.op)
            if found is not None:
                return found
        return None

    return get_workload


@contextlib.contextmanager
def faster_te_compiler() -> Iterator[None]:
    """Within the block, ``te_compiler`` reads ``libinfo()`` once and AutoTVM's workload
    look-ups are remembered (nested and threaded uses share both)."""
    global _depth, _original
    from tvm import autotvm
    from tvm.relay.backend import te_compiler

    with _lock:
        if _depth == 0:
            _original = (te_compiler.libinfo, autotvm.task.get_workload)
            info = dict(_original[0]())
            te_compiler.libinfo = lambda: info
            autotvm.task.get_workload = _remembering_get_workload(_original[1], {})
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                assert _original is not None  # set when the outermost block entered
                te_compiler.libinfo, autotvm.task.get_workload = _original

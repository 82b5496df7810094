"""Tuned schedules: which AutoTVM records a compile uses, and how many kernels have none.

TVM picks each kernel's schedule through AutoTVM's dispatch context, a process-wide stack that
``autotvm.apply_history_best(log)`` pushes onto: inside it, ``relay.build`` -- and
``relay_aot.compile``, which lowers through the same TE compiler -- use the best record of the
log for every workload it has, and a fallback (untuned) configuration for the others. The
records in scope change the kernels built, so :func:`fingerprint` names them for the cache key.

TVM reports untuned workloads once per process, as a raw "One or more operators have not been
tuned" warning on the ``autotvm`` logger; :func:`watch` silences it while relay_aot lowers and
counts the workloads instead, so that a build says once how many kernels use fallback schedules.
It also puts relay_aot's own schedule rules (kernels/schedule_rules.py) under any tuning records.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import tvm
from tvm import autotvm
from tvm.relay.backend import te_compiler

from .schedule_rules import ShapeRules

#: The line TVM logs at DEBUG for each workload it finds no record for.
_NO_RECORDS = "Cannot find tuning records for"

_logger = logging.getLogger("relay_aot")


def fingerprint() -> str:
    """A digest of the AutoTVM records in scope ("" outside any tuning context).

    Every context on the dispatch stack counts: a query falls through to the enclosing one.
    A context of a kind not known here gets a key of its own identity, which no later compile
    shares: never a stale library, at the cost of a rebuild.
    """
    parts = []
    context = autotvm.task.DispatchContext.current
    while context is not None and not isinstance(context, autotvm.task.FallbackContext):
        if isinstance(context, ShapeRules):
            pass  # relay_aot's own rule: its sources are in every cache key
        elif isinstance(context, autotvm.task.ApplyHistoryBest):
            for table in (context.best_by_targetkey, context.best_by_model):
                parts += sorted(f"{key}={inp.config}" for key, (inp, _) in table.items())
            parts += sorted(f"{key}={config}" for key, config in context._best_user_defined.items())
        elif isinstance(context, (autotvm.task.ApplyConfig, autotvm.task.ApplyFixedConfig)):
            parts.append(f"{type(context).__name__}:{getattr(context, '_config', '')}:{getattr(context, '_schedule_names', '')}")
        else:
            parts.append(f"{type(context).__name__}@{id(context)}")
        context = getattr(context, "_old_ctx", None)
    if not parts:
        return ""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def captured() -> Callable[[], contextlib.AbstractContextManager]:
    """The AutoTVM records in scope now, to put back in scope later: a variant of a compile made
    afterwards (the library instrumented for profiling) must use the records the compile used,
    whether the caller is still inside their context or not."""
    context = autotvm.task.DispatchContext.current

    def restore() -> contextlib.AbstractContextManager:
        active = autotvm.task.DispatchContext.current
        while active is not None:
            if active is context:  # still in effect: entering it again would chain it to itself
                return contextlib.nullcontext()
            active = getattr(active, "_old_ctx", None)
        return context

    return restore


def records(path: Union[str, os.PathLike, None]):
    """The context a compile reads ``path``'s AutoTVM records in (nothing for None).

    :raises FileNotFoundError: ``path`` does not exist.
    :raises ValueError: a line of it is not an AutoTVM record.
    """
    if path is None:
        return contextlib.nullcontext()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tuning records {path}: no such file")
    try:
        return autotvm.apply_history_best(str(path))
    except (ValueError, KeyError, IndexError, TypeError, tvm.error.TVMError) as err:
        raise ValueError(f"tuning records {path}: not an AutoTVM log ({type(err).__name__}: {err})") from None


class Untuned:
    """The workloads a lowering found no tuning records for.

    TVM's TE compiler caches lowered functions for the process and reports a workload only
    when it lowers it; so what each kernel reported is remembered, per tuning context, and a
    kernel served from that cache counts what it reported when it was lowered.
    """

    def __init__(self, context: str, target: str) -> None:
        self.context = context
        self.target = target
        self.workloads: set[str] = set()
        self._pending: set[str] = set()

    def kernel_lowered(self, key: int) -> None:
        """Attribute what was reported since the last kernel to the kernel of structural hash ``key``."""
        memo = (self.context, self.target, key)
        if self._pending:
            _reported[memo] = frozenset(self._pending)
        self.workloads |= _reported.get(memo, frozenset())
        self._pending = set()

    def report(self) -> None:
        """One line when any kernel uses a fallback schedule: a warning the first time in the
        process (as TVM's own), information after that."""
        if self.workloads:
            count = len(self.workloads)
            global _warned
            level = logging.INFO if _warned else logging.WARNING
            _warned = True
            _logger.log(level,
                "relay_aot: %d kernel schedule%s untuned (TVM's fallback configuration); tune them with "
                "AutoTVM and compile inside autotvm.apply_history_best(log) (docs/performance.md, "
                "\"Tuned kernels\")", count, " is" if count == 1 else "s are")


#: whether a build of this process has warned of untuned kernels already
_warned = False
#: (tuning context, target, kernel's structural hash) -> workloads it had no records for
_reported: dict[tuple[str, str, int], frozenset[str]] = {}
#: the tuning context the TE compiler's cache was last filled under (None: not by relay_aot)
_cached_under: Optional[str] = None


class _Collect(logging.Handler):
    def __init__(self, untuned: Untuned):
        super().__init__(logging.DEBUG)
        self.untuned = untuned

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(_NO_RECORDS):
            self.untuned._pending.add(message.split("key=", 1)[-1].split("\n", 1)[0])


@contextlib.contextmanager
def watch(target: str = "", lowering: bool = False) -> Iterator[Untuned]:
    """Run TVM's passes or lowering inside this: its own tuning messages are held back and the
    workloads without records collected (TVM's process-wide logging state is restored after).

    ``lowering``: kernels will be lowered, so the TE compiler's process-wide cache is emptied
    first if it was filled under other tuning records (or by someone else): a kernel lowered
    without the records in scope now would be served from it.
    """
    global _cached_under
    context = fingerprint()
    if lowering and (context or _cached_under != context):
        te_compiler.get().clear()
        _cached_under = context
    logger = logging.getLogger("autotvm")
    saved = (logger.level, logger.propagate, list(logger.handlers), set(autotvm.task.DispatchContext.warning_messages),
             te_compiler._first_warning, autotvm.GLOBAL_SCOPE.silent)
    untuned = Untuned(context, target)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.handlers = [_Collect(untuned)]
    # TVM reports a workload once per process: forget the earlier ones so this build counts its own.
    autotvm.task.DispatchContext.warning_messages.clear()
    te_compiler._first_warning = False
    # TVM's select_implementation sets this flag around its template queries and leaves it set
    # when a compute raises there (a refused shape, say): every later lowering in the process
    # would then report no untuned workload. The messages are held back above anyway.
    autotvm.GLOBAL_SCOPE.silent = False
    rules = ShapeRules(untuned=lambda workload: untuned._pending.add(str(workload)))
    try:
        with rules:
            yield untuned
    finally:
        level, propagate, handlers, messages, first, silent = saved
        autotvm.GLOBAL_SCOPE.silent = silent
        logger.setLevel(level)
        logger.propagate = propagate
        logger.handlers = handlers
        autotvm.task.DispatchContext.warning_messages.clear()
        autotvm.task.DispatchContext.warning_messages.update(messages)
        te_compiler._first_warning = first

"""Tuning the kernels relay_aot builds: AutoTVM over exactly this compile's kernels.

:func:`tasks` runs relay_aot's own passes and lowering (the same fusion, legalization and
bounds rewrites as a compile) with AutoTVM's task tracing on, so the tasks are the templates
those kernels call -- not the ones ``relay.build`` would make of the same module. As in TVM's
own extraction, the layout choice is left out: at ``opt_level`` 3 it reads each convolution's
and dense product's record to pick its packed layout, so the records belong to the kernels
before it.

:func:`tune` measures configurations of each task with AutoTVM's local builder and runner and
appends them to a log, which a compile then reads (``relay_aot.compile(...,
tuning_records=log)``, :func:`relay_aot.kernels.tuning.records`, or inside
``autotvm.apply_history_best(log)``). A task that already has
its trials in the log is skipped, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

import tvm
from tvm import autotvm
from tvm.relay.backend import te_compiler

from .request import Request

#: Tuners by name; "auto" is XGBoost's cost model where xgboost is installed, else the genetic one.
TUNERS = ("auto", "xgb", "ga", "random", "grid")


def tasks(mod: tvm.IRModule, params: Optional[Mapping[str, object]] = None, target=None,
          opt_level: int = 3) -> list:
    """The AutoTVM tasks of the kernels ``relay_aot.compile(mod, target, params, opt_level=...)``
    builds (``autotvm.task.Task``, in the order the kernels are lowered; none for kernels
    without a tunable template, such as those of ``?`` shapes)."""
    request = Request.make(mod, target, params, opt_level=opt_level)
    env = autotvm.task.TaskExtractEnv.get()
    env.reset(None)
    # Records in scope would not change which templates are called, but a fresh context keeps
    # the lowering's dispatch free of them (and of configurations an earlier layout pass stored).
    # The TE compiler's process-wide cache would serve kernels lowered before without calling
    # their templates: emptied before, and after (its kernels were lowered without records).
    te_compiler.get().clear()
    with autotvm.apply_history_best([]), env:
        try:
            _, table = request.lower(layouts=False)
            table.lower_all(report=False)
        finally:
            te_compiler.get().clear()
    found = []
    for name, args in env.get_tasks():
        try:
            found.append(autotvm.task.create(name, args, target=request.target))
        except tvm.topi.InvalidShapeError:  # the template refuses these shapes: nothing to tune
            continue
    return found


@dataclasses.dataclass
class TuneResult:
    """What :func:`tune` did: the log, and per task its name, trials measured now and before."""

    log: Path
    tasks: list = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.log}: {len(self.tasks)} task{'s' if len(self.tasks) != 1 else ''}"]
        lines += [f"  {name}: {now} trials measured, {before} in the log before" for name, now, before in self.tasks]
        return "\n".join(lines)


def tune(mod: tvm.IRModule, log: Union[str, os.PathLike], params: Optional[Mapping[str, object]] = None,
         target=None, *, trials: int = 200, opt_level: int = 3, tuner: str = "auto",
         number: int = 4, repeat: int = 3, min_repeat_ms: int = 50, timeout: float = 10.0,
         progress: Optional[Callable[[str], None]] = None) -> TuneResult:
    """Tune the kernels of ``relay_aot.compile(mod, target, params, opt_level=...)`` with
    AutoTVM and append every measured configuration to ``log``.

    :param log: the AutoTVM log (JSON lines) to append to; compile with
        ``relay_aot.compile(mod, ..., tuning_records=log)``.
    :param trials: configurations measured per task at most (fewer when its space is smaller).
        A task with that many records in ``log`` already is skipped; one with fewer measures the
        rest, its tuner starting from those records.
    :param target: as for :func:`relay_aot.compile` (by default this machine's CPU): the
        records are for that target, and the measurements run here.
    :param tuner: ``"auto"`` (XGBoost's cost model when xgboost is installed, else ``"ga"``),
        ``"xgb"``, ``"ga"``, ``"random"`` or ``"grid"``.
    :param number, repeat, min_repeat_ms, timeout: AutoTVM's local runner's settings.
    :param progress: called with a line of text as each task starts (the CLI prints it); AutoTVM's
        progress bar shows the trials when stdout is a terminal.
    :returns: the tasks tuned, with the trials measured now and found in the log before.
    :raises ValueError: a bad ``trials`` or ``tuner``.
    """
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    if tuner not in TUNERS:
        raise ValueError(f"tuner must be one of {', '.join(TUNERS)}, got {tuner!r}")
    log = Path(log)
    if not log.parent.is_dir():
        raise FileNotFoundError(f"{log}: directory {log.parent} does not exist")
    found = tasks(mod, params, target, opt_level)
    measured = _measured(log)
    result = TuneResult(log)
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(timeout=timeout),
        runner=autotvm.LocalRunner(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, timeout=timeout))
    for index, task in enumerate(found, 1):
        key = _key(task.target, task.workload)
        before = measured.get(key, [])
        wanted = min(trials, len(task.config_space))
        name = f"[{index}/{len(found)}] {task.name} {task.args}"
        if len(before) >= wanted:
            result.tasks.append((task.name, 0, len(before)))
            if progress is not None:
                progress(f"{name}: {len(before)} trials in the log, skipped")
            continue
        if progress is not None:
            progress(f"{name}: {wanted - len(before)} trials")
        chosen = _tuner(task, tuner)
        if before:
            chosen.load_history(before)
        callbacks = [autotvm.callback.log_to_file(str(log))]
        if os.isatty(1):
            callbacks.append(autotvm.callback.progress_bar(wanted - len(before), prefix=f"[{index}/{len(found)}]"))
        with _quiet_autotvm():
            chosen.tune(n_trial=wanted - len(before), measure_option=option, callbacks=callbacks)
        result.tasks.append((task.name, wanted - len(before), len(before)))
    return result


def _key(target, workload) -> tuple:
    return (str(target.kind.name), tuple(sorted(target.keys)), repr(workload))


def _measured(log: Path) -> dict:
    """The successful records of ``log`` by (target, workload); empty if it does not exist."""
    found: dict = {}
    if not log.exists():
        return found
    for inp, res in autotvm.record.load_from_file(str(log)):
        if res.error_no == 0:
            found.setdefault(_key(inp.target, inp.task.workload), []).append((inp, res))
    return found


def _tuner(task, name: str):
    if name in ("auto", "xgb"):
        try:
            import xgboost  # noqa: F401
        except ImportError:
            if name == "xgb":
                raise ValueError("tuner 'xgb' needs the xgboost package") from None
            name = "ga"
        else:
            return autotvm.tuner.XGBTuner(task, loss_type="reg")
    if name == "ga":
        return autotvm.tuner.GATuner(task, pop_size=min(50, len(task.config_space)))
    if name == "random":
        return autotvm.tuner.RandomTuner(task)
    return autotvm.tuner.GridSearchTuner(task)


@contextlib.contextmanager
def _quiet_autotvm():
    """AutoTVM logs each measurement at DEBUG and errors of failed configurations at WARNING;
    the log file keeps them, the terminal gets the progress bar."""
    logger = logging.getLogger("autotvm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)

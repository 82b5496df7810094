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
its trials in the log for the same target (CPU and features) is skipped, so an interrupted run
resumes where it stopped. The log is read as a compile reads it
(:func:`relay_aot.kernels.tuning.read`): a last line cut off mid-write is ignored, with a
warning, and removed from the log before the first record is appended (:func:`end_lines`), so
that the next record does not continue it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import tvm
from tvm import autotvm
from tvm.relay.backend import te_compiler

from . import passes
from .kernels import schedule_rules, tuning
from .passes.walk import nodes_where
from .request import Request

#: Tuners by name; "auto" is XGBoost's cost model where xgboost is installed, else the genetic one.
TUNERS = ("auto", "xgb", "ga", "random", "grid")


def tasks(mod: tvm.IRModule, params: Mapping[str, object] | None = None, target=None, opt_level: int = 3) -> list:
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
    """What :func:`tune` did: the log, per task its name, trials measured now and before, and
    the records to compile with (the graph tuner's choice when it ran, else the log)."""

    log: Path
    tasks: list = dataclasses.field(default_factory=list)
    graph_log: Path | None = None
    confirmed: int = 0  #: measurements made again of the tasks' best configurations
    #: Seconds per call in the network of the graph tuner's choice and of the untuned build
    #: (:func:`tune`'s check), and whether the untuned configurations replaced the choice.
    network: tuple[float, float] | None = None
    kept_untuned: bool = False

    @property
    def records(self) -> Path:
        """What ``compile(..., tuning_records=...)`` should read."""
        return self.graph_log or self.log

    def network_line(self) -> str:
        """What :func:`tune`'s check in the network found (``network`` must be set)."""
        assert self.network is not None, "no check in the network was made"
        tuned, untuned = self.network
        kept = "the untuned configurations replace it" if self.kept_untuned else "it stays"
        return (
            f"in the network: the graph tuner's choice {tuned * 1e3:.3f} ms per call, the untuned build "
            f"{untuned * 1e3:.3f} ms; {kept}"
        )

    def __str__(self) -> str:
        lines = [f"{self.log}: {len(self.tasks)} task{'s' if len(self.tasks) != 1 else ''}"]
        lines += [f"  {name}: {now} trials measured, {before} in the log before" for name, now, before in self.tasks]
        if self.confirmed:
            lines.append(f"  {self.confirmed} measurements again of the tasks' best configurations")
        if self.graph_log is not None:
            lines.append(f"{self.graph_log}: the graph tuner's choice of one record per convolution")
        if self.network is not None:
            lines.append(f"  {self.network_line()}")
        lines.append(f"compile with tuning_records={str(self.records)!r}")
        return "\n".join(lines)


def graph_log_path(log: str | os.PathLike) -> Path:
    """Where :func:`tune` writes the graph tuner's choice for ``log`` (``records.json`` ->
    ``records.graph.json``), and its layout-transform measurements (``.layouts.json``)."""
    return _beside(Path(log), "graph")


def _beside(path: Path, part: str) -> Path:
    """``path`` with ``part`` before its suffix (``records.json`` -> ``records.<part>.json``)."""
    return path.with_name(f"{path.stem}.{part}{path.suffix or '.json'}")


def tune(
    mod: tvm.IRModule,
    log: str | os.PathLike,
    params: Mapping[str, object] | None = None,
    target=None,
    *,
    trials: int = 200,
    opt_level: int = 3,
    tuner: str = "auto",
    number: int = 4,
    repeat: int = 3,
    min_repeat_ms: int = 50,
    timeout: float = 10.0,
    layouts: bool = True,
    measurements: int = 3,
    network_check: bool = True,
    progress: Callable[[str], None] | None = None,
) -> TuneResult:
    """Tune the kernels of ``relay_aot.compile(mod, target, params, opt_level=...)`` with
    AutoTVM and append every measured configuration to ``log``.

    :param log: the AutoTVM log (JSON lines) to append to; compile with
        ``relay_aot.compile(mod, ..., tuning_records=log)``.
    :param trials: configurations measured per task at most (fewer when its space is smaller),
        the first of them the one an untuned compile uses (:func:`untuned_config`), so that a
        task's best record is never one measured slower than the untuned kernel.
        A task with that many records in ``log`` already is skipped; one with fewer measures the
        rest, its tuner starting from those records.
    :param target: as for :func:`relay_aot.compile` (by default this machine's CPU): the
        records are for that target, and the measurements run here.
    :param tuner: ``"auto"`` (XGBoost's cost model when xgboost is installed, else ``"ga"``),
        ``"xgb"``, ``"ga"``, ``"random"`` or ``"grid"``.
    :param number, repeat, min_repeat_ms, timeout: AutoTVM's local runner's settings.
    :param measurements: before the graph tuner, measure the best configurations of each
        convolution it chooses for (by median, the :data:`CONFIRM_CANDIDATES` best, and the
        untuned one) again, interleaved, until each has this many measurements; the graph tuner
        compares a configuration measured more than once by its median (:func:`median_costs`).
        The best of hundreds of single measurements is mostly the luckiest: on a machine whose
        speed varies by 10-20% from one second to the next, SqueezeNet's best configurations
        measured again came out 7% slower on average (docs/performance.md, "Tuned kernels").
        1 keeps AutoTVM's single measurements. (A compile with the log itself, for the other
        kernels, takes AutoTVM's choice, as ``autotvm.apply_history_best`` does.)
    :param layouts: then run TVM's graph tuner (:func:`tune_layouts`) where it applies (x86
        convolutions of a dataflow graph): each layer's best record picks its own data layout,
        and the layout transforms between layers can cost more than tuning saved. Its choice
        goes to :func:`graph_log_path` and is what to compile with (``result.records``).
    :param network_check: then time the module compiled with the graph tuner's choice against
        the untuned compile, the two libraries interleaved here on random inputs; where the
        untuned one is faster, the choice is replaced by the convolutions' untuned
        configurations (their measured records), so that tuning never leaves a network slower
        than it was. The graph tuner prices each kernel and layout transform alone: SqueezeNet's
        choice ran 4-10% slower than the untuned build in the network on a 2-core Xeon.
    :param progress: called with a line of text as each task starts (the CLI prints it); AutoTVM's
        progress bar shows the trials when stdout is a terminal.
    :returns: the tasks tuned, with the trials measured now and found in the log before.
    :raises ValueError: a bad ``trials``, ``measurements`` or ``tuner``; a line of ``log`` that
        is not a record (but a last one cut off mid-write, which is ignored and removed before
        the first append: :func:`end_lines`), or a record outside its task's configuration space
        (:func:`relay_aot.kernels.tuning.read`, which names the line).
    """
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    if not isinstance(measurements, int) or measurements < 1:
        raise ValueError(f"measurements must be a positive integer, got {measurements!r}")
    if tuner not in TUNERS:
        raise ValueError(f"tuner must be one of {', '.join(TUNERS)}, got {tuner!r}")
    log = Path(log)
    if not log.parent.is_dir():
        raise FileNotFoundError(f"{log}: directory {log.parent} does not exist")
    found = tasks(mod, params, target, opt_level)
    measured = _measured(log)
    result = TuneResult(log)
    runner = _LocalRunner(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, timeout=timeout)
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(timeout=timeout), runner=runner)
    try:
        _tune_tasks(found, measured, option, log, trials, tuner, progress, result)
        chosen_together = [task for task in found if task.name.startswith(GRAPH_TUNED_TEMPLATE)]
        if layouts and measurements > 1 and chosen_together:
            result.confirmed = _confirm(chosen_together, _measured(log), option, log, measurements, progress)
    finally:
        runner.close()
    if layouts and any(task.name.startswith(GRAPH_TUNED_TEMPLATE) for task in found):
        if progress is not None:
            progress("graph tuner: the convolutions' layouts, with the transforms between them")
        result.graph_log = tune_layouts(
            mod, log, params, target, opt_level=opt_level, timeout=timeout, progress=progress
        )
        if network_check and result.graph_log is not None:
            _check_in_the_network(mod, params, target, opt_level, found, result, progress)
    return result


#: Interleaved rounds of :func:`_network_times`, each timing both libraries for at least
#: :data:`NETWORK_ROUND_S` seconds.
NETWORK_ROUNDS = 9
NETWORK_ROUND_S = 0.05


def _check_in_the_network(
    mod, params, target, opt_level: int, found: list, result: TuneResult, progress: Callable[[str], None] | None
) -> None:
    """:func:`tune`'s check of the graph tuner's choice in the network (``network_check``)."""
    graph_log = result.graph_log
    assert graph_log is not None  # tune checks the choice only once the graph tuner wrote it
    untuned = _untuned_records(found, result.log)
    chosen = tuning.read(graph_log)
    if any(repr(inp.task.workload) not in untuned for inp, _ in chosen):
        return  # a convolution whose untuned configuration was not measured: nothing to fall back to
    times = _network_times(mod, params, target, opt_level, graph_log)
    if times is None:
        return
    result.network = times
    tuned_s, untuned_s = times
    if untuned_s < tuned_s:
        with graph_log.open("w") as out:
            for inp, _ in chosen:
                out.write(autotvm.record.encode(*untuned[repr(inp.task.workload)]) + "\n")
        result.kept_untuned = True
    if progress is not None:
        progress(result.network_line())


def _untuned_records(found: list, log: Path) -> dict:
    """Per workload (repr) of ``found``'s tasks, the record of its untuned configuration in
    ``log`` (its median cost), where it was measured."""
    measured = _measured(log)
    records = {}
    for task in found:
        config = untuned_config(task)
        if config is None:
            continue
        mine = [
            (inp, res)
            for inp, res in measured.get(_key(task.target, task.workload), [])
            if config_key(inp.config) == config_key(config)
        ]
        if mine:
            records[repr(task.workload)] = median_costs(mine)[0]
    return records


def _network_times(mod, params, target, opt_level: int, records: Path) -> tuple[float, float] | None:
    """Median seconds per call of ``mod`` compiled with ``records`` and without, interleaved on
    random inputs; None where ``@main`` takes anything but float tensors of static shapes."""
    import numpy as np

    from .compiler import compile as compile_module

    main = tvm.relay.transform.InferType()(mod)["main"]
    rng = np.random.default_rng(0)
    args = []
    for param in main.params:
        if params is not None and param.name_hint in params:
            continue  # bound by the compile
        ty = param.checked_type
        if not (
            isinstance(ty, tvm.relay.TensorType)
            and ty.dtype.startswith("float")
            and all(isinstance(d, tvm.tir.IntImm) for d in ty.shape)
        ):
            return None
        args.append(rng.uniform(-1, 1, [int(d) for d in ty.shape]).astype(ty.dtype))
    calls = [
        compile_module(mod, target, params, opt_level=opt_level, tuning_records=records),
        compile_module(mod, target, params, opt_level=opt_level),
    ]
    for call in calls:
        call(*args)  # the first call into a library resolves its symbols
    samples: list = [[], []]
    for _ in range(NETWORK_ROUNDS):
        for call, times in zip(calls, samples):
            count, started = 0, time.perf_counter()
            while True:
                call(*args)
                count += 1
                elapsed = time.perf_counter() - started
                if elapsed >= NETWORK_ROUND_S:
                    break
            times.append(elapsed / count)
    return float(np.median(samples[0])), float(np.median(samples[1]))


def _tune_tasks(
    found: list,
    measured: dict,
    option: dict,
    log: Path,
    trials: int,
    tuner: str,
    progress: Callable[[str], None] | None,
    result: TuneResult,
) -> None:
    """:func:`tune`'s kernel tuning, task by task, into ``result``."""
    for index, task in enumerate(found, 1):
        key = _key(task.target, task.workload)
        before = measured.get(key, [])
        wanted = min(trials, len(task.config_space))
        name = f"[{index}/{len(found)}] {task.name} {task.args}"
        # The untuned build's configuration is the first trial (also of a task tuned before).
        have = before + _measure_untuned(task, option, log, before)
        seeded = len(have) - len(before)
        if len(have) >= wanted:
            result.tasks.append((task.name, seeded, len(before)))
            if progress is not None:
                progress(f"{name}: {len(before)} trials in the log, skipped")
            continue
        left = wanted - len(have)
        if progress is not None:
            progress(f"{name}: {left} trials")
        chosen = _tuner(task, tuner)
        in_space = [(inp, res) for inp, res in have if _indexed(task, inp.config)]  # a cost model indexes the space
        if in_space:
            chosen.load_history(in_space)
        callbacks = [_log_to(log)]
        if os.isatty(1):
            callbacks.append(autotvm.callback.progress_bar(left, prefix=f"[{index}/{len(found)}]"))
        with _quiet_autotvm():
            chosen.tune(n_trial=left, measure_option=option, callbacks=callbacks)
        result.tasks.append((task.name, left + seeded, len(before)))


def measured_cost(result) -> float:
    """The cost of one AutoTVM measurement: the mean of its repeats (as AutoTVM compares them)."""
    return float(sum(result.costs) / len(result.costs))


def median_costs(found) -> list:
    """AutoTVM records ``(MeasureInput, MeasureResult)``, one per configuration: one measured
    more than once (:func:`tune` measures the best ones again) costs the median of its
    measurements. The lowest of several is the luckiest: on a machine whose speed varies it is
    the configuration measured in a quiet moment (the winner's curse); AutoTVM itself compares
    single measurements. Failed measurements are kept as they are."""
    grouped: dict = {}
    out = []
    for inp, res in found:
        if res.error_no != 0:
            out.append((inp, res))
            continue
        grouped.setdefault((*_key(inp.target, inp.task.workload), config_key(inp.config)), []).append((inp, res))
    for measured in grouped.values():
        inp, res = measured[-1]
        if len(measured) > 1:
            cost = statistics.median(measured_cost(r) for _, r in measured)
            res = autotvm.MeasureResult((cost,), 0, res.all_cost, res.timestamp)
        out.append((inp, res))
    return out


#: Configurations per task that :func:`tune` measures again (its best by median), besides the
#: untuned one.
CONFIRM_CANDIDATES = 4

#: Rankings per task :func:`_confirm` measures for: a configuration measured again may fall
#: behind one measured once, which is then measured too.
CONFIRM_PASSES = 3


def _confirm(
    found: list, measured: dict, option: dict, log: Path, measurements: int, progress: Callable[[str], None] | None
) -> int:
    """Measure each task's best configurations and its untuned one again (appended to ``log``)
    until each has ``measurements``; how many measurements that took. Each round measures each
    configuration once, so that the machine's slow and quiet moments fall on all of them."""
    done = 0
    for index, task in enumerate(found, 1):
        have = list(measured.get(_key(task.target, task.workload), []))
        untuned = untuned_config(task)
        measure = None
        for _ in range(CONFIRM_PASSES):
            costs: dict = {}
            for inp, res in have:
                costs.setdefault(config_key(inp.config), (inp.config, []))[1].append(measured_cost(res))
            ranked = sorted(costs.values(), key=lambda entry: statistics.median(entry[1]))[:CONFIRM_CANDIDATES]
            if (
                untuned is not None
                and config_key(untuned) in costs
                and all(config_key(c) != config_key(untuned) for c, _ in ranked)
            ):
                ranked.append(costs[config_key(untuned)])
            short = [(config, measurements - len(values)) for config, values in ranked if len(values) < measurements]
            if not short:
                break
            if progress is not None:
                progress(
                    f"[{index}/{len(found)}] {task.name}: {sum(n for _, n in short)} measurements again "
                    f"of its best configurations"
                )
            measure = measure or autotvm.measure.create_measure_batch(task, option)
            for round_ in range(max(n for _, n in short)):
                inputs = [autotvm.MeasureInput(task.target, task, config) for config, n in short if n > round_]
                with _quiet_autotvm():
                    results = measure(inputs)
                _log_to(log)(None, inputs, results)
                have += [(inp, res) for inp, res in zip(inputs, results) if res.error_no == 0]
                done += len(inputs)
    return done


#: Convolutions up to which the graph tuner's exact dynamic programming is used.
DP_MAX_CONVOLUTIONS = 60

#: The template whose records TVM's graph tuner chooses between (its x86 convolutions, whose
#: configurations fix their input and output channel blocking).
GRAPH_TUNED_TEMPLATE = "conv2d_NCHWc.x86"


def tune_layouts(
    mod: tvm.IRModule,
    log: str | os.PathLike,
    params: Mapping[str, object] | None = None,
    target=None,
    *,
    opt_level: int = 3,
    output: str | os.PathLike | None = None,
    max_candidates: int = 20,
    timeout: float = 10.0,
    progress: Callable[[str], None] | None = None,
) -> Path | None:
    """TVM's graph tuner over the convolutions of ``mod``: from the records of ``log``, one
    configuration per convolution, chosen together with the layout transforms their blockings
    need between layers (whose times it measures here; kept in ``.layouts.json`` next to the
    output, so a second run measures none again).

    The graph is the one relay_aot's layout choice reads (:func:`relay_aot.passes.layout_graph`),
    so its workloads are those of :func:`tasks`. TVM's dynamic-programming tuner is used, or
    its PBQP tuner (approximate, but polynomial) past :data:`DP_MAX_CONVOLUTIONS` convolutions,
    as TVM's x86 tutorial advises for large graphs.

    :param progress: called with a line of text every 25 layout transforms measured (SqueezeNet
        needs about 600: 3 minutes here, one RPC tracker and server measuring them all).
    :returns: the output (by default :func:`graph_log_path` of ``log``), or None when the module
        has no convolution for it (then compile with ``log`` itself).
    :raises ValueError: a convolution has no record in ``log`` (tune it first).
    """
    from tvm.autotvm.graph_tuner import DPTuner, PBQPTuner

    request = Request.make(mod, target, params, opt_level=opt_level)
    graph = passes.layout_graph(request.mod, request.params, opt_level, request.target)["main"]
    shapes, dtypes = {}, set()
    for param in graph.params:
        ty = param.checked_type
        if not isinstance(ty, tvm.relay.TensorType) or not all(isinstance(d, tvm.tir.IntImm) for d in ty.shape):
            return None  # the graph tuner reads dataflow graphs of static tensors only
        shapes[param.name_hint] = tuple(int(d) for d in ty.shape)
        dtypes.add(ty.dtype)
    conv2d = tvm.relay.op.get("nn.conv2d")
    convolutions = _count_calls(graph, conv2d)
    if not convolutions or len(dtypes) > 1:
        return None
    records = [
        (inp, res)
        for inp, res in median_costs(tuning.read(log))
        if res.error_no == 0 and inp.task.name == GRAPH_TUNED_TEMPLATE
    ]
    output = Path(output) if output is not None else graph_log_path(log)
    layout_log = _beside(output, "layouts")
    # (records of layout transforms, which have no configuration space to check)
    layout_records = tuning.read(layout_log, check_spaces=False) if layout_log.exists() else None
    chosen = DPTuner if convolutions <= DP_MAX_CONVOLUTIONS else PBQPTuner
    with _quiet_autotvm(), request.target:
        try:
            tuner = chosen(
                graph,
                shapes,
                records,
                [conv2d],
                request.target,
                max_sch_num=max_candidates,
                dtype=dtypes.pop(),
                verbose=False,
                log_file=os.devnull,
            )
        except KeyError as err:
            raise ValueError(
                f"{log}: no record for a convolution of the module ({err}): tune its kernels first"
            ) from None
        runner = _CountingRunner(progress, number=100, repeat=1, timeout=timeout)
        try:
            tuner.benchmark_layout_transform(timeout=timeout, layout_records=layout_records, runner=runner)
        finally:
            runner.close()
        if progress is not None:
            progress(
                f"graph tuner: {runner.count} layout transforms measured, "
                f"{len(layout_records or [])} read from {layout_log}"
            )
        with layout_log.open("w") as out:
            for inp, res in tuner.layout_transform_perf_records.values():
                if inp.task is not None:  # measured, not inferred
                    out.write(autotvm.record.encode(inp, res) + "\n")
        tuner.run()
        # TVM's writer appends, and ApplyGraphBest takes a file's records in order, one per
        # convolution: a second run's choice after the first would never be read.
        output.unlink(missing_ok=True)
        tuner.write_opt_sch2record_file(str(output))
    return output


class _LocalRunner(autotvm.LocalRunner):
    """AutoTVM's local runner, with one RPC tracker and server for all the tasks it measures.

    TVM's starts a tracker and a server (two processes that import TVM: 1.5-2 s here) for each
    task, which is each layout transform for the graph tuner (hundreds of one-trial tasks).
    :meth:`close` stops them."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._rpc = None

    def set_task(self, task):
        if self._rpc is None:
            self._rpc = super().set_task(task)  # (server, tracker), stopped when dropped
        else:
            self.task = task  # the device checked for the first task is still there
        return self._rpc

    def close(self) -> None:
        """Stop the tracker and the server."""
        if self._rpc is not None:
            for process in reversed(self._rpc):  # the tracker first: the server's going is no error
                process.terminate()
            self._rpc = None


class _CountingRunner(_LocalRunner):
    """AutoTVM's local runner, reporting how many measurements it made: the graph tuner measures
    its layout transforms one at a time, hundreds of them, for minutes."""

    def __init__(self, report: Callable[[str], None] | None, **kwargs):
        super().__init__(**kwargs)
        self.report = report
        self.count = 0

    def run(self, measure_inputs, build_results):
        results = super().run(measure_inputs, build_results)
        self.count += len(results)
        if self.report is not None and self.count % 25 == 0:
            self.report(f"graph tuner: {self.count} layout transforms measured")
        return results


def _count_calls(func, op) -> int:
    return len(
        nodes_where(
            func,
            lambda node: isinstance(node, tvm.relay.Call) and isinstance(node.op, tvm.ir.Op) and node.op.same_as(op),
        )
    )


def untuned_config(task):
    """The configuration an untuned compile gives ``task``'s kernel -- relay_aot's schedule rule
    (:mod:`relay_aot.kernels.schedule_rules`), else the template's fallback -- as an entity of
    the task's space; the rule's own configuration where it is outside that space (a block of
    output columns that does not divide the width, 9 of 17: the template's split lists divisors
    and powers of two only, so no tuner would measure it); None where the fallback is not in
    the space."""
    rule = schedule_rules.RULES.get(task.name)
    config = rule(task.workload, task.target) if rule is not None else None
    ruled = config is not None
    if config is None:
        config = autotvm.task.space.FallbackConfigEntity()
        try:
            with autotvm.task.ApplyConfig(config), task.target:
                task.func(*task.args)  # the template fills in its fallback
        except Exception:  # noqa: BLE001 - a template that cannot say: no seed, tuning goes on
            return None
    space = task.config_space
    knobs = []
    for name, subspace in space.space_map.items():
        wanted = _entity_key(config._entity_map.get(name))
        index = next((i for i, entity in enumerate(subspace.entities) if _entity_key(entity) == wanted), None)
        if index is None:
            return config if ruled else None
        knobs.append(index)
    return space.get(space.knob2point(knobs))


def _entity_key(entity) -> str:
    """A knob's value as the space lists it: a split's outer extent is the space's -1 (inferred)
    where a configuration made outside the space states it."""
    if isinstance(entity, autotvm.task.space.SplitEntity):
        return str(list(entity.size[1:]))
    return str(entity)


def config_key(config) -> tuple:
    """A configuration's knobs as the space lists them: the same for a configuration read back
    from a log and one made here (``str`` of a configuration made outside the space, the rule's,
    prints its knobs differently, so it never matched its own record)."""
    return tuple((name, _entity_key(entity)) for name, entity in sorted(config._entity_map.items()))


def _measure_untuned(task, option, log: Path, before: list) -> list:
    """Measure the untuned configuration of ``task`` (appended to ``log``) unless ``before``
    has it: tuners start from random points, and a best record worse than what the untuned
    build runs would make tuning a loss (the graph tuner's candidates are those records too)."""
    config = untuned_config(task)
    if config is None or any(config_key(inp.config) == config_key(config) for inp, _ in before):
        return []
    inputs = [autotvm.MeasureInput(task.target, task, config)]
    with _quiet_autotvm():
        results = autotvm.measure.create_measure_batch(task, option)(inputs)
    _log_to(log)(None, inputs, results)  # as tune's own trials are
    return [(inp, res) for inp, res in zip(inputs, results) if res.error_no == 0]


def _key(target, workload) -> tuple:
    # The whole target, CPU and features included: a log measured on another CPU does not make
    # this one's task done (AutoTVM's own lookup goes by the target's keys, "cpu" for all).
    return (str(target), repr(workload))


def _measured(log: Path) -> dict:
    """The successful records of ``log`` by (target, workload); empty if it does not exist.

    :raises ValueError: a line of ``log`` is not a record, or a record is outside its task's
        configuration space (:func:`relay_aot.kernels.tuning.read`).
    """
    found: dict = {}
    if not log.exists():
        return found
    for inp, res in tuning.read(log):
        if res.error_no == 0:
            found.setdefault(_key(inp.target, inp.task.workload), []).append((inp, res))
    return found


def _indexed(task, config) -> bool:
    """Whether ``config``'s index is the point of ``task``'s space its knobs are: what a tuner's
    cost model takes it for (a configuration made outside the space has index -1; one whose
    index disagrees with its knobs would teach the model another configuration's cost)."""
    space = task.config_space
    if not 0 <= config.index < space.range_length:
        return False
    try:
        return config_key(space.get(config.index)) == config_key(config)
    except IndexError:  # excluded by the space's constraints
        return False


def _log_to(log: Path) -> Callable:
    """AutoTVM's ``log_to_file`` callback for ``log``, that first ends the log at a line's end
    (:func:`end_lines`)."""
    write = autotvm.callback.log_to_file(str(log))

    def append(tuner, inputs, results) -> None:
        end_lines(log)
        write(tuner, inputs, results)

    return append


def end_lines(log: Path) -> None:
    """Make ``log`` end with a newline before a record is appended to it, so the record is a
    line of its own: AutoTVM appends ``record + "\\n"`` to whatever the file ends with.

    A last line cut off mid-write (not JSON: :func:`relay_aot.kernels.tuning.is_cut`) is
    removed, with a warning naming the file and the line; a complete record that lacks only its
    newline gets it. Removing the cut line, rather than starting a new line after it, keeps the
    log a log that TVM's reader reads too (``autotvm.apply_history_best`` refuses a malformed
    line anywhere) and that :func:`relay_aot.kernels.tuning.read` does not refuse (a malformed
    line that is not the last one is refused); what is removed never was a record. The file is
    checked again here, just before the append, not when it was read: the bytes removed are the
    ones found now. (Two tuners appending to one log at once are not supported: one would take
    the other's line being written for a cut one.)
    """
    try:
        with log.open("r+b") as out:
            size = out.seek(0, os.SEEK_END)
            if size == 0:
                return
            out.seek(size - 1)
            if out.read(1) == b"\n":
                return
            out.seek(0)
            data = out.read()
            start = data.rfind(b"\n") + 1
            if not data[start:].strip():
                out.truncate(start)  # blanks after the last record: TVM's reader refuses a blank line
            elif tuning.is_cut(data[start:]):
                out.truncate(start)
                logging.getLogger("relay_aot").warning(
                    "tuning records %s, line %d: the last line was cut off mid-write (no newline, not a record): "
                    "removed (%d bytes) before appending",
                    log,
                    data.count(b"\n") + 1,
                    size - start,
                )
            else:
                out.seek(size)
                out.write(b"\n")
    except FileNotFoundError:
        return


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

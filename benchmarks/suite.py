"""Run workloads on executors in this process: prepare, check, time; one record per pair.

For each workload the module is built once, then every selected executor prepares it and makes
a first call whose result is checked against the reference executor's (the VM's, or the
interpreter's where the VM cannot run the program) and a warm-up call. Then all of them are
timed in interleaved rounds (``timing.interleave``), and each makes a last call that is checked
again (so state carried between calls cannot hide). The kernel-only floor (``kernel_floor.py``)
is one more pseudo-executor, ``kernels``.

Executors run on a thread with a 1 GiB stack: TVM's interpreter and py_converter recurse on
the C and Python stacks and crash on the main thread's 8 MiB at about 1,500 nested calls.

Records are plain dicts (JSON-ready). ``python -m benchmarks.suite`` is the worker process
the command line starts once per thread setting; it streams records as JSON lines so that a
crash loses only the executor it happened in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from relay_aot import cpu, testing

from . import executors as executors_mod
from . import kernel_floor, tuning
from . import workloads as workloads_mod
from .timing import Budget, Plan, interleave, timed

#: Key of the kernel-only pseudo-executor.
KERNELS = "kernels"
KERNELS_LABEL = "kernels only (VM's kernel calls replayed)"

_STACK_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class Options:
    """How to time: budgets per executor and for the kernel floor, and the TVM target (by default
    relay_aot's: this machine's CPU, named explicitly, so every executor gets the same string)."""

    target: str = dataclasses.field(default_factory=cpu.host_target)
    budget: Budget = Budget(seconds=1.5)
    kernel_budget: Budget = Budget(min_runs=5, min_run_s=0.02)

    @staticmethod
    def quick() -> Options:
        """Few, short runs: for smoke tests and trying things out."""
        return Options(
            budget=Budget(seconds=0.2, min_runs=2, max_runs=3, min_run_s=0.005),
            kernel_budget=Budget(min_runs=2, min_run_s=0.002),
        )


def _error(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    # TVM errors end with the message after a long C++ traceback.
    message = lines[-1] if lines else ""
    text = f"{type(err).__name__}: {message}" if message else type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _record(workload: str, executor: str, status: str, **fields) -> dict[str, Any]:
    return {"workload": workload, "executor": executor, "status": status, **fields}


class WorkloadRun:
    """One workload's module, arguments and reference result, shared by its executors."""

    def __init__(self, workload: workloads_mod.Workload, options: Options):
        self.workload = workload
        self.options = options
        self.mod = workload.module()
        self.args = workload.args()
        self.reference: tuple[str, Any] | None = None

    def check(self, key: str, result: Any) -> str | None:
        """None if ``result`` agrees with the reference (or there is none yet), else the difference."""
        if self.reference is None:
            return None
        name, expected = self.reference
        try:
            testing.assert_same(
                testing.normalize(result), expected, self.workload.rtol, self.workload.atol, names=(key, name)
            )
        except (testing.Mismatch, TypeError) as err:
            return str(err)[:500]
        return None

    def prepare(self, executor: executors_mod.Executor) -> dict[str, Any]:
        """Prepare one executor and check its first call; a record, with ``plan`` if it can be timed."""
        name, key = self.workload.name, executor.key
        reason = executor.unsupported(self.workload)
        if reason:
            return _record(name, key, "n/a", reason=reason)
        try:
            with tuning.context(self.workload, self.options.target):  # a tuned row's executors compile with its records
                call, prepare_s = timed(
                    lambda: executor.prepare_workload(self.workload, self.mod, self.args, self.options.target)
                )
            first, first_call_s = timed(call)
        except Exception as err:  # noqa: BLE001 - any failure makes this executor n/a, reported
            return _record(name, key, "n/a", reason=_error(err))
        record = _record(name, key, "ok", prepare_s=prepare_s, first_call_s=first_call_s)
        if self.reference is None and key in executors_mod.REFERENCES:
            self.reference = (key, testing.normalize(first))
            record["reference"] = True
        else:
            record["checked_against"] = self.reference[0] if self.reference else None
        mismatch = self.check(key, first)
        try:
            _, estimate = timed(call)  # warm-up; estimates the cost of one call
        except Exception as err:  # noqa: BLE001
            return _record(name, key, "n/a", reason=f"failed on a second call: {_error(err)}")
        if mismatch:
            record.update(status="mismatch", reason=mismatch)
        budget = self.options.budget.capped(executor.max_runs, executor.min_runs)
        record["plan"] = Plan.of(call, budget, estimate)
        return record

    def run_all(
        self, executors: Iterable[executors_mod.Executor], on_start: Callable[[str, str], None] = lambda w, e: None
    ) -> list[dict[str, Any]]:
        """Prepare and check each executor, time them all in interleaved rounds, check again."""
        name = self.workload.name
        records = []
        for executor in ordered(executors):
            on_start(name, executor.key)
            records.append(self.prepare(executor))
        timed_records = [r for r in records if "plan" in r]
        owner = {id(r["plan"]): r["executor"] for r in timed_records}
        interleave([r["plan"] for r in timed_records], lambda plan: on_start(name, owner[id(plan)]))
        for record in timed_records:
            plan = record.pop("plan")
            if plan.error is not None:
                record.update(status="n/a", reason=f"failed on a repeated call: {_error(plan.error)}")
                continue
            record["timing"] = plan.timing().to_json()
            on_start(name, record["executor"])
            try:
                last = plan.call()
            except Exception as err:  # noqa: BLE001
                record.update(status="n/a", reason=f"failed on the last call: {_error(err)}")
                continue
            mismatch = self.check(record["executor"], last)
            if mismatch and record["status"] == "ok":
                record.update(status="mismatch", reason=mismatch)
        return records

    def run(self, executor: executors_mod.Executor) -> dict[str, Any]:
        """Prepare, check and time one executor."""
        return self.run_all([executor])[0]

    def kernels(self) -> dict[str, Any]:
        """The kernel-only floor of one call (from the VM's kernel calls)."""
        name = self.workload.name
        if self.workload.references:
            return _record(
                name, KERNELS, "n/a", reason=f"it replays the VM's kernel calls, and {executors_mod.NO_REFERENCES}"
            )
        try:
            with tuning.context(self.workload, self.options.target):
                floor, prepare_s = timed(
                    lambda: kernel_floor.kernel_floor(
                        self.mod, self.args, self.options.target, self.options.kernel_budget
                    )
                )
        except Exception as err:  # noqa: BLE001
            return _record(name, KERNELS, "n/a", reason=_error(err))
        return _record(
            name,
            KERNELS,
            "ok",
            prepare_s=prepare_s,
            timing=floor.timing.to_json(),
            kernel_calls=floor.calls,
            distinct_kernels=floor.distinct,
            top_kernels=floor.per_kernel[:5],
        )


def ordered(executors: Iterable[executors_mod.Executor]) -> list[executors_mod.Executor]:
    """References first (the VM, then the interpreter), then the others in report order."""
    executors = list(executors)
    rank = {key: i for i, key in enumerate(executors_mod.REFERENCES)}
    return sorted(executors, key=lambda e: rank.get(e.key, len(rank)))


def run_workload(
    workload: workloads_mod.Workload,
    executors: Iterable[executors_mod.Executor],
    options: Options,
    with_kernels: bool = True,
    skip: frozenset = frozenset(),
    exclude: frozenset = frozenset(),
    on_start: Callable[[str, str], None] = lambda workload, executor: None,
) -> Iterator[dict[str, Any]]:
    """Records for ``workload`` on each executor (and the kernel floor), one at a time.

    ``skip`` holds executor keys already measured by a worker that crashed later: they are not
    reported again, though the reference executors still run for the checks. ``exclude``
    holds executors that crashed the process on this workload: they do not run at all.
    """
    run = WorkloadRun(workload, options)
    chosen = [e for e in executors if e.key not in exclude and (e.key not in skip or e.key in executors_mod.REFERENCES)]
    for record in run.run_all(chosen, on_start):
        if record["executor"] not in skip:
            yield record
    if with_kernels and KERNELS not in skip | exclude:
        on_start(workload.name, KERNELS)
        yield run.kernels()


def progress_line(record: dict[str, Any]) -> str:
    """One line saying how an executor did on a workload."""
    head = f"{record['workload']:<14} {record['executor']:<17} {record['status']:<8}"
    if "timing" in record:
        head += f" {record['timing']['median'] * 1e3:10.4f} ms/call"
    if "prepare_s" in record:
        head += f"  (prepare {record['prepare_s']:.2f} s)"
    if record.get("reason"):
        head += f"  {record['reason'].splitlines()[0][:150]}"
    return head


def setting_label(tvm_num_threads: str | None) -> str:
    """How a thread setting is named in reports."""
    if tvm_num_threads:
        return f"TVM_NUM_THREADS={tvm_num_threads}"
    return "default threading (TVM_NUM_THREADS unset)"


def thread_setting() -> dict[str, Any]:
    """The threading this process runs under."""
    import tvm

    env = os.environ.get("TVM_NUM_THREADS")
    return {
        "TVM_NUM_THREADS": env,
        "label": setting_label(env),
        "tvm_runtime_num_threads": int(tvm.get_global_func("runtime.NumThreads")()),
    }


def on_big_stack(func: Callable[[], Any]) -> Any:
    """Run ``func`` on a new thread with a 1 GiB stack; return its result or raise its error."""
    outcome: dict[str, Any] = {}

    def body():
        try:
            outcome["value"] = func()
        except BaseException as err:  # noqa: BLE001 - re-raised on the calling thread
            outcome["error"] = err

    previous = threading.stack_size(_STACK_BYTES)
    try:
        worker = threading.Thread(target=body, name="benchmarks")
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def run_suite(
    workload_names: Iterable[str],
    executor_keys: Iterable[str],
    options: Options,
    with_kernels: bool = True,
) -> list[dict[str, Any]]:
    """All records of the selected workloads and executors, in this process (tests use this)."""
    known = workloads_mod.by_name()
    chosen = [executors_mod.by_key()[k] for k in executor_keys]

    def body():
        records = []
        for name in workload_names:
            records.extend(run_workload(known[name], chosen, options, with_kernels))
        return records

    return on_big_stack(body)


# -- worker process ---------------------------------------------------------------------------


def _worker(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="benchmarks worker: one thread setting, JSON lines out")
    parser.add_argument("--out", required=True, help="JSON lines file to append records to")
    parser.add_argument("--workloads", required=True)
    parser.add_argument("--executors", required=True)
    parser.add_argument("--options", required=True, help="Options as JSON")
    parser.add_argument("--no-kernels", action="store_true")
    parser.add_argument("--skip", default="[]", help="JSON list of [workload, executor] already done")
    parser.add_argument("--exclude", default="[]", help="JSON list of [workload, executor] that crashed")
    args = parser.parse_args(argv)
    logging.getLogger("autotvm").setLevel(logging.ERROR)  # "operators have not been tuned"

    raw = json.loads(args.options)
    options = Options(
        target=raw["target"], budget=Budget(**raw["budget"]), kernel_budget=Budget(**raw["kernel_budget"])
    )
    skip, exclude = _pairs(args.skip), _pairs(args.exclude)
    known = workloads_mod.by_name()
    chosen = [executors_mod.by_key()[k] for k in args.executors.split(",") if k]

    with open(args.out, "a", encoding="utf-8") as out:

        def emit(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()
            if "status" in record:
                print(f"  {progress_line(record)}", flush=True)

        def body():
            for name in args.workloads.split(","):
                records = run_workload(
                    known[name],
                    chosen,
                    options,
                    with_kernels=not args.no_kernels,
                    skip=frozenset(skip.get(name, ())),
                    exclude=frozenset(exclude.get(name, ())),
                    on_start=lambda w, e: emit({"started": [w, e]}),
                )
                for record in records:
                    emit(record)
            emit({"setting": thread_setting()})

        try:
            on_big_stack(body)
        except Exception:  # noqa: BLE001 - the parent reports it
            emit({"worker_error": traceback.format_exc()[-2000:]})
            return 1
    return 0


def _pairs(text: str) -> dict[str, set]:
    by_workload: dict[str, set] = {}
    for workload, executor in json.loads(text):
        by_workload.setdefault(workload, set()).add(executor)
    return by_workload


def options_json(options: Options) -> str:
    """``Options`` as the worker's ``--options`` argument."""
    return json.dumps(dataclasses.asdict(options))


if __name__ == "__main__":
    sys.exit(_worker())

"""``python -m benchmarks``: run the suite under each thread setting and write the results.

TVM's thread pool is configured once per process, so every thread setting runs in its own
worker process (``python -m benchmarks.suite``). A worker streams its records as JSON lines;
if it dies (a segfault in an executor), the record it was working on is marked "crashed" and
a new worker carries on with the rest. relay_aot builds go to a fresh cache shared by the
settings (unless ``--keep-cache``), so the first setting's preparation time includes the C++
build and the second's shows a cache hit.

The full suite also measures compile times (``compile_time.py``: relay_aot's first compile, a
new module with a warm cache and a cache hit, against the VM's compile and ``relay.build``) for
``compile_time.COMPILE_WORKLOADS``; ``--compile-workloads`` chooses them for any run.

The full suite writes ``results.json``, ``results.md`` and ``speedup.png`` to
``docs/benchmarks/``; a partial or quick run writes them to ``.cache/benchmarks/`` unless
``--output-dir`` says otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import compile_time, machine, report, tuning
from . import executors as executors_mod
from . import workloads as workloads_mod
from .suite import KERNELS, Options, options_json, setting_label
from .timing import Budget

ROOT = machine.ROOT
#: Thread settings: the name on the command line and the value of TVM_NUM_THREADS (None: unset).
THREAD_SETTINGS = {"default": None, "1": "1"}
#: A worker that writes nothing for this long (one executor preparing or timing one workload)
#: is stopped, and the harness goes on without that pair: one stuck peer must not stall a run.
STALL_LIMIT_S = 900


def _csv(text: str, known: list[str], what: str) -> list[str]:
    chosen = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (choose from {', '.join(known)})")
    return chosen


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    workload_names = list(workloads_mod.by_name())
    executor_keys = list(executors_mod.by_key())
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time relay_aot against TVM's executors on Relay programs with control flow.",
    )
    parser.add_argument(
        "--workloads", default=",".join(workload_names), help=f"comma-separated subset of: {', '.join(workload_names)}"
    )
    parser.add_argument(
        "--executors",
        default=",".join(executor_keys),
        help=f"comma-separated subset of: {', '.join(executor_keys)} (vm is added: it is the baseline)",
    )
    parser.add_argument(
        "--threads",
        choices=["both", *THREAD_SETTINGS],
        default="both",
        help="thread settings to run: TVM's default, TVM_NUM_THREADS=1, or both (default)",
    )
    parser.add_argument("--quick", action="store_true", help="few short runs (a smoke test, not a measurement)")
    parser.add_argument("--runs", type=int, help="at most this many timed runs per executor (default 15; quick 3)")
    parser.add_argument("--budget", type=float, help="seconds of timing per executor and workload (default 1.5)")
    parser.add_argument("--no-kernels", action="store_true", help="skip the kernel-only floor")
    parser.add_argument(
        "--target",
        help="TVM target for every executor (default: relay_aot's, this machine's CPU, "
        "e.g. 'llvm -mcpu=znver3'; llvm: generic x86-64)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        help="where results go (default docs/benchmarks for the full suite, else .cache/benchmarks)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS_JSON",
        help="print the tables and redraw the chart of an earlier run's JSON (runs nothing)",
    )
    parser.add_argument(
        "--keep-cache",
        action="store_true",
        help="use $RELAY_AOT_CACHE_DIR (or the user cache) instead of a fresh build cache",
    )
    parser.add_argument(
        "--compile-workloads",
        metavar="PROGRAMS",
        help="programs of the compile-time table, comma-separated (lstm, gen50 or workload names; "
        f"default: {','.join(compile_time.COMPILE_WORKLOADS)} on a full run, none otherwise)",
    )
    parser.add_argument(
        "--tune-trials",
        type=int,
        default=tuning.DEFAULT_TRIALS,
        metavar="N",
        help="the tuned rows' budget: AutoTVM trials per kernel, resumed from the records in "
        f"{tuning.RECORDS_DIR.relative_to(ROOT)} (default {tuning.DEFAULT_TRIALS}; "
        "0: time with the records as they are; a quick run never tunes)",
    )
    parser.add_argument(
        "--compile-repeat",
        type=int,
        default=1,
        help="processes per compile-time measurement, the median is reported (default 1)",
    )
    args = parser.parse_args(argv)
    if args.tune_trials < 0:
        parser.error(f"--tune-trials must be 0 or more, got {args.tune_trials}")
    args.workload_list = _csv(args.workloads, workload_names, "workloads")
    args.compile_list = (
        None
        if args.compile_workloads is None
        else _csv(args.compile_workloads, compile_time.program_names(), "compile workloads")
    )
    args.executor_list = _csv(args.executors, executor_keys, "executors")
    if "vm" not in args.executor_list:
        args.executor_list.insert(0, "vm")
    return args


def make_options(args: argparse.Namespace) -> Options:
    """Timing options from the command line."""
    options = Options.quick() if args.quick else Options()
    budget = options.budget
    if args.runs is not None:
        budget = Budget(budget.seconds, min(budget.min_runs, args.runs), args.runs, budget.min_run_s)
    if args.budget is not None:
        budget = Budget(args.budget, budget.min_runs, budget.max_runs, budget.min_run_s)
    target = options.target if args.target is None else args.target
    return Options(target=target, budget=budget, kernel_budget=options.kernel_budget)


def _run_watched(worker: subprocess.Popen, out: Path) -> tuple[int, bool]:
    """Wait for ``worker``; kill it when ``out`` has not grown for :data:`STALL_LIMIT_S`.

    Returns its exit status and whether it was stopped for stalling.
    """
    last = time.monotonic()
    size = -1
    while worker.poll() is None:
        now_size = out.stat().st_size if out.exists() else 0
        if now_size != size:
            size, last = now_size, time.monotonic()
        elif time.monotonic() - last > STALL_LIMIT_S:
            worker.kill()
            return worker.wait(), True
        time.sleep(1.0)
    return worker.returncode, False


def _died(code: int) -> str:
    if code < 0:
        try:
            return f"the worker process died of {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker process died of signal {-code}"
    return f"the worker process exited with status {code}"


def _log_tail(log: Path, start: int, lines: int = 20) -> list[str]:
    """The last lines a crashed worker wrote to stderr, without TVM's routine warnings."""
    with open(log, encoding="utf-8", errors="replace") as f:
        f.seek(start)
        text = f.read().splitlines()
    noise = ("letlist not used", "have not been tuned")
    return [line for line in text if not any(n in line for n in noise)][-lines:]


def run_setting(
    name: str, args: argparse.Namespace, options: Options, env: dict[str, str], work_dir: Path
) -> dict[str, Any]:
    """All records under one thread setting, restarting the worker after a crash."""
    env = dict(env)
    value = THREAD_SETTINGS[name]
    if value is None:
        env.pop("TVM_NUM_THREADS", None)
    else:
        env["TVM_NUM_THREADS"] = value
    records: list[dict] = []
    crashed: list[list[str]] = []
    setting: dict[str, Any] = {}
    log = work_dir / f"worker-{name}.log"
    start = time.perf_counter()
    # A crash leaves its (workload, executor) out of the next worker, so every restart makes
    # progress and the loop ends: it restarts as often as pairs crash (the int8 models' VM,
    # graph executor and kernel floor abort on VNNI CPUs: six restarts for two models), never
    # leaving the workloads after them silently unmeasured. A worker reports a workload's records
    # when it is done with it, so those before the crash are done: the next worker starts at the
    # crashed one (from the start, it ran every earlier workload's VM again for the checks:
    # minutes per restart).
    remaining = list(args.workload_list)
    for attempt in itertools.count():
        out = work_dir / f"records-{name}-{attempt}.jsonl"
        command = [
            sys.executable,
            "-m",
            "benchmarks.suite",
            "--out",
            str(out),
            "--workloads",
            ",".join(remaining),
            "--executors",
            ",".join(args.executor_list),
            "--options",
            options_json(options),
            "--skip",
            json.dumps([[r["workload"], r["executor"]] for r in records]),
            "--exclude",
            json.dumps(crashed),
        ]
        if args.no_kernels:
            command.append("--no-kernels")
        log_start = log.stat().st_size if log.exists() else 0
        with open(log, "a", encoding="utf-8") as stderr:
            code, stalled = _run_watched(subprocess.Popen(command, cwd=ROOT, env=env, stderr=stderr), out)
        current = None
        worker_error = None
        for line in out.read_text(encoding="utf-8").splitlines() if out.exists() else []:
            item = json.loads(line)
            if "started" in item:
                current = item["started"]
            elif "setting" in item:
                setting = item["setting"]
            elif "worker_error" in item:
                worker_error = item["worker_error"]
            else:
                records.append(item)
                current = None
        if code == 0:
            break
        if current is None or worker_error:
            raise SystemExit(f"benchmark worker ({name}) failed: {worker_error or _died(code)}; see {log}")
        if current in crashed:
            raise SystemExit(f"benchmark worker ({name}) crashed twice on {current}; see {log}")
        workload, executor = current
        print(
            f"  [{name}] {workload} / {executor}: {'stalled' if stalled else _died(code)}; restarting without it",
            flush=True,
        )
        died = f"no result after {STALL_LIMIT_S} s, stopped" if stalled else _died(code)
        records.append(
            {
                "workload": workload,
                "executor": executor,
                "status": "crashed",
                "reason": f"{died} (the harness went on without it)",
                "log_tail": _log_tail(log, log_start),
            }
        )
        crashed.append(current)
        remaining = remaining[remaining.index(workload) :] if workload in remaining else remaining
    setting["wall_s"] = time.perf_counter() - start
    if not setting.get("label"):  # the worker died before it could say
        setting.update(label=setting_label(value), TVM_NUM_THREADS=value)
    order = {w: i for i, w in enumerate(args.workload_list)}
    columns = {c: i for i, c in enumerate(report.COLUMNS)}
    records.sort(key=lambda r: (order.get(r["workload"], 99), columns.get(r["executor"], 99)))
    report.add_ratios(records)
    return {"setting": setting, "records": records}


def write_outputs(result: dict, output_dir: Path, write_json: bool = True) -> list[Path]:
    """results.json, results.md and speedup.png; the paths written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    chart_path = output_dir / "speedup.png"
    why_not = report.chart(result, chart_path)
    if why_not:
        print(f"no chart: {why_not}", file=sys.stderr)
    else:
        written.append(chart_path)
    if write_json:
        json_path = output_dir / "results.json"
        json_path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(json_path)
    md_path = output_dir / "results.md"
    md_path.write_text(report.markdown_report(result, None if why_not else chart_path.name), encoding="utf-8")
    return [*written, md_path]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks``."""
    args = parse_args(argv)
    if args.render:
        result = json.loads(args.render.read_text(encoding="utf-8"))
        print(report.text_report(result))
        for path in write_outputs(result, args.output_dir or args.render.parent, write_json=False):
            print(f"wrote {path}")
        return 0
    options = make_options(args)
    full = (
        not args.quick
        and args.workload_list == list(workloads_mod.by_name())
        and set(args.executor_list) == set(executors_mod.by_key())
        and args.threads == "both"
        and not args.no_kernels
        and args.runs is None
        and args.budget is None
    )
    output_dir = args.output_dir or (ROOT / "docs" / "benchmarks" if full else ROOT / ".cache" / "benchmarks")
    settings = list(THREAD_SETTINGS) if args.threads == "both" else [args.threads]
    compile_list = (
        args.compile_list if args.compile_list is not None else (compile_time.COMPILE_WORKLOADS if full else [])
    )

    env = dict(os.environ)
    env.setdefault("TOPHUB_LOCATION", "NONE")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="relay_aot-bench-") as tmp:
        work_dir = Path(tmp)
        if not args.keep_cache:
            env["RELAY_AOT_CACHE_DIR"] = str(work_dir / "cache")
        result: dict[str, Any] = {
            "machine": machine.describe(),
            "options": {
                "target": options.target,
                "budget": dataclasses.asdict(options.budget),
                "kernel_budget": dataclasses.asdict(options.kernel_budget),
                "quick": args.quick,
                "fresh_build_cache": not args.keep_cache,
            },
            "workloads": {w.name: w.description for w in workloads_mod.all_workloads() if w.name in args.workload_list},
            "executors": {k: report.LABELS[k] for k in [*args.executor_list, KERNELS]},
            "settings": [],
        }
        tuned_rows = [w for w in workloads_mod.all_workloads() if w.tuned_from and w.name in args.workload_list]
        if tuned_rows and args.tune_trials > 0 and not args.quick:
            print("== tuning ==", flush=True)
            result["tuning"] = {w.name: tuning.tune(w, args.tune_trials, env, options.target) for w in tuned_rows}
        for name in settings:
            print(f"== thread setting: {name} ==", flush=True)
            result["settings"].append(run_setting(name, args, options, env, work_dir))
        if compile_list:
            print("== compile time ==", flush=True)
            started = time.perf_counter()
            result["compile_time"] = compile_time.compile_table(compile_list, args.compile_repeat)
            result["compile_time"]["wall_s"] = time.perf_counter() - started
    result["wall_s"] = time.perf_counter() - start
    print()
    print(report.text_report(result))
    for path in write_outputs(result, output_dir):
        print(f"wrote {path}")
    print(f"total {result['wall_s']:.0f} s")
    return 0

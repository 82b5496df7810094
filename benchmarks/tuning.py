"""Tuned rows: conv nets the benchmark run also times with AutoTVM records of its own.

Before timing, ``python -m benchmarks`` tunes each workload of
:data:`benchmarks.workloads.TUNED` with ``relay_aot.tune`` (its kernels, then the graph tuner's
choice of layouts) within a trial budget, one thread, and keeps the records next to the results,
in ``docs/benchmarks/tuning/<workload>.<cpu>.json``, one log per target CPU (the LLVM name of the
run's ``-mcpu``): a configuration's time on one CPU says nothing of another, and AutoTVM's
``apply_history_best`` picks the fastest record of a kernel whatever CPU measured it. A later run
on the same CPU finds them and measures only what a larger budget adds (``tune`` resumes). The tuned row (``<workload>_tuned``) is the same module
and inputs; its TVM executors and relay_aot compile inside ``autotvm.apply_history_best`` of
those records, so each is tuned the same way; onnxruntime runs as on the untuned row.

``python -m benchmarks.tuning WORKLOAD TRIALS TARGET`` is the process the command line starts per
workload (one thread, as the rows it serves are compared at one thread).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import machine
from . import workloads as workloads_mod

#: Where the records of the tuned rows are kept.
RECORDS_DIR = machine.ROOT / "docs" / "benchmarks" / "tuning"
#: Configurations measured per kernel at most, by default (about 25 minutes for SqueezeNet's 18).
DEFAULT_TRIALS = 150


def log_path(base: str, target: str) -> Path:
    """The AutoTVM log of workload ``base``'s kernels compiled for ``target``."""
    import tvm

    cpu_name = tvm.target.Target(target).attrs.get("mcpu") or "generic"
    return RECORDS_DIR / f"{base}.{cpu_name}.json"


def records(workload: workloads_mod.Workload, target: str) -> Path | None:
    """The records a tuned row compiles with for ``target``: the graph tuner's choice where there
    is one, else the kernels' log; None for an untuned row, or when nothing was tuned yet."""
    if workload.tuned_from is None:
        return None
    from relay_aot.tuner import graph_log_path

    log = log_path(workload.tuned_from, target)
    for path in (graph_log_path(log), log):
        if path.is_file():
            return path
    return None


def context(workload: workloads_mod.Workload, target: str) -> contextlib.AbstractContextManager:
    """Where an executor prepares ``workload`` for ``target``: inside its records for a tuned row.
    ``FileNotFoundError`` for a tuned row that has none (the row is then n/a, saying why)."""
    if workload.tuned_from is None:
        return contextlib.nullcontext()
    path = records(workload, target)
    if path is None:
        raise FileNotFoundError(
            f"no tuning records in {log_path(workload.tuned_from, target)}: "
            f"run python -m benchmarks (it tunes with --tune-trials, default {DEFAULT_TRIALS})"
        )
    from relay_aot.kernels import tuning

    # relay_aot's reader: TVM's context of the records, a cut last line dropped with a warning
    # (TVM's reader fails on it) and every record checked against its task's space
    return tuning.records(path)


def tune(
    workload: workloads_mod.Workload, trials: int, env: dict[str, str], target: str, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Tune tuned row ``workload``'s kernels for ``target`` to ``trials`` each (in a child process,
    one thread); what was done, for the results."""
    RECORDS_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(env, TVM_NUM_THREADS="1")
    started = time.perf_counter()
    command = [sys.executable, "-m", "benchmarks.tuning", workload.tuned_from, str(trials), target]
    with subprocess.Popen(command, cwd=machine.ROOT, env=env, stdout=subprocess.PIPE, text=True) as child:
        for line in child.stdout:
            say(f"  {line.rstrip()}")
    if child.returncode != 0:
        raise SystemExit(f"tuning {workload.tuned_from} failed (exit status {child.returncode})")
    return {
        "trials_per_kernel": trials,
        "wall_s": time.perf_counter() - started,
        "records": str(records(workload, target).relative_to(machine.ROOT)),
    }


def _main(argv: list[str] | None = None) -> int:
    import logging

    import relay_aot

    base, trials, target = argv if argv is not None else sys.argv[1:]
    logging.getLogger("autotvm").setLevel(logging.ERROR)
    mod = workloads_mod.by_name()[base].module()
    result = relay_aot.tune(
        mod, log_path(base, target), target=target, trials=int(trials), progress=lambda line: print(line, flush=True)
    )
    print(result, flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOPHUB_LOCATION", "NONE")
    sys.exit(_main())

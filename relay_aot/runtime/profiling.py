"""Profiling one call of a compiled program: TVM's profiling report, and a Chrome trace.

A program compiled for profiling (``compile(..., profile=True)``, or the variant
``CompiledModule.profile`` builds) records, while a profile runs, every call of its functions
and kernels (``runtime_cpp/relay_aot/profile.h``; the Python backend drives the same profiler
through the extension). :func:`run_profiled` runs one call between the profiler's start and
stop; :class:`Profile` holds what it recorded and makes of it

* a :class:`tvm.runtime.profiling.Report` (:meth:`Profile.report`), whose ``table()``,
  ``csv()`` and ``json()`` read as TVM's profilers' do. One row per kernel (``Duration (us)``:
  its time over all calls) and one per Relay function (``Duration (us)``: its *self* time, in
  its own code -- control flow, allocation, argument checks -- without the functions and kernels
  it calls; ``Exclusive (us)`` adds its kernels; ``Inclusive (us)`` adds everything it calls,
  counted once for a recursive function). So the ``Duration (us)`` column adds up to the whole
  call's time, which the report's device metrics give with the allocations made;
* a Chrome trace (:meth:`Profile.chrome_trace`, for chrome://tracing or Perfetto): one slice
  per function and kernel call, nested as the calls were, up to a cap (the first calls are
  kept; the note in ``otherData`` says how many are missing).

See docs/performance.md, "Profiling your program".
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tvm
from tvm.runtime import profiling

#: Trace events kept by default: the first calls of a deep recursion, not a gigabyte of JSON.
DEFAULT_TRACE_EVENTS = 100_000

#: The device metrics' key (TVM's name of the CPU every tensor lives on).
DEVICE = "cpu0"

#: Allocation kinds as profile.h reports them: tensors, and objects (tuples and constructor
#: values, closures, reference cells), which the report's device metrics sum up.
OBJECT_KINDS = ("adt", "closure", "ref")


@dataclasses.dataclass
class Profile:
    """What the profiler recorded during one profiled call (see the module's docstring)."""

    executor: str
    total_ns: int
    functions: list[dict]  #: name, calls, inclusive_ns, exclusive_ns, self_ns (by profile id)
    kernels: list[dict]  #: name, calls, ns (by profile id)
    #: kind (tensor, adt, closure, ref) -> (count, bytes); empty if not counted (Python backend)
    allocations: dict[str, tuple[int, int]]
    events: list[tuple[int, int, int, int]]  #: (0 function / 1 kernel, id, start ns, duration ns)
    dropped_events: int
    max_events: int

    @classmethod
    def from_json(cls, text: str, executor: str, max_events: int, allocations: bool = True) -> Profile:
        """The profile in ``text`` (``Profiler::stop`` in profile.h)."""
        data = json.loads(text)
        counted = {kind: tuple(value) for kind, value in data["allocations"].items()} if allocations else {}
        events = [tuple(e) for e in data["events"] if e[3] >= 0]  # an unfinished call has no duration
        return cls(
            executor,
            data["total_ns"],
            data["functions"],
            data["kernels"],
            counted,
            events,
            data["dropped_events"],
            max_events,
        )

    def report(self) -> profiling.Report:
        """The profile as TVM's report (see the module's docstring for the columns)."""
        total = self.total_ns

        def percent(ns: int) -> profiling.Percent:
            return profiling.Percent(100.0 * ns / total if total else 0.0)

        def row(name: str, kind: str, count: int, ns: int) -> dict:
            return {
                "Name": name,
                "Kind": kind,
                "Count": profiling.Count(count),
                "Duration (us)": profiling.Duration(ns / 1e3),
                "Percent": percent(ns),
                "Mean (us)": profiling.Duration(ns / 1e3 / count),
            }

        calls = [row(k["name"], "kernel", k["calls"], k["ns"]) for k in self.kernels if k["calls"]]
        for f in self.functions:
            if f["calls"]:
                calls.append(
                    row(f["name"], "function", f["calls"], f["self_ns"])
                    | {
                        "Exclusive (us)": profiling.Duration(f["exclusive_ns"] / 1e3),
                        "Inclusive (us)": profiling.Duration(f["inclusive_ns"] / 1e3),
                    }
                )
        device = {
            "Duration (us)": profiling.Duration(total / 1e3),
            "Percent": profiling.Percent(100.0),
            "Count": profiling.Count(1),
        }
        if self.allocations:
            objects = [self.allocations[kind] for kind in OBJECT_KINDS]
            device["Tensors allocated"] = profiling.Count(self.allocations["tensor"][0])
            device["Tensor bytes"] = profiling.Count(self.allocations["tensor"][1])
            device["Objects allocated"] = profiling.Count(sum(count for count, _ in objects))
            device["Object bytes"] = profiling.Count(sum(nbytes for _, nbytes in objects))
        configuration = {"Executor": self.executor, "Number of threads": profiling.Count(_threads())}
        if self.dropped_events:
            configuration["Trace events dropped"] = profiling.Count(self.dropped_events)
        return profiling.Report(calls, {DEVICE: device}, configuration)

    def chrome_trace(self) -> dict[str, Any]:
        """The calls as a Chrome trace: ``{"traceEvents": [{"name", "ph": "X", "ts", "dur", "pid",
        "tid", "cat"}...], ...}``, times in microseconds from the profile's start."""
        pid = os.getpid()
        names = ([f["name"] for f in self.functions], [k["name"] for k in self.kernels])
        kinds = ("function", "kernel")
        events = [
            {
                "name": names[kind][index],
                "cat": kinds[kind],
                "ph": "X",
                "ts": round(start / 1e3, 3),
                "dur": round(duration / 1e3, 3),
                "pid": pid,
                "tid": 0,
            }
            for kind, index, start, duration in self.events
        ]
        other = {"executor": self.executor, "events": len(events), "dropped_events": self.dropped_events}
        if self.dropped_events:
            other["note"] = (
                f"the trace holds the first {self.max_events} calls; {self.dropped_events} later calls "
                "are not in it (the report's totals count every call)"
            )
        return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}

    def write_trace(self, path) -> Path:
        """Write :meth:`chrome_trace` to ``path`` (JSON); returns the path."""
        path = Path(path)
        path.write_text(json.dumps(self.chrome_trace()))
        return path


def _threads() -> int:
    """Threads of TVM's pool (what the kernels may use)."""
    get = tvm.get_global_func("runtime.NumThreads", allow_missing=True)
    return int(get()) if get is not None else int(os.environ.get("TVM_NUM_THREADS", "0") or 0)


def run_profiled(
    call: Callable[..., Any],
    control: Callable[[int, int], str],
    args,
    executor: str,
    max_events: int = DEFAULT_TRACE_EVENTS,
    allocations: bool = True,
    warmup: int = 1,
) -> tuple[Any, Profile]:
    """``call(*args)`` with the profiler ``control`` (``<model>__profile``) started before and
    stopped after; its result and the :class:`Profile`. The profile is stopped even when the
    call raises (then the error propagates).

    ``warmup`` calls run first, unprofiled: the first call into a library just loaded resolves
    its symbols and fills its caches, and would show hundreds of microseconds that later calls
    never pay (as TVM's ``profile_function`` runs ``warmup_iters`` first).
    """
    for _ in range(warmup):
        call(*args)
    control(1, int(max_events))
    try:
        result = call(*args)
    finally:
        text = str(control(0, 0))
    return result, Profile.from_json(text, executor, int(max_events), allocations)

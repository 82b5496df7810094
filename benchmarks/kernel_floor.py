"""Kernel-only time: the compiled kernels alone, on the same call sequence as one call of ``@main``.

The Relay VM's profiler records every kernel call of one run with its argument shapes. Each
distinct (kernel, shapes) pair is then timed on its own with ``time_evaluator`` (a C++ loop
over the kernel's PackedFunc, so no Python or VM between calls) and the per-call times are
added up, weighted by how often the run made each call. The sum is the time an executor
would take if everything around the kernels were free: the floor each executor's overhead is
measured against. The kernels are the VM's (TVM's fusion and schedules); relay_aot lowers
the same fused functions through the same TE compiler, so they match up to fusion details.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from collections.abc import Sequence

import numpy as np
import tvm
from tvm import relay
from tvm.runtime import profiler_vm

from .timing import Budget, Timing

_TENSOR = re.compile(r"(\w+)\[([^\]]*)\]")


@dataclasses.dataclass(frozen=True)
class KernelCall:
    """One kernel and the (dtype, shape) of each argument, outputs included."""

    name: str
    args: tuple[tuple[str, tuple[int, ...]], ...]


def _parse_shapes(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``"float32[1, 16], int32[]"`` -> ``(("float32", (1, 16)), ("int32", ()))``."""
    parsed = []
    for dtype, dims in _TENSOR.findall(text):
        parsed.append((dtype, tuple(int(d) for d in dims.split(",") if d.strip())))
    return tuple(parsed)


def count_kernel_calls(exe, args: Sequence[np.ndarray]) -> collections.Counter:
    """How often one call of ``@main`` calls each (kernel, argument shapes), per the VM profiler."""
    device = tvm.cpu(0)
    profiler = profiler_vm.VirtualMachineProfiler(exe, device)
    report = profiler.profile(*[tvm.nd.array(np.asarray(a), device=device) for a in args], func_name="main")
    counts: collections.Counter = collections.Counter()
    for call in json.loads(report.json())["calls"]:
        name = call["Name"]["string"]
        shapes = call.get("Argument Shapes")
        if name.startswith("VM::") or shapes is None:
            continue  # the VM's own instructions (allocation, moves), not kernels
        counts[KernelCall(name, _parse_shapes(shapes["string"]))] += int(call["Count"]["count"])
    return counts


def _arguments(call: KernelCall, rng: np.random.Generator) -> list[tvm.nd.NDArray]:
    arrays = []
    for dtype, shape in call.args:
        if np.dtype(dtype).kind == "f":
            value = rng.uniform(-1, 1, size=shape).astype(dtype)
        else:
            value = np.zeros(shape, dtype=dtype)  # indices (take) stay in range
        arrays.append(tvm.nd.array(value, device=tvm.cpu(0)))
    return arrays


def time_kernel(lib: tvm.runtime.Module, call: KernelCall, budget: Budget) -> list[float]:
    """Per-call seconds of one kernel, one sample per run."""
    rng = np.random.default_rng(0)
    evaluator = lib.time_evaluator(
        call.name,
        tvm.cpu(0),
        number=1,
        repeat=budget.min_runs,
        min_repeat_ms=max(1, int(budget.min_run_s * 1000)),
    )
    return list(evaluator(*_arguments(call, rng)).results)


@dataclasses.dataclass
class KernelFloor:
    """The summed kernel time of one call of ``@main`` and what it is made of."""

    timing: Timing
    calls: int
    distinct: int
    per_kernel: list[dict]


def kernel_floor(mod: tvm.IRModule, args: Sequence[np.ndarray], target: str, budget: Budget) -> KernelFloor:
    """Compile ``mod`` for the VM, count its kernel calls, and time them alone."""
    with tvm.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target=target)
    counts = count_kernel_calls(exe, args)
    runs = budget.min_runs
    totals = np.zeros(runs)
    per_kernel = []
    for call, count in sorted(counts.items(), key=lambda item: item[0].name):
        samples = np.asarray(time_kernel(exe.lib, call, budget))
        totals += count * np.sort(samples)
        per_kernel.append(
            {
                "kernel": call.name,
                "args": ", ".join(f"{d}{list(s)}" for d, s in call.args),
                "calls": count,
                "median_s": float(np.median(samples)),
            }
        )
    per_kernel.sort(key=lambda k: -k["calls"] * k["median_s"])
    # Sorting each kernel's samples before adding pairs fastest with fastest: the totals'
    # minimum is the sum of minima and their maximum the sum of maxima.
    timing = Timing(float(np.median(totals)), float(totals.min()), float(totals.max()), runs, 1)
    return KernelFloor(timing, sum(counts.values()), len(counts), per_kernel)

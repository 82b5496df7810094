"""Timing one call repeatedly: calls per run calibrated like ``timeit``, runs bounded by a budget.

A *run* is ``number`` back-to-back calls, with ``number`` chosen so a run lasts at least
``Budget.min_run_s`` (timer resolution and loop overhead vanish for microsecond calls). The
number of runs fits ``Budget.seconds`` but stays within ``[min_runs, max_runs]``. Each run's
time divided by ``number`` is one per-call sample; the median and the range of the samples
are reported. Python's garbage collector is paused during runs, as ``timeit`` does.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from typing import Any, Callable, Optional


@dataclasses.dataclass(frozen=True)
class Budget:
    """How long to time one executor on one workload."""

    seconds: float = 1.0
    min_runs: int = 3
    max_runs: int = 15
    min_run_s: float = 0.02

    def capped(self, max_runs: Optional[int], min_runs: Optional[int] = None) -> "Budget":
        """This budget with at most ``max_runs`` and at least ``min_runs`` runs, when given."""
        most = self.max_runs if max_runs is None else min(self.max_runs, max_runs)
        least = self.min_runs if min_runs is None else min_runs
        return dataclasses.replace(self, max_runs=most, min_runs=min(least, most))


@dataclasses.dataclass(frozen=True)
class Timing:
    """Per-call seconds over ``runs`` runs of ``number`` calls each."""

    median: float
    min: float
    max: float
    runs: int
    number: int

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)

    @staticmethod
    def of_samples(samples: list[float], number: int) -> "Timing":
        """The summary of per-call samples."""
        return Timing(statistics.median(samples), min(samples), max(samples), len(samples), number)


def measure(call: Callable[[], Any], budget: Budget, first_call_s: float) -> Timing:
    """Time ``call`` (already warmed up; its last call took ``first_call_s`` seconds)."""
    estimate = max(first_call_s, 1e-7)
    number = max(1, int(budget.min_run_s / estimate))
    runs = int(budget.seconds / (number * estimate))
    runs = max(budget.min_runs, min(budget.max_runs, runs))
    samples = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(runs):
            start = time.perf_counter()
            for _ in range(number):
                call()
            samples.append((time.perf_counter() - start) / number)
    finally:
        if enabled:
            gc.enable()
    return Timing.of_samples(samples, number)


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()`` and the seconds it took."""
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start

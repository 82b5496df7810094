"""Timing one call repeatedly: calls per run calibrated like ``timeit``, runs bounded by a budget.

A *run* is ``number`` back-to-back calls, with ``number`` chosen so a run lasts at least
``Budget.min_run_s`` (timer resolution and loop overhead vanish for microsecond calls). The
number of runs fits ``Budget.seconds`` but stays within ``[min_runs, max_runs]``. Each run's
time divided by ``number`` is one per-call sample; the median and the range of the samples
are reported. Several executors are timed in interleaved rounds (:func:`interleave`). Python's
garbage collector is paused during runs, as ``timeit`` does.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Budget:
    """How long to time one executor on one workload."""

    seconds: float = 1.0
    min_runs: int = 3
    max_runs: int = 15
    min_run_s: float = 0.02

    def capped(self, max_runs: int | None, min_runs: int | None = None) -> Budget:
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
    def of_samples(samples: list[float], number: int) -> Timing:
        """The summary of per-call samples."""
        return Timing(statistics.median(samples), min(samples), max(samples), len(samples), number)


@dataclasses.dataclass
class Plan:
    """How one executor is timed: ``runs`` runs of ``number`` calls; samples collect here."""

    call: Callable[[], Any]
    number: int
    runs: int
    samples: list[float] = dataclasses.field(default_factory=list)
    error: BaseException | None = None

    @staticmethod
    def of(call: Callable[[], Any], budget: Budget, estimate: float) -> Plan:
        """Calibrate from ``estimate``, the seconds one warmed-up call took."""
        estimate = max(estimate, 1e-7)
        number = max(1, int(budget.min_run_s / estimate))
        runs = int(budget.seconds / (number * estimate))
        return Plan(call, number, max(budget.min_runs, min(budget.max_runs, runs)))

    def timing(self) -> Timing:
        """The summary of the samples taken."""
        return Timing.of_samples(self.samples, self.number)


def interleave(plans: list[Plan], before_run: Callable[[Plan], None] = lambda plan: None) -> None:
    """Time every plan, one run of each in turn, so that load that comes and goes on the machine
    falls on all executors alike instead of on whichever ran at the time. A plan whose call
    raises keeps the error and takes no more runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        for round_index in range(max((p.runs for p in plans), default=0)):
            for plan in plans:
                if round_index >= plan.runs or plan.error is not None:
                    continue
                before_run(plan)
                try:
                    start = time.perf_counter()
                    for _ in range(plan.number):
                        plan.call()
                    plan.samples.append((time.perf_counter() - start) / plan.number)
                except Exception as err:  # noqa: BLE001 - reported by the caller
                    plan.error = err
    finally:
        if enabled:
            gc.enable()


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()`` and the seconds it took."""
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start

"""Differential testing: run a Relay program on TVM's executors and on relay_aot, and compare.

``normalize`` and ``assert_same`` (``compare.py``) put every executor's values in one form and
compare them; ``check_equivalence`` runs a module on relay_aot's backends and on
TVM's executors (skipping, or isolating in a child process, those that cannot run it safely;
see ``oracle.py``) and raises a :class:`Mismatch` report naming whoever disagreed.

Random well-typed programs for these checks come from ``relay_aot.testing.strategies`` (which
needs Hypothesis, a test extra; nothing else here does), and ``fuzz.py`` runs campaigns of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import tvm

from .compare import Mismatch, assert_same, normalize, summary
from .oracle import (
    REFERENCES,
    IsolatedOracle,
    Outcome,
    error_text,
    evaluate,
    reference,
    run_reference,
    unsupported_reason,
)

__all__ = [
    "Mismatch",
    "Report",
    "REFERENCES",
    "normalize",
    "assert_same",
    "reference",
    "run_reference",
    "check_equivalence",
    "equivalence_report",
    "compare_outcomes",
]


Executor = str | tuple[str, Callable]


@dataclasses.dataclass
class Report:
    """What :func:`equivalence_report` saw: every executor's :class:`~relay_aot.testing.oracle.Outcome`.

    ``value`` is the agreed normalized result (None when the program raised everywhere).
    """

    outcomes: dict[str, Outcome]
    value: Any = None

    @property
    def ran(self) -> list[str]:
        """Executors that ran the program (returned a value or raised)."""
        return [name for name, o in self.outcomes.items() if o.kind != "unavailable"]

    @property
    def skipped(self) -> dict[str, str]:
        """Executors that could not run the program, with the reason."""
        return {name: o.detail for name, o in self.outcomes.items() if o.kind == "unavailable"}

    def __str__(self) -> str:
        lines = []
        for name, outcome in self.outcomes.items():
            if outcome.kind == "value":
                lines.append(f"{name}: returned {summary(outcome.value)}")
            else:
                lines.append(f"{name}: {outcome.kind} ({outcome.detail})")
        return "\n".join(lines)


def compare_outcomes(
    name: str, outcome: Outcome, base_name: str, base: Outcome, rtol: float = 1e-5, atol: float = 1e-6
) -> str | None:
    """Why executor ``name``'s ``outcome`` disagrees with ``base_name``'s ``base`` (None if it agrees)."""
    if outcome.kind == "raised" and base.kind == "raised":
        return None  # each executor words its run-time errors differently
    if outcome.kind != base.kind:

        def say(n, o):
            return f"{n} returned {summary(o.value)}" if o.kind == "value" else f"{n} raised {o.detail}"

        return f"{say(name, outcome)}, but {say(base_name, base)}"
    try:
        assert_same(outcome.value, base.value, rtol, atol, names=(name, base_name))
    except Mismatch as err:
        return str(err)
    return None


def _run_backend(mod, args, backend: Executor, compile_options) -> tuple[str, Outcome]:
    if isinstance(backend, str):
        from ..compiler import compile as aot_compile

        name = f"relay_aot {backend} backend"
        func: Callable[..., Any] = aot_compile(mod, backend=backend, **compile_options)  # compile errors propagate
    else:
        name, func = backend
    try:
        return name, Outcome("value", normalize(func(*args)))
    except Exception as err:  # noqa: BLE001 - a run-time failure is an outcome to compare
        return name, Outcome("raised", detail=error_text(err))


def equivalence_report(
    mod: tvm.IRModule,
    args: Sequence[Any],
    backends: Iterable[Executor] = ("cpp", "python"),
    references: Iterable[str] = REFERENCES,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    expected: Any | None = None,
    isolate: bool | IsolatedOracle = False,
    recursion_depth: int | None = None,
    **compile_options,
) -> Report:
    """:func:`check_equivalence`, returning the :class:`Report` of every executor's outcome."""
    outcomes: dict[str, Outcome] = {}
    if expected is not None:
        outcomes["expected value"] = Outcome("value", normalize(expected))
    oracle = isolate if isinstance(isolate, IsolatedOracle) else (IsolatedOracle() if isolate else None)
    try:
        for reference in references:
            reason = unsupported_reason(mod, reference, recursion_depth)
            if reason is not None:
                outcomes[reference] = Outcome("unavailable", detail=reason)
            elif oracle is not None:
                outcomes[reference] = oracle.run(mod, args, reference)
            else:
                outcomes[reference] = evaluate(mod, args, reference)
    finally:
        if oracle is not None and oracle is not isolate:
            oracle.close()
    for backend in backends:
        name, outcome = _run_backend(mod, args, backend, compile_options)
        outcomes[name] = outcome
    report = Report(outcomes)
    ran = [(name, o) for name, o in outcomes.items() if o.kind != "unavailable"]
    if not ran:
        return report
    base_name, base = ran[0]
    problems = [p for name, o in ran[1:] if (p := compare_outcomes(name, o, base_name, base, rtol, atol)) is not None]
    if problems:
        listed = "".join(f"\n  {line}" for line in str(report).splitlines())
        raise Mismatch("\n".join(problems) + "\noutcomes:" + listed)
    report.value = base.value if base.kind == "value" else None
    return report


def check_equivalence(mod: tvm.IRModule, args: Sequence[Any], **options) -> Any:
    """Run ``mod`` on relay_aot's backends and TVM's executors; raise :class:`Mismatch` on disagreement.

    ``options`` are :func:`equivalence_report`'s: ``backends``, ``references``, ``rtol``,
    ``atol``, ``expected``, ``isolate``, ``recursion_depth``, and options for
    :func:`relay_aot.compile`. ``backends`` are backend names (compiled with ``compile_options``) or ``(name, callable)``
    pairs, e.g. an already compiled module. ``references`` are TVM executors; one that cannot
    run the program is skipped (the VM has no references; the interpreter overflows beyond
    :data:`~relay_aot.testing.oracle.INTERPRETER_MAX_DEPTH` levels of ``recursion_depth``, when the
    caller knows it). ``isolate=True`` (or an :class:`~relay_aot.testing.oracle.IsolatedOracle` to reuse)
    runs the references in a child process, so that one that crashes or hangs is reported as
    unavailable instead of taking this process down. ``expected`` (a plain value) is checked too.

    Ints and bools compare exactly, floats within ``rtol``/``atol``; executors that all raise at
    run time agree. The :class:`Mismatch` message names each executor that disagreed, the path
    of the difference and both values, then lists every outcome. Returns the agreed result,
    normalized (None when the program raised everywhere); :func:`equivalence_report` returns
    what each executor did, skipped ones included.
    """
    return equivalence_report(mod, args, **options).value

"""Differential fuzzing: generated Relay programs on relay_aot's backends and TVM's executors.

``python -m relay_aot.testing.fuzz`` runs a campaign: Hypothesis draws batches of random well-typed
programs (``strategies.batches``), each batch is compiled once per backend, and every result is
compared with TVM's executors (run in a child process, so an executor crash is reported rather
than fatal). On a disagreement the failing batch is shrunk by Hypothesis, the smallest failing
case is isolated and written as Relay text, ready to be pinned as a regression test.

``--hostile`` runs the other campaign, :func:`run_hostile_campaign`: programs over ``?``
dimensions fed hostile arguments, judged against numpy (``hostile.py``).

See ``docs/testing.md`` for the options and for how failures become regression cases.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from . import Mismatch, Report, compare_outcomes, equivalence_report, hostile, hostile_surfaces
from .oracle import IsolatedOracle, Outcome, unsupported_reason
from .strategies import Program

#: Tolerances for generated programs: executors fuse float arithmetic differently.
RTOL = 1e-4
ATOL = 1e-5


@dataclasses.dataclass
class Checked:
    """What :func:`check_program` compared: per reference, how many programs it checked or skipped."""

    programs: int = 0
    compared: Counter = dataclasses.field(default_factory=Counter)
    skipped: Counter = dataclasses.field(default_factory=Counter)
    reasons: Counter = dataclasses.field(default_factory=Counter)

    def add(self, other: Checked) -> None:
        self.programs += other.programs
        self.compared.update(other.compared)
        self.skipped.update(other.skipped)
        self.reasons.update(other.reasons)

    def __str__(self) -> str:
        parts = [f"{self.programs} programs"]
        for ref in sorted(set(self.compared) | set(self.skipped)):
            parts.append(f"{ref}: {self.compared[ref]} compared, {self.skipped[ref]} skipped")
        return "; ".join(parts)


def check_program(
    program: Program,
    oracle: IsolatedOracle | None = None,
    backends: Sequence[str] = ("cpp", "python"),
    references: Sequence[str] = ("interpreter",),
    **compile_options,
) -> Checked:
    """Run one generated program (or batch) everywhere; :class:`Mismatch` if executors disagree.

    With the C++ backend, it also checks that a look-alike of the program (float constants one
    ulp away) compiled into the same cache gets a library of its own (:func:`check_lookalike`).

    Each backend compiles the whole batch once. A reference that cannot run the batch (TVM's
    executors reject some programs, see ``docs/testing.md``) is run on each case on its own and
    compared with that case's slice of every backend's result, so one awkward case does not
    take the oracle away from the others. On a disagreement inside a batch, the message also
    shows the first case that fails on its own (as Relay text), ready to be pinned as a
    regression test.
    """
    if "cpp" in backends:
        check_lookalike(program, **compile_options)
    own_oracle = oracle is None
    oracle = oracle if oracle is not None else IsolatedOracle()
    try:
        return _check(program, oracle, tuple(backends), tuple(references), compile_options)
    finally:
        if own_oracle:
            oracle.close()


def _check(program: Program, oracle, backends, references, compile_options) -> Checked:
    try:
        report = equivalence_report(
            program.module,
            program.args,
            backends=backends,
            references=references,
            rtol=RTOL,
            atol=ATOL,
            isolate=oracle,
            **compile_options,
        )
    except Mismatch as err:
        if len(program.cases) <= 1:
            raise Mismatch(f"{err}\nprogram:\n{program.text()}\narguments: {program.args!r}") from None
        culprit = first_failing_case(program, oracle, backends, references, compile_options)
        raise Mismatch(f"{err}\n{culprit}") from None
    checked = Checked(programs=max(len(program.cases), 1))
    for reference in references:
        outcome = report.outcomes[reference]
        if outcome.kind != "unavailable":
            checked.compared[reference] += checked.programs
        elif len(program.cases) <= 1:
            checked.skipped[reference] += 1
            checked.reasons[outcome.detail[:120]] += 1
        else:
            _check_cases(program, reference, report, oracle, checked, backends, compile_options)
    return checked


def _check_cases(
    program: Program, reference: str, report: Report, oracle, checked: Checked, backends, compile_options
) -> None:
    """Compare ``reference`` on each case with the slices of the backends' batch results."""
    slices = {name: o for name, o in report.outcomes.items() if name.startswith("relay_aot")}
    if any(o.kind != "value" for o in slices.values()):
        # A backend raised on the batch: check the cases one by one from scratch.
        for index in range(len(program.cases)):
            checked.add(_check(program.case(index), oracle, backends, (reference,), compile_options))
        checked.programs -= len(program.cases)
        return
    for index in range(len(program.cases)):
        case = program.case(index)
        reason = unsupported_reason(case.module, reference)
        outcome = Outcome("unavailable", detail=reason) if reason else oracle.run(case.module, case.args, reference)
        if outcome.kind == "unavailable":
            checked.skipped[reference] += 1
            checked.reasons[outcome.detail[:120]] += 1
            continue
        checked.compared[reference] += 1
        for name, batch in slices.items():
            mine = Outcome("value", batch.value[2][index])
            problem = compare_outcomes(f"{name} (case {index} of the batch)", mine, reference, outcome, RTOL, ATOL)
            if problem is not None:
                raise Mismatch(f"executors disagree:\n{problem}\nprogram:\n{case.text()}\narguments: {case.args!r}")


def perturb_constants(mod) -> tuple:
    """``mod`` with every float constant moved to its next representable value (one ulp up),
    and how many constants changed."""
    import tvm
    from tvm import relay

    class Perturb(relay.ExprMutator):
        def __init__(self):
            super().__init__()
            self.changed = 0

        def visit_constant(self, const):
            data = const.data.numpy()
            if data.dtype.kind != "f" or data.size == 0:
                return const
            self.changed += 1
            return relay.const(np.nextafter(data, np.inf).astype(data.dtype), dtype=str(data.dtype))

    mutator = Perturb()
    updated = tvm.IRModule(dict(mod.functions.items()), type_definitions=mod.type_definitions)
    for gvar, func in mod.functions.items():
        updated[gvar] = mutator.visit(func)
    return updated, mutator.changed


def check_lookalike(program: Program, **compile_options) -> bool:
    """Compile ``program`` and then a look-alike -- every float constant one ulp away, which
    ``mod.astext()`` prints the same -- in the same cache: the look-alike must get a library of
    its own (a cache key that confuses them would run the first program). False when the
    program has no live float constant to perturb: a constant bound to a dead ``let`` is
    dropped by relay_aot's passes, and two modules differing only there rightly share a
    library, so only the constants left by dead-code elimination are moved."""
    from tvm import relay

    from ..compiler import compile as aot_compile

    perturbed, changed = perturb_constants(relay.transform.DeadCodeElimination()(program.module))
    if not changed:
        return False
    first = aot_compile(program.module, **compile_options)
    second = aot_compile(perturbed, **compile_options)
    assert first.build_result is not None and second.build_result is not None  # the C++ backend's libraries
    if second.build_result.key == first.build_result.key:
        raise Mismatch(
            f"a module with its float constants one ulp away got the first module's library "
            f"{first.library_path}\nprogram:\n{program.text()}"
        )
    return True


def first_failing_case(program: Program, oracle, backends, references, compile_options) -> str:
    """A description of the first case of a batch that disagrees on its own."""
    for index in range(len(program.cases)):
        case = program.case(index)
        try:
            equivalence_report(
                case.module,
                case.args,
                backends=backends,
                references=references,
                rtol=RTOL,
                atol=ATOL,
                isolate=oracle,
                **compile_options,
            )
        except Mismatch as err:
            return f"case {index} fails on its own:\n{err}\nprogram:\n{case.text()}\narguments: {case.args!r}"
    return "no case fails on its own (the cases interact through the batch's module)"


def run_campaign(
    examples: int,
    cases: int,
    backends: Iterable[str],
    references: Iterable[str],
    seed: int | None,
    out_dir: Path,
    max_depth: int,
    max_size: int,
    dynamic: bool = False,
) -> int:
    """Check ``examples`` batches of ``cases`` programs; write the first failure to ``out_dir``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from .strategies import batches

    backends, references = tuple(backends), tuple(references)
    total = Checked()
    batches_done = [0]
    start = time.time()
    with IsolatedOracle() as oracle:

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.generate, Phase.shrink],
            print_blob=True,
        )
        @given(batches(cases=cases, max_depth=max_depth, max_size=max_size, dynamic=dynamic))
        def campaign(program):
            total.add(check_program(program, oracle, backends, references))
            batches_done[0] += 1
            if batches_done[0] % 10 == 0:
                rate = total.programs / (time.time() - start)
                print(f"relay_aot.testing.fuzz: {total} ({rate:.2f} programs/s)", file=sys.stderr)

        if seed is not None:
            campaign = hypothesis_seed(seed)(campaign)
        try:
            campaign()
        except Mismatch as err:
            out_dir.mkdir(parents=True, exist_ok=True)
            path = out_dir / f"failure-{int(time.time())}.txt"
            path.write_text(str(err))
            print(f"relay_aot.testing.fuzz: executors disagree; report written to {path}\n{err}", file=sys.stderr)
            return 1
    print(f"relay_aot.testing.fuzz: all executors agree: {total}")
    for reason, count in total.reasons.most_common(5):
        print(f"  skipped {count}x: {reason}")
    return 0


def run_hostile_campaign(
    examples: int,
    arg_sets: int,
    backends: Iterable[str],
    references: Iterable[str],
    seed: int | None,
    out_dir: Path,
    operators: Sequence[str] | None = None,
    minutes: float | None = None,
    with_surfaces: bool = True,
) -> int:
    """Check ``examples`` hostile programs (``arg_sets`` argument sets each), taking the operator
    families of ``operators`` (default all of ``hostile.OPERATORS``) in turn, for at most
    ``minutes``; then (``with_surfaces``) model names and export places drawn from the seed
    (``hostile_surfaces``). Every finding is printed (the first of each kind as it is found)
    and all are written to ``out_dir``; returns 1 if there was one."""
    import random

    backends, references = tuple(backends), tuple(references)
    families = list(operators or hostile.OPERATORS)
    unknown = sorted(set(families) - set(hostile.OPERATORS))
    if unknown:
        raise ValueError(f"unknown operator families {unknown}: choose among {', '.join(hostile.OPERATORS)}")
    seed = random.randrange(2**32) if seed is None else seed
    print(f"relay_aot.testing.fuzz: hostile campaign, seed {seed}", file=sys.stderr)
    total = hostile.Tally()
    seen: set = set()
    start = time.time()
    mine, theirs = hostile.oracles()
    with mine, theirs:
        for index in range(examples):
            if minutes is not None and time.time() - start > minutes * 60:
                break
            program = hostile.numbered_program(seed, index, arg_sets, families)
            tally = hostile.check(program, mine, theirs, backends, references)
            for finding in tally.findings:
                if finding.signature() not in seen:
                    seen.add(finding.signature())
                    print(
                        f"relay_aot.testing.fuzz: finding (seed {seed}, program {index})\n{finding}\n", file=sys.stderr
                    )
            total.add(tally)
            if total.programs % 10 == 0:
                print(f"relay_aot.testing.fuzz: {total} ({time.time() - start:.0f} s)", file=sys.stderr)
    print(f"relay_aot.testing.fuzz: hostile campaign, {time.time() - start:.0f} s: {total}")
    print("  operators: " + ", ".join(f"{op} {n}" for op, n in sorted(total.operators.items())))
    print("  hostile kinds: " + ", ".join(f"{k} {total.kinds[k]}" for k in hostile.KINDS))
    surfaces = hostile_surfaces.run(seed) if with_surfaces else []
    if with_surfaces:
        print(f"relay_aot.testing.fuzz: model names and export places: {len(surfaces)} findings")
    if not total.findings and not surfaces:
        print("relay_aot.testing.fuzz: relay_aot kept the rule on every argument set")
        return 0
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"hostile-{int(time.time())}.txt"
    path.write_text("\n\n".join([str(f) for f in total.findings] + surfaces))
    kinds = Counter(f.signature() for f in total.findings)
    print(
        f"relay_aot.testing.fuzz: {len(total.findings) + len(surfaces)} findings ({len(kinds)} kinds of program "
        f"finding), written to {path}"
    )
    for signature, count in kinds.most_common():
        print(f"  {count}x {' / '.join(signature)}")
    for finding in surfaces:
        print(f"  {finding}")
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ``python -m relay_aot.testing.fuzz --help``."""
    parser = argparse.ArgumentParser(prog="python -m relay_aot.testing.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=200, help="batches to check (default 200)")
    parser.add_argument("--cases", type=int, default=8, help="programs per batch, i.e. per compile (default 8)")
    parser.add_argument("--backends", default="cpp,python", help="comma-separated relay_aot backends")
    parser.add_argument(
        "--references",
        default="interpreter",
        help="comma-separated TVM executors (interpreter, vm; default interpreter)",
    )
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random)")
    parser.add_argument("--max-depth", type=int, default=4, help="expression nesting depth (default 4)")
    parser.add_argument("--max-size", type=int, default=60, help="expression nodes per program (default 60)")
    parser.add_argument("--out", type=Path, default=Path("fuzz-failures"), help="where failure reports go")
    parser.add_argument("--dynamic", action="store_true", help="give about half the variables ? dimensions")
    parser.add_argument(
        "--hostile",
        action="store_true",
        help="hostile shapes and attributes judged against numpy (--examples counts programs)",
    )
    parser.add_argument("--arg-sets", type=int, default=8, help="with --hostile: argument sets per program (default 8)")
    parser.add_argument(
        "--operators", default="", help="with --hostile: comma-separated operator families (default all)"
    )
    parser.add_argument("--minutes", type=float, default=None, help="with --hostile: stop after this many minutes")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOPHUB_LOCATION", "NONE")
    if args.hostile:
        return run_hostile_campaign(
            args.examples,
            args.arg_sets,
            [b for b in args.backends.split(",") if b],
            [r for r in args.references.split(",") if r],
            args.seed,
            args.out,
            [o for o in args.operators.split(",") if o],
            args.minutes,
            with_surfaces=not args.operators,
        )
    return run_campaign(
        args.examples,
        args.cases,
        [b for b in args.backends.split(",") if b],
        [r for r in args.references.split(",") if r],
        args.seed,
        args.out,
        args.max_depth,
        args.max_size,
        args.dynamic,
    )


if __name__ == "__main__":
    sys.exit(main())

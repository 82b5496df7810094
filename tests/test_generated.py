"""Generated programs: the interpreter, the Python backend and the C++ backend agree on each.

Each example is a batch of independent random programs (``strategies.batches``) compiled once per
backend, so CI checks hundreds of programs with a few dozen C++ builds. The examples are fixed
(a seed per test), so CI is reproducible; ``python -m relay_aot.testing.fuzz`` (and the ``slow`` test
below) run fresh random campaigns. A disagreement names the executors and the failing case as
Relay text, to be pinned in ``tests/programs`` (see docs/testing.md).
"""

import os

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from relay_aot.testing import fuzz, oracle, strategies

#: Programs per batch (one compile per backend per batch).
CASES = 8
#: Batches per CI test; two tests run in parallel under xdist: 2 x 3 x 8 = 48 programs (the
#: ``slow`` campaign below and ``python -m relay_aot.testing.fuzz`` run many more; CI keeps
#: under 30 minutes on two cores).
BATCHES = 3
#: Batches of programs with ``?`` dimensions.
DYNAMIC_BATCHES = 2


@pytest.fixture(scope="module")
def reference():
    with oracle.IsolatedOracle() as isolated:
        yield isolated


def check_batches(reference, examples: int, fixed_seed=None, dynamic: bool = False):
    """Check ``examples`` batches (with ``?`` dimensions if ``dynamic``); assert the interpreter
    compared nearly every program."""
    totals = fuzz.Checked()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    @given(strategies.batches(cases=CASES, dynamic=dynamic))
    def check(program):
        totals.add(fuzz.check_program(program, reference))

    if fixed_seed is not None:
        check = seed(fixed_seed)(check)
    check()
    print(f"generated programs: {totals}")
    assert totals.programs >= examples * CASES * 0.9
    # Programs the interpreter cannot run are skipped, not compared: keep that rare, or this
    # test would pass without checking anything.
    assert totals.compared["interpreter"] >= 0.85 * totals.programs, totals.reasons.most_common(5)
    return totals


@pytest.mark.early
@pytest.mark.parametrize("part", [1, pytest.param(2, marks=pytest.mark.slow)])  # CI time: the first part
def test_generated_programs_agree(reference, part):
    check_batches(reference, BATCHES, fixed_seed=part)


@pytest.mark.early
def test_generated_dynamic_programs_agree(reference):
    """Programs whose variables have ``?`` dimensions: dynamic kernels, shape functions and
    entry checks on both backends, against the interpreter."""
    check_batches(reference, DYNAMIC_BATCHES, fixed_seed=3, dynamic=True)


@pytest.mark.slow
def test_generated_programs_agree_long_campaign(reference):
    """A fresh random campaign: RELAY_AOT_FUZZ_EXAMPLES batches (default 100, 800 programs)."""
    check_batches(reference, int(os.environ.get("RELAY_AOT_FUZZ_EXAMPLES", "100")))

"""Generated programs over ``?`` dimensions fed hostile arguments (``relay_aot.testing.hostile``):
relay_aot keeps the rule against numpy on each -- never a crash, a clear error only where numpy
refuses, numpy's value otherwise.

The rule itself is tested here without compiling anything (``judge`` on made-up outcomes: each
way of breaking it is caught); the ``slow`` test runs a short campaign on both backends with
TVM's interpreter and VM alongside (``python -m relay_aot.testing.fuzz --hostile`` runs long
ones, see docs/testing.md).
"""

import os

import numpy as np
import pytest

from relay_aot.testing import hostile
from relay_aot.testing.oracle import Outcome

VALUE = Outcome("value", np.arange(3, dtype="float32"))
REFUSED = Outcome("raised", detail="Refused: topk: k is larger than the axis")
UNREPRESENTABLE = Outcome(
    "raised",
    detail="Unrepresentable: numpy cannot represent an array of shape (1099511627776, 0, 4294967296) and dtype int32",
)


@pytest.mark.parametrize(
    "outcome, expected, verdict",
    [
        (VALUE, VALUE, None),
        (Outcome("raised", detail="KernelError: kernel k0 failed: topk: k is larger than the axis"), REFUSED, None),
        (Outcome("raised", detail="OutOfMemoryError: unable to allocate 8796093022208 bytes"), REFUSED, None),
        (Outcome("value", np.arange(1, 4, dtype="float32")), VALUE, "wrong result"),
        (Outcome("value", np.arange(3, dtype="float64")), VALUE, "wrong result"),
        (Outcome("value", np.arange(2, dtype="float32")), VALUE, "wrong result"),
        (VALUE, REFUSED, "accepted"),
        (Outcome("raised", detail="KernelError: kernel k0 failed: Assert fail"), VALUE, "spurious error"),
        (Outcome("raised", detail="TVMError: std::bad_alloc"), REFUSED, "unclear error"),
        (Outcome("raised", detail="RuntimeError: something"), REFUSED, "unclear error"),
        (Outcome("unavailable", detail="relay_aot cpp crashed (killed by SIGFPE)", cause="crashed"), REFUSED, "crash"),
        (Outcome("unavailable", detail="cpp did not finish within 300 s", cause="hung"), VALUE, "crash"),
        (
            Outcome("unavailable", detail="cpp rejected the program: CompileError: g++ failed", cause="rejected"),
            VALUE,
            "compile error",
        ),
        (
            Outcome(
                "unavailable",
                detail="cpp rejected the program: UnsupportedError: TVM could not lower it",
                cause="rejected",
            ),
            VALUE,
            None,
        ),
        # an empty (2^40, 0, 2^32) tensor numpy cannot represent, reshaped to (0,) (seed 7102): an
        # empty result or a clear error are both right; a non-empty one is not
        (Outcome("value", np.zeros(0, "int32")), UNREPRESENTABLE, None),
        (Outcome("raised", detail="ShapeError: too big"), UNREPRESENTABLE, None),
        (Outcome("value", np.zeros(2, "int32")), UNREPRESENTABLE, "accepted"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_the_rule_catches_each_way_of_breaking_it(outcome, expected, verdict):
    found = hostile.judge(outcome, expected)
    assert (found and found[0]) == verdict, found


def test_the_campaign_programs_are_reproducible():
    """Program i of a seed is the same program with the same arguments, drawn again alone."""
    first, again = (hostile.numbered_program(5, 3) for _ in range(2))
    assert first.text() == again.text() and first.operator == hostile.numbered_program(5, 3).operator
    for a, b in zip(first.arg_sets, again.arg_sets):
        for x, y in zip(a.args, b.args):
            np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_a_hostile_campaign_finds_nothing():
    """RELAY_AOT_HOSTILE_EXAMPLES programs (default 20, one per operator family) of 6 argument
    sets each, on both backends, with the interpreter and the VM tallied alongside."""
    examples = int(os.environ.get("RELAY_AOT_HOSTILE_EXAMPLES", str(len(hostile.OPERATORS))))
    total = hostile.Tally()
    mine, theirs = hostile.oracles()
    with mine, theirs:
        for index in range(examples):
            total.add(hostile.check(hostile.numbered_program("test", index, 6), mine, theirs))
    print(f"hostile campaign: {total}")
    assert not total.findings, "\n\n".join(str(f) for f in total.findings[:5])
    # Judged both ways: values compared with numpy's, and refusals.
    for backend in ("relay_aot cpp", "relay_aot python"):
        assert total.outcomes[(backend, "value")] > 0 and total.outcomes[(backend, "raised")] > 0, total


def test_kernel_values_are_judged_relative_to_the_largest_output_and_by_their_non_finite_positions():
    """The families on relay_aot's own kernels (Built.relative): an error of a few ulps of the
    largest output passes, a NaN or infinity where the direct computation has none does not."""
    expected = Outcome("value", np.array([3e36, 1.0, np.inf, np.nan], "float32"))
    close = Outcome("value", np.array([3e36, 1.0 + 1e30, np.inf, np.nan], "float32"))
    assert hostile.judge(close, expected, relative=True) is None
    assert hostile.judge(close, expected)[0] == "wrong result"  # per value, it is not close
    for wrong in ([3e36, np.nan, np.inf, np.nan], [3e36, 1.0, np.nan, np.nan], [3e36, 1.0, np.inf, 0.0]):
        found = hostile.judge(Outcome("value", np.array(wrong, "float32")), expected, relative=True)
        assert found and found[0] == "wrong result", wrong


def test_every_kernel_family_draws_non_finite_and_huge_values():
    kinds = set()
    for index in range(12):
        program = hostile.numbered_program(3, index, 6, ["conv2d_3x3", "dense_pack", "int8_product"])
        kinds.update(*(a.kinds for a in program.arg_sets))
    assert {"non_finite", "huge_value"} <= kinds


def test_surfaces_report_a_crash_and_accept_refusals():
    """hostile_surfaces: a child that dies is a finding; a refused name is not; an accepted one
    is checked through the library and a standalone package's C program."""
    from relay_aot.testing import hostile_surfaces

    died = hostile_surfaces._child("import os; os.abort()")
    assert len(died) == 1 and "status" in died[0], died
    assert hostile_surfaces.check_name("malloc") == []  # refused with ValueError
    assert hostile_surfaces.check_name("main") == []  # accepted: runs from Python and from C
    assert hostile_surfaces.check_path("standalone", "Makefile", "FIFO") == []
    assert hostile_surfaces.check_log("huge split") == []  # refused by file and line
    assert hostile_surfaces.check_log("cut", 17) == []  # the cut line dropped; numpy's result

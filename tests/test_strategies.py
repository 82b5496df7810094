"""The program generator: every module is well formed and typed, and over 500 programs it reaches
every Relay node kind, pattern kind, dtype, operator family and program feature it promises. The
hostile generator draws every kind of hostile argument for every operator family."""

from collections import Counter

import numpy as np
import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from tvm import relay

from relay_aot.testing import hostile, strategies

EXAMPLES = 500


def test_generated_modules_are_well_formed_and_cover_the_language():
    totals: Counter = Counter()
    seen = [0]

    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(strategies.programs())
    def generate(program):
        mod = program.module
        for gvar, func in mod.functions.items():
            assert relay.analysis.well_formed(func), gvar.name_hint
        relay.transform.InferType()(mod)  # raises on an ill-typed module
        assert len(program.args) == len(mod["main"].params)
        totals.update(strategies.node_counts(mod))
        seen[0] += 1

    generate()
    assert seen[0] >= EXAMPLES * 0.95  # Hypothesis may stop early only on duplicates
    wanted = (
        list(strategies.NODE_KINDS)
        + list(strategies.PATTERN_KINDS)
        + [f"dtype:{d}" for d in strategies.DTYPES]
        + [f"family:{f}" for f in strategies.OP_FAMILIES]
        + [f"feature:{f}" for f in strategies.FEATURES]
    )
    table = "\n".join(f"{key:36} {totals[key]}" for key in wanted)
    print(f"coverage over {seen[0]} generated programs:\n{table}")
    missing = [key for key in wanted if totals[key] == 0]
    assert not missing, f"never generated: {missing}\n{table}"


def test_batches_hold_independent_cases():
    """A batch's cases, extracted on their own, are the programs @main calls."""

    @settings(max_examples=20, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(strategies.batches(cases=3))
    def check(batch):
        assert len(batch.cases) == 3
        main = batch.module["main"]
        assert isinstance(main.body, relay.Tuple) and len(main.body.fields) == 3
        assert sum(len(a) for a in batch.case_args) == len(batch.args)
        for index in range(3):
            case = batch.case(index)
            assert tvm.ir.structural_equal(case.module["main"], batch.module[batch.cases[index]], map_free_vars=True)
            assert len(case.args) == len(case.module["main"].params)

    check()


HOSTILE_EXAMPLES = 8  # programs per operator family


def test_hostile_programs_draw_every_hostile_kind_for_every_operator_family():
    """The hostile generator (strategies.hostile_programs): every module is typed, every
    operator family of hostile.OPERATORS is drawn, every kind of hostile argument
    (hostile.KINDS) occurs, and the numpy reference both returns and refuses, so that the
    campaign judges both ways. No relay_aot or TVM executor runs here."""
    kinds: Counter = Counter()
    expected: Counter = Counter()
    families: Counter = Counter()
    for family in hostile.OPERATORS:

        @settings(
            max_examples=HOSTILE_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(strategies.hostile_programs(arg_sets=6, operators=[family]))
        def generate(program):
            relay.transform.InferType()(program.module)
            params = program.module["main"].params
            assert program.arg_sets, program.text()
            for arg_set in program.arg_sets:
                assert len(arg_set.args) == len(params)
                assert set(arg_set.kinds) <= set(hostile.KINDS)
                kinds.update(arg_set.kinds)
                expected[program.expected(arg_set.args).kind] += 1

        generate()  # raises unless it drew a program of the family
        families[family] += 1
    print(f"hostile kinds: {dict(kinds)}; reference outcomes: {dict(expected)}")
    assert set(families) == set(hostile.OPERATORS)
    missing = [kind for kind in hostile.KINDS if kinds[kind] == 0]
    assert not missing, f"never drawn: {missing} ({dict(kinds)})"
    assert expected["value"] > 0 and expected["raised"] > 0, expected


def test_the_hostile_reference_refuses_what_cannot_be_allocated():
    """A result beyond HUGE_BYTES (or 2^63 elements) is refused without being allocated; an empty
    one with huge extents is computed; one between MAX_BYTES and HUGE_BYTES is Unsafe (the
    generator drops those argument sets: no executor may really allocate it)."""

    def zeros(shape):
        shape = tuple(int(v) for v in shape)
        hostile.fits(shape, "float32")
        return np.zeros(shape, "float32")

    huge = hostile.expect(zeros, [np.array([2**32, 2**32])])
    assert huge.kind == "raised" and "cannot be allocated" in huge.detail
    assert hostile.expect(zeros, [np.array([2**40])]).kind == "raised"
    empty = hostile.expect(zeros, [np.array([0, 2**40])])
    assert empty.kind == "value" and empty.value.shape == (0, 2**40)
    # numpy's rule: the extents other than 0 must fit too
    assert hostile.expect(zeros, [np.array([0, 2**62])]).kind == "raised"
    with pytest.raises(hostile.Unsafe):
        zeros(np.array([2**14, 2**14]))

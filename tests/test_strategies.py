"""The program generator: every module is well formed and typed, and over 500 programs it reaches
every Relay node kind, pattern kind, dtype, operator family and program feature it promises."""

from collections import Counter

from hypothesis import HealthCheck, given, settings
import tvm
from tvm import relay

from relay_aot.testing import strategies

EXAMPLES = 500


def test_generated_modules_are_well_formed_and_cover_the_language():
    totals: Counter = Counter()
    seen = [0]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
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

    @settings(max_examples=20, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
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

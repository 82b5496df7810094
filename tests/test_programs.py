"""Every program in tests/programs, on every backend, against TVM's interpreter (or VM)."""

import re

import pytest
from program_files import all_programs

import relay_aot
from relay_aot import testing
from relay_aot.testing import oracle

PROGRAMS = all_programs()
CASES = [(p, i) for p in PROGRAMS for i in range(len(p.cases))]
_compiled = {}
_expected = {}


def compiled(program, backend):
    """Compile each (program, backend) once per test session."""
    key = (program.name, backend)
    if key not in _compiled:
        _compiled[key] = relay_aot.compile(program.module(), backend=backend)
    return _compiled[key]


def reference_value(program, case, args):
    """The reference executor's normalized result of one case, computed once per test session
    (the backends' tests of a case are neighbours, see conftest.py)."""
    key = (program.name, case)
    if key not in _expected:
        outcome = oracle.evaluate(program.module(), args, program.reference)
        assert outcome.kind == "value", f"{program.reference}: {outcome.kind} ({outcome.detail})"
        _expected[key] = outcome.value
    return _expected[key]


@pytest.mark.parametrize("program,case", CASES, ids=[f"{p.name}-{i}" for p, i in CASES])
def test_program(program, case, backend):
    args = program.args(program.cases[case])
    module = compiled(program, backend)
    if program.raises:
        with pytest.raises(Exception) as info:
            module(*args)
        text = f"{type(info.value).__name__}: {info.value}"
        assert re.search(program.raises, text), text
        return
    actual = testing.normalize(module(*args))
    if program.expect is not None:
        expected = testing.normalize(program.expected())
        source = "expected value"
    else:
        expected = reference_value(program, case, args)
        source = program.reference
    testing.assert_same(actual, expected, rtol=program.rtol, names=(f"relay_aot {backend}", source))

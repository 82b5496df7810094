"""Every program in tests/programs, on every backend, against TVM's interpreter (or VM)."""

import re

import pytest
import tvm

import relay_aot
from relay_aot import testing

from program_files import all_programs

PROGRAMS = all_programs()
CASES = [(p, i) for p in PROGRAMS for i in range(len(p.cases))]
_compiled = {}


def compiled(program, backend):
    """Compile each (program, backend) once per test session."""
    key = (program.name, backend)
    if key not in _compiled:
        _compiled[key] = relay_aot.compile(program.module(), backend=backend)
    return _compiled[key]


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
        expected = testing.normalize(testing.run_reference(program.module(), args, program.reference))
        source = program.reference
    testing.assert_same(actual, expected, rtol=program.rtol, names=(f"relay_aot {backend}", source))

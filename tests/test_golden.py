"""Golden tests: what lowering, liveness and both emitters make of the programs in tests/golden/.

For each ``<name>.relay`` the expected outputs are data files beside it:

* ``<name>.ir`` -- the control IR (``relay_aot.ir.printer``), each variable's last use marked
  ``^``: lowering (closure conversion, match compilation, tail calls, specialisation, escaping
  constants) and liveness at once;
* ``<name>.cc`` -- every file the C++ emitter writes, with the C API's additions (``capi.py``;
  banners without machine-specific paths);
* ``<name>.py`` -- the Python emitter's source.

A change that alters any of them shows as a diff here. When the change is intended, regenerate
them with ``RELAY_AOT_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py`` and read the diff
before committing it. (The programs' results are checked against TVM by the differential tests;
these tests pin how they are compiled.)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_aot.backends.cpp.capi import add_c_api
from relay_aot.backends.cpp.emit import emit_cpp
from relay_aot.backends.python.emit import emit_python
from relay_aot.ir.printer import format_program
from relay_aot.request import Request

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
PROGRAMS = sorted(p.stem for p in GOLDEN_DIR.glob("*.relay"))
UPDATE = os.environ.get("RELAY_AOT_UPDATE_GOLDEN") == "1"

#: Constants of the programs that use ``meta[relay.Constant][i]``.
META = {"relay.Constant": [relay.const(np.array([1, 2, 3], "float32")), relay.const(np.array([0.5, 2, 4], "float32"))]}


def _program(name: str):
    text = (GOLDEN_DIR / f"{name}.relay").read_text()
    mod = tvm.relay.parse(text, source_name=f"{name}.relay", init_meta_table=META)
    program, _ = Request.make(mod, "llvm", None, "golden", 3).lower()
    return program


OUTPUTS = {
    "ir": lambda program: format_program(program, liveness=True),
    "cc": lambda program: add_c_api(
        emit_cpp(program, "golden", lambda file_name: f"// {file_name}"), program, "golden"
    ).text(),
    "py": lambda program: emit_python(program, "golden"),
}


@pytest.mark.parametrize("suffix", list(OUTPUTS))
@pytest.mark.parametrize("name", PROGRAMS)
def test_golden(name, suffix):
    actual = OUTPUTS[suffix](_program(name))
    path = GOLDEN_DIR / f"{name}.{suffix}"
    if UPDATE:
        path.write_text(actual)
    assert path.exists(), f"{path} is missing: run with RELAY_AOT_UPDATE_GOLDEN=1 to write it"
    expected = path.read_text()
    if actual != expected:
        import difflib

        diff = "".join(
            difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), str(path), "actual", n=2)
        )
        pytest.fail(f"{path.name} differs (RELAY_AOT_UPDATE_GOLDEN=1 regenerates it):\n{diff[:6000]}")


def test_every_program_has_its_golden_files():
    for name in PROGRAMS:
        for suffix in OUTPUTS:
            assert (GOLDEN_DIR / f"{name}.{suffix}").exists(), f"{name}.{suffix}"

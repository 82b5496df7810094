"""ONNX's backend node tests as a conformance suite (docs/testing.md, "ONNX conformance").

Every case of the installed ``onnx`` package's ``backend/test/data/node`` is imported by TVM's
ONNX frontend and run by relay_aot (``relay_aot/testing/onnx_conformance.py``); its outcome --
``pass`` or why it cannot pass, with the first line of the error -- must be the one
``tests/data/onnx_conformance.json`` records. So a regression fails here, and so does a case
that starts passing: the message names each case that moved. When the change is intended,

    RELAY_AOT_UPDATE_CONFORMANCE=1 python -m pytest tests/test_onnx_conformance.py -n 2

rewrites the file's lines of the cases that ran (and the summary docs/language.md quotes from
it); review the diff.

Cases run in batches of :data:`BATCH` that share one compiled module (``run_relay_aot``). In
CI the C++ backend runs every case that does not pass and a fifth of those that pass
(:data:`PASS_STRIDE`), the Python backend every :data:`PYTHON_STRIDE`-th of those batches; ``-m
slow`` runs the rest. The VM's outcome is not measured here, which would double the cost: the file
records it, and the ``slow`` test ``test_vm_column`` measures it again.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="the ONNX conformance suite needs the onnx package (the test extra)")

from relay_aot.testing import onnx_conformance as conformance  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "onnx_conformance.json"
LANGUAGE = ROOT / "docs" / "language.md"
UPDATE = os.environ.get("RELAY_AOT_UPDATE_CONFORMANCE") == "1"
HOW_TO_UPDATE = (
    "If the change is intended, rewrite the file with\n"
    "  RELAY_AOT_UPDATE_CONFORMANCE=1 python -m pytest tests/test_onnx_conformance.py -n 2\n"
    'and review its diff (docs/testing.md, "ONNX conformance").'
)

#: Cases per compiled module.
BATCH = 16

#: CI runs every case that does not pass and every PASS_STRIDE-th passing case (in name order);
#: the other passing cases run under ``slow``. (The whole suite took 13.5 CPU-minutes with an
#: empty build cache: too much for CI's budget; this part is about a third of it.)
PASS_STRIDE = 5

#: The Python backend runs every PYTHON_STRIDE-th batch of the CI part (every batch under ``slow``).
PYTHON_STRIDE = 8

_DATA = conformance.read_data(DATA)
RECORDS: dict[str, conformance.Record] = _DATA["cases"]
UNSTABLE: dict[str, str] = _DATA.get("unstable", {})
TOLERANCES = {name: (t["rtol"], t["atol"]) for name, t in _DATA.get("tolerances", {}).items()}
NAMES = conformance.case_names()


def _batches(names: list[str]) -> list[list[str]]:
    return [names[i : i + BATCH] for i in range(0, len(names), BATCH)]


_PASSING = [n for n in NAMES if n in RECORDS and RECORDS[n].status == conformance.PASS]
_SLOW = set(_PASSING) - set(_PASSING[::PASS_STRIDE])
CI_BATCHES = _batches([n for n in NAMES if n not in _SLOW])
SLOW_BATCHES = _batches([n for n in NAMES if n in _SLOW])
BATCHES = CI_BATCHES + SLOW_BATCHES


def _param(names: list[str], slow: bool = False):
    return pytest.param(names, id=f"{names[0]}..{names[-1]}", marks=[pytest.mark.slow] if slow else [])


@contextmanager
def _locked():
    """Hold the data file's lock (the test processes of one run update it one at a time)."""
    with open(Path(tempfile.gettempdir()) / "relay_aot-onnx-conformance.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _changes(before, after) -> str:
    """What moved in a case's record, field by field."""
    if before is None:
        return f"not in the file -> {after.to_json()}"
    moved = []
    for field in ("status", "error", "vm", "python"):
        old, new = getattr(before, field), getattr(after, field)
        if old != new:
            moved.append(f"{field}: {old or '-'} -> {new or '-'}")
    return "; ".join(moved)


def _passes(record, backend: str) -> bool:
    if backend == "python" and record.python is not None:
        return record.python == conformance.PASS
    return record.status == conformance.PASS


def _compare_or_update(observed: dict[str, conformance.Record], backend: str) -> None:
    """Fail naming every case whose record moved; in update mode write them instead."""
    moved = {name: record for name, record in observed.items() if RECORDS.get(name) != record}
    if not moved:
        return
    if UPDATE:
        with _locked():
            data = conformance.read_data(DATA)
            data["cases"].update(moved)
            conformance.write_data(DATA, data)
            _write_summary(data)
        return
    lines = [f"{len(moved)} ONNX conformance cases moved on the {backend} (tests/data/onnx_conformance.json):"]
    for name, record in sorted(moved.items()):
        before = RECORDS.get(name)
        was, now = before is not None and _passes(before, backend), _passes(record, backend)
        kind = "newly passing: " if now and not was else "REGRESSION: " if was and not now else ""
        lines.append(f"  {name}: {kind}{_changes(before, record)}")
    pytest.fail("\n".join(lines) + "\n" + HOW_TO_UPDATE, pytrace=False)


def _raises(name: str) -> bool:
    """Whether the file says relay_aot raises on the case: it then compiles alone, outside the
    batch (whose module would fail, and be split until the case is found)."""
    record = RECORDS.get(name)
    return record is not None and record.error is not None and not record.error.startswith("output ")


def _run(names: list[str], backend: str) -> tuple[list[conformance.Prepared], dict[str, str]]:
    """Import ``names`` (except the unstable ones) and run those imported on ``backend``."""
    prepared = [conformance.prepare(name) for name in names if name not in UNSTABLE]
    imported = [p for p in prepared if p.mod is not None]
    outcomes = conformance.run_relay_aot([p for p in imported if not _raises(p.name)], backend, tolerances=TOLERANCES)
    outcomes.update(
        conformance.run_relay_aot([p for p in imported if _raises(p.name)], backend, batch=False, tolerances=TOLERANCES)
    )
    return prepared, outcomes


@pytest.mark.parametrize("names", [_param(b) for b in CI_BATCHES] + [_param(b, slow=True) for b in SLOW_BATCHES])
def test_cpp_backend(names):
    """Each case's outcome on the C++ backend is the recorded one."""
    prepared, outcomes = _run(names, "cpp")
    observed = {}
    for p in prepared:
        recorded = RECORDS.get(p.name)
        vm = recorded.vm if recorded is not None and recorded.vm is not None else None
        if vm is None and p.mod is not None:  # a case the file does not know yet
            vm = conformance.run_vm(p)
        record = conformance.classify(
            {"import_error": p.import_error, "inputs_differ": p.inputs_differ, "vm": vm, "cpp": outcomes.get(p.name)}
        )
        record.python = recorded.python if recorded is not None else None  # test_python_backend checks it
        observed[p.name] = record
    _compare_or_update(observed, "C++ backend")


@pytest.mark.parametrize(
    "names", [_param(b, slow=i % PYTHON_STRIDE != 0 or b in SLOW_BATCHES) for i, b in enumerate(BATCHES)]
)
def test_python_backend(names):
    """The Python backend's outcome is the C++ backend's, except where the file records another."""
    prepared, outcomes = _run(names, "python")
    observed = {}
    for p in prepared:
        recorded = RECORDS.get(p.name)
        if p.mod is None or recorded is None:
            continue  # test_cpp_backend reports these
        python = outcomes[p.name]
        observed[p.name] = dataclasses.replace(
            recorded, python=None if python == (recorded.error or "pass") else python
        )
    _compare_or_update(observed, "Python backend")


@pytest.mark.slow
@pytest.mark.parametrize("names", [_param(b) for b in BATCHES])
def test_vm_column(names):
    """TVM's VM's outcome on each imported case is the recorded one (measured again)."""
    observed = {}
    for p in (conformance.prepare(name) for name in names if name not in UNSTABLE):
        recorded = RECORDS.get(p.name)
        if p.mod is None or recorded is None:
            continue  # test_cpp_backend reports these
        record = dataclasses.replace(recorded, vm=conformance.run_vm(p))
        if record.status in ("relay_aot_fails", "vm_fails_too") and not p.inputs_differ:
            record.status = "relay_aot_fails" if record.vm == conformance.PASS else "vm_fails_too"
        observed[p.name] = record
    _compare_or_update(observed, "TVM VM")


def test_the_file_lists_every_case_of_the_installed_onnx():
    import onnx

    assert _DATA["onnx"] == onnx.__version__, (
        f"tests/data/onnx_conformance.json was measured with onnx {_DATA['onnx']}, this is onnx {onnx.__version__}: "
        'measure it again (docs/testing.md, "ONNX conformance")'
    )
    assert sorted(RECORDS) == NAMES
    assert set(UNSTABLE) <= set(NAMES)
    for name, record in RECORDS.items():
        assert record.status in conformance.STATUSES, name
        assert (record.error is None) == (record.status == conformance.PASS), name
        assert (record.vm is None) == (record.status == "import_fails"), name
        if record.status == "relay_aot_fails":
            assert record.vm == conformance.PASS, name
        if record.status == "vm_fails_too":
            assert record.vm != conformance.PASS, name
        if name in UNSTABLE:
            assert record == conformance.record_for(name, {}, _DATA), name


# ---------------------------------------------------------------------------------------------
# docs/language.md quotes the file's summary

_SUMMARY = re.compile(r"(<!-- onnx-conformance:.*?-->\n)(.*?)(\n<!-- /onnx-conformance -->)", re.DOTALL)


def _write_summary(data: dict) -> None:
    text = LANGUAGE.read_text()
    LANGUAGE.write_text(_SUMMARY.sub(lambda m: m.group(1) + conformance.summary(data) + m.group(3), text))


def test_language_md_quotes_the_file():
    quoted = _SUMMARY.search(LANGUAGE.read_text())
    assert quoted, "docs/language.md has no onnx-conformance block"
    if UPDATE:
        with _locked():
            _write_summary(conformance.read_data(DATA))
        return
    assert quoted.group(2) == conformance.summary(_DATA), (
        "docs/language.md's ONNX conformance summary is not the data file's.\n" + HOW_TO_UPDATE
    )

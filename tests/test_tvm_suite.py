"""relay_aot behind TVM's executors, as ``relay_aot.testing.tvm_suite`` puts it for TVM's own test
files; and the recorded run over TVM 0.19's files (``tests/data/tvm_suite.json``).

TVM's checkout is not part of this project: the harness is checked here on a sample written in
the form of TVM's tests (``tests/tvm_suite_sample``), and the record's invariants on the file.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import tvm

from relay_aot.testing import tvm_suite

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "tvm_suite.json"


@pytest.mark.early
def test_every_executor_runs_relay_aot_and_the_summary_names_what_fails_only_there():
    runs = {
        mode: tvm_suite.run_file(ROOT / "tvm_suite_sample", "executors_sample.py", mode, 1, 300)
        for mode in ("tvm", "aot")
    }
    for test, entry in runs["tvm"].items():
        assert entry["outcome"] == "passed" and entry["reached"] == 0, (test, entry)
    aot = {test.split("::")[1]: entry for test, entry in runs["aot"].items()}
    # every kind of create_executor, relay.build + GraphModule, vm.compile + VirtualMachine
    assert aot["test_every_kind"]["reached"] == 4
    for name in (
        "test_every_kind",
        "test_build_and_graph_module",
        "test_legacy_build_tuple",
        "test_graph_and_vm_module_apis",
        "test_vm_compile",
        "test_interpreter_constructor_values",
    ):
        assert aot[name]["outcome"] == "passed" and aot[name]["reached"] >= 1, (name, aot[name])
    summary = tvm_suite.summarize(
        {"executors_sample.py": runs}, {"executors_sample.py::test_fails_only_under_relay_aot": "why"}
    )
    (only,) = summary["failing_only_with_relay_aot"]
    assert only["test"].endswith("test_fails_only_under_relay_aot") and only["reason"] == "why"
    assert "AssertionError" in only["error"]


def test_the_record_gives_a_reason_for_every_test_failing_only_on_relay_aot():
    data = json.loads(DATA.read_text())
    assert data["tvm_version"].split(".")[:2] == tvm.__version__.split(".")[:2]
    unexplained = [e["test"] for e in data["failing_only_with_relay_aot"] if not e["reason"]]
    assert not unexplained, f"tests/data/tvm_suite.json: no reason recorded for {unexplained}"
    for name, entry in data["files"].items():
        assert entry["group"] == tvm_suite.group(name)
        assert entry["reached_and_both_passed"] <= entry["reached_and_tvm_passed"] <= entry["tvm"]["passed"], name
    for group, total in data["totals"].items():
        files = [f for f in data["files"].values() if f["group"] == group]
        assert total["files"] == len(files)
        for key in ("reached_and_tvm_passed", "reached_and_both_passed"):
            assert total[key] == sum(f[key] for f in files), (group, key)
        failing = [e for e in data["failing_only_with_relay_aot"] if tvm_suite.group(e["test"].split("::")[0]) == group]
        assert total["failing_only_with_relay_aot"] == len(failing), group


@pytest.mark.parametrize(
    "stdout, stderr",
    [
        (b"collected 3 items\nrunning caf\xc3", None),
        (None, b"collected 3 items\nFatal Python error"),
        (b"", b"collected 3 items"),
    ],
)
def test_a_file_run_its_timeout_ends_reports_what_it_printed(monkeypatch, tmp_path, stdout, stderr):
    """subprocess keeps a timed-out run's streams as bytes even with text=True, None for one that
    printed nothing, and may cut a character: each stream is read on its own."""

    def timed_out(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"], output=stdout, stderr=stderr)

    monkeypatch.setattr(tvm_suite.subprocess, "run", timed_out)
    results = tvm_suite.run_file(tmp_path, "test_x.py", "aot", 1, 10, file_timeout=1)
    (entry,) = results.values()
    assert entry["outcome"] == "failed"
    assert entry["error"].startswith("collected 3 items")

"""Smoke tests of the benchmark harness (``benchmarks/``): it runs, and executors agree.

Quick mode, two small workloads; nothing here asserts anything about speed.
"""

import argparse
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tvm
from conftest import ROOT
from tvm import relay

from benchmarks import executors, report, suite, tflm, workloads
from benchmarks.suite import KERNELS, Options
from relay_aot.testing.oracle import uses_references


def _heavy_marked_slow(workload):
    # Building a vision model's weights and type-checking it takes seconds to a minute each.
    return pytest.param(workload, marks=pytest.mark.slow if workload.model_zoo else (), id=workload.name)


@pytest.mark.parametrize("workload", [_heavy_marked_slow(w) for w in workloads.all_workloads()])
def test_workload_arguments_match_main(workload):
    """Every workload parses, type-checks, and its arguments fit ``@main``'s parameters."""
    main = workload.module()["main"]
    args = workload.args()
    assert len(args) == len(main.params)
    for arg, param in zip(args, main.params):
        ty = param.checked_type
        assert str(arg.dtype) == ty.dtype and len(arg.shape) == len(ty.shape), param.name_hint
        for size, dim in zip(arg.shape, ty.shape):
            # a dynamic workload's ``?`` dimensions take any size
            assert isinstance(dim, tvm.tir.Any) or size == int(dim), param.name_hint
    # Graph and AOT executors reject global functions, ? dimensions and control flow: "static"
    # must mean @main alone, with static shapes, a dataflow graph.
    reachable = relay.transform.RemoveUnusedFunctions(["main"])(workload.module())
    assert workload.static == (len(reachable.functions) == 1 and not workload.dynamic and _dataflow(main))
    assert workload.references == uses_references(reachable)


def _dataflow(main) -> bool:
    """No closures, references, ``if``, ``match`` or constructors in ``main`` (a Relay gradient
    is @main alone, full of references and closures)."""
    control = (relay.Function, relay.RefCreate, relay.RefRead, relay.RefWrite, relay.If, relay.Match, relay.Constructor)
    found = []
    relay.analysis.post_order_visit(main.body, lambda node: found.append(node) if isinstance(node, control) else None)
    return not found


def test_suite_runs_and_executors_agree():
    """fib15 and mlp_b1 on every TVM executor and relay_aot's C++ backend: all agree with the VM."""
    keys = ["vm", "interpreter", "graph", "aot", "relay_aot_cpp"]
    records = suite.run_suite(["fib15", "mlp_b1"], keys, Options.quick())
    pairs = report.by_pair(records)
    for workload in ("fib15", "mlp_b1"):
        for key in ("vm", "interpreter", "relay_aot_cpp"):
            record = pairs[(workload, key)]
            assert record["status"] == "ok", record
            assert record["timing"]["median"] > 0 and record["timing"]["runs"] >= 2
        assert pairs[(workload, "vm")]["reference"] is True
        assert pairs[(workload, "relay_aot_cpp")]["checked_against"] == "vm"
    for key in ("graph", "aot"):
        assert pairs[("fib15", key)]["status"] == "n/a"
        assert pairs[("mlp_b1", key)]["status"] == "ok", pairs[("mlp_b1", key)]
    # fib(15) makes 1,973 calls: 986 evaluate less, two subtracts and an add, 987 only less.
    assert pairs[("fib15", KERNELS)]["kernel_calls"] == 986 * 4 + 987
    report.add_ratios(records)
    assert pairs[("mlp_b1", "relay_aot_cpp")]["vs_graph"] > 0
    text = report.text_report(
        {"machine": _machine(), "settings": [{"setting": suite.thread_setting(), "records": records}]}
    )
    assert "fib15" in text and "mlp_b1" in text


class _WrongAnswer(executors.Executor):
    key = "relay_aot_cpp"
    label = "an executor that returns fib(15) + 1"

    def prepare(self, mod, args, target):
        return lambda: tvm.nd.array(np.array(611, dtype="int32"))


class _Raises(executors.Executor):
    key = "relay_aot_python"
    label = "an executor that cannot compile"

    def prepare(self, mod, args, target):
        raise NotImplementedError("no such backend yet")


def test_wrong_results_and_failures_are_reported():
    """A fast wrong answer is flagged as a mismatch; an executor that raises is n/a with the reason."""
    run = suite.WorkloadRun(workloads.fib(15), Options.quick())
    assert run.run(executors.VirtualMachine())["status"] == "ok"
    wrong = run.run(_WrongAnswer())
    assert wrong["status"] == "mismatch" and "611" in wrong["reason"] and "610" in wrong["reason"]
    failed = run.run(_Raises())
    assert failed == {
        "workload": "fib15",
        "executor": "relay_aot_python",
        "status": "n/a",
        "reason": "NotImplementedError: no such backend yet",
    }


def test_hand_written_cpp_agrees_with_the_vm():
    """The hand-written C++ programs (benchmarks/hand_cpp) return the VM's results, on small sizes;
    other workloads are n/a with the reason, and relay_aot's record gets its multiple of them."""
    hand = executors.HandCpp()
    for workload in (workloads.fib(10), workloads.list_of_scalars(30), workloads.list_of_tensors(30, size=4)):
        run = suite.WorkloadRun(workload, Options.quick())
        records = [run.run(executors.VirtualMachine()), run.run(hand), run.run(executors.by_key()["relay_aot_cpp"])]
        assert [r["status"] for r in records] == ["ok", "ok", "ok"], records
        assert records[1]["checked_against"] == "vm"
        report.add_ratios(records)
        assert records[2]["x_hand"] > 0
    assert "by hand only" in hand.unsupported(workloads.closures_loop())


def test_command_line_writes_results(tmp_path):
    """``python -m benchmarks`` in quick mode: a worker process, JSON, Markdown and the table."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--workloads",
            "fib15",
            "--executors",
            "vm,relay_aot_cpp",
            "--threads",
            "1",
            "--no-kernels",
            "--keep-cache",
            "--output-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    (setting,) = result["settings"]
    assert setting["setting"]["TVM_NUM_THREADS"] == "1"
    statuses = {r["executor"]: r["status"] for r in setting["records"]}
    assert statuses == {"vm": "ok", "relay_aot_cpp": "ok"}
    assert "relay_aot speedups" in out.stdout
    assert "fib15" in (tmp_path / "results.md").read_text()


def _machine():
    return {
        "date": "2000-01-01T00:00:00",
        "cpu": "cpu",
        "cores": 2,
        "tvm": tvm.__version__,
        "relay_aot": "0",
        "commit": None,
    }


def test_c_entry_benchmark_runs(tmp_path):
    """``python -m benchmarks.c_entry``'s measurement on fib15: both entries timed, from C++."""
    from benchmarks import c_entry

    result = c_entry.measure(workloads.by_name()["fib15"], tmp_path, budget=0.05)
    for key in ("c_entry", "packed"):
        assert result[key]["runs"] >= 3 and result[key]["median"] > 0
    assert "| fib15 |" in c_entry.table({"fib15": result})


def test_interpreter_is_the_baseline_where_the_vm_cannot_run():
    """A workload the VM cannot run (references) gets its ratios against the interpreter."""
    timing = lambda median: {"median": median, "min": median, "max": median, "runs": 3}  # noqa: E731
    records = [
        {"workload": "grad", "executor": "vm", "status": "n/a", "reason": executors.NO_REFERENCES},
        {"workload": "grad", "executor": "interpreter", "status": "ok", "timing": timing(0.08)},
        {"workload": "grad", "executor": "relay_aot_cpp", "status": "ok", "timing": timing(0.002)},
        {"workload": "fib", "executor": "vm", "status": "ok", "timing": timing(0.01)},
        {"workload": "fib", "executor": "interpreter", "status": "ok", "timing": timing(0.1)},
        {"workload": "fib", "executor": "relay_aot_cpp", "status": "ok", "timing": timing(0.001)},
    ]
    report.add_ratios(records)
    pairs = report.by_pair(records)
    assert pairs[("grad", "relay_aot_cpp")]["vs_interp"] == pytest.approx(40)
    assert "vs_interp" not in pairs[("fib", "relay_aot_cpp")]  # the VM ran: it stays the baseline
    result = {"machine": _machine(), "settings": [{"setting": suite.thread_setting(), "records": records}]}
    lines = report.summary(result, markdown=True).splitlines()
    cells = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in lines
        if line.startswith("| ")
    }
    assert cells["workload"][:2] == ["C++ vs VM (default)", "C++ vs interp, no VM (default)"]
    assert cells["grad"][:2] == ["", "40×"] and cells["fib"][:2] == ["10×", ""]
    assert "40× vs interp" in report.setting_tables(result["settings"][0])


def test_chart_of_workloads_the_vm_cannot_run(tmp_path):
    """A run of gradient workloads alone has no speedup over the VM to draw: the chart is still
    written (it used to fail drawing an empty legend) and the tables are unaffected."""
    pytest.importorskip("matplotlib")
    timing = lambda median: {"median": median, "min": median, "max": median, "runs": 3}  # noqa: E731
    records = [
        {"workload": "grad", "executor": "vm", "status": "n/a", "reason": executors.NO_REFERENCES},
        {"workload": "grad", "executor": "interpreter", "status": "ok", "timing": timing(0.08)},
        {"workload": "grad", "executor": "relay_aot_cpp", "status": "ok", "timing": timing(0.002)},
    ]
    report.add_ratios(records)
    result = {"machine": _machine(), "settings": [{"setting": suite.thread_setting(), "records": records}]}
    assert report.chart(result, tmp_path / "chart.png") is None
    assert (tmp_path / "chart.png").stat().st_size > 0


def test_compile_time_table_measures_each_compile_and_renders_ratios():
    """``benchmarks/compile_time.py`` on fib15: first, nothing prebuilt, new module, cache hit and
    the VM's compile, each in a fresh process (it checks that the new module builds and the hit
    does not)."""
    from benchmarks import compile_time

    table = compile_time.compile_table(["fib15"], progress=lambda line: None)
    measured = table["programs"]["fib15"]
    assert "error" not in measured, measured
    for what in ("first", "scratch", "new", "hit", "vm"):
        assert measured[what] > 0 and f"{what}_cpu" in measured
    # The first compile links the runtime object pip install built; from scratch, none is there.
    assert measured["stats"]["first"]["runtime_builds"] == 0 and measured["stats"]["scratch"]["runtime_builds"] == 1
    assert "build" not in measured and not measured["static"]  # fib15 is not static
    assert measured["stats"]["new"]["builds"] == 1 and measured["stats"]["new"]["kernel_builds"] == 0
    assert measured["new/vm"] == measured["new"] / measured["vm"]
    table["programs"]["broken"] = {"error": "RuntimeError: no"}
    # TVM's own compile failing (an LLVM assertion on int8 models) leaves the row, marked
    without_vm = {key: value for key, value in measured.items() if "vm" not in key}
    table["programs"]["peer_failed"] = {**without_vm, "vm_error": "Assertion failed"}
    text = report.compile_time_table(table, markdown=True)
    assert "| fib15 |" in text and "new / VM" in text and "nothing prebuilt / VM" in text
    assert "n/a: RuntimeError: no" in text
    row = next(line for line in text.splitlines() if line.startswith("| peer_failed |"))
    assert "failed" in row
    section = report.compile_time_section({"compile_time": table})
    assert section.startswith("### Compile time") and "relay.build" in section


def test_a_stalled_worker_is_stopped(tmp_path, monkeypatch):
    """A worker that writes nothing for the stall limit is killed and reported as stalled; one
    that finishes is waited for."""
    from benchmarks import cli

    monkeypatch.setattr(cli, "STALL_LIMIT_S", 2)
    out = tmp_path / "records.jsonl"
    code, stalled = cli._run_watched(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]), out)
    assert stalled and code != 0
    code, stalled = cli._run_watched(subprocess.Popen([sys.executable, "-c", "pass"]), out)
    assert (code, stalled) == (0, False)


def test_a_tuned_row_compiles_inside_its_records(tmp_path, monkeypatch):
    """A tuned row is its workload compiled inside ``autotvm.apply_history_best`` of the records
    the run keeps (the graph tuner's where there are some); without records it is n/a, saying
    where they would be."""
    from benchmarks import tuning
    from relay_aot.kernels import tuning as kernel_tuning

    monkeypatch.setattr(tuning, "RECORDS_DIR", tmp_path)
    row = workloads.tuned(workloads.mlp(1))
    assert (row.name, row.tuned_from) == ("mlp_b1_tuned", "mlp_b1")
    assert tvm.ir.structural_equal(row.module(), workloads.mlp(1).module())
    seen = []

    class Spy(executors.Executor):
        key = "spy"

        def prepare(self, mod, args, target):
            seen.append(kernel_tuning.fingerprint())
            return lambda: np.zeros(1)

    target = Options.quick().target
    record = suite.WorkloadRun(row, Options.quick()).prepare(Spy())
    cpu_name = tvm.target.Target(target).attrs["mcpu"]
    assert record["status"] == "n/a" and str(tmp_path / f"mlp_b1.{cpu_name}.json") in record["reason"], record
    log = tuning.log_path("mlp_b1", target)
    import relay_aot

    relay_aot.tune(row.module(), log, target=target, trials=1, tuner="random", layouts=False)
    assert tuning.records(row, target) == log and tuning.records(workloads.mlp(1), target) is None
    # Records are per CPU: another CPU's run finds none of this one's.
    assert tuning.records(row, "llvm -mcpu=skylake") is None
    assert suite.WorkloadRun(row, Options.quick()).prepare(Spy())["status"] == "ok"
    assert suite.WorkloadRun(workloads.mlp(1), Options.quick()).prepare(Spy())["status"] == "ok"
    assert seen[0] != "" and seen[1] == "", seen  # inside the records; the untuned row outside any
    assert [w.name for w in workloads.all_workloads() if w.tuned_from] == [f"{n}_tuned" for n in workloads.TUNED]


def test_tinyml_m4_counts_a_package_on_qemu(tmp_path):
    """``python -m benchmarks.tinyml_m4``'s measurement of relay_aot on MLPerf Tiny's AD model:
    the plugin builds without QEMU's header and counts, the package is bit-exact with TFLite's
    reference kernels, the sizes come from the map. TFLM is skipped without its sources."""
    from benchmarks import tinyml_m4

    reason = tinyml_m4.common_missing()
    if reason is not None:
        pytest.skip(reason)
    options = argparse.Namespace(work=str(tmp_path), tflm_sources=None, jobs=1)
    found = tinyml_m4.run_all(["relay_aot", "tflm"], ["ad"], options)
    assert found["skipped"] == {"tflm": "no --tflm-sources DIR (benchmarks/README.md: its layout and commits)"}
    (result,) = found["results"]
    assert [e["max_lsb"] for e in result["exactness"]] == [0, 0, 0]
    assert 0 < result["instructions"] < result["instructions_one_run"]
    header = (tmp_path / "relay_aot" / "ad" / "pkg" / "tvmgen_m.h").read_text()
    assert f"#define TVMGEN_M_PLANNED_SIZE {result['planned']} " in header
    # the model's weights are the package's constants: 264,192 int8 of them in flash
    assert result["flash"]["model"] > 264_192 and result["ram"]["runtime"] >= result["planned"]
    assert "| AD | relay_aot |" in tinyml_m4.render(found)


def test_tinyml_m4_table_in_the_docs_is_the_committed_run():
    """docs/performance.md shows the table of docs/benchmarks/tinyml_m4.json as rendered."""
    from benchmarks import tinyml_m4

    found = json.loads((ROOT / "docs" / "benchmarks" / "tinyml_m4.json").read_text())
    assert tinyml_m4.render(found) in (ROOT / "docs" / "performance.md").read_text()
    assert found["tflm_sources"] == {s.directory: s.commit for s in tflm.SOURCES}


def _patched_layout(root, patch_applied: bool):
    """A TFLM source layout of empty directories whose flatbuffers has (or lacks) a one-line patch."""
    for source in tflm.SOURCES:
        (root / source.directory).mkdir(parents=True)
    patch = root / "tflite-micro" / tflm.FLATBUFFERS_PATCH
    patch.parent.mkdir(parents=True)
    patch.write_text("--- a/base.h\n+++ b/base.h\n@@ -1 +1 @@\n-old\n+new\n")
    (root / "flatbuffers" / "base.h").write_text("new\n" if patch_applied else "old\n")


def test_tflm_sources_are_checked(tmp_path):
    """The TFLM source directory: each repository present, flatbuffers patched, a git checkout
    at the pinned commit (else refused), any other directory used with a warning."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    with pytest.raises(ValueError, match="tflite-micro is missing"):
        tflm.check_sources(tmp_path)
    _patched_layout(tmp_path / "unpatched", patch_applied=False)
    with pytest.raises(ValueError, match="patch is not applied"):
        tflm.check_sources(tmp_path / "unpatched")
    _patched_layout(tmp_path / "ok", patch_applied=True)
    commits, warnings = tflm.check_sources(tmp_path / "ok")
    assert set(commits.values()) == {"unverified"} and len(warnings) == len(tflm.SOURCES)
    ruy = tmp_path / "ok" / "ruy"
    git = ["git", "-C", str(ruy), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "other"], check=True)
    with pytest.raises(ValueError, match="ruy is at [0-9a-f]{40}, not d37128311b"):
        tflm.check_sources(tmp_path / "ok")


def test_a_worker_crashing_on_many_pairs_is_restarted_until_every_workload_is_measured(monkeypatch, tmp_path):
    """Each crash leaves its pair out of the next worker: seven crashing pairs (more than the
    five restarts the harness once allowed, after which the workloads left were silently not
    measured) end as seven "crashed" records and the other pairs' results; a restarted worker
    starts at the workload it crashed on, not at the first."""
    from benchmarks import cli

    started_with = []

    pairs = [[f"w{i}", e] for i in range(4) for e in ("vm", "relay_aot_cpp")]
    crashing = [p for p in pairs if p[1] == "vm"] + [
        ["w0", "relay_aot_cpp"],
        ["w1", "relay_aot_cpp"],
        ["w2", "relay_aot_cpp"],
    ]

    class Worker:
        def __init__(self, command, **kwargs):
            self.command = command

    def run_watched(worker, out):
        command = worker.command
        skip = json.loads(command[command.index("--skip") + 1])
        exclude = json.loads(command[command.index("--exclude") + 1])
        chosen = command[command.index("--workloads") + 1].split(",")
        started_with.append(chosen[0])
        with open(out, "w", encoding="utf-8") as f:
            f.write(json.dumps({"setting": {"label": "1 thread"}}) + "\n")
            for pair in pairs:
                if pair in skip or pair in exclude or pair[0] not in chosen:
                    continue
                f.write(json.dumps({"started": pair}) + "\n")
                if pair in crashing:
                    return -6, False
                f.write(json.dumps({"workload": pair[0], "executor": pair[1], "status": "ok"}) + "\n")
        return 0, False

    monkeypatch.setattr(cli.subprocess, "Popen", Worker)
    monkeypatch.setattr(cli, "_run_watched", run_watched)
    monkeypatch.setattr(cli.report, "add_ratios", lambda records: None)
    args = argparse.Namespace(
        workload_list=[f"w{i}" for i in range(4)], executor_list=["vm", "relay_aot_cpp"], no_kernels=True
    )
    result = cli.run_setting("1", args, Options(), {}, tmp_path)
    statuses = {(r["workload"], r["executor"]): r["status"] for r in result["records"]}
    assert statuses == {tuple(p): ("crashed" if p in crashing else "ok") for p in pairs}
    assert started_with == ["w0", "w0", "w0", "w1", "w1", "w2", "w2", "w3"]

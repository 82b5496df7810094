"""Profiling (issue 17): ``CompiledModule.profile`` reports, in TVM's format, where a call went.

Counts in the report are checked against counts known independently (the calls of a doubly
recursive function on tensors); times against each other (the rows partition the call); the
trace's slices must nest; the plain library must carry no instrumentation at all.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from conftest import ROOT
from deploy_support import LSTM, lstm_args
from tvm.runtime import profiling

import relay_aot
from relay_aot import cli, names
from relay_aot.compiler import generate_source
from relay_aot.runtime import exported_symbols

#: fib on tensors of shape (2,): every addition is a real kernel call (0-d arithmetic would be
#: inline C++, never a kernel).
FIB = """#[version = "0.0.5"]
def @fib(%n: int32, %one: Tensor[(2), float32]) -> Tensor[(2), float32] {
  if (less(%n, 2)) { %one } else { add(@fib(subtract(%n, 1), %one), @fib(subtract(%n, 2), %one)) }
}
def @main(%n: int32, %one: Tensor[(2), float32]) -> Tensor[(2), float32] { @fib(%n, %one) }
"""

#: Recursion as deep as ``%n`` (not a tail call: the addition follows the recursive call).
DEEP = """#[version = "0.0.5"]
def @count(%n: int32, %x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  if (less(%n, 1)) { %x } else { add(@count(subtract(%n, 1), %x), %x) }
}
def @main(%n: int32, %x: Tensor[(2), float32]) -> Tensor[(2), float32] { @count(%n, %x) }
"""

N = 12
ONE = np.ones(2, "float32")


def fib_counts(n: int) -> tuple[int, int, int]:
    """(calls of @fib, additions, value) of fib(n) as FIB computes it."""
    if n < 2:
        return 1, 0, 1
    c1, a1, v1 = fib_counts(n - 1)
    c2, a2, v2 = fib_counts(n - 2)
    return 1 + c1 + c2, a1 + a2 + 1, v1 + v2


def rows(report) -> dict[str, dict]:
    """The report's rows by name, values as Python numbers."""
    data = json.loads(report.json())
    out = {}
    for call in data["calls"]:
        # Each value is {"count": n}, {"microseconds": t}, {"string": s}, ... (or a bare string).
        row = {key: next(iter(value.values())) if isinstance(value, dict) else value for key, value in call.items()}
        out[row["Name"]] = row
    return out


def total_us(report) -> float:
    return json.loads(report.json())["device_metrics"]["cpu0"]["Duration (us)"]["microseconds"]


@pytest.fixture(scope="module", params=["cpp", "python"])
def fib(request):
    return relay_aot.compile(tvm.relay.parse(FIB), backend=request.param)


def check_trace(trace: dict) -> list[dict]:
    """The trace's slices, checked: complete events that nest (a slice starting inside another
    ends inside it)."""
    events = trace["traceEvents"]
    for e in events:
        assert e["ph"] == "X" and {"name", "ts", "dur", "pid", "tid"} <= set(e)
    eps = 1e-3  # times are rounded to the nanosecond
    stack: list[dict] = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + eps:
            stack.pop()
        if stack:
            parent = stack[-1]
            assert e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + eps, f"{e} overlaps {parent}"
        stack.append(e)
    return events


def test_kernel_and_function_counts_are_the_programs(fib):
    calls, additions, value = fib_counts(N)
    result = fib(np.int32(N), ONE)
    np.testing.assert_array_equal(result.numpy(), np.full(2, value, "float32"))
    report = fib.profile(np.int32(N), ONE)
    assert isinstance(report, profiling.Report)
    by_name = rows(report)
    assert by_name["@fib"]["Count"] == calls and by_name["@fib"]["Kind"] == "function"
    assert by_name["@main"]["Count"] == 1 and by_name[names.PROFILE_ENTRY]["Count"] == 1
    kernels = {name: row for name, row in by_name.items() if row["Kind"] == "kernel"}
    adds = [row for name, row in kernels.items() if name.endswith("_add")]
    assert len(adds) == 1 and adds[0]["Count"] == additions, kernels


def test_times_partition_the_call(fib):
    report = fib.profile(np.int32(N), ONE)
    total = total_us(report)
    assert total > 0
    by_name = rows(report)
    functions = [row for row in by_name.values() if row["Kind"] == "function"]
    # Exclusive times of the functions (the entry included) add up to the whole call ...
    assert sum(row["Exclusive (us)"] for row in functions) == pytest.approx(total, rel=0.1)
    # ... and so do the rows' own durations (functions' self time plus kernels).
    assert sum(row["Duration (us)"] for row in by_name.values()) == pytest.approx(total, rel=0.1)
    assert sum(row["Percent"] for row in by_name.values()) == pytest.approx(100, rel=0.1)
    # The entry's inclusive time is the call; @fib's counts its recursion once.
    assert by_name[names.PROFILE_ENTRY]["Inclusive (us)"] == pytest.approx(total, rel=0.01)
    assert by_name["@fib"]["Inclusive (us)"] <= by_name["@main"]["Inclusive (us)"] + 1e-3


def test_report_formats_load_and_print(fib):
    report = fib.profile(np.int32(N), ONE)
    loaded = profiling.Report.from_json(report.json())
    assert rows(loaded) == rows(report)
    table = report.table()
    assert "@fib" in table and "Inclusive (us)" in table and "Total" in table
    assert "@fib" in report.csv()
    assert str(report.configuration["Executor"]) == f"relay_aot ({fib.backend})"
    assert str(loaded.configuration["Executor"]) == f"relay_aot ({fib.backend})"


def test_chrome_trace_nests(fib, tmp_path):
    path = tmp_path / "trace.json"
    fib.profile(np.int32(6), ONE, trace=path)
    events = check_trace(json.loads(path.read_text()))
    calls, additions, _ = fib_counts(6)
    names_seen = [e["name"] for e in events]
    assert names_seen.count("@fib") == calls and names_seen.count(names.PROFILE_ENTRY) == 1
    assert sum(1 for e in events if e["cat"] == "kernel" and e["name"].endswith("_add")) == additions
    entry = next(e for e in events if e["name"] == names.PROFILE_ENTRY)
    assert all(entry["ts"] <= e["ts"] for e in events)


def test_plain_builds_carry_no_instrumentation(fib):
    mod = tvm.relay.parse(FIB)
    plain = generate_source(mod, backend=fib.backend)
    profiled = generate_source(mod, backend=fib.backend, profile=True)
    markers = (
        ("profiled_call_kernel", "FunctionScope", "counted(")
        if fib.backend == "cpp"
        else ("profiled_call_kernel", "profile_enter", "profile_exit")
    )
    assert not [m for m in markers if m in plain]
    assert all(m in profiled for m in markers)
    assert fib.profiler is None  # the plain module; profile() used its variant
    if fib.backend == "cpp":
        assert names.profile_symbol(fib.name) not in exported_symbols(fib.library_path)
        variant = fib.profiled_variant()
        assert variant.build_result.key != fib.build_result.key
        assert names.profile_symbol(fib.name) in exported_symbols(variant.library_path)


def test_deep_recursion_aggregates_and_caps_the_trace(tmp_path):
    depth = 100_000
    compiled = relay_aot.compile(tvm.relay.parse(DEEP), profile=True)
    x = np.array([1.0, 2.0], "float32")
    path = tmp_path / "deep.json"
    report = compiled.profile(np.int32(depth), x, trace=path, max_trace_events=1000)
    by_name = rows(report)
    assert by_name["@count"]["Count"] == depth + 1
    adds = [row for name, row in by_name.items() if row["Kind"] == "kernel" and name.endswith("_add")]
    assert adds[0]["Count"] == depth
    trace = json.loads(path.read_text())
    events = check_trace(trace)
    assert len(events) == 1000
    # (entry), @main, @count depth + 1 times, the add kernel depth times
    assert trace["otherData"]["dropped_events"] == 2 * depth + 3 - 1000
    assert "first 1000 calls" in trace["otherData"]["note"]
    assert [e["name"] for e in events[:3]] == [names.PROFILE_ENTRY, "@main", "@count"]


def test_closures_and_lists_with_an_exported_library(tmp_path):
    """The LSTM example (a closure folded over a List of 10 steps), profiled after export and
    relay_aot.load; allocations counted."""
    mod = tvm.relay.parse(LSTM.read_text())
    args = lstm_args()
    compiled = relay_aot.compile(mod, profile=True)
    path = compiled.export_library(tmp_path / "lstm.so")
    loaded = relay_aot.load(path)
    report = loaded.profile(*args)
    by_name = rows(report)
    assert by_name["%cell in @main"]["Count"] == 10
    assert by_name["@steps"]["Count"] == 11
    assert any(row["Count"] == 10 for name, row in by_name.items() if row["Kind"] == "kernel" and "dense" in name)
    device = json.loads(report.json())["device_metrics"]["cpu0"]
    assert device["Tensors allocated"]["count"] > 0 and device["Tensor bytes"]["count"] > 0
    assert device["Objects allocated"]["count"] >= 10 + 11  # a state tuple per step, the list's cells
    np.testing.assert_allclose(loaded(*args)[0].numpy(), compiled(*args)[0].numpy())


def test_a_plain_library_loaded_says_how_to_profile(tmp_path):
    compiled = relay_aot.compile(tvm.relay.parse(FIB))
    loaded = relay_aot.load(compiled.export_library(tmp_path / "fib.so"))
    with pytest.raises(ValueError, match="not built for profiling.*profile=True"):
        loaded.profile(np.int32(3), ONE)


def test_cli_profile(tmp_path, capsys):
    program = tmp_path / "fib.relay"
    program.write_text(FIB)
    np.save(tmp_path / "n.npy", np.int32(N))
    np.save(tmp_path / "one.npy", ONE)
    inputs = ["--inputs", str(tmp_path / "n.npy"), str(tmp_path / "one.npy")]
    plain, profiled, trace = tmp_path / "plain.so", tmp_path / "profiled.so", tmp_path / "trace.json"
    assert cli.main(["compile", str(program), "-o", str(plain)]) == 0
    assert cli.main(["compile", str(program), "-o", str(profiled), "--profile"]) == 0
    assert "built for profiling" in capsys.readouterr().out
    assert cli.main(["run", str(plain), *inputs, "--profile"]) == 1
    assert "was not built for profiling: compile it with `relay-aot compile --profile" in capsys.readouterr().err
    assert cli.main(["run", str(profiled), *inputs, "--profile", "--profile-json", str(trace)]) == 0
    out = capsys.readouterr().out
    _, additions, value = fib_counts(N)
    assert out.startswith(f"Tensor[(2), float32] [{value}.0, {value}.0]") or str(value) in out.splitlines()[0]
    assert "@fib" in out and "Inclusive (us)" in out and f"wrote {trace}" in out
    check_trace(json.loads(trace.read_text()))
    assert cli.main(["show", str(program), "--profile"]) == 0
    assert "profiled_call_kernel" in capsys.readouterr().out


def test_shape_functions_are_timed_as_kernels(backend):
    """A program with ? dimensions: its kernels' shape functions are rows of their own."""
    mod = tvm.relay.parse((ROOT / "tests" / "programs" / "dyn_concat_grow.relay").read_text())
    compiled = relay_aot.compile(mod, backend=backend, profile=True)
    report = compiled.profile(np.array([1, 2], "float32"), np.int32(4))
    by_name = rows(report)
    shape_functions = {name: row["Count"] for name, row in by_name.items() if name.endswith("_shape")}
    assert 4 in shape_functions.values(), by_name  # the concatenate's, once per step
    assert by_name["@grow"]["Count"] == 1  # a self tail call is a loop


def test_python_backend_profiles_closures_and_lists():
    report = relay_aot.compile(tvm.relay.parse(LSTM.read_text()), backend="python").profile(*lstm_args())
    by_name = rows(report)
    assert by_name["%cell in @main"]["Count"] == 10 and by_name["@steps"]["Count"] == 11
    assert "Tensors allocated" not in json.loads(report.json())["device_metrics"]["cpu0"]  # not counted there


def test_a_call_that_raises_stops_the_profile(backend):
    """The error propagates, the profile is stopped, and the next profile starts clean."""
    mod = tvm.relay.parse((ROOT / "tests" / "programs" / "match_failure.relay").read_text())
    compiled = relay_aot.compile(mod, backend=backend, profile=True)
    with pytest.raises(relay_aot.MatchError, match="@unwrap"):
        compiled.profile(np.int32(1), warmup=0)
    by_name = rows(compiled.profile(np.int32(0)))
    assert by_name["@unwrap"]["Count"] == 1 and by_name["@main"]["Count"] == 1
    assert by_name[names.PROFILE_ENTRY]["Count"] == 1  # nothing left over from the failed call

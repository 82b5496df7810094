"""ONNX's backend node tests as a conformance suite: import each, run it on relay_aot, compare.

The ``onnx`` package ships ``onnx/backend/test/data/node``: 1,282 cases, each a ``model.onnx``
of one operator (or a small expansion of one) with ``test_data_set_0/input_*.pb`` and the
expected ``output_*.pb``. Each case goes through:

1. :func:`load_case` reads the model, its inputs and expected outputs;
2. :func:`import_case` imports it with TVM's ONNX frontend
   (``relay.frontend.from_onnx(model, shape=..., freeze_params=True)``);
3. relay_aot compiles and runs it on the stored inputs (:func:`run_relay_aot`), and
   :func:`output_problem` compares the results with the expected outputs as ONNX's own backend
   tests do (same number of outputs, same dtypes and shapes, ``numpy.testing.assert_allclose``
   with ``rtol=1e-3``, ``atol=1e-7``; non-numeric outputs exactly).

Every case ends in one of :data:`STATUSES` (``pass`` or why it cannot pass: :func:`classify`),
which ``tests/data/onnx_conformance.json`` records with the first line of the error and TVM's
VM's outcome on the same module (:func:`run_vm`; measured once, not in CI). ``tests/test_onnx_conformance.py`` checks that the
outcomes stay what the file says: a regression and a newly passing case both fail it.

Compiles are shared: :func:`run_relay_aot` puts many cases into one module whose ``@main``
takes every case's inputs and returns the tuple of every case's outputs (:func:`batch_module`),
so a batch pays relay_aot's fixed cost per library (a C++ unit, the link) once. A batch that
fails to compile or raises is split in halves until the cases that fail alone are found; each
case's outcome is the one it has compiled on its own.

``python -m relay_aot.testing.onnx_conformance`` measures cases (the VM column included) in
worker processes, so that a case crashing the process is reported instead of ending the run;
``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relay

from .oracle import error_text

#: ONNX's backend tests' tolerances (``onnx.backend.test.loader``'s defaults for node tests).
RTOL = 1e-3
ATOL = 1e-7

#: What a case's outcome can be, in the order they are decided. ``import_fails``: TVM's ONNX
#: frontend does not import the model. ``pass``: relay_aot agrees with the expected outputs.
#: ``input_dtype``: relay_aot fails on a case that stores an input in another dtype than the
#: imported model declares (or as an ONNX sequence or optional), see :func:`input_problem`.
#: ``vm_fails_too``: relay_aot fails (an error or a wrong result) and so does TVM's VM on the
#: same module. ``relay_aot_fails``: relay_aot fails where the VM passes.
STATUSES = ("import_fails", "pass", "input_dtype", "vm_fails_too", "relay_aot_fails")

#: The VM's outcome when it agrees with the expected outputs.
PASS = "pass"


def node_dir() -> Path:
    """Where the installed ``onnx`` package keeps its backend node tests."""
    import onnx.backend.test

    return Path(onnx.backend.test.__file__).resolve().parent / "data" / "node"


def case_names() -> list[str]:
    """Every node test case, sorted by name."""
    return sorted(p.name for p in node_dir().iterdir() if (p / "model.onnx").exists())


@dataclasses.dataclass
class Case:
    """One node test: the model, its inputs (in the graph's input order) and expected outputs.

    Inputs and outputs are numpy arrays, lists (ONNX sequences) or None (an empty optional).
    """

    name: str
    model: Any
    input_names: list[str]
    inputs: list[Any]
    expected: list[Any]


def _read_value(path: Path, type_proto) -> Any:
    """A ``.pb`` value as ONNX's runner reads it: by the kind the graph declares."""
    import onnx
    from onnx import numpy_helper

    data = path.read_bytes()
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if kind == "optional_type":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def load_case(name: str) -> Case:
    """Read case ``name`` from :func:`node_dir` (its first and only data set)."""
    import onnx

    directory = node_dir() / name
    model = onnx.load(str(directory / "model.onnx"))
    data = directory / "test_data_set_0"
    inputs, input_names = [], []
    for i, graph_input in enumerate(model.graph.input):
        path = data / f"input_{i}.pb"
        if not path.exists():  # an optional input left out
            break
        input_names.append(graph_input.name)
        inputs.append(_read_value(path, graph_input.type))
    expected = [
        _read_value(data / f"output_{i}.pb", out.type)
        for i, out in enumerate(model.graph.output)
        if (data / f"output_{i}.pb").exists()
    ]
    return Case(name, model, input_names, inputs, expected)


def import_case(case: Case) -> tvm.IRModule:
    """The case's model as Relay, as TVM's frontend imports it with the inputs' shapes."""
    shape = {name: value.shape for name, value in zip(case.input_names, case.inputs) if isinstance(value, np.ndarray)}
    # TVM's importer asks onnxruntime for its version (ConvTranspose with auto_pad); the suite's
    # outcomes must not depend on whether that optional package is installed.
    saved = sys.modules.get("onnxruntime")
    # None in sys.modules makes `import onnxruntime` fail (the import system's documented rule; typeshed
    # types the mapping's values as modules only)
    sys.modules["onnxruntime"] = None  # type: ignore[assignment]
    # A random operator without a seed (Bernoulli, RandomUniformLike) gets one from numpy's
    # global generator at import: seeded by the case's name, its outcome is the same on every
    # run (test_bernoulli matched its expected output by chance in one CI run).
    random_state = np.random.get_state()
    np.random.seed(zlib.crc32(case.name.encode()))
    try:
        mod, params = relay.frontend.from_onnx(case.model, shape=shape, freeze_params=True)
    finally:
        np.random.set_state(random_state)
        if saved is None:
            del sys.modules["onnxruntime"]
        else:
            sys.modules["onnxruntime"] = saved
    if params:
        mod = relay.build_module.bind_params_by_name(mod["main"], params)
        mod = tvm.IRModule.from_expr(mod)
    return relay.transform.InferType()(mod)


def input_problem(case: Case, mod: tvm.IRModule) -> str | None:
    """How the case's stored inputs differ from ``@main``'s parameters (None when they fit):
    another number of them, an ONNX sequence or optional, or another dtype than a declared one
    (ONNX's INT4 stored as float32, bfloat16 as uint16). A parameter declared with no dtype
    (TVM's importer makes ``Tensor[(4), ]`` of an ONNX optional) is relay_aot's to handle."""
    params = mod["main"].params
    if len(params) != len(case.inputs):
        return f"the data set has {len(case.inputs)} inputs, the imported @main takes {len(params)}"
    for name, value, param in zip(case.input_names, case.inputs, params):
        ty = param.checked_type
        if not isinstance(value, np.ndarray):
            return f"input {name!r} is stored as an ONNX {'sequence' if isinstance(value, list) else 'optional'}"
        if isinstance(ty, relay.TensorType) and ty.dtype and ty.dtype != str(value.dtype):
            return f"input {name!r} is stored as {value.dtype}, the model declares {ty.dtype}"
    return None


def flatten_result(value: Any, count: int) -> list[Any]:
    """A Relay result (normalized, see ``testing.normalize``) as the list of ONNX outputs."""
    if count != 1 and isinstance(value, tuple) and value[:2] == ("adt", 0):
        return list(value[2])
    return [value]


def output_problem(case: Case, outputs: Sequence[Any], rtol: float = RTOL, atol: float = ATOL) -> str | None:
    """Why ``outputs`` (normalized) differ from the case's expected outputs, as ONNX's backend
    tests judge it (None when they agree). An ONNX sequence is compared with a Relay tuple
    (what TVM's importer makes of one), element by element."""
    if len(outputs) != len(case.expected):
        return f"{len(outputs)} outputs, expected {len(case.expected)}"
    for i, (actual, expected) in enumerate(zip(outputs, case.expected)):
        problem = _value_problem(actual, expected, f"output {i}", rtol, atol)
        if problem is not None:
            return problem
    return None


def _value_problem(actual: Any, expected: Any, what: str, rtol: float, atol: float) -> str | None:
    if isinstance(expected, list):
        if not (isinstance(actual, tuple) and actual[:2] == ("adt", 0)):
            return f"{what} is not a tuple, expected an ONNX sequence"
        if len(actual[2]) != len(expected):
            return f"{what} has {len(actual[2])} elements, expected {len(expected)}"
        for k, (a, e) in enumerate(zip(actual[2], expected)):
            problem = _value_problem(a, e, f"{what}[{k}]", rtol, atol)
            if problem is not None:
                return problem
        return None
    if not isinstance(expected, np.ndarray):
        return f"{what} is an empty ONNX optional, which is not compared"
    if not isinstance(actual, np.ndarray):
        return f"{what} is not a tensor"
    if actual.shape != expected.shape:
        return f"{what} has shape {list(actual.shape)}, expected {list(expected.shape)}"
    if not np.issubdtype(expected.dtype, np.number):
        return None if actual.tolist() == expected.tolist() else f"{what} differs ({expected.dtype})"
    if actual.dtype != expected.dtype:
        return f"{what} is {actual.dtype}, expected {expected.dtype}"
    try:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    except AssertionError:
        # Not how many elements differ: that varies between runs of the random operators.
        return f"{what} differs beyond rtol={rtol:g}, atol={atol:g}"
    return None


_VOLATILE = [
    (re.compile(r"\[\d\d:\d\d:\d\d\] "), ""),  # TVM's log timestamps
    (re.compile(r"0x[0-9a-f]{6,}"), "0x..."),  # addresses
    (re.compile(r"; the sources and build\.ninja are kept in .*"), ""),  # CompileError's build directory
    (re.compile(r"/tmp/\S+"), "/tmp/..."),  # temporary files
    (re.compile(r"\b[0-9a-f]{24,}\b"), "<hash>"),  # cache keys
]

#: Longest error line recorded.
MAX_ERROR = 200


def error_line(err: BaseException) -> str:
    """The first line of an error as the data file records it: ``Type: message``, without
    what changes between runs (timestamps, addresses, temporary paths, keys)."""
    if isinstance(err, tvm.error.TVMError):  # TVM's C++ errors: backtrace first, message last
        line = error_text(err)
    else:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
        line = f"{type(err).__name__}: {first}"
    return stable_line(line)


def stable_line(line: str) -> str:
    """``line`` without what changes between runs, at most :data:`MAX_ERROR` characters."""
    for pattern, replacement in _VOLATILE:
        line = pattern.sub(replacement, line)
    return line if len(line) <= MAX_ERROR else line[: MAX_ERROR - 3] + "..."


@dataclasses.dataclass
class Prepared:
    """A case after import: its module (None when the import failed, ``import_error`` says
    why), and :func:`input_problem`'s finding."""

    case: Case
    mod: tvm.IRModule | None = None
    import_error: str | None = None
    inputs_differ: str | None = None

    @property
    def name(self) -> str:
        return self.case.name


def prepare(name: str) -> Prepared:
    """Load and import case ``name``, and compare its inputs with the parameters."""
    case = load_case(name)
    try:
        mod = import_case(case)
    except Exception as err:  # noqa: BLE001 - any failure of the frontend is this outcome
        return Prepared(case, import_error=error_line(err))
    return Prepared(case, mod, inputs_differ=input_problem(case, mod))


def run_vm(prepared: Prepared) -> str:
    """TVM's Relay VM on an imported case: :data:`PASS`, or why it fails."""
    from .compare import normalize

    try:
        with tvm.transform.PassContext(opt_level=3):
            func = relay.create_executor("vm", mod=prepared.mod, device=tvm.cpu(), target="llvm").evaluate()
        value = normalize(func(*[tvm.nd.array(v) if isinstance(v, np.ndarray) else v for v in prepared.case.inputs]))
    except Exception as err:  # noqa: BLE001 - a failure is the outcome measured
        return error_line(err)
    return output_problem(prepared.case, flatten_result(value, len(prepared.case.expected))) or PASS


def batchable(prepared: Prepared) -> bool:
    """Whether a case can share a module with others: ``@main`` alone, over tensors (with a
    dtype), and inputs that fit it."""
    mod = prepared.mod
    assert mod is not None  # run_relay_aot runs imported cases only
    if prepared.inputs_differ or len(mod.get_global_vars()) != 1 or mod.get_global_type_vars():
        return False
    func = mod["main"]

    def tensors(ty) -> bool:
        if isinstance(ty, relay.TupleType):
            return all(tensors(f) for f in ty.fields)
        return isinstance(ty, relay.TensorType) and bool(ty.dtype)

    return all(tensors(p.checked_type) for p in func.params) and tensors(func.ret_type)


def batch_module(mods: Sequence[tvm.IRModule]) -> tvm.IRModule:
    """One module computing every case of ``mods`` (each :func:`batchable`): ``@main`` takes
    their parameters in order and returns the tuple of their results."""
    params, results = [], []
    for k, mod in enumerate(mods):
        func = mod["main"]
        fresh = [relay.var(f"c{k}_{p.name_hint}", type_annotation=p.checked_type) for p in func.params]
        params.extend(fresh)
        results.append(relay.bind(func.body, dict(zip(func.params, fresh))))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(params, relay.Tuple(results))))


def _compile_and_run(mod: tvm.IRModule, args: list, backend: str) -> Any:
    from ..compiler import compile as aot_compile
    from .compare import normalize

    return normalize(aot_compile(mod, backend=backend, name="onnx_conformance")(*args))


def run_relay_aot(
    cases: Sequence[Prepared],
    backend: str = "cpp",
    batch: bool = True,
    tolerances: dict[str, tuple[float, float]] | None = None,
) -> dict[str, str]:
    """Run imported ``cases`` on relay_aot's ``backend``: :data:`PASS` or why each fails.

    With ``batch``, the :func:`batchable` cases compile into one module; one that fails or
    raises is split in halves until each failing case is alone (the outcome recorded is the
    case's own). ``tolerances`` maps a case to its ``(rtol, atol)`` when not ONNX's defaults.
    """
    tolerances = tolerances or {}
    outcomes: dict[str, str] = {}

    def judge(prepared: Prepared, value: Any) -> str:
        case = prepared.case
        rtol, atol = tolerances.get(case.name, (RTOL, ATOL))
        return output_problem(case, flatten_result(value, len(case.expected)), rtol, atol) or PASS

    def alone(prepared: Prepared) -> None:
        try:
            value = _compile_and_run(prepared.mod, list(prepared.case.inputs), backend)
        except Exception as err:  # noqa: BLE001 - a failure is the outcome measured
            outcomes[prepared.case.name] = error_line(err)
        else:
            outcomes[prepared.case.name] = judge(prepared, value)

    def together(group: list[Prepared]) -> None:
        if len(group) == 1:
            alone(group[0])
            return
        try:
            value = _compile_and_run(
                batch_module([p.mod for p in group]), [a for p in group for a in p.case.inputs], backend
            )
        except Exception:  # noqa: BLE001 - find the culprits: each half on its own
            half = len(group) // 2
            together(group[:half])
            together(group[half:])
            return
        for prepared, part in zip(group, value[2]):
            outcome = judge(prepared, part)
            if outcome == PASS:
                outcomes[prepared.case.name] = outcome
            else:
                alone(prepared)  # the outcome recorded is the case's own

    shared = [p for p in cases if batch and batchable(p)]
    for prepared in cases:
        if not (batch and batchable(prepared)):
            alone(prepared)
    if shared:
        together(shared)
    return {p.case.name: outcomes[p.case.name] for p in cases}


# ---------------------------------------------------------------------------------------------
# The data file


@dataclasses.dataclass
class Record:
    """One case's line in the data file.

    ``status`` is one of :data:`STATUSES`; ``error`` the first line of why it cannot pass
    (the frontend's error, or relay_aot's error or which output differed how); ``vm`` TVM's
    VM's outcome on the imported module (:data:`PASS` or why it fails; None where nothing was
    imported); ``python`` the Python backend's outcome where it differs from the C++ backend's.
    """

    status: str
    error: str | None = None
    vm: str | None = None
    python: str | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict) -> Record:
        return cls(**data)


def classify(outcomes: dict[str, str | None]) -> Record:
    """A case's :class:`Record` from what was measured (:func:`measure`'s form): its
    ``import_error`` and ``inputs_differ`` (:class:`Prepared`'s), and the ``vm``, ``cpp`` and
    ``python`` outcomes (:data:`PASS` or why it failed; ``python`` may be left out)."""
    if outcomes.get("import_error"):
        return Record("import_fails", outcomes["import_error"])
    vm, cpp = outcomes.get("vm"), outcomes["cpp"]
    python = outcomes.get("python")
    python = python if python != cpp else None
    if cpp == PASS:
        return Record(PASS, None, vm, python)
    if outcomes.get("inputs_differ"):
        status = "input_dtype"
    else:
        status = "relay_aot_fails" if vm == PASS else "vm_fails_too"
    return Record(status, cpp, vm, python)


def record_for(name: str, outcomes: dict[str, str | None], data: dict) -> Record:
    """:func:`classify`, except for a case the data file lists as ``unstable`` (its outcome
    varies between runs: the Relay TVM's importer makes of it reads memory out of bounds), which
    is recorded as failing on both relay_aot and the VM for that reason."""
    reason = data.get("unstable", {}).get(name)
    if reason is not None:
        varies = f"varies between runs: {reason}"
        return Record("vm_fails_too", varies, varies)
    return classify(outcomes)


def read_data(path: Path) -> dict:
    """The data file: ``{"about": ..., "tolerances": {...}, "cases": {name: Record}}``."""
    data = json.loads(path.read_text())
    data["cases"] = {name: Record.from_json(r) for name, r in data["cases"].items()}
    return data


def write_data(path: Path, data: dict) -> None:
    """Write the data file with one case to a line (so that a change is a one-line diff)."""
    head = {k: v for k, v in data.items() if k != "cases"}
    lines = [json.dumps(head, indent=1)[:-2] + ","]  # the header without its closing brace
    lines.append(' "cases": {')
    names = sorted(data["cases"])
    for i, name in enumerate(names):
        comma = "," if i < len(names) - 1 else ""
        lines.append(f"  {json.dumps(name)}: {json.dumps(data['cases'][name].to_json(), sort_keys=True)}{comma}")
    lines.append(" }")
    lines.append("}")
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def cause(error: str) -> str:
    """The part of an error line that names its cause (``Type: message``, without the details
    after the message's first colon), by which :func:`summary` groups cases."""
    return ": ".join(error.split(": ")[:2])


def summary(data: dict) -> str:
    """The Markdown ``docs/language.md`` quotes from the data file: how many cases each
    outcome has, and the cases relay_aot fails where the VM passes, grouped by :func:`cause`."""
    records: dict[str, Record] = data["cases"]
    count = Counter(r.status for r in records.values())
    vm_passes = sum(1 for r in records.values() if r.vm == PASS)
    lines = [
        f"| ONNX {data['onnx']} node tests | cases |",
        "|---|---|",
        f"| in the suite | {len(records):,} |",
        f"| imported by TVM's ONNX frontend | {len(records) - count['import_fails']:,} |",
        f"| TVM's VM passes | {vm_passes:,} |",
        f"| **relay_aot passes** | **{count[PASS]:,}** |",
        f"| relay_aot fails where the VM passes | {count['relay_aot_fails']:,} |",
        f"| relay_aot and the VM both fail | {count['vm_fails_too']:,} |",
        f"| relay_aot fails on inputs stored in another dtype than the model declares | {count['input_dtype']:,} |",
        "",
        "| relay_aot fails where the VM passes (the error's cause) | cases |",
        "|---|---|",
    ]
    groups: dict[str, list[str]] = {}
    for name, record in sorted(records.items()):
        if record.status == "relay_aot_fails":
            assert record.error is not None  # classify: the C++ backend's outcome, not a pass
            groups.setdefault(cause(record.error), []).append(name)
    for error, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        cases = ", ".join(f"`{n}`" for n in names)
        shown = error.replace("|", "\\|")
        lines.append(f"| `{shown}` | {len(names)}: {cases} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Measuring in worker processes


def measure(
    names: Sequence[str],
    backends: Sequence[str] = ("cpp",),
    vm: bool = True,
    batch_size: int = 16,
    tolerances: dict[str, tuple[float, float]] | None = None,
) -> dict[str, dict[str, str]]:
    """What happens to each case of ``names``, in this process: ``{name: {"import_error": ...,
    "inputs_differ": ..., "vm": ..., backend: ...}}`` (what :func:`classify` reads; keys whose
    value is None are left out). Cases run in batches of ``batch_size`` (see :func:`run_relay_aot`)."""
    results: dict[str, dict[str, str]] = {}
    for start in range(0, len(names), batch_size):
        group = [prepare(name) for name in names[start : start + batch_size]]
        runnable = [p for p in group if p.mod is not None]
        for prepared in group:
            entry = {"import_error": prepared.import_error, "inputs_differ": prepared.inputs_differ}
            if prepared.mod is not None and vm:
                entry["vm"] = run_vm(prepared)
            results[prepared.name] = {k: v for k, v in entry.items() if v is not None}
        for backend in backends:
            for name, outcome in run_relay_aot(runnable, backend, tolerances=tolerances).items():
                results[name][backend] = outcome
    return results


def _worker(args: argparse.Namespace) -> None:
    """Measure the cases named on stdin; print one JSON line per case."""
    out = sys.stdout
    sys.stdout = sys.stderr  # what TVM prints must not mix with the results
    names = [line.strip() for line in sys.stdin if line.strip()]
    for start in range(0, len(names), args.batch):
        chunk = names[start : start + args.batch]
        for name, entry in measure(chunk, args.backends, not args.no_vm, args.batch).items():
            out.write(json.dumps({"name": name, **entry}) + "\n")
            out.flush()


def measure_isolated(
    names: Sequence[str],
    backends: Sequence[str] = ("cpp",),
    vm: bool = True,
    batch_size: int = 16,
    jobs: int = 1,
    timeout: float = 1800.0,
    log: Callable[[str], None] = print,
) -> dict[str, dict]:
    """:func:`measure` in ``jobs`` worker processes. When a worker dies (or runs past ``timeout``
    seconds), the cases it had not reported are measured again one at a time, and the case that
    ends a worker alone gets ``{"crashed": how}``."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    results: dict[str, dict] = {}

    def run(chunk: Sequence[str], size: int) -> list[str]:
        """Measure ``chunk`` in a worker; return the names a dead worker left unmeasured."""
        argv = [
            sys.executable,
            "-m",
            "relay_aot.testing.onnx_conformance",
            "--worker",
            "--batch",
            str(size),
            "--backends",
            ",".join(backends),
        ] + ([] if vm else ["--no-vm"])
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            out, _ = proc.communicate("\n".join(chunk), timeout=timeout)
            how = f"exit status {proc.returncode}" if proc.returncode >= 0 else f"signal {-proc.returncode}"
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            how = f"no result within {timeout:g} s"
        for line in out.splitlines():
            entry = json.loads(line)
            results[entry.pop("name")] = entry
        missing = [n for n in chunk if n not in results]
        if not missing:
            return []
        log(f"a worker ended ({how}) before measuring {len(missing)} cases: {' '.join(missing[:4])} ...")
        if size == 1:
            results[missing[0]] = {"crashed": how}
            return missing[1:]
        return missing

    chunks = [list(names[i : i + batch_size * 4]) for i in range(0, len(names), batch_size * 4)]
    with ThreadPoolExecutor(jobs) as pool:
        for done, missing in enumerate(pool.map(lambda c: run(c, batch_size), chunks), 1):
            log(f"{done}/{len(chunks)} chunks, {len(results)} cases measured")
            while missing:  # one at a time, to find the case that ends the worker
                missing = run(missing, 1)
    return results


def main(argv: Sequence[str] | None = None) -> None:
    """Measure cases (``--help``) and print the outcomes, or write them into a data file."""
    parser = argparse.ArgumentParser(
        prog="python -m relay_aot.testing.onnx_conformance",
        description="Run ONNX's backend node tests on relay_aot and TVM's VM.",
    )
    parser.add_argument("cases", nargs="*", help="case names (default: every case)")
    parser.add_argument(
        "--backends", default="cpp,python", help="relay_aot backends, comma-separated (default: cpp,python)"
    )
    parser.add_argument("--no-vm", action="store_true", help="do not run TVM's VM")
    parser.add_argument("--batch", type=int, default=16, help="cases per compiled module (default: 16)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default: 1)")
    parser.add_argument("--out", type=Path, help="write the raw outcomes as JSON here")
    parser.add_argument(
        "--write",
        type=Path,
        metavar="DATA_FILE",
        help="record the outcomes in this data file (tests/data/onnx_conformance.json): "
        "the cases measured are replaced, the others kept; needs the cpp backend and the VM",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.backends = [b for b in args.backends.split(",") if b]
    if args.worker:
        _worker(args)
        return
    if args.write and (args.no_vm or "cpp" not in args.backends):
        parser.error("--write needs the VM and the cpp backend")
    names = args.cases or case_names()
    start = time.monotonic()
    results = measure_isolated(
        names, args.backends, not args.no_vm, args.batch, args.jobs, log=lambda m: print(m, file=sys.stderr, flush=True)
    )
    print(f"{len(results)} cases in {time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(dict(sorted(results.items())), indent=1) + "\n")
    if args.write:
        import onnx

        data: dict[str, Any] = read_data(args.write) if args.write.exists() else {"onnx": onnx.__version__, "cases": {}}
        for name, outcomes in results.items():
            if "crashed" in outcomes:
                outcomes = {"cpp": f"the process crashed ({outcomes['crashed']})"}
            data["cases"][name] = record_for(name, outcomes, data)
        data["onnx"] = onnx.__version__
        write_data(args.write, data)
    if not (args.out or args.write):
        print(json.dumps(dict(sorted(results.items())), indent=1))


if __name__ == "__main__":
    main()

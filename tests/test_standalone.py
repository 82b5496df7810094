"""Standalone packages (issue 32): built with each target's toolchain, linked into a C99 main
with no TVM and no C++ library, run (natively, under qemu-aarch64, on QEMU's Cortex-M4) and
checked against TVM's Relay interpreter; their archives need only libc's memory functions,
libm and the compiler runtime; running out of arena is an error the next run recovers from.

The toolchains and emulators are Debian packages (.ci/run installs them); a test whose tool is
missing is skipped outside CI and fails in CI.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot.backends.standalone.targets import TARGETS
from relay_aot.testing import standalone as sa
from relay_aot.testing.oracle import run_reference

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS_DIR = ROOT / "tests" / "programs"

#: float64 kernels and scalars; on the Cortex-M4 (a single-precision FPU) in software.
FLOAT64 = """#[version = "0.0.5"]
def @main(%d: Tensor[(4), float64], %w: Tensor[(3, 4), float64], %s: float64, %f: Tensor[(4), float32]) {
  let %y = nn.dense(reshape(%d, newshape=[1, 4]), %w, units=None);
  (exp(%y), sum(multiply(%d, %d)), add(%s, 1.5f64), sqrt(%d), cast(%f, dtype="float64"),
   cast(%d, dtype="float32"), divide(%d, %s), tanh(%d))
}
"""

DTYPES = """#[version = "0.0.5"]
type Holder[A] { Hold(A) }
def @pick[A](%c: bool, %a: A, %b: A) -> A { if (%c) { %a } else { %b } }
def @main(%i: Tensor[(3), int32], %s: Tensor[(3), int8], %m: Tensor[(3), bool], %big: int64,
          %u: Tensor[(2), uint8], %h: Tensor[(2), int16]) {
  let %f = fn (%x: Tensor[(3), int8]) -> Tensor[(3), int8] { add(%x, %x) };
  (
    multiply(%i, %i), sum(%i), add(cast(%i, dtype="int64"), %big), %f(%s), cast(%s, dtype="int32"),
    logical_not(%m), logical_and(%m, greater(%i, 0)),
    match (@pick(True, Hold(%m), Hold(%m))) { Hold(%v) => %v },
    @pick(any(%m), %big, 0i64), where(%m, %i, negative(%i)), argmax(%i, axis=[0]),
    add(%u, %u), floor_divide(%big, 3i64), multiply(%h, %h), cast(%i, dtype="float32")
  )
}
"""

TUPLES_IFS = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 3), float32], %k: float32, %flag: bool) {
  let %parts = split(%x, indices_or_sections=2);
  let %a = %parts.0;
  let %b = abs(%parts.1);
  let %c = concatenate(%parts, axis=1);
  let %t = ((%a, %b), %c);
  let %chosen = if (%flag) { %t } else { ((%b, %a), multiply(%c, %k)) };
  let %s = if (greater(sum(%x), %k)) { add(%k, 1f) } else { subtract(%k, 1f) };
  (add((%chosen.0).1, %s), %chosen.1, %parts.0, %s)
}
"""

DEEP = """#[version = "0.0.5"]
def @sum_to(%n: int32) -> int32 {
  if (equal(%n, 0)) { 0 } else { add(%n, @sum_to(subtract(%n, 1))) }
}
def @main(%n: int32) -> int32 { @sum_to(%n) }
"""


def mlp() -> tuple[tvm.IRModule, list]:
    """The MLP of the issue (32 -> 64 -> 10, relu), weights as constants."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 32))
    w1, b1 = rng.uniform(-1, 1, (64, 32)).astype("float32"), rng.uniform(-1, 1, (64,)).astype("float32")
    w2, b2 = rng.uniform(-1, 1, (10, 64)).astype("float32"), rng.uniform(-1, 1, (10,)).astype("float32")
    h = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, relay.const(w1)), relay.const(b1)))
    y = relay.nn.bias_add(relay.nn.dense(h, relay.const(w2)), relay.const(b2))
    return tvm.IRModule.from_expr(relay.Function([x], y)), [rng.uniform(-1, 1, (1, 32)).astype("float32")]


#: A data-dependent loop: a tensor that grows by a concatenation per iteration (an ONNX Loop's
#: scan output), then kernels over ? shapes computed from run-time values.
GROW = """#[version = "0.0.5"]
def @grow(%i: int32, %n: int32, %acc: Tensor[(?), float32], %x: Tensor[(3), float32]) -> Tensor[(?), float32] {
  if (less(%i, %n)) {
    @grow(add(%i, 1), %n, concatenate((%acc, multiply(%x, cast(%i, dtype="float32"))), axis=0), %x)
  } else {
    %acc
  }
}
"""


def dynamic_shapes() -> tvm.IRModule:
    """``?`` shapes inside the program (its parameters and results are static): the loop of
    :data:`GROW`, ``arange`` to a run-time stop, ``dyn.reshape`` to a run-time shape, a
    transpose and reshape over ``?`` extents, ``argwhere`` (a shape read from data). (A
    ``strided_slice`` from a run-time begin works too, but TVM takes 100 s to lower it.)"""
    mod = tvm.relay.parse(GROW)
    n, x = relay.var("n", shape=(), dtype="int32"), relay.var("x", shape=(3,), dtype="float32")
    grown = relay.Call(mod.get_global_var("grow"), [relay.const(0), n, relay.zeros((0,), "float32"), x])
    stop = relay.cast(n, "float32")
    r = relay.arange(relay.const(0.0), stop, relay.const(1.0), dtype="float32")
    m = relay.reshape(grown, relay.concatenate([relay.const([3], "int32"), relay.reshape(n, [1])], 0))
    weights = relay.arange(
        relay.const(1.0), stop * relay.const(3.0) + relay.const(1.0), relay.const(1.0), dtype="float32"
    )
    flat = relay.reshape(relay.transpose(m), [-1])
    positive = relay.cast(relay.argwhere(relay.greater(grown, relay.const(0.0))), "float32")  # data-dependent
    results = [
        relay.sum(grown),
        relay.sum(r * r),
        relay.sum(relay.max(m, axis=[0])),
        relay.sum(flat * weights),
        relay.sum(positive),
    ]
    mod["main"] = relay.Function([n, x], relay.Tuple(results))
    return mod


_UNARY_FLOAT = (
    "abs",
    "negative",
    "exp",
    "log",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "sigmoid",
    "tanh",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "atanh",
    "erf",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "fast_exp",
    "fast_tanh",
    "fast_erf",
    "nn.relu",
)
_BINARY_FLOAT = (
    "add",
    "subtract",
    "multiply",
    "divide",
    "floor_divide",
    "floor_mod",
    "trunc_divide",
    "trunc_mod",
    "mod",
    "power",
    "maximum",
    "minimum",
)
_UNARY_INT = ("abs", "negative", "sign", "bitwise_not")
_BINARY_INT = (
    "add",
    "subtract",
    "multiply",
    "divide",
    "floor_divide",
    "floor_mod",
    "trunc_divide",
    "trunc_mod",
    "mod",
    "maximum",
    "minimum",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "left_shift",
    "right_shift",
)


def elementwise() -> str:
    """Every unary and binary elementwise operator on float32, float64, int32 and int8 tensors
    (each its own kernel: a kernel of TVM's C for the Cortex-M4 and of LLVM elsewhere), plus
    the comparisons and float predicates: an operator that builds for one target must build
    for all (``abs`` of a float did not build for the Cortex-M4)."""
    outputs = []
    for dtype, x, y in (("float32", "%x", "%y"), ("float64", "%xd", "%yd")):
        outputs += [f"{op}({x})" for op in _UNARY_FLOAT]
        outputs += [f"acosh(add({x}, 1{'f' if dtype == 'float32' else 'f64'}))"]
        outputs += [f"{op}({x}, {y})" for op in _BINARY_FLOAT]
        outputs += [f"{op}({x}, {y})" for op in ("equal", "less", "greater_equal")]
        outputs += [f"{op}(divide({x}, {x}))" for op in ("isnan", "isinf", "isfinite")]
        outputs += [f"clip({x}, a_min=0.2f, a_max=0.7f)"]
    for i, j in (("%i", "%j"), ("%b", "%c")):
        outputs += [f"{op}({i})" for op in _UNARY_INT]
        outputs += [f"{op}({i}, {j})" for op in _BINARY_INT]
        outputs += [f"clip({i}, a_min=-3, a_max=3)"]
    return (
        '#[version = "0.0.5"]\ndef @main(%x: Tensor[(6), float32], %y: Tensor[(6), float32], '
        "%xd: Tensor[(6), float64], %yd: Tensor[(6), float64], %i: Tensor[(6), int32], %j: Tensor[(6), int32], "
        "%b: Tensor[(6), int8], %c: Tensor[(6), int8]) {\n  (" + ",\n   ".join(outputs) + ")\n}\n"
    )


def _elementwise_args() -> list:
    x = np.linspace(0.1, 0.9, 6)
    y = np.linspace(0.5, 2.0, 6)[::-1].copy()
    i = np.array([-7, -2, 0, 3, 9, 100], "int32")
    j = np.array([2, 3, 5, 1, 4, 7], "int32")
    return [x.astype("float32"), y.astype("float32"), x, y, i, j, i.astype("int8"), j.astype("int8")]


def _elementwise_reference(x, y, xd, yd, i, j, b, c) -> list:
    """numpy's results for :func:`elementwise` (TVM's interpreter fails to build its vectorized
    integer floor_divide: LLVM 22 refuses TVM's debug declaration of a vector)."""
    from math import erf

    erf_ = np.vectorize(erf)
    unary = {
        "abs": np.abs,
        "negative": np.negative,
        "exp": np.exp,
        "log": np.log,
        "log2": np.log2,
        "log10": np.log10,
        "sqrt": np.sqrt,
        "rsqrt": lambda v: 1 / np.sqrt(v),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "tanh": np.tanh,
        "sin": np.sin,
        "cos": np.cos,
        "tan": np.tan,
        "asin": np.arcsin,
        "acos": np.arccos,
        "atan": np.arctan,
        "sinh": np.sinh,
        "cosh": np.cosh,
        "asinh": np.arcsinh,
        "atanh": np.arctanh,
        "erf": erf_,
        "floor": np.floor,
        "ceil": np.ceil,
        "round": np.round,
        "trunc": np.trunc,
        "sign": np.sign,
        "fast_exp": np.exp,
        "fast_tanh": np.tanh,
        "fast_erf": erf_,
        "nn.relu": lambda v: np.maximum(v, 0),
        "bitwise_not": np.invert,
    }
    binary = {
        "add": np.add,
        "subtract": np.subtract,
        "multiply": np.multiply,
        "floor_divide": np.floor_divide,
        "floor_mod": np.mod,
        "trunc_mod": np.fmod,
        "mod": np.fmod,
        "power": np.power,
        "maximum": np.maximum,
        "minimum": np.minimum,
        "bitwise_and": np.bitwise_and,
        "bitwise_or": np.bitwise_or,
        "bitwise_xor": np.bitwise_xor,
        "left_shift": np.left_shift,
        "right_shift": np.right_shift,
    }
    out = []
    for u, v in ((x, y), (xd, yd)):
        out += [unary[op](u).astype(u.dtype) for op in _UNARY_FLOAT]
        out += [np.arccosh(u + 1)]
        for op in _BINARY_FLOAT:
            out.append(
                {
                    "divide": np.divide,
                    "trunc_divide": lambda p, q: np.trunc(p / q),
                    "floor_divide": lambda p, q: np.floor(p / q),
                }.get(op, binary.get(op))(u, v).astype(u.dtype)
            )
        out += [u == v, u < v, u >= v]
        out += [np.zeros(u.shape, bool), np.zeros(u.shape, bool), np.ones(u.shape, bool)]
        out += [np.clip(u, 0.2, 0.7).astype(u.dtype)]
    for u, v in ((i, j), (b, c)):
        out += [unary[op](u).astype(u.dtype) for op in _UNARY_INT]
        for op in _BINARY_INT:
            # integer divide truncates, as C's
            f = {"divide": lambda p, q: np.trunc(p / q), "trunc_divide": lambda p, q: np.trunc(p / q)}.get(
                op, binary.get(op)
            )
            out.append(np.asarray(f(u, v)).astype(u.dtype))
        out += [np.clip(u, -3, 3).astype(u.dtype)]
    return out


def _parsed(text: str, args: list):
    return lambda: (tvm.relay.parse(text), args)


_rng = np.random.default_rng(1)

#: name -> () -> (module, arguments): control flow (ADTs, closures, recursion, tuples, ifs, dtypes)
#: and plain dataflow.
PROGRAMS = {
    "lstm_list": _parsed(
        (ROOT / "examples" / "lstm.relay").read_text(),
        [_rng.uniform(-1, 1, s).astype("float32") for s in [(10, 1, 8), (64, 8), (64, 16), (64,)]],
    ),
    "tree_reduce": _parsed(
        (PROGRAMS_DIR / "tree_reduce.relay").read_text(),
        [np.int32(3), np.linspace(-1, 1, 32, dtype="float32").reshape(4, 8)],
    ),
    "closures": _parsed((PROGRAMS_DIR / "closures.relay").read_text(), [np.array([1, 2, 3], dtype="float32")]),
    "fib": _parsed((PROGRAMS_DIR / "fib.relay").read_text(), [np.int32(12)]),
    "polymorphic_maps": _parsed(
        (PROGRAMS_DIR / "polymorphic_maps.relay").read_text(), [np.array([1.5, -2, 0.25], dtype="float32"), np.int32(3)]
    ),
    "tuples_ifs": _parsed(
        TUPLES_IFS, [(np.arange(12, dtype="float32") - 5).reshape(4, 3), np.float32(2), np.bool_(False)]
    ),
    "dtypes": _parsed(
        DTYPES,
        [
            np.array([1, -2, 3], dtype="int32"),
            np.array([-128, 0, 127], dtype="int8"),
            np.array([True, False, True]),
            np.int64(2**40),
            np.array([3, 9], dtype="uint8"),
            np.array([300, -7], dtype="int16"),
        ],
    ),
    "float64": _parsed(
        FLOAT64,
        [
            _rng.uniform(0.1, 2, 4),
            _rng.uniform(-1, 1, (3, 4)),
            np.float64(0.25),
            _rng.uniform(-1, 1, 4).astype("float32"),
        ],
    ),
    "mlp": mlp,
    "elementwise": lambda: (tvm.relay.parse(elementwise()), _elementwise_args()),
    "dynamic_shapes": lambda: (dynamic_shapes(), [np.int32(5), np.array([1, -2, 0.5], dtype="float32")]),
}


def _flatten(value) -> list:
    if isinstance(value, (tuple, list)) or type(value).__name__ in ("ADT", "TupleValue"):
        return [x for field in value for x in _flatten(field)]
    return [np.asarray(value.numpy() if hasattr(value, "numpy") else value)]


#: Programs the aarch64 Linux package runs outside ``-m slow``: the values whose C layout differs
#: from the host's (dtypes, float64) and shapes computed at run time; the other programs are the
#: host's C cross-compiled (CI time).
AARCH64_IN_CI = {"dtypes", "float64", "dynamic_shapes"}


def _programs_on_targets() -> list:
    return [
        pytest.param(
            program,
            target,
            marks=[pytest.mark.slow] if target == "aarch64-linux" and program not in AARCH64_IN_CI else [],
        )
        for program in PROGRAMS
        for target in TARGETS
    ]


@pytest.mark.parametrize("program, target", _programs_on_targets())
def test_package_runs_on_target_and_matches_interpreter(program, target, tmp_path):
    row = TARGETS[target]
    sa.skip_without_tools(row)
    mod, args = PROGRAMS[program]()
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name=program, target=target)
    sa.make_package(package)
    undefined = sa.undefined_symbols(package)
    assert not sa.disallowed(undefined), f"the archive needs {sorted(sa.disallowed(undefined))}"
    rc, error, outputs = sa.run_c_main(package, [np.asarray(a) for a in args], work=tmp_path)
    assert rc == 0, error
    expected = _elementwise_reference(*args) if program == "elementwise" else _flatten(run_reference(mod, args))
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_symbol_check_can_fail():
    assert sa.disallowed({"memcpy", "tanhf", "__aeabi_dmul", "__udivdi3"}) == set()
    forbidden = {
        "malloc",
        "free",
        "_Znwm",
        "__cxa_throw",
        "pthread_create",
        "__tls_get_addr",
        "printf",
        "TVMBackendAllocWorkspace",
    }
    assert sa.disallowed(forbidden) == forbidden


def test_static_program_gets_planned_storage_and_no_arena(tmp_path):
    mod, _ = mlp()
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="mlp")
    # one (1, 64) intermediate; the result goes straight into the caller's buffer
    assert package.planned_size == 256
    header = package.header.read_text()
    assert "#define TVMGEN_MLP_PLANNED_SIZE 256" in header
    entry = (package.directory / "entry.cc").read_text()
    assert "arena_alloc(" not in entry and "static inline Value f0(Value v0, Value output_buffer)" in entry
    assert "unit0.cc" not in package.files  # the one function sits beside the entry, inlined


def test_the_plan_keeps_the_smaller_of_two_first_fit_orders():
    """Two buffers live at step 0, one of them and a larger one at step 1: first fit in the
    order made leaves a gap below the larger one; by decreasing size it goes first."""
    from relay_aot.backends.standalone.plan import Interval, pack, place

    a, b, c = Interval((1, -1), 32, 0, 0), Interval((2, -1), 32, 0, 1), Interval((3, -1), 48, 1, 2)
    intervals = [a, b, c]
    assert place(intervals, [0, 1, 2]) == ({a.key: 0, b.key: 32, c.key: 64}, 112)
    assert pack(intervals) == ({c.key: 0, a.key: 0, b.key: 48}, 80)
    assert pack([]) == ({}, 0)


def test_a_reshape_between_kernels_is_its_inputs_storage(tmp_path):
    """A reshape kernel's result is its input's bytes: not called, no storage of its own, and
    the input is live until the reshape's reader has run."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(4, 16))
    w1 = relay.const(rng.standard_normal((16, 16)).astype("float32"))
    w2 = relay.const(rng.standard_normal((8, 32)).astype("float32"))
    hidden = relay.nn.relu(relay.nn.dense(x, w1))  # (4, 16): 256 bytes, planned
    out = relay.nn.dense(relay.reshape(hidden, (2, 32)), w2)  # straight into the caller's buffer
    mod = tvm.IRModule.from_expr(relay.Function([x], out))
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="m")
    assert package.planned_size == 256
    entry = (package.directory / "entry.cc").read_text()
    assert "_fused_reshape(" not in entry
    assert re.search(r"Value v\d+ = v\d+;  // \(2, 32\): its input's bytes", entry), entry
    row = TARGETS["host"]
    sa.skip_without_tools(row)
    sa.make_package(package)
    args = [rng.standard_normal((4, 16)).astype("float32")]
    rc, error, outputs = sa.run_c_main(package, args, work=tmp_path)
    assert rc == 0, error
    np.testing.assert_allclose(outputs[0], _flatten(run_reference(mod, args))[0], rtol=1e-4, atol=1e-5)


def test_the_stack_is_the_deepest_chain_of_frames():
    """GCC's call graph (``-fcallgraph-info=su``): frames add along the deepest chain; a function
    it did not compile counts as none; a frame of run-time size or recursion: not measured."""
    from relay_aot.backends.standalone.stack import call_graph, deepest

    text = "\n".join(
        [
            'graph: { title: "entry.cc"',
            'node: { title: "run" label: "int32_t run()\\nentry.cc:1:1\\n16 bytes (static)" }',
            'node: { title: "k0" label: "k0\\nkernels.c:2:1\\n40 bytes (static)" }',
            'node: { title: "k1" label: "k1\\nkernels.c:3:1\\n24 bytes (static)" }',
            'node: { title: "kernels.c:micro.isra.0" label: "micro\\nkernels.c:4:1\\n32 bytes (static)" }',
            'node: { title: "memcpy" label: "__builtin_memcpy\\n<built-in>" shape : ellipse }',
            'edge: { sourcename: "run" targetname: "k0" label: "entry.cc:5:1" }',
            'edge: { sourcename: "run" targetname: "k1" label: "entry.cc:6:1" }',
            'edge: { sourcename: "k1" targetname: "kernels.c:micro.isra.0" label: "kernels.c:7:1" }',
            'edge: { sourcename: "k0" targetname: "memcpy" }',
            "}",
        ]
    )
    frames, calls = call_graph(text)
    assert frames == {"run": 16, "k0": 40, "k1": 24, "kernels.c:micro.isra.0": 32}
    assert deepest("run", frames, calls) == 16 + 24 + 32
    assert deepest("run", {**frames, "k0": None}, calls) is None
    assert deepest("run", frames, {**calls, "kernels.c:micro.isra.0": {"run"}}) is None


def test_a_cortex_m4_package_states_the_stack_its_run_needs(tmp_path):
    """With the target's GCC installed the header gives the stack a run needs, as GCC measured
    the package's functions with the target's flags."""
    mod, _ = mlp()
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="mlp", target="cortex-m4")
    header = package.header.read_text()
    try:
        sa.tool(TARGETS["cortex-m4"], "gcc")
    except sa.ToolMissing:
        assert package.stack_size is None and "STACK_SIZE" not in header
        return
    assert package.stack_size is not None and 0 < package.stack_size < 1024
    assert f"#define TVMGEN_MLP_STACK_SIZE {package.stack_size}\n" in header
    assert "compiled with arm-none-eabi-gcc -mcpu=cortex-m4 " in header
    host = relay_aot.export_standalone(mod, tmp_path / "host", name="mlp")
    assert host.stack_size is None, "LLVM's kernels.o: not measured"


def test_kernel_scratch_is_planned_storage_and_the_entry_has_no_state(tmp_path):
    """The MLP with its weights as inputs: the dense kernels pack the weights into scratch
    memory, which is planned beside the intermediate (no workspace call, no arena)."""
    from benchmarks.micro import mlp as mlp_of

    mod, args = mlp_of(weights_as_inputs=True)
    row = TARGETS["cortex-m4"]
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="mlp", target="cortex-m4")
    assert package.workspace_size == 0
    assert package.planned_size == 256 + 8192  # the intermediate, then the packed 64 x 32 weights
    assert "TVMBackendAllocWorkspace" not in (package.directory / "kernels.c").read_text()
    entry = (package.directory / "entry.cc").read_text()
    assert "State state" not in entry and "a kernel failed" not in entry
    sa.skip_without_tools(row)
    sa.make_package(package)
    assert not sa.disallowed(sa.undefined_symbols(package))
    rc, error, outputs = sa.run_c_main(package, args, work=tmp_path)
    assert rc == 0, error
    np.testing.assert_allclose(outputs[0], _flatten(run_reference(mod, args))[0], rtol=1e-4, atol=1e-5)


def test_only_workspace_sized_allocations_become_scratch_parameters():
    from tvm import te, tir

    from relay_aot.kernels import scratch

    a = te.placeholder((512,), name="a")
    big = te.compute((512,), lambda i: a[i] * 2, name="big")  # 2 KiB: TVM asks the workspace
    c = te.compute((512,), lambda i: big[i] + 1, name="c")
    small = te.compute((8,), lambda i: a[i] * 3, name="small")  # 32 B: TVM puts it on the stack
    d = te.compute((8,), lambda i: small[i] + 1, name="d")
    func = tvm.lower(te.create_schedule([c.op, d.op]), [a, c, d])["main"]
    moved, info = scratch.to_params(func)
    assert info == scratch.Scratch((2048,), fallible=False)
    assert [p.name for p in moved.params] == ["a", "c", "d", "big"]
    asserting = func.with_body(
        tir.SeqStmt([tir.AssertStmt(tir.const(True), tir.StringImm("no"), tir.Evaluate(0)), func.body])
    )
    assert scratch.to_params(asserting)[1].fallible


def test_host_kernels_keep_workspace_sized_buffers_on_the_stack():
    """A host library's kernels keep buffers of 1-16 KiB on the stack (softmax's 4 KB row of
    exponentials), where TVM calls the workspace each time; a standalone package's call it (its
    hooks, or its planned scratch), a microcontroller's stack being small."""
    from relay_aot.request import Request

    x = relay.var("x", shape=(4, 1000))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.softmax(x)))
    calls = {}
    for standalone in (False, True):
        request = Request.make(mod, target="llvm")
        _, table = (request.standalone() if standalone else request).lower()
        calls[standalone] = "TVMBackendAllocWorkspace" in table.build().get_source("ll")
    assert calls == {False: False, True: True}
    data = np.random.default_rng(0).uniform(-5, 5, (4, 1000)).astype("float32")
    expected = np.exp(data - data.max(axis=1, keepdims=True))
    np.testing.assert_allclose(
        relay_aot.compile(mod)(data).numpy(), expected / expected.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7
    )


ARENA_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "tvmgen_lstm_list.h"
static float xs[80], w_ih[512], w_hh[1024], bias[64], h[16], c[16];
static unsigned char big[1 << 16];
int main(void) {
  for (int i = 0; i < 80; ++i) xs[i] = (float)(i % 7) / 7.0f;
  for (int i = 0; i < 512; ++i) w_ih[i] = (float)(i % 5) / 50.0f;
  for (int i = 0; i < 1024; ++i) w_hh[i] = (float)(i % 3) / 30.0f;
  struct tvmgen_lstm_list_inputs in = {xs, w_ih, w_hh, bias};
  struct tvmgen_lstm_list_outputs out = {h, c};
  int rc1 = tvmgen_lstm_list_run(&in, &out);
  printf("first %d %s\n", rc1, tvmgen_lstm_list_last_error());
  tvmgen_lstm_list_set_workspace(big, sizeof big);
  int rc2 = tvmgen_lstm_list_run(&in, &out);
  printf("second %d [%s] peak %u\n", rc2, tvmgen_lstm_list_last_error(), (unsigned)tvmgen_lstm_list_workspace_peak());
  float h2[16];
  memcpy(h2, h, sizeof h);
  tvmgen_lstm_list_set_workspace(0, 0);
  int rc3 = tvmgen_lstm_list_run(&in, &out);
  printf("third %d same %d\n", rc3, memcmp(h, h2, sizeof h) == 0);
  return 0;
}
"""


def test_running_out_of_arena_is_an_error_and_a_larger_arena_succeeds(tmp_path):
    sa.skip_without_tools(TARGETS["host"])
    mod, _ = PROGRAMS["lstm_list"]()
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="lstm_list", workspace_size=2048)
    assert "#define TVMGEN_LSTM_LIST_WORKSPACE_SIZE 2048" in package.header.read_text()
    sa.make_package(package)
    (tmp_path / "main.c").write_text(ARENA_MAIN)
    out = sa.run(package, sa.link(package, tmp_path / "main.c", tmp_path / "main")).splitlines()
    first = out[0].split(maxsplit=2)
    assert first[:2] == ["first", "-1"]
    assert "out of workspace: an allocation of" in first[2] and "more than the 2048-byte workspace" in first[2]
    second = out[1].split()
    assert second[:3] == ["second", "0", "[]"] and 2048 < int(second[-1]) < (1 << 16)
    assert out[2].startswith("third -1")  # back to the built-in arena, which is still too small


CHECKS_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "tvmgen_checks.h"
static void run(float stop, int k, int rows, int cols) {
  float out = -1;
  unsigned long bits = 0;
  struct tvmgen_checks_inputs in = {&stop, &k, &rows, &cols};
  struct tvmgen_checks_outputs outs = {&out};
  int rc = tvmgen_checks_run(&in, &outs);
  memcpy(&bits, &out, 4);
  printf("%d|%s|%08lx\n", rc, rc ? tvmgen_checks_last_error() : "", rc ? 0ul : bits);
}
int main(void) {
  run(6, 3, 2, 5);
  run(3e9f, 1, 1, 1);        /* an extent beyond 32 bits */
  run(20000, 1, 1, 1);       /* more than the arena, for a data-dependent size */
  run(6, 4, 1, 1);           /* 6 elements into rows of 4: the shape function's check */
  run(6, 3, 60000, 60000);   /* 1.44e10 bytes: more than 32 bits count */
  run(6, 3, 2, 5);           /* the next run with room succeeds */
  return 0;
}
"""


@pytest.mark.parametrize("target", list(TARGETS))
def test_shapes_computed_at_run_time_are_checked_before_use(target, tmp_path):
    """Extents beyond 32 bits, byte counts beyond 32 bits, a reshape that does not fit and
    running out of arena on a data-dependent size: each a non-zero return with a message, the
    check of a shape function's as well where TVM prints its kernels as C (which drops
    assertions); the next run with room succeeds."""
    sa.skip_without_tools(TARGETS[target])
    stop, k = relay.var("stop", shape=(), dtype="float32"), relay.var("k", shape=(), dtype="int32")
    rows, cols = relay.var("rows", shape=(), dtype="int32"), relay.var("cols", shape=(), dtype="int32")
    a = relay.arange(relay.const(0.0), stop, relay.const(1.0), dtype="float32")
    d = relay.reshape(a, relay.concatenate([relay.reshape(k, [1]), relay.const([-1], "int32")], 0))
    ones = relay.ones(relay.concatenate([relay.reshape(rows, [1]), relay.reshape(cols, [1])], 0), "float32")
    result = relay.sum(d) + relay.sum(ones) + relay.max(ones)  # read twice: a tensor of its own
    mod = tvm.IRModule.from_expr(relay.Function([stop, k, rows, cols], result))
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="checks", target=target)
    sa.make_package(package)
    (tmp_path / "main.c").write_text(CHECKS_MAIN)
    out = sa.run(package, sa.link(package, tmp_path / "main.c", tmp_path / "main.elf")).splitlines()
    want = _flatten(run_reference(mod, [np.float32(6), np.int32(3), np.int32(2), np.int32(5)]))[0]
    assert out[0] == f"0||{want.astype('<f4').view('<u4'):08x}"
    assert out[1] == "-1|checks_k0_fused_arange: a shape computed at run time has an extent beyond 32 bits|00000000"
    # 80,000 bytes of data after its extents' header (a multiple of the alignment)
    assert re.match(r"-1\|out of workspace: an allocation of 800(16|64) bytes needs at least \d+ more than", out[2])
    assert out[2].endswith(
        "more than the 65536-byte workspace (give the package a larger --workspace-size, or a larger buffer)|00000000"
    )
    assert out[3].startswith("-1|") and "reshape: the input's size is not a multiple" in out[3]
    assert out[4].startswith("-1|") and out[4].endswith(
        "a tensor computed at run time has more than 2^32 bytes|00000000"
    )
    assert out[5] == out[0]


def test_recursion_deeper_than_the_stack_budget_is_an_error(tmp_path):
    sa.skip_without_tools(TARGETS["host"])
    mod = tvm.relay.parse(DEEP)
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="deep")
    sa.make_package(package)
    rc, error, outputs = sa.run_c_main(package, [np.int32(100)], work=tmp_path)
    assert rc == 0 and int(outputs[0]) == 5050
    rc, error, _ = sa.run_c_main(package, [np.int32(10_000_000)], work=tmp_path)
    assert rc != 0 and error == "recursion deeper than the stack budget"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            """#[version = "0.0.5"]
def @main(%f: fn (Tensor[(2), float32]) -> Tensor[(2), float32], %x: Tensor[(2), float32]) { %f(%x) }""",
            "parameter %f has type fn",
        ),
        (
            """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 2), float32]) { add(%x, %x) }""",
            "@main's parameter %x has the dynamic type Tensor[(?, 2), float32]",
        ),
        (
            """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32], %s: Tensor[(2), int32]) { dyn.reshape(%x, %s, newshape=[]) }""",
            "@main's result has the dynamic type Tensor[(?, ?), float32]",
        ),
        (
            """#[version = "0.0.5"]
type Box { Box(Tensor[(2), float32]) }
def @main(%x: Tensor[(2), float32]) { Box(%x) }""",
            "result has type Box",
        ),
    ],
)
def test_what_cannot_run_standalone_is_refused_by_name(text, message, tmp_path):
    with pytest.raises(relay_aot.UnsupportedError, match="no standalone package") as info:
        relay_aot.export_standalone(tvm.relay.parse(text), tmp_path / "pkg")
    assert message in str(info.value)


def test_a_targets_unsupported_dtype_is_refused_by_name(tmp_path, monkeypatch):
    row = dataclasses.replace(TARGETS["cortex-m4"], unsupported_dtypes=("float64",))
    monkeypatch.setitem(TARGETS, "cortex-m4", row)
    mod = tvm.relay.parse("""#[version = "0.0.5"]
def @main(%d: Tensor[(2), float64]) { multiply(%d, %d) }""")
    with pytest.raises(relay_aot.UnsupportedError, match="float64, which TVM's kernels do not support on cortex-m4"):
        relay_aot.export_standalone(mod, tmp_path / "pkg", target="cortex-m4")


def test_command_line_writes_a_package(tmp_path):
    source = tmp_path / "fib.relay"
    source.write_text((PROGRAMS_DIR / "fib.relay").read_text())
    done = subprocess.run(
        [
            "relay-aot",
            "compile",
            str(source),
            "--standalone",
            str(tmp_path / "pkg"),
            "--name",
            "fib",
            "--workspace-size",
            "4096",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    assert "libtvmgen_fib.a for host" in done.stdout
    files = {p.name for p in (tmp_path / "pkg").iterdir()}
    assert {"tvmgen_fib.h", "Makefile", "program.h", "entry.cc", "unit0.cc", "relay_aot_standalone.h"} <= files
    assert "#define TVMGEN_FIB_WORKSPACE_SIZE 4096" in (tmp_path / "pkg" / "tvmgen_fib.h").read_text()
    assert str(tmp_path) not in "".join(p.read_text() for p in (tmp_path / "pkg").iterdir() if p.suffix != ".o")


def test_the_micro_benchmark_counts_only_the_models_loaded_sections(tmp_path):
    from benchmarks import micro

    map_file = tmp_path / "main.map"
    map_file.write_text("""Discarded input sections
 .text.unused   0x00000000       0x40 libtvmgen_m.a(entry.o)
Linker script and memory map
 .text.tvmgen_m_run
                0x00000100       0x20 pkg/libtvmgen_m.a(entry.o)
 .text.main     0x00000120       0x30 main.o
 .rodata._ZN1k0E
                0x00000200      0x100 pkg/libtvmgen_m.a(constants.o)
 .data._ZN5stateE
                0x20000000       0x24 pkg/libtvmgen_m.a(entry.o)
 .bss._ZN7storageE
                0x20000100       0x40 pkg/libtvmgen_m.a(entry.o)
 .comment       0x00000000       0x27 pkg/libtvmgen_m.a(entry.o)
 .debug_info    0x00000000      0x200 pkg/libtvmgen_m.a(kernels.o)
""")
    sizes = micro.model_sizes(map_file, lambda origin: "libtvmgen_m.a" in origin)
    assert sizes == {"text": 0x20 + 0x100, "data": 0x24, "bss": 0x40}
    # a string section merged into the one before it takes no bytes, whatever size it shows
    map_file.write_text("""Linker script and memory map
 .rodata.tvmgen_m_run.str1.4
                0x000028c8       0x20 pkg/libtvmgen_m.a(entry.o)
 .rodata.tvmgen_m_last_error.str1.4
                0x000028e8       0x20 pkg/libtvmgen_m.a(entry.o)
                                  0x1 (size before relaxing)
 *fill*         0x000028e8        0x8
""")
    assert micro.model_sizes(map_file, lambda origin: "libtvmgen_m.a" in origin)["text"] == 0x20


def test_export_refuses_anything_but_a_regular_file_in_the_packages_place(tmp_path):
    """export_standalone followed a symlink at DIR/Makefile and overwrote its target, and a FIFO
    there blocked it: the policy of export_library, per file of the package."""
    mod = tvm.IRModule.from_expr(relay.Function([x := relay.var("x", shape=(3,))], relay.abs(x)))
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    special = {"symbolic link": lambda p: p.symlink_to(target), "FIFO": os.mkfifo, "directory": Path.mkdir}
    for index, (kind, make) in enumerate(special.items()):
        for victim in ("Makefile", "entry.cc", "tvmgen_m.h"):
            package = tmp_path / f"pkg{index}_{victim}"
            package.mkdir()
            make(package / victim)
            with pytest.raises(ValueError, match=f"export_standalone: .*{victim} is a {kind}, not a regular file"):
                relay_aot.export_standalone(mod, package, name="m")
            assert sorted(p.name for p in package.iterdir()) == [victim], "nothing is written"
    assert target.read_text() == "keep me"
    # a regular file in the way is replaced
    package = tmp_path / "ok"
    package.mkdir()
    (package / "Makefile").write_text("old")
    relay_aot.export_standalone(mod, package, name="m")
    assert "libtvmgen_m.a" in (package / "Makefile").read_text()


@pytest.mark.parametrize(
    "model, target",
    [
        # KWS on aarch64 Linux: the host's int8 C cross-compiled, as AD's (-m slow: CI time)
        pytest.param(
            model, target, marks=[pytest.mark.slow] if (model, target) == ("kws_ref_model", "aarch64-linux") else []
        )
        for model in ["ad01_int8", "kws_ref_model"]
        for target in TARGETS
    ],
)
def test_an_int8_tflite_model_builds_and_runs_on_every_target(model, target, tmp_path):
    """An int8 package builds with no file the user must add (the Cortex-M4's kernels are TVM's
    C, whose DSP micro-kernels included TVM's C runtime error codes, which no package shipped)
    and computes exactly what the host library does: integer arithmetic, equal bit for bit."""
    row = TARGETS[target]
    sa.skip_without_tools(row)
    imported = relay_aot.read_tflite(ROOT / "tests" / "data" / "tinyml" / f"{model}.tflite")
    (spec,) = imported.inputs
    x = np.random.default_rng(0).integers(-40, 40, spec.shape).astype(spec.dtype)
    want = relay_aot.compile(imported.mod, params=imported.params)(x).numpy()
    package = relay_aot.export_standalone(
        imported.mod, tmp_path / "pkg", name="m", target=target, params=imported.params
    )
    sa.make_package(package)
    assert not sa.disallowed(sa.undefined_symbols(package))
    header = package.header.read_text()
    assert ("no check of the CPU at run time" in header) == bool(row.kernel_c_target), header[:1500]
    rc, error, outputs = sa.run_c_main(package, [x], work=tmp_path)
    assert rc == 0, error
    np.testing.assert_array_equal(outputs[0], want)

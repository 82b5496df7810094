"""relay_aot.testing: check_equivalence catches wrong executors, skips and isolates oracles."""

import numpy as np
import pytest
import tvm
from tvm.relay.prelude import Prelude

import relay_aot
from relay_aot import testing
from relay_aot.backends.python.driver import load_python
from relay_aot.testing import oracle


def parse(text):
    return tvm.relay.parse('#[version = "0.0.5"]\n' + text)


TWO_KERNELS = parse("""
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  (add(%x, %y), multiply(%x, %y))
}
""")
X = np.array([1, 2, 3], dtype="float32")
Y = np.array([4, 5, 6], dtype="float32")


def test_all_executors_agree_and_the_report_says_who_ran():
    report = testing.equivalence_report(TWO_KERNELS, (X, Y))
    assert report.ran == ["interpreter", "vm", "relay_aot cpp backend", "relay_aot python backend"]
    assert report.skipped == {}
    testing.assert_same(report.value, testing.normalize((X + Y, X * Y)))


def broken_python_backend():
    """The python backend with its two kernels swapped: a deliberately wrong backend."""
    compiled = relay_aot.compile(TWO_KERNELS, backend="python")
    k0 = compiled.source.split("kernel_module['")[1].split("'")[0]
    k1 = compiled.source.split("kernel_module['")[2].split("'")[0]
    source = compiled.source.replace(repr(k0), "FIRST").replace(repr(k1), repr(k0)).replace("FIRST", repr(k1))
    entry = load_python(source, "default", compiled.module, [])
    wrong = relay_aot.CompiledModule(
        compiled.module, compiled.signature, "default", backend="python", source=source, entry=entry
    )
    return "broken python backend", wrong


def test_a_wrong_backend_is_caught_and_named_with_both_values():
    with pytest.raises(testing.Mismatch) as info:
        testing.equivalence_report(TWO_KERNELS, (X, Y), backends=["python", broken_python_backend()])
    message = str(info.value)
    assert "broken python backend" in message
    assert "relay_aot python backend" not in message.split("outcomes:")[0]  # the right one agreed
    assert "result[0]" in message
    assert repr(X * Y) in message and repr(X + Y) in message  # both values are shown
    assert "interpreter: returned" in message


def test_a_backend_that_raises_is_caught():
    def failing(*args):
        raise relay_aot.KernelError("kernel k0 failed: deliberately")

    with pytest.raises(
        testing.Mismatch,
        match=r"failing raised KernelError: kernel k0 failed: deliberately, "
        r"but interpreter returned",
    ):
        testing.equivalence_report(TWO_KERNELS, (X, Y), backends=[("failing", failing)], references=["interpreter"])


def test_expected_value_is_checked_and_the_agreed_value_returned():
    with pytest.raises(testing.Mismatch, match="expected value"):
        testing.check_equivalence(TWO_KERNELS, (X, Y), backends=["python"], references=[], expected=(X + Y, X * Y + 1))
    agreed = testing.check_equivalence(
        TWO_KERNELS, (X, Y), backends=["python"], references=["interpreter"], expected=(X + Y, X * Y)
    )
    testing.assert_same(agreed, testing.normalize((X + Y, X * Y)))


REFS = parse("""
def @main(%x: int32) {
  let %r = ref(%x);
  let %u = ref_write(%r, add(ref_read(%r), 1));
  ref_read(%r)
}
""")


def test_the_vm_is_skipped_for_references():
    report = testing.equivalence_report(REFS, (np.int32(4),))
    assert set(report.skipped) == {"vm"}
    assert "references" in report.skipped["vm"]
    assert int(report.value) == 5
    assert "vm: unavailable" in str(report)


def test_a_dense_of_a_weight_with_a_dynamic_row_count_is_compared_exactly():
    """TVM's executors computed nn.dense(constant, y of (?, 3)) from uninitialized memory (the
    dynamic campaign, seed 60015): the references run it as the same matmul, and agree with
    relay_aot and numpy."""
    m = np.array([[0, 0, 1], [1, 0, 0]], "float32")
    w = np.array([[0, 0, 0], [0, 0, -0.75], [2, 1, 0]], "float32")
    y = tvm.relay.var("y", shape=(tvm.relay.Any(), 3))
    mod = tvm.IRModule.from_expr(tvm.relay.Function([y], tvm.relay.nn.dense(tvm.relay.const(m), y)))
    report = testing.equivalence_report(mod, (w,), expected=m @ w.T)
    assert not report.skipped and {"interpreter", "vm"} <= set(report.ran), str(report)
    for name in ("interpreter", "vm"):
        np.testing.assert_array_equal(report.outcomes[name].value, m @ w.T)


def test_all_executors_raising_agree():
    mod = parse("""
    type Opt { Some(int32), Nothing }
    def @main(%i: int32) -> int32 { match? (Nothing) { Some(%v) => %v } }
    """)
    report = testing.equivalence_report(mod, (np.int32(1),), references=["interpreter"])
    assert report.value is None
    assert all(o.kind == "raised" for o in report.outcomes.values())


DEEP = parse("""
def @down(%n: int32) -> int32 {
  if (equal(%n, 0)) { 0 } else { add(@down(subtract(%n, 1)), 1) }
}
def @main(%n: int32) { @down(%n) }
""")


def test_interpreter_skipped_beyond_its_recursion_depth():
    report = testing.equivalence_report(
        DEEP,
        (np.int32(5000),),
        backends=[("numpy", lambda n: np.int32(n))],
        references=["interpreter"],
        recursion_depth=5000,
    )
    assert "recursion 5000 deep" in report.skipped["interpreter"]
    assert report.ran == ["numpy"]


def test_a_crashing_oracle_is_reported_not_fatal():
    """The interpreter overflows its C stack at this depth; in a child process that is a report."""
    with oracle.IsolatedOracle(timeout=120) as isolated:
        report = testing.equivalence_report(
            DEEP, (np.int32(200_000),), backends=[], references=["interpreter"], isolate=isolated
        )
        assert "crashed" in report.skipped["interpreter"]
        assert "SIGSEGV" in report.skipped["interpreter"]
        assert report.outcomes["interpreter"].cause == "crashed"
        # The oracle restarts after a crash.
        again = testing.equivalence_report(
            DEEP, (np.int32(10),), backends=["python"], references=["interpreter"], isolate=isolated
        )
        assert again.ran == ["interpreter", "relay_aot python backend"] and int(again.value) == 10


def test_an_oracle_child_killed_between_runs_is_reaped_and_replaced():
    """A child that died while idle (killed from outside) leaves pipes to close and an exit to
    reap; the next run starts a new child instead of leaking them."""
    with oracle.IsolatedOracle() as isolated:
        assert isolated.run(TWO_KERNELS, (X, Y), "interpreter").kind == "value"
        first, pipes = isolated._proc, (isolated._send, isolated._recv)
        first.kill()
        first.wait()
        assert isolated.run(TWO_KERNELS, (X, Y), "interpreter").kind == "value"
        assert isolated._proc is not first
        assert all(pipe.closed for pipe in pipes)
        assert first.stdin.closed and first.stdout.closed


def test_isolated_and_in_process_references_agree():
    """TVM's references, and relay_aot's backends (compiled in the child, as the hostile-shape
    campaign runs them), in a child process and in this one."""
    args = (X, Y)
    with oracle.IsolatedOracle() as isolated:
        for executor in oracle.REFERENCES + oracle.BACKENDS:
            inside = oracle.evaluate(TWO_KERNELS, args, executor)
            outside = isolated.run(TWO_KERNELS, args, executor)
            assert inside.kind == outside.kind == "value"
            testing.assert_same(outside.value, inside.value)


def test_any_name_reaches_the_isolated_oracle():
    """TVM's JSON reader knows few escapes; the module is re-encoded so that any name survives."""
    names = ["x\u00e9", "a\x01b", 'q"\\n*/', "tab\tnl\n", "b\x08f\x0c", "emoji\U0001f600"]
    with oracle.IsolatedOracle() as isolated:
        for name in names:
            x = tvm.relay.var(name, shape=(2,), dtype="float32")
            gtv = tvm.relay.GlobalTypeVar("T" + name)
            ctor = tvm.relay.Constructor("C" + name, [x.type_annotation], gtv)
            mod = tvm.IRModule()
            mod[gtv] = tvm.relay.TypeData(gtv, [], [ctor])
            helper = tvm.relay.GlobalVar("g" + name)
            mod[helper] = tvm.relay.Function([x], tvm.relay.add(x, x))
            y = tvm.relay.var(name, shape=(2,), dtype="float32")
            v = tvm.relay.var(name, shape=(2,), dtype="float32")
            unwrap = tvm.relay.Match(
                ctor(helper(y)), [tvm.relay.Clause(tvm.relay.PatternConstructor(ctor, [tvm.relay.PatternVar(v)]), v)]
            )
            mod["main"] = tvm.relay.Function([y], unwrap)
            outcome = isolated.run(mod, (np.ones(2, dtype="float32"),), "interpreter")
            assert outcome.kind == "value", (name, outcome.detail)
            testing.assert_same(outcome.value, np.full(2, 2, dtype="float32"))


def test_a_reference_outcome_is_remembered_for_the_same_module_and_arguments(monkeypatch):
    """Each backend's test of a program compares with the same reference run: it runs once; on
    other arguments it runs again, on the executor made for the first."""
    made, ran = [], []
    executor = oracle._executor

    def counted(mod, kind):
        made.append(kind)
        func = executor(mod, kind)
        return lambda *args: (ran.append(kind), func(*args))[1]

    monkeypatch.setattr(oracle, "_executor", counted)
    monkeypatch.setattr(oracle, "_remembered", type(oracle._remembered)())
    monkeypatch.setattr(oracle, "_runners", type(oracle._runners)())
    text = 'def @main(%x: Tensor[(3), float32], %n: int32) { multiply(%x, cast(%n, dtype="float32")) }'
    mod = parse(text)
    x = np.array([1, 2, 3], "float32")
    first = testing.check_equivalence(mod, (x, 2), backends=["cpp"])
    again = testing.check_equivalence(parse(text), (x.copy(), 2), backends=["python"])  # parsed again
    assert made == ran == ["interpreter", "vm"]
    np.testing.assert_array_equal(first, again)
    # other arguments (another value, another type): run again; another module: made again
    testing.check_equivalence(mod, (x, 3), references=("interpreter",), backends=[])
    testing.check_equivalence(mod, (x.astype("float64"), 2), references=("interpreter",), backends=[])
    assert made == ["interpreter", "vm"] and ran == ["interpreter", "vm", "interpreter", "interpreter"]
    other = parse(text.replace("multiply", "add"))
    np.testing.assert_array_equal(
        testing.check_equivalence(other, (x, 2), references=("interpreter",), backends=[]), x + 2
    )
    assert made == ["interpreter", "vm", "interpreter"] and len(ran) == 5
    # what a caller does to a returned value does not change the remembered one
    first[...] = 0
    np.testing.assert_array_equal(testing.check_equivalence(mod, (x, 2), backends=[]), x * 2)
    assert len(ran) == 5


def test_a_long_list_from_a_reference_is_compared_not_remembered():
    """A value nested deeper than a copy of it can be (copy.deepcopy recurses more per level than
    normalize) is returned, not remembered."""
    mod = tvm.IRModule()
    Prelude(mod)
    mod = tvm.relay.parse(
        """#[version = "0.0.5"]
def @make(%n: int32, %acc: List[int32]) -> List[int32] {
  if (equal(%n, 0)) { %acc } else { @make(subtract(%n, 1), Cons(%n, %acc)) }
}
def @main(%n: int32) -> List[int32] { @make(%n, Nil) }
""",
        init_module=mod,
    )
    before = len(oracle._remembered)
    value = testing.check_equivalence(mod, (2500,), references=("vm",), backends=[])
    length = 0
    while value[2]:  # Cons(head, tail); Nil has no fields
        value, length = value[2][1], length + 1
    assert length == 2500 and len(oracle._remembered) == before

"""Bad input never crashes the process: malformed calls, kernel failures, hostile names."""

import pytest

from isolated import run_isolated

SIGNATURE_PROGRAM = '''
#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @main(%x: Tensor[(2, 3), float32], %t: (int32, Tensor[(2), int64]), %l: List[Tensor[(2), float32]],
          %f: fn (Tensor[(2), float32]) -> Tensor[(2), float32], %b: bool) {
  let %s = (match (%l) { Cons(%h, _) => %f(%h), Nil => %f(ones(shape=[2], dtype="float32")) });
  (sum(%x), %t.0, %s, %b)
}
'''

# Each entry: (description, python expression for the argument list). Names available:
# np, tvm, ADT, good (a dict of well-formed arguments), cons(head, tail), nil(), lst(n).
MALFORMED = [
    ("no arguments", "[]"),
    ("too many arguments", "[good['x'], good['t'], good['l'], good['f'], good['b'], good['b']]"),
    ("None for a tensor", "[None, good['t'], good['l'], good['f'], good['b']]"),
    ("a string for a tensor", "['x', good['t'], good['l'], good['f'], good['b']]"),
    ("a Python list for a tensor", "[[[1.0] * 3] * 2, good['t'], good['l'], good['f'], good['b']]"),
    ("wrong dtype", "[np.zeros((2, 3), 'float64'), good['t'], good['l'], good['f'], good['b']]"),
    ("wrong rank", "[np.zeros((6,), 'float32'), good['t'], good['l'], good['f'], good['b']]"),
    ("wrong shape", "[np.zeros((3, 2), 'float32'), good['t'], good['l'], good['f'], good['b']]"),
    ("tuple of the wrong arity", "[good['x'], (np.int32(1),), good['l'], good['f'], good['b']]"),
    ("tuple with a wrong field", "[good['x'], (np.int32(1), np.zeros(2, 'int32')), good['l'], good['f'], good['b']]"),
    ("nested tuple for a tensor", "[((good['x'],),), good['t'], good['l'], good['f'], good['b']]"),
    ("a tensor for a tuple", "[good['x'], good['x'], good['l'], good['f'], good['b']]"),
    ("ADT with a foreign tag", "[good['x'], good['t'], ADT(12345, []), good['f'], good['b']]"),
    ("ADT with too few fields", "[good['x'], good['t'], ADT(cons_tag, [tvm.nd.array(np.ones(2, 'float32'))]), good['f'], good['b']]"),
    ("ADT with a wrong field deep inside", "[good['x'], good['t'], cons(np.ones(2, 'float32'), cons(np.ones(2, 'float32'), cons(np.ones(3, 'float32'), nil()))), good['f'], good['b']]"),
    ("a tuple for an ADT", "[good['x'], good['t'], (1, 2), good['f'], good['b']]"),
    ("a tensor for a function", "[good['x'], good['t'], good['l'], good['x'], good['b']]"),
    ("None for a function", "[good['x'], good['t'], good['l'], None, good['b']]"),
    ("an int array for a bool", "[good['x'], good['t'], good['l'], good['f'], np.array(1, 'int32')]"),
    ("a float for an int32 scalar", "[good['x'], (1.5, np.zeros(2, 'int64')), good['l'], good['f'], good['b']]"),
    ("an int32 overflow", "[good['x'], (2**40, np.zeros(2, 'int64')), good['l'], good['f'], good['b']]"),
    ("a dict for a tuple", "[good['x'], {'a': 1}, good['l'], good['f'], good['b']]"),
    ("a function returning the wrong shape", "[good['x'], good['t'], good['l'], lambda v: tvm.nd.array(np.ones(3, 'float32')), good['b']]"),
    ("a function returning None", "[good['x'], good['t'], good['l'], lambda v: None, good['b']]"),
]

DRIVER = '''
import json, numpy as np, tvm, relay_aot
from tvm.runtime.container import ADT
mod = tvm.relay.parse({program!r})
compiled = relay_aot.compile(mod, backend={backend!r})
cons_tag = mod.get_type("List")[1].tag
nil_tag = mod.get_type("List")[2].tag
def nil(): return ADT(nil_tag, [])
def cons(h, t): return ADT(cons_tag, [tvm.nd.array(h) if isinstance(h, np.ndarray) else h, t])
good = dict(x=np.ones((2, 3), "float32"), t=(np.int32(4), np.arange(2, dtype="int64")),
            l=cons(np.ones(2, "float32"), nil()), f=lambda v: tvm.nd.array(v.numpy() * 2), b=True)
assert compiled(*[good[k] for k in "xtlfb"])[2].numpy().tolist() == [2.0, 2.0]
def to_tvm(value):
    """What a C++ or raw-FFI caller would pass: TVM objects only."""
    if callable(value):
        return tvm.runtime.convert(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return tvm.nd.array(np.asarray(value))
    if isinstance(value, tuple):
        return tvm.runtime.container.tuple_object([to_tvm(v) for v in value])
    return value
results = []
for name, expr in {cases!r}:
    args = eval(expr)
    outcomes = []
    for how, call in (("CompiledModule", compiled), ("raw PackedFunc", compiled.entry)):
        try:
            if how == "raw PackedFunc":
                args = [to_tvm(a) for a in args]
            call(*args)
            outcomes.append((how, "no error"))
        except Exception as err:
            outcomes.append((how, type(err).__name__ + ": " + str(err).strip().splitlines()[-1][:300]))
    results.append((name, outcomes))
print(json.dumps(results))
'''


@pytest.mark.parametrize("backend", ["cpp"])
def test_malformed_calls_raise_clean_exceptions(backend):
    results = run_isolated(DRIVER.format(program=SIGNATURE_PROGRAM, backend=backend, cases=MALFORMED))
    assert len(results) == len(MALFORMED) >= 20
    problems = []
    for name, outcomes in results:
        for how, outcome in outcomes:
            if outcome == "no error" or not outcome.split(":")[0].endswith("Error"):
                problems.append(f"{name} via {how}: {outcome}")
    assert not problems, "\n".join(problems)


def test_malformed_call_messages_name_the_parameter():
    results = dict(run_isolated(DRIVER.format(program=SIGNATURE_PROGRAM, backend="cpp", cases=MALFORMED)))
    via_python = {name: dict(outcomes)["CompiledModule"] for name, outcomes in results.items()}
    via_packed = {name: dict(outcomes)["raw PackedFunc"] for name, outcomes in results.items()}
    assert "%x" in via_python["wrong shape"] and "(3, 2)" in via_python["wrong shape"]
    assert "%x" in via_packed["wrong shape"] and "(3, 2)" in via_packed["wrong shape"]
    assert via_packed["ADT with a wrong field deep inside"].startswith("ValueError")
    assert ".Cons[1].Cons[1].Cons[0]" in via_packed["ADT with a wrong field deep inside"]
    assert "%l" in via_python["ADT with a foreign tag"]
    assert "TypeError" in via_packed["a function returning None"]


def test_kernel_failures_surface_as_kernel_error():
    outcome = run_isolated(
        '''
        import json, numpy as np, tvm, relay_aot
        mod = tvm.relay.parse("""
        #[version = "0.0.5"]
        def @main(%x: Tensor[(2, 3), float32]) { add(%x, %x) }
        """)
        compiled = relay_aot.compile(mod)
        # a view with a byte offset: TVM's kernels assert that offsets are zero
        view = tvm.nd.array(np.arange(12, dtype="float32"))._create_view((2, 3), relative_byte_offset=8)
        try:
            compiled(view)
            print(json.dumps("no error"))
        except relay_aot.KernelError as err:
            print(json.dumps(str(err).strip().splitlines()[-1]))
        '''
    )
    assert outcome.startswith("KernelError: kernel default_k0_fused_add failed") and "byte_offset" in outcome

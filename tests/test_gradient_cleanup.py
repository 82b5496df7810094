"""``relay_aot.passes.gradient_cleanup``: the gradient's unobserved work goes, nothing observed does.

Each program runs on TVM's Relay interpreter before and after :func:`cleanup`, and the results
must agree; the structural assertions check that what should go went.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot import testing
from relay_aot.passes import gradient
from relay_aot.passes.gradient_cleanup import cleanup


def _parse(body: str) -> tvm.IRModule:
    return relay.parse('#[version = "0.0.5"]\n' + body)


def _census(mod: tvm.IRModule) -> collections.Counter:
    """Operator calls by name, and reference operations by kind, in ``@main``."""
    found: collections.Counter = collections.Counter()

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op):
            found[node.op.name] += 1
        elif isinstance(node, (relay.RefCreate, relay.RefRead, relay.RefWrite)):
            found[type(node).__name__] += 1

    relay.analysis.post_order_visit(mod["main"], visit)
    return found


def _interpret(mod: tvm.IRModule, *args):
    return relay.create_executor("debug", mod=mod, device=tvm.cpu(), target="llvm").evaluate()(*args)


X = np.array([1.5, -2.0], dtype="float32")

# A cell paired with %x in a list, accumulated by a closure that matches on the list.
_THROUGH_A_LIST = """
type List[A] {
  Cons(A, List[A]),
  Nil,
}

def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %l = Cons((%x, ref(zeros_like(%x))), Nil);
  let %k = fn () -> () {
    match (%l) { Cons(%p, _) => ref_write(%p.1, add(ref_read(%p.1), %p.0)), Nil => () }
  };
  let %v = %k();
  let %v2 = %k();
  RESULT
}
"""

# Each: (program, whether a RefWrite must survive the cleanup).
PROGRAMS = {
    # accumulated into itself by a closure (called twice: not inlined), then returned: observed.
    "returned": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %r = ref(zeros_like(%x));
  let %f = fn () -> () { ref_write(%r, add(ref_read(%r), %x)) };
  let %u = %f();
  let %u2 = %f();
  ref_read(%r)
}
""",
        True,
    ),
    # the same in one let chain: every read is of known contents, so the cell goes.
    "known-contents": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %r = ref(zeros_like(%x));
  let %u = ref_write(%r, add(ref_read(%r), %x));
  ref_read(%r)
}
""",
        False,
    ),
    # only ever feeds itself: dead.
    "self-only": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %r = ref(zeros_like(%x));
  let %u = ref_write(%r, add(ref_read(%r), %x));
  let %v = ref_write(%r, multiply(ref_read(%r), %x));
  %x
}
""",
        False,
    ),
    # passed to a function: escapes.
    "escapes-to-call": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %f = fn (%c) -> Tensor[(2), float32] { ref_read(%c) };
  let %r = ref(zeros_like(%x));
  let %u = ref_write(%r, add(ref_read(%r), %x));
  %f(%r)
}
""",
        True,
    ),
    # in a tuple, written and read in a closure (called twice): its value flows into another
    # cell, returned.
    "read-into-another-cell": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %t = (%x, ref(zeros_like(%x)));
  let %out = ref(%x);
  let %k = fn () -> () { ref_write(%out, negative(ref_read(%t.1))) };
  let %u = ref_write(%t.1, add(ref_read(%t.1), %x));
  let %v = %k();
  let %v2 = %k();
  ref_read(%out)
}
""",
        True,
    ),
    # in a tuple, written in a closure, the value of the tuple used: the cell is dead.
    "tuple-in-closure": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %t = (%x, ref(zeros_like(%x)));
  let %k = fn () -> () { ref_write(%t.1, add(ref_read(%t.1), %t.0)) };
  let %v = %k();
  add(%t.0, %x)
}
""",
        False,
    ),
    # a function writing a cell is called (twice: not inlined) for its effect: the calls stay.
    "effectful-call": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %w = ref(%x);
  let %f = fn () -> () { ref_write(%w, multiply(%x, %x)) };
  let %u = %f();
  let %u2 = %f();
  ref_read(%w)
}
""",
        True,
    ),
    # cells passed to a function that is only ever called: dead together.
    "through-a-parameter": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %f = fn (%p) -> Tensor[(2), float32] {
    let %u = ref_write(%p.1, add(ref_read(%p.1), %p.0));
    %p.0
  };
  let %t1 = (%x, ref(zeros_like(%x)));
  let %t2 = (negative(%x), ref(zeros_like(%x)));
  add(%f(%t1), %f(%t2))
}
""",
        False,
    ),
    # the same, but one of the cells passed is also read and returned: all kept.
    "through-a-parameter-observed": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %f = fn (%p) -> Tensor[(2), float32] {
    let %u = ref_write(%p.1, add(ref_read(%p.1), %p.0));
    %p.0
  };
  let %r = ref(zeros_like(%x));
  let %t1 = (%x, ref(zeros_like(%x)));
  let %t2 = (negative(%x), %r);
  let %y = add(%f(%t1), %f(%t2));
  add(%y, ref_read(%r))
}
""",
        True,
    ),
    # stored in another cell, accumulated by a closure (called twice), read through the other
    # cell: escapes.
    "stored-in-a-cell": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %r = ref(zeros_like(%x));
  let %h = ref(%r);
  let %f = fn () -> () { ref_write(%r, add(ref_read(%r), %x)) };
  let %u = %f();
  let %u2 = %f();
  ref_read(ref_read(%h))
}
""",
        True,
    ),
    # a cell written under another name (a tuple's field) is not known after the write.
    "aliased-write": (
        """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %r = ref(%x);
  let %t = (%x, %r);
  let %s = %t.1;
  let %w = ref_write(%s, add(%x, %x));
  ref_read(%r)
}
""",
        False,
    ),
    # in a list, written in a closure that matches on it: nothing reads it but itself, dead.
    "through-a-list": (_THROUGH_A_LIST.replace("RESULT", "%x"), False),
    # the same, and the cell read back through the list and returned: observed.
    "through-a-list-observed": (
        _THROUGH_A_LIST.replace("RESULT", "match (%l) { Cons(%q, _) => ref_read(%q.1), Nil => %x }"),
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cleanup_keeps_what_is_observed(name):
    source, keeps_write = PROGRAMS[name]
    mod = relay.transform.InferType()(_parse(source))
    cleaned = cleanup(mod)
    before, after = _interpret(mod, X), _interpret(cleaned, X)
    np.testing.assert_array_equal(before.numpy(), after.numpy())
    assert (_census(cleaned)["RefWrite"] > 0) == keeps_write
    if not keeps_write:
        assert _census(cleaned)["zeros_like"] == 0


def test_unused_call_of_a_pure_recursive_function_goes():
    mod = relay.transform.InferType()(
        _parse("""
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %loop = fn (%i: int32, %h: Tensor[(2), float32]) -> Tensor[(2), float32] {
    if (less_equal(3, %i)) { %h } else { %loop(add(%i, 1), tanh(%h)) }
  };
  let %unused = %loop(0, %x);
  %x
}
""")
    )
    cleaned = cleanup(mod)
    assert _census(cleaned)["tanh"] == 0
    np.testing.assert_array_equal(_interpret(cleaned, X).numpy(), X)


def test_identity_collapse_sum_goes_broadcasting_one_stays():
    mod = relay.transform.InferType()(
        _parse("""
def @main(%x: Tensor[(2, 3), float32], %b: Tensor[(3), float32]) -> (Tensor[(2, 3), float32], Tensor[(3), float32]) {
  (collapse_sum_like(%x, %x), collapse_sum_like(%x, %b))
}
""")
    )
    assert _census(cleanup(mod))["collapse_sum_like"] == 1


def test_zeros_like_of_a_static_type_is_a_constant_of_its_dtype():
    mod = _parse("""
def @main(%x: Tensor[(2), float64], %y: Tensor[(?), float32]) -> (Tensor[(2), float64], Tensor[(?), float32]) {
  (add(zeros_like(%x), %x), add(zeros_like(%y), %y))
}
""")
    cleaned = cleanup(mod)
    assert _census(cleaned)["zeros_like"] == 1  # the dynamic one stays
    constants = []
    relay.analysis.post_order_visit(
        cleaned["main"], lambda n: constants.append(n) if isinstance(n, relay.Constant) else None
    )
    assert [(c.data.shape, c.data.dtype) for c in constants] == [((2,), "float64")]
    x, y = np.array([1.5, -2.0]), np.array([3.0, 4.0, 5.0], "float32")
    for got, want in zip(_interpret(cleaned, x, y), (x, y)):
        np.testing.assert_array_equal(got.numpy(), want)


def test_data_gradient_is_not_computed():
    """With the input bound by ``params``, its gradient (a product with the weights) is dead."""
    mod = _parse("""
def @main(%x: Tensor[(2, 5), float32], %w: Tensor[(4, 5), float32]) -> Tensor[(2, 4), float32] {
  nn.relu(nn.dense(%x, %w, units=4))
}
""")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2, 5)).astype("float32")
    w = rng.uniform(-1, 1, (4, 5)).astype("float32")
    grad = gradient(mod, params={"x": x})
    # the forward product and the weights' gradient; not the data's
    assert _census(grad)["nn.dense"] == 2
    assert _census(grad)["collapse_sum_like"] == 0
    testing.check_equivalence(grad, [w], backends=[("cpp", relay_aot.compile(grad))], references=("interpreter",))


@pytest.mark.parametrize("strides, pads", [([1, 1], 1), ([1, 2], 0)], ids=["unit-strides", "strided"])
def test_gradient_of_a_static_slice_is_a_pad(strides, pads):
    """strided_set into zeros with constant bounds and unit strides is nn.pad; other strides stay."""
    width = 4 // strides[1]
    mod = _parse(f"""
def @main(%x: Tensor[(2, 6), float32]) -> Tensor[(2, {width}), float32] {{
  multiply(strided_slice(%x, begin=[0, 0], end=[2, 4], strides={strides}, axes=None), 3f)
}}
""")
    grad = gradient(mod)
    assert _census(grad)["nn.pad"] == pads and _census(grad)["strided_set"] == 1 - pads
    x = np.arange(12, dtype="float32").reshape(2, 6)
    dx = np.zeros_like(x)
    dx[:, 0 : 4 : strides[1]] = 3
    expected = (3 * x[:, 0 : 4 : strides[1]], (dx,))
    testing.check_equivalence(
        grad, [x], backends=[("cpp", relay_aot.compile(grad))], references=("interpreter",), expected=expected
    )


_BACKPROP = """
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %out = ref(%x);
  let %bp = ref(fn () -> () { ref_write(%out, negative(ref_read(%out))) });
  let %prev = ref_read(%bp);
  BETWEEN
  let %k = fn () -> () { %prev() };
  let %u = ref_write(%bp, %k);
  let %f = ref_read(%bp);
  let %v = %f();
  ref_read(%out)
}
"""


_ADD_X = "fn () -> () { ref_write(%out, add(ref_read(%out), %x)) }"


@pytest.mark.parametrize(
    "between",
    [
        "",
        f"let %w = ref_write(%bp, {_ADD_X});",  # written, then written again before any read
        f"let %w = ref_write(%bp, {_ADD_X}); let %g = ref_read(%bp); let %y = %g();",  # and called
    ],
    ids=["write-back", "overwritten-between", "called-between"],
)
def test_backpropagator_chain_becomes_dataflow(between):
    """A chain of backpropagator steps in one ``let`` chain: each read of the cell holding the
    chain is of known contents, each step is called once and inlined, and then every cell's
    contents are known where they are read: no reference is left."""
    mod = relay.transform.InferType()(_parse(_BACKPROP.replace("BETWEEN", between)))
    cleaned = cleanup(mod)
    np.testing.assert_array_equal(_interpret(mod, X).numpy(), _interpret(cleaned, X).numpy())
    census = _census(cleaned)
    assert census["RefCreate"] == census["RefRead"] == census["RefWrite"] == 0, census

"""Loop invariants computed once (``relay_aot/passes/invariants.py``): what moves out of a
repeatedly called function, what stays, and the same values as TVM's executors either way."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_aot import testing
from relay_aot.passes import invariants


def _parse(body: str) -> tvm.IRModule:
    return relay.transform.InferType()(relay.parse('#[version = "0.0.5"]\n' + body))


def _ops_in_functions(mod: tvm.IRModule) -> tuple[list, list]:
    """Operator names inside ``let``-bound functions of ``@main``, and outside them."""
    inside, outside = [], []

    def walk(expr, depth):
        if isinstance(expr, relay.Function):
            walk(expr.body, depth + 1)
        elif isinstance(expr, relay.Let):
            walk(expr.value, depth)
            walk(expr.body, depth)
        elif isinstance(expr, relay.Call):
            if isinstance(expr.op, tvm.ir.Op):
                (inside if depth > 1 else outside).append(expr.op.name)
            else:
                walk(expr.op, depth)
            for arg in expr.args:
                walk(arg, depth)
        elif isinstance(expr, relay.If):
            for part in (expr.cond, expr.true_branch, expr.false_branch):
                walk(part, depth)
        elif isinstance(expr, relay.Tuple):
            for field in expr.fields:
                walk(field, depth)
        elif isinstance(expr, relay.TupleGetItem):
            walk(expr.tuple_value, depth)

    walk(mod["main"], 0)
    return inside, outside


# A loop multiplying by the transpose of a weight at each step: the weight comes from outside.
_LOOP = """
def @main(%w: Tensor[(4, 4), float32], %x: Tensor[(1, 4), float32], %n: int32) -> Tensor[(1, 4), float32] {
  let %loop = fn (%i: int32, %h: Tensor[(1, 4), float32]) -> Tensor[(1, 4), float32] {
    if (less(%i, %n)) { %loop(add(%i, 1), tanh(nn.dense(%h, STEP_WEIGHT, units=4))) } else { %h }
  };
  %loop(0, %x)
}
"""


def _loop_args():
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, (4, 4)).astype("float32"), rng.uniform(-1, 1, (1, 4)).astype("float32"), np.int32(5)]


def _vm(mod: tvm.IRModule, args):
    return relay.create_executor("vm", mod=mod, device=tvm.cpu(), target="llvm").evaluate()(*args).numpy()


@pytest.mark.parametrize(
    "weight, moved",
    [
        ("transpose(%w, axes=None)", ["transpose"]),
        ("multiply(transpose(%w, axes=None), 2f)", ["transpose", "multiply"]),
        # the product depends on the loop's parameter and stays; the transpose in it moves
        ('multiply(transpose(%w, axes=None), cast(%i, dtype="float32"))', ["transpose"]),
        # indexes with data: stays, even over outer values only
        ('broadcast_to(take(%w, %n, axis=0, mode="clip"), shape=[4, 4])', []),
    ],
    ids=["transpose", "expression", "depends-on-the-loop", "data-indexed"],
)
def test_what_moves_out_of_a_loop(weight, moved):
    mod = _parse(_LOOP.replace("STEP_WEIGHT", weight))
    hoisted = invariants.hoist(mod)
    inside_before, _ = _ops_in_functions(mod)
    inside, outside = _ops_in_functions(hoisted)
    assert sorted(outside) == sorted(moved)
    assert sorted(inside + outside) == sorted(inside_before)
    testing.check_equivalence(
        hoisted, _loop_args(), backends=["cpp"], references=("interpreter",), expected=_vm(mod, _loop_args())
    )


def test_a_function_called_once_keeps_its_work():
    """Moving work out of a function called once saves nothing; it stays where it was."""
    mod = _parse("""
def @main(%w: Tensor[(4, 4), float32], %x: Tensor[(1, 4), float32]) -> Tensor[(1, 4), float32] {
  let %once = fn (%h: Tensor[(1, 4), float32]) -> Tensor[(1, 4), float32] {
    nn.dense(%h, transpose(%w, axes=None), units=4)
  };
  %once(%x)
}
""")
    assert _ops_in_functions(invariants.hoist(mod))[1] == []


def test_called_from_a_loop_counts_as_repeated():
    """A step function called by name from inside a recursive one runs once per iteration: its
    invariants move out, past the loop too when they depend on nothing inside it."""
    mod = _parse("""
def @main(%w: Tensor[(4, 4), float32], %x: Tensor[(1, 4), float32], %n: int32) -> Tensor[(1, 4), float32] {
  let %step = fn (%h: Tensor[(1, 4), float32]) -> Tensor[(1, 4), float32] {
    tanh(nn.dense(%h, transpose(%w, axes=None), units=4))
  };
  let %loop = fn (%i: int32, %h: Tensor[(1, 4), float32]) -> Tensor[(1, 4), float32] {
    if (less(%i, %n)) { %loop(add(%i, 1), %step(%h)) } else { %h }
  };
  %loop(0, %x)
}
""")
    hoisted = invariants.hoist(mod)
    assert _ops_in_functions(hoisted)[1] == ["transpose"]
    testing.check_equivalence(
        hoisted, _loop_args(), backends=["cpp"], references=("interpreter",), expected=_vm(mod, _loop_args())
    )


def test_gradient_lstm_packs_its_weight_once():
    """In the LSTM gradient, the input weight's transpose and packing (for the product with each
    step's gradient) runs once per call, outside the folded step function."""
    from benchmarks import workloads
    from relay_aot import passes

    workload = workloads.grad_lstm(hidden=4, steps=3)
    prepared = passes.prepare(workload.build(), None, 3, tvm.target.Target("llvm"))
    moved = []

    def visit(node):
        if isinstance(node, relay.Let) and node.var.name_hint.startswith("invariant"):
            moved.append(node.var.name_hint)

    relay.analysis.post_order_visit(prepared["main"], visit)
    assert moved, "nothing moved out of the LSTM's step"

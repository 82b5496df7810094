"""Relay's higher-order gradients (``relay_aot.passes.gradient``) compiled by relay_aot.

``relay.transform.gradient(mode="higher_order")`` makes programs of references and closures
that TVM's Relay VM cannot run; the Relay interpreter is the reference here, and numpy (with
central finite differences, in float64) an independent second oracle.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from benchmarks import workloads
from relay_aot import testing
from relay_aot.passes import gradient

BACKENDS = ["cpp", "python"]


def _parse(body: str) -> tvm.IRModule:
    return relay.parse('#[version = "0.0.5"]\n' + body)


# An RNN unrolled by a let-bound recursive closure: control flow, closures and recursion.
_RNN = """
def @main(%x: Tensor[(3), float64], %w: Tensor[(3, 3), float64]) -> Tensor[(3), float64] {
  let %loop = fn (%i: int32, %h: Tensor[(3), float64]) -> Tensor[(3), float64] {
    if (less_equal(4, %i)) {
      %h
    } else {
      let %wh = reshape(nn.dense(reshape(%h, newshape=[1, 3]), %w, units=3), newshape=[3]);
      %loop(add(%i, 1), tanh(add(%wh, %x)))
    }
  };
  %loop(0, %x)
}
"""


def _rnn_numpy(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    h = x
    for _ in range(4):
        h = np.tanh(w @ h + x)
    return h


def _finite_differences(f, args, eps=1e-6):
    """d sum(f(*args)) / d arg for each argument, by central differences."""
    grads = []
    for i, arg in enumerate(args):
        grad = np.zeros_like(arg)
        for index in np.ndindex(arg.shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[i][index] += eps
            minus[i][index] -= eps
            grad[index] = (f(*plus).sum() - f(*minus).sum()) / (2 * eps)
        grads.append(grad)
    return tuple(grads)


def test_gradient_module_shape_and_vm_cannot_run_it():
    grad = gradient(_parse(_RNN))
    main = grad["main"]
    assert [p.name_hint for p in main.params] == ["x", "w"]
    assert str(main.checked_type.ret_type) == str(
        relay.TupleType(
            [
                relay.TensorType((3,), "float64"),
                relay.TupleType([relay.TensorType((3,), "float64"), relay.TensorType((3, 3), "float64")]),
            ]
        )
    )
    assert "references" in testing.oracle.unsupported_reason(grad, "vm")


@pytest.mark.parametrize("backend", BACKENDS)
def test_rnn_gradient_matches_interpreter_numpy_and_finite_differences(backend):
    rng = np.random.default_rng(0)
    x, w = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, (3, 3))
    grad = gradient(_parse(_RNN))
    expected = (_rnn_numpy(x, w), _finite_differences(_rnn_numpy, [x, w]))
    # relay_aot against the interpreter, and both against numpy's forward and finite differences.
    testing.check_equivalence(
        grad, [x, w], backends=[backend], references=("interpreter",), expected=expected, rtol=1e-6, atol=1e-8
    )


def test_lstm_over_a_list_matches_interpreter():
    """The benchmark's grad_lstm program (ADTs, match, recursive closures), small; both backends
    against one interpreter run."""
    workload = workloads.grad_lstm(hidden=4, steps=3)
    mod = workload.module()
    compiled = relay_aot.compile(mod)
    report = testing.equivalence_report(
        mod, workload.args(), backends=[("cpp", compiled), "python"], rtol=1e-4, atol=1e-5
    )
    assert "vm" in report.skipped and "interpreter" in report.ran
    value, grads = compiled(*workload.args())
    assert value.shape == (1, 4) and [g.shape for g in grads] == [(16, 4), (16, 4), (16,)]
    assert all(np.abs(g.numpy()).sum() > 0 for g in grads)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mlp_gradient_with_data_bound_matches_numpy(backend):
    """Gradient with respect to weights only (the input bound by ``params``), against numpy."""
    mod = _parse("""
def @main(%x: Tensor[(2, 5), float32], %w: Tensor[(4, 5), float32], %b: Tensor[(4), float32]) -> Tensor[(2, 4), float32] {
  nn.relu(nn.bias_add(nn.dense(%x, %w, units=4), %b))
}
""")
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (2, 5)).astype("float32")
    w, b = rng.uniform(-1, 1, (4, 5)).astype("float32"), rng.uniform(-1, 1, 4).astype("float32")
    grad = gradient(mod, params={"x": x})
    assert [p.name_hint for p in grad["main"].params] == ["w", "b"]
    pre = x @ w.T + b
    active = (pre > 0).astype("float32")
    expected = (np.maximum(pre, 0), (active.T @ x, active.sum(axis=0)))
    result = relay_aot.compile(grad, backend=backend)(w, b)
    testing.assert_same(testing.normalize(result), testing.normalize(expected), 1e-5, 1e-6)
    testing.check_equivalence(
        grad, [w, b], backends=[(backend, relay_aot.compile(grad, backend=backend))], references=("interpreter",)
    )


# The RNN with its loop and its cell as global functions: bound inside @main before the pass.
_RNN_GLOBALS = """
def @cell(%h: Tensor[(3), float64], %x: Tensor[(3), float64], %w: Tensor[(3, 3), float64]) -> Tensor[(3), float64] {
  tanh(add(reshape(nn.dense(reshape(%h, newshape=[1, 3]), %w, units=3), newshape=[3]), %x))
}
def @loop(%i: int32, %h: Tensor[(3), float64], %x: Tensor[(3), float64], %w: Tensor[(3, 3), float64])
    -> Tensor[(3), float64] {
  if (less_equal(4, %i)) { %h } else { @loop(add(%i, 1), @cell(%h, %x, %w), %x, %w) }
}
def @main(%x: Tensor[(3), float64], %w: Tensor[(3, 3), float64]) -> Tensor[(3), float64] { @loop(0, %x, %x, %w) }
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_monomorphic_globals_are_differentiated(backend):
    rng = np.random.default_rng(2)
    x, w = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, (3, 3))
    grad = gradient(_parse(_RNN_GLOBALS))
    assert [g.name_hint for g in grad.get_global_vars()] == ["main"]
    expected = (_rnn_numpy(x, w), _finite_differences(_rnn_numpy, [x, w]))
    testing.check_equivalence(
        grad, [x, w], backends=[backend], references=("interpreter",), expected=expected, rtol=1e-6, atol=1e-8
    )


def test_tuple_result_differentiates_its_first_tensor():
    mod = _parse("""
def @main(%x: Tensor[(2), float32]) -> (Tensor[(2), float32], Tensor[(2), float32]) {
  (multiply(%x, %x), exp(%x))
}
""")
    x = np.array([1.5, -2.0], dtype="float32")
    value, (dx,) = relay_aot.compile(gradient(mod))(x)
    np.testing.assert_allclose(value[0].numpy(), x * x)
    np.testing.assert_allclose(value[1].numpy(), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(dx.numpy(), 2 * x)


@pytest.mark.parametrize(
    "source, message",
    [
        (
            """
def @id[A](%x: A) -> A { %x }
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { @id(%x) }
""",
            "calls the polymorphic global function @id",
        ),
        (
            """
def @main(%x: Tensor[(2), float32], %n: Tensor[(), float32]) -> Tensor[(2), float32] {
  if (less_equal(%n, 0f)) { %x } else { @main(multiply(%x, %x), subtract(%n, 1f)) }
}
""",
            "@main is recursive (through @main)",
        ),
        (
            """
def @even(%x: Tensor[(2), float32], %n: Tensor[(), float32]) -> Tensor[(2), float32] {
  if (less_equal(%n, 0f)) { %x } else { @odd(%x, subtract(%n, 1f)) }
}
def @odd(%x: Tensor[(2), float32], %n: Tensor[(), float32]) -> Tensor[(2), float32] {
  if (less_equal(%n, 0f)) { %x } else { @even(tanh(%x), subtract(%n, 1f)) }
}
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { @even(%x, 3f) }
""",
            "the global functions @even, @odd are mutually recursive",
        ),
        (
            """
def @main(%x: (Tensor[(2), float32], Tensor[(2), float32])) -> Tensor[(2), float32] { add(%x.0, %x.1) }
""",
            "differentiates functions of tensor parameters only",
        ),
        (
            """
def @main(%x: Tensor[(4), float32]) -> Tensor[(2), float32] { let %s = split(%x, indices_or_sections=2); %s.0 }
""",
            "no gradient is registered for the operators split",
        ),
        (
            """
def @main(%x: Tensor[(2), float32]) -> fn () -> Tensor[(2), float32] { fn () { %x } }
""",
            "needs a tensor or a tuple of tensors",
        ),
    ],
    ids=[
        "polymorphic-global",
        "recursive-main",
        "mutual-recursion",
        "tuple-parameter",
        "missing-gradient",
        "closure-result",
    ],
)
def test_unsupported_programs_are_refused_clearly(source, message):
    with pytest.raises(relay_aot.UnsupportedError, match=re.escape(message)):
        gradient(_parse(source))


def test_bad_arguments():
    mod = _parse("def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { %x }")
    with pytest.raises(relay_aot.RelayAotError, match="no @f function"):
        gradient(mod, name="f")
    with pytest.raises(relay_aot.RelayAotError, match="params name no parameter of @main: y"):
        gradient(mod, params={"y": np.zeros(2, "float32")})
    with pytest.raises(TypeError):
        gradient(mod["main"])

"""Products of transposed operands (``relay_aot/passes/dense_transposes.py``): the kernels they
become, and the same values as TVM's executors and numpy, rewritten or not."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tvm
from tvm import relay

from benchmarks import workloads
from relay_aot import passes, testing

TARGET = tvm.target.Target("llvm")


def _parse(body: str) -> tvm.IRModule:
    return relay.parse('#[version = "0.0.5"]\n' + body)


def _kernel_ops(mod: tvm.IRModule) -> collections.Counter:
    """The operators of each fused kernel of ``mod``, joined by ``+``, counted."""
    found = collections.Counter()

    def visit(node):
        if isinstance(node, relay.Function) and node.attrs and int(node.attrs.get("Primitive", 0)) == 1:
            ops = []
            relay.analysis.post_order_visit(
                node.body,
                lambda n: ops.append(n.op.name) if isinstance(n, relay.Call) and isinstance(n.op, tvm.ir.Op) else None,
            )
            found["+".join(ops)] += 1

    for func in mod.functions.values():
        if isinstance(func, relay.Function):
            relay.analysis.post_order_visit(func, visit)
    return found


# Relay's gradient of nn.dense at batch 1, written out: the weight's (an outer product of two
# transposed rows, accumulated) and the input's (a product with the transposed weight).
_GRADIENTS = """
def @main(%g: Tensor[(1, 8), float32], %x: Tensor[(1, 5), float32], %w: Tensor[(8, 5), float32],
          %acc: Tensor[(8, 5), float32]) -> (Tensor[(8, 5), float32], Tensor[(1, 5), float32]) {
  (add(%acc, nn.dense(transpose(%g, axes=None), transpose(%x, axes=[1, 0]), units=5)), nn.dense(%g, transpose(%w, axes=None), units=5))
}
"""


def _gradient_args():
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, shape).astype("float32") for shape in [(1, 8), (1, 5), (8, 5), (8, 5)]]


def test_outer_product_and_transposed_weight_become_elementwise_and_packed_kernels():
    ops = _kernel_ops(passes.prepare(_parse(_GRADIENTS), None, 3, TARGET))
    assert ops == {
        # both transposes, the outer product and the accumulation: one kernel
        "transpose+transpose+reshape+multiply+add": 1,
        "transpose+layout_transform": 1,  # the weight, transposed and packed in one pass
        "nn.contrib_dense_pack": 1,
    }, ops


def test_opt_level_2_keeps_the_layout():
    ops = _kernel_ops(passes.prepare(_parse(_GRADIENTS), None, 2, TARGET))
    assert ops == {"transpose+transpose+reshape+multiply+add": 1, "transpose": 1, "nn.dense": 1}, ops


@pytest.mark.parametrize("opt_level", [1, 2, 3])
def test_same_values_as_tvm_and_numpy(opt_level):
    g, x, w, acc = _gradient_args()
    expected = (acc + g.T @ x, g @ w)
    testing.check_equivalence(
        _parse(_GRADIENTS),
        [g, x, w, acc],
        backends=["cpp", "python"],
        expected=expected,
        opt_level=opt_level,
        rtol=1e-5,
        atol=1e-6,
    )


def _real_product():  # contracted extent 2
    a, b = relay.var("a", shape=(2, 3)), relay.var("b", shape=(2, 4))
    return [a, b], relay.nn.dense(relay.transpose(a), relay.transpose(b))


def _integer_product():  # an integer product keeps its kernel (and its out_dtype)
    a, b = relay.var("a", shape=(3, 1), dtype="int32"), relay.var("b", shape=(4, 1), dtype="int32")
    return [a, b], relay.nn.dense(a, b, out_dtype="int64")


def _unknown_extent():  # no static shape to reshape to
    a, b = relay.var("a", shape=(relay.Any(), 1)), relay.var("b", shape=(4, 1))
    return [a, b], relay.nn.dense(a, b)


@pytest.mark.parametrize("make", [_real_product, _integer_product, _unknown_extent])
def test_other_products_are_left_alone_and_agree(make):
    params, body = make()
    mod = tvm.IRModule.from_expr(relay.Function(params, body))
    ops = _kernel_ops(passes.prepare(mod, None, 2, TARGET))
    assert ops["nn.dense"] == 1 and not any("multiply" in k for k in ops), ops
    rng = np.random.default_rng(1)
    args = []
    for param in params:
        shape = [3 if isinstance(d, tvm.tir.Any) else int(d) for d in param.type_annotation.shape]
        dtype = param.type_annotation.dtype
        args.append(
            rng.integers(-5, 5, shape).astype(dtype) if "int" in dtype else rng.uniform(-1, 1, shape).astype(dtype)
        )
    testing.check_equivalence(mod, args, backends=["cpp"], rtol=1e-5, atol=1e-6)


def test_contracted_extent_one_of_a_constant():
    """The product need not come from transposes: a column times a constant column (at
    opt_level 2: at 3, AlterOpLayout packs the constant weight first, as relay.build does)."""
    column = np.arange(4, dtype="float32").reshape(4, 1)
    a = relay.var("a", shape=(3, 1))
    mod = tvm.IRModule.from_expr(relay.Function([a], relay.nn.dense(a, relay.const(column))))
    assert _kernel_ops(passes.prepare(mod, None, 2, TARGET)) == {"reshape+multiply": 1}
    arg = np.array([[1.0], [-2.0], [0.5]], dtype="float32")
    testing.check_equivalence(mod, [arg], backends=["cpp"], expected=arg @ column.T, opt_level=2)


def test_mlp_gradient_runs_no_transpose_kernel():
    """The benchmark's gradient of the 784-256-256-10 MLP at batch 1: before this pass, the
    transpose of the 256×256 weight alone took a quarter of its time."""
    ops = _kernel_ops(passes.prepare(workloads.grad_mlp(1).build(), None, 3, TARGET))
    assert "transpose" not in ops, ops
    assert ops["transpose+layout_transform"] == 2 and ops["nn.contrib_dense_pack+add"] == 2, ops
    assert not any("dense" in k and "transpose" in k for k in ops), ops


@pytest.mark.early
def test_a_deeply_nested_program_compiles():
    """The rewrite walks expressions recursively; a dataflow chain 1,200 deep, inlined into one
    expression before fusion, needs more Python frames than the default limit (1,000) allows."""
    a, b = relay.var("a", shape=(3, 1)), relay.var("b", shape=(4, 1))
    first = relay.var("v0")
    chain = [relay.var(f"v{i}") for i in range(1, 1200)]
    body = chain[-1]
    for i in reversed(range(len(chain))):
        body = relay.Let(chain[i], relay.add(chain[i - 1] if i else first, first), body)
    mod = tvm.IRModule.from_expr(relay.Function([a, b], relay.Let(first, relay.nn.dense(a, b), body)))
    x, y = np.ones((3, 1), "float32"), np.arange(4, dtype="float32").reshape(4, 1)
    testing.check_equivalence(mod, [x, y], backends=["cpp"], references=(), expected=x @ y.T * 1200, cache=False)

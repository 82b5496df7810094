"""passes/constant_movement.py: data movement of constants folded with numpy equals TVM's
FoldConstant (which builds and runs each expression), and is left to it where numpy's is not
TVM's operator (a split that does not divide its axis)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_aot.passes import constant_movement
from relay_aot.passes.walk import nodes_where, op_name


def _folded_both_ways(expr: relay.Expr) -> tuple[np.ndarray, np.ndarray, list]:
    """The value of constant ``expr`` folded here and by TVM, and the operators left here."""
    mod = tvm.IRModule.from_expr(relay.Function([], expr))
    ours = constant_movement.fold(mod)
    left = [op_name(n) for n in nodes_where(ours["main"], lambda n: op_name(n) is not None)]
    theirs = relay.transform.FoldConstant()(mod)
    body = relay.transform.FoldConstant()(ours)["main"].body
    assert isinstance(theirs["main"].body, relay.Constant) and isinstance(body, relay.Constant)
    return body.data.numpy(), theirs["main"].body.data.numpy(), left


LAYOUTS = [
    ((8, 4, 3, 3), "OIHW", "OIHW2i4o"),
    ((8, 4, 3, 3), "OIHW", "OIHW4o"),
    ((32, 16, 1, 1), "OIHW", "OIHW16i16o"),
    ((1, 16, 5, 7), "NCHW", "NCHW8c"),
    ((1, 5, 7, 16), "NHWC", "NCHW16c"),
    ((6, 4, 2), "ABC", "CBA"),
    ((2, 8, 3, 4), "NCHW", "NHWC4c"),
    ((16, 1, 3, 3), "OIHW", "OIHW1i8o"),
    ((32, 8, 3, 3), "OIHW", "OIHW2i16o4i"),  # the int8 kernels': one axis split twice
    ((4, 16), "AB", "AB2b4a2b"),
]


@pytest.mark.parametrize("shape,src,dst", LAYOUTS)
def test_layout_transforms_of_constants_are_tvms(shape, src, dst):
    data = np.random.default_rng(0).standard_normal(shape).astype("float32")
    ours, theirs, left = _folded_both_ways(relay.layout_transform(relay.const(data), src, dst))
    assert left == [], "folded here"
    np.testing.assert_array_equal(ours, theirs)


def test_a_split_that_does_not_divide_its_axis_is_left_to_tvm():
    data = np.arange(1 * 6 * 2 * 2, dtype="int8").reshape(1, 6, 2, 2)
    ours, theirs, left = _folded_both_ways(relay.layout_transform(relay.const(data), "NCHW", "NCHW4c"))
    assert left == ["layout_transform"]
    np.testing.assert_array_equal(ours, theirs)
    assert constant_movement.layout_transform(data, "NCHW4c", "NCHW") is None  # split source: TVM's


@pytest.mark.parametrize(
    "make",
    [
        lambda c: relay.expand_dims(c, axis=1, num_newaxis=2),
        lambda c: relay.expand_dims(c, axis=-1),
        lambda c: relay.squeeze(relay.expand_dims(c, axis=0)),
        lambda c: relay.reshape(c, newshape=(0, -1)),
        lambda c: relay.reshape(c, newshape=(-1,)),
        lambda c: relay.transpose(c),
        lambda c: relay.transpose(c, axes=(1, 0, 2)),
        lambda c: relay.layout_transform(relay.expand_dims(c, axis=0), "NCHW", "NCHW4c"),
    ],
)
def test_reshapes_and_transposes_of_constants_are_tvms(make):
    data = np.random.default_rng(1).integers(-100, 100, (4, 3, 2)).astype("int32")
    ours, theirs, left = _folded_both_ways(make(relay.const(data)))
    assert left == []
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


def test_arithmetic_and_non_constants_are_left_alone():
    x = relay.var("x", shape=(2, 3), dtype="float32")
    c = relay.const(np.ones((3, 2), "float32"))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.add(relay.transpose(x), relay.negative(c))))
    folded = constant_movement.fold(mod)
    assert tvm.ir.structural_equal(folded, relay.transform.InferType()(mod))

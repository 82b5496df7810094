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


CASTS = [
    ("int8", "int32", (-128, 127)),
    ("int32", "int64", (-(2**31), 2**31 - 1)),
    ("int32", "int8", (-(2**31), 2**31 - 1)),  # narrowing wraps, in numpy as in LLVM
    ("int64", "int16", (-(2**62), 2**62)),
    ("int32", "uint8", (-1000, 1000)),
    ("uint8", "int8", (0, 255)),
    ("int64", "float32", (-(2**62), 2**62)),  # rounded to nearest, ties to even
    ("int32", "float32", (-(2**31), 2**31 - 1)),
    ("int32", "float64", (-(2**31), 2**31 - 1)),
    ("int32", "bool", (-2, 2)),
    ("bool", "int32", (0, 1)),
]


@pytest.mark.parametrize("src,dst,bounds", CASTS)
def test_casts_of_integer_constants_are_tvms(src, dst, bounds):
    rng = np.random.default_rng(2)
    data = rng.integers(bounds[0], bounds[1], (64,), endpoint=True, dtype="int64")
    data[:2] = bounds  # the extremes too
    data = data.astype(src)
    ours, theirs, left = _folded_both_ways(relay.cast(relay.const(data), dst))
    assert left == [], "folded here"
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("dst", ["int32", "uint8", "bool", "float16"])
def test_casts_of_floats_and_to_float16_are_left_to_tvm(dst):
    # LLVM's conversion of NaN and out-of-range floats is not numpy's; float16 from int is left too
    data = np.array([1.5, -2.5, np.nan, 3e9], dtype="float32") if dst != "float16" else np.arange(4, dtype="int32")
    mod = tvm.IRModule.from_expr(relay.Function([], relay.cast(relay.const(data), dst)))
    left = [op_name(n) for n in nodes_where(constant_movement.fold(mod)["main"], lambda n: op_name(n) is not None)]
    assert left == ["cast"]

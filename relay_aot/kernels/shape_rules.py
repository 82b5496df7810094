"""Shape functions relay_aot checks beyond TVM's, and the ones it replaces.

TVM's VM trusts that the shapes of an operator's inputs fit together where the operator's shape
function does not check them, and that data-dependent attributes are in range: the kernel then
reads out of bounds, computes garbage, or divides by zero. relay_aot does not run a kernel on
shapes it has not checked. Two tables, both keyed by Relay operator name, hold what it adds:

* :data:`REPLACED` -- shape functions written again, where TVM's own cannot be checked after the
  fact because it already misbehaves while computing (divides by a zero step, indexes an input
  dimension that does not exist) or computes another length than numpy and ONNX define (slices
  with out-of-range bounds, fractional ``arange`` steps). Same calling convention as TVM's
  ``FShapeFunc``: ``(attrs, inputs, out_ndims) -> outputs``.
* :data:`CHECKS` -- assertions run on what TVM's shape function took and made, passing the
  output shape through (or correcting it: ``nn.batch_matmul``'s batch of 0 against 1).

An assertion that fails makes the shape function fail with its message, which the generated code
raises as ``KernelError`` naming the kernel and its arguments' shapes, before the kernel runs.
docs/guarantees.md lists these operators (``tests/test_dynamic_hostile.py`` checks the list).
"""

from __future__ import annotations

import tvm
from tvm.runtime import convert
from tvm.te.hybrid import script

# -- replaced shape functions ---------------------------------------------------------------------
#
# (The hybrid-script functions below use TVM's hybrid dialect: output_tensor, const_range, int64,
# float64, ceil_div are its builtins, and a variable must be assigned before any branch uses it.)


@script
def _arange_int(start, stop, step):
    out = output_tensor((1,), "int64")
    assert int64(step[()]) != int64(0), "arange: the step is zero"
    # The distance and the step's magnitude in 64 unsigned bits: stop - start may not fit in
    # int64 (from -2^63 to 2^63 - 1 by 2^62 is 4 elements), nor may -step.
    span = uint64(0)
    by = uint64(1)
    if step[()] > 0:
        if stop[()] > start[()]:
            span = uint64(int64(stop[()])) - uint64(int64(start[()]))
            by = uint64(int64(step[()]))
    else:
        if start[()] > stop[()]:
            span = uint64(int64(start[()])) - uint64(int64(stop[()]))
            by = uint64(int64(-1) - int64(step[()])) + uint64(1)  # (TVM folds 0 - x to 0 for unsigned x)
    count = span // by
    if span % by != uint64(0):
        count += uint64(1)
    # As for float bounds: an arange of 2^62 elements could not be allocated anyway.
    assert count < uint64(2000000000) * uint64(2000000000), "arange: the range is too large"  # 4e18
    out[0] = int64(count)
    return out


@script
def _arange_float(start, stop, step):
    out = output_tensor((1,), "int64")
    assert float64(step[()]) != float64(0.0), "arange: the step is zero"
    count = (float64(stop[()]) - float64(start[()])) / float64(step[()])
    # Also false for NaN (a NaN bound or step) and for an infinite count.
    assert count < 4.0e18, "arange: the number of elements is not finite or too large"
    out[0] = int64(0)
    if count > 0.0:
        out[0] = int64(count)
        if float64(out[0]) < count:  # the ceiling
            out[0] += int64(1)
    return out


def _arange(attrs, inputs, out_ndims):
    """numpy's ``arange`` length: ``ceil((stop - start) / step)``, 0 when negative; a zero step, a
    NaN and an infinite or unrepresentable length refused. TVM's truncates float bounds and steps
    to integers first (a step of 0.5 divides by zero) and gives a negative length for an empty
    range."""
    dtype = inputs[0].dtype
    arange = _arange_float if dtype.startswith("float") else _arange_int
    return [arange(*inputs)]


@script
def _reshape(data_shape, newshape, ndim, allowzero, dynamic):
    out = output_tensor((ndim,), "int64")
    src = 0
    dst = 0
    inferred = -1
    copy = 0
    skip = 0
    for i in const_range(len(newshape)):
        if skip > 0:
            skip -= 1
        elif newshape[i] > 0:
            out[dst] = int64(newshape[i])
            src += 1
            dst += 1
        elif newshape[i] == 0:
            if allowzero:
                out[dst] = int64(0)
            else:
                assert src < data_shape.shape[0], (
                    "reshape: a 0 in the new shape copies a dimension the input does not have"
                )
                out[dst] = data_shape[src]
            src += 1
            dst += 1
        elif newshape[i] == -1:
            assert inferred < 0, "reshape: more than one -1 in the new shape"
            out[dst] = int64(1)
            inferred = dst
            src += 1
            dst += 1
        elif newshape[i] == -2:
            assert dynamic == 0, "reshape: -2 is not valid in the new shape of a dynamic reshape"
            copy = 1
        elif newshape[i] == -3:
            assert data_shape.shape[0] - src > 1, "reshape: not enough input dimensions for -3"
            out[dst] = data_shape[src] * data_shape[src + 1]
            src += 2
            dst += 1
        elif newshape[i] == -4:
            assert dynamic == 0, "reshape: -4 is not valid in the new shape of a dynamic reshape"
            assert len(newshape) - i > 2, "reshape: not enough dimensions in the new shape for -4"
            assert newshape[i + 1] != 0, "reshape: a -4 split into a zero dimension"
            assert newshape[i + 2] != 0, "reshape: a -4 split into a zero dimension"
            if newshape[i + 1] == -1:
                assert newshape[i + 2] != -1, "reshape: both dimensions of a -4 split are -1"
                out[dst] = data_shape[src] // int64(newshape[i + 2])
                out[dst + 1] = int64(newshape[i + 2])
            else:
                out[dst] = int64(newshape[i + 1])
                if newshape[i + 2] == -1:
                    out[dst + 1] = data_shape[src] // int64(newshape[i + 1])
                else:
                    out[dst + 1] = int64(newshape[i + 2])
            assert data_shape[src] == out[dst] * out[dst + 1], (
                "reshape: the -4 split does not multiply to the input dimension"
            )
            src += 1
            dst += 2
            skip = 2
        else:
            assert False, "reshape: a negative value other than -1, -2, -3, -4 in the new shape"  # noqa: B011 (hybrid script has no raise; its asserts are compiled, never stripped)
    if copy != 0:
        for i in range(src, data_shape.shape[0]):
            out[dst] = data_shape[i]
            dst += 1
    if inferred >= 0:
        size = int64(1)
        for i in const_range(data_shape.shape[0]):
            size *= data_shape[i]
        rest = int64(1)
        for i in const_range(out.shape[0]):
            rest *= out[i]
        assert rest != 0, "reshape: -1 cannot be inferred when the other dimensions multiply to 0"
        assert size % rest == 0, "reshape: the input's size is not a multiple of the new shape's other dimensions"
        out[inferred] = size // rest
    return out


def _reshape_static(attrs, inputs, out_ndims):
    """TVM's reshape shape function (``-1``, ``0``, ``-2``, ``-3``, ``-4``), refusing what
    numpy and ONNX refuse instead of dividing by zero or reading past the input's shape: a
    ``-1`` among dimensions that multiply to 0, a ``0`` beyond the input's rank. The inferred
    dimension is the one ``-1`` stood at (TVM writes it at its index in ``newshape``)."""
    if len(inputs[0].shape) == 0 or int(inputs[0].shape[0]) == 0:
        # A 0-d input (TVM's hybrid parser refuses the general function on an empty shape):
        # every new dimension is 1, as the type checker has checked.
        return [constant_tensor([1 if int(d) == -1 else int(d) for d in attrs.newshape], "int64", "reshape_0d_shape")]
    newshape = convert(tuple(int(d) for d in attrs.newshape))
    return [_reshape(inputs[0], newshape, out_ndims[0], convert(bool(attrs.allowzero)), convert(0))]


def _reshape_dynamic(attrs, inputs, out_ndims):
    """``dyn.reshape``: the same, the new shape read at run time (``-2`` and ``-4`` refused, as TVM does)."""
    return [_reshape(inputs[0], inputs[1], out_ndims[0], convert(bool(attrs.allowzero)), convert(1))]


def constant_tensor(values, dtype: str, name: str, shape=None) -> tvm.te.Tensor:
    """A tensor of the constants ``values`` (flat, row-major; ``shape`` default: 1-d) for a
    shape function: a chain of selects that TVM folds where the index is known."""
    values = [v.item() if hasattr(v, "item") else int(v) for v in values]
    shape = tuple(shape) if shape is not None else (len(values),)

    def element(*index):
        flat = 0
        for i, n in zip(index, shape):
            flat = flat * n + i
        result = tvm.tir.const(values[0] if values else 0, dtype)
        for k in range(1, len(values)):
            result = tvm.tir.if_then_else(flat == k, tvm.tir.const(values[k], dtype), result)
        return result

    return tvm.te.compute(shape, element, name)


@script
def _slice(data_shape, begin, end, strides, axes, size_mode):
    out = output_tensor((data_shape.shape[0],), "int64")
    for i in const_range(data_shape.shape[0]):
        out[i] = data_shape[i]
    for j in const_range(axes.shape[0]):
        n = int64(data_shape[axes[j]])
        b = int64(begin[j])
        e = int64(end[j])
        s = int64(strides[j])
        length = int64(0)
        if size_mode != 0:
            s = int64(1)
        assert s != int64(0), "strided_slice: a stride is zero"
        # numpy's bounds: negative ones count from the end, then clamped into the axis.
        if b < 0:
            b += n
        if size_mode != 0:
            if b < 0:
                b = int64(0)
            if b > n:
                b = n
            if e < 0:
                e = n
            elif e > n - b:
                e = n
            else:
                e = b + e
            length = e - b
        elif s > 0:
            if e < 0:
                e += n
            if b < 0:
                b = int64(0)
            if b > n:
                b = n
            if e < 0:
                e = int64(0)
            if e > n:
                e = n
            if e > b:
                length = (e - b - 1) // s + 1
        else:
            if e < 0:
                e += n
            if b < -1:
                b = int64(-1)
            if b > n - 1:
                b = n - 1
            if e < -1:
                e = int64(-1)
            if e > n - 1:
                e = n - 1
            if b > e:
                # |s| may be any int64, even the one whose negation wraps
                if s <= e - b:
                    length = int64(1)
                else:
                    length = (b - e - 1) // (int64(0) - s) + 1
        out[axes[j]] = length
    return out


#: The bounds TVM gives the axes a static ``strided_slice`` leaves out (StridedSliceRel):
#: all of the axis for a positive stride; for a negative one, from the last element down to,
#: but excluding, the first.
_PAST_END = (1 << 63) - 1


def _static_values(values, name):
    return constant_tensor(values, "int64", name)


def _slice_static(attrs, inputs, out_ndims):
    """numpy's slice length for ``strided_slice`` (TVM's does not clamp a begin or end beyond
    the axis, so that a begin of -100 on an axis of 10 reads 90 elements before the tensor)."""
    rank = int(inputs[0].shape[0])
    strides = [int(s) for s in attrs.strides]
    begin = [int(b) for b in attrs.begin]
    end = [int(e) for e in attrs.end]
    if attrs.axes is not None:
        axes = [int(a) + rank if int(a) < 0 else int(a) for a in attrs.axes]
    else:
        axes = list(range(rank))
        strides += [1] * (rank - len(strides))
        begin += [0 if s > 0 else _PAST_END for s in strides[len(begin) :]]
        end += [_PAST_END if s > 0 else 0 for s in strides[len(end) :]]
    size_mode = 1 if attrs.slice_mode == "size" else 0
    return [
        _slice(
            inputs[0],
            _static_values(begin, "begin"),
            _static_values(end, "end"),
            _static_values(strides, "strides"),
            _static_values(axes, "axes"),
            convert(size_mode),
        )
    ]


def _slice_dynamic(attrs, inputs, out_ndims):
    """numpy's slice length for ``dyn.strided_slice`` (its begin is made numpy's too, before the
    kernel reads it: ``passes/bounds.py``)."""
    count = int(inputs[1].shape[0])
    size_mode = 1 if attrs.slice_mode == "size" else 0
    return [
        _slice(
            inputs[0], inputs[1], inputs[2], inputs[3], _static_values(list(range(count)), "axes"), convert(size_mode)
        )
    ]


@script
def _numpy_broadcast(shape1, shape2):
    rank1 = shape1.shape[0]
    rank2 = shape2.shape[0]
    out_rank = max(rank1, rank2)
    out = output_tensor((out_rank,), "int64")
    for index in const_range(out_rank):
        dim1 = int64(1)
        dim2 = int64(1)
        if rank1 == out_rank:
            dim1 = shape1[index]
        elif rank1 - (out_rank - index) >= 0:
            dim1 = shape1[rank1 - (out_rank - index)]
        if rank2 == out_rank:
            dim2 = shape2[index]
        elif rank2 - (out_rank - index) >= 0:
            dim2 = shape2[rank2 - (out_rank - index)]
        assert dim1 == dim2 or dim1 == 1 or dim2 == 1, (
            "where: the shapes do not broadcast together (TVM: Invalid broadcast shapes)"
        )
        out[index] = dim1
        if dim1 == 1:
            out[index] = dim2
    return out


def _where(attrs, inputs, out_ndims):
    """numpy's broadcast of ``where``'s three shapes: an extent of 1 takes the other one, 0
    included (TVM's takes the larger, 1 against 0, and the kernel then fails its own check)."""
    shapes = [_static_values([1], "scalar_shape") if len(s.shape) == 0 else s for s in inputs]
    return [_numpy_broadcast(_numpy_broadcast(shapes[1], shapes[2]), shapes[0])]


@script
def _pad(data, pad_width, limit):
    out = output_tensor((len(data.shape),), "int64")
    for i in const_range(len(data.shape)):
        assert pad_width[i, 0] < limit, "pad: a pad width of 2^62 or more"
        assert pad_width[i, 1] < limit, "pad: a pad width of 2^62 or more"
        out[i] = int64(pad_width[i, 0] + pad_width[i, 1] + data.shape[i])
    return out


def _pad_dynamic(attrs, inputs, out_ndims):
    """``dyn.nn.pad`` whose widths cannot overflow the output extent (TVM's adds them in int64:
    two widths near 2^63 wrapped to an empty tensor). Below 2^62 each, the sum of two widths and an
    extent fits; a result too large to allocate is then refused as any other."""
    return [_pad(inputs[0], inputs[1], tvm.tir.const(1 << 62, "int64"))]


@script
def _resize2d(data, size, height_axis, width_axis):
    out = output_tensor((len(data.shape),), "int64")
    assert int64(size.shape[0]) == int64(2), "resize2d: the size has two elements"
    for i in const_range(len(data.shape)):
        out[i] = int64(data.shape[i])
    out[height_axis] = int64(size[0])
    out[width_axis] = int64(size[1])
    return out


def _resize2d_dynamic(attrs, inputs, out_ndims):
    """``dyn.image.resize2d`` with its size checked to have two elements first (TVM's reads two,
    past an empty size)."""
    layout = str(attrs.layout)
    axes = [layout.index("H"), layout.index("W")] if "H" in layout and "W" in layout else [2, 3]
    return [_resize2d(inputs[0], inputs[1], convert(axes[0]), convert(axes[1]))]


@script
def _matmul(a, b, transpose_a, transpose_b):
    out = output_tensor((a.shape[0],), "int64")
    for i in const_range(a.shape[0] - 2):
        out[i] = a[i]
    out[a.shape[0] - 2] = a[a.shape[0] - 2]
    if transpose_a:
        out[a.shape[0] - 2] = a[a.shape[0] - 1]
    out[a.shape[0] - 1] = b[1]
    if transpose_b:
        out[a.shape[0] - 1] = b[0]
    return out


def _matmul_static(attrs, inputs, out_ndims):
    """``nn.matmul``'s rows are ``a``'s last dimension when it is transposed: TVM's copies the
    output's own last extent there before writing it (an uninitialised value: 0 rows, or -2)."""
    flags = [tvm.tir.IntImm("bool", bool(attrs.transpose_a)), tvm.tir.IntImm("bool", bool(attrs.transpose_b))]
    return [_matmul(inputs[0], inputs[1], *flags)]


@script
def _squeeze_all(data_shape, remove_axes):
    out = output_tensor((0,), "int64")
    for i in const_range(len(remove_axes)):
        assert data_shape[remove_axes[i]] == 1, "squeeze: a removed dimension is not 1"
    return out


def _squeeze(attrs, inputs, out_ndims):
    """A ``squeeze`` of every axis to a 0-d tensor: its shape is an empty vector, and the removed
    extents are checked to be 1. TVM's makes a 0-d tensor instead of an empty shape (its kernel
    then refuses the shape buffer) and checks nothing."""
    if attrs.axis is None or len(attrs.axis) < inputs[0].shape[0].value:
        return _TVM_SQUEEZE(attrs, inputs, out_ndims)
    ndim = inputs[0].shape[0].value
    return [_squeeze_all(inputs[0], convert(sorted({int(a) + ndim if int(a) < 0 else int(a) for a in attrs.axis})))]


_TVM_SQUEEZE = tvm.ir.Op.get("squeeze").get_attr("FShapeFunc")

#: Relay operator -> its shape function, replacing TVM's (see the module docstring).
REPLACED = {
    "nn.matmul": _matmul_static,
    "squeeze": _squeeze,
    "dyn.nn.pad": _pad_dynamic,
    "dyn.image.resize2d": _resize2d_dynamic,
    "arange": _arange,
    "reshape": _reshape_static,
    "dyn.reshape": _reshape_dynamic,
    "strided_slice": _slice_static,
    "dyn.strided_slice": _slice_dynamic,
    "where": _where,
}


# -- checks after TVM's shape functions -----------------------------------------------------------
#
# Each takes what the operator's shape function took and made, asserts what the kernel assumes,
# and passes the output shape through.


@script
def _same_size(in_shape, out_shape):
    out = output_tensor((out_shape.shape[0],), "int64")
    count = allocate((2,), "int64")
    count[0] = int64(1)
    count[1] = int64(1)
    for i in const_range(in_shape.shape[0]):
        count[0] = count[0] * in_shape[i]
    for i in const_range(out_shape.shape[0]):
        count[1] = count[1] * out_shape[i]
        out[i] = out_shape[i]
    assert count[0] == count[1], "reshape would change the number of elements"
    return out


@script
def _same_inner_dim(data_shape, weight_shape, out_shape):
    out = output_tensor((out_shape.shape[0],), "int64")
    for i in const_range(out_shape.shape[0]):
        out[i] = out_shape[i]
    assert data_shape[data_shape.shape[0] - 1] == weight_shape[1], "dense: the inner dimensions differ"
    return out


@script
def _same_other_dims(first, other, out_shape, axis):
    out = output_tensor((out_shape.shape[0],), "int64")
    for i in const_range(out_shape.shape[0]):
        out[i] = out_shape[i]
        if i != axis:
            assert first[i] == other[i], "concatenate: the tensors differ in a dimension other than the axis"
    return out


@script
def _same_shape(first, other, out_shape):
    out = output_tensor((out_shape.shape[0],), "int64")
    for i in const_range(out_shape.shape[0]):
        out[i] = out_shape[i]
    for i in const_range(first.shape[0]):
        assert first[i] == other[i], "stack: the tensors differ in shape"
    return out


@script
def _batch_matmul_dims(a, b, out_shape, transpose_a, transpose_b):
    out = output_tensor((3,), "int64")
    assert a[0] == b[0] or a[0] == 1 or b[0] == 1, "batch_matmul: the batch dimensions differ and neither is 1"
    inner_a = a[2]
    if transpose_a:
        inner_a = a[1]
    inner_b = b[1]
    if transpose_b:
        inner_b = b[2]
    assert inner_a == inner_b, "batch_matmul: the inner dimensions differ"
    # numpy's broadcast: a batch of 1 takes the other's, 0 included (TVM's shape function takes
    # the larger, 1 against 0)
    out[0] = a[0]
    if a[0] == 1:
        out[0] = b[0]
    out[1] = out_shape[1]
    out[2] = out_shape[2]
    return out


@script
def _matmul_inner_dims(a, b, out_shape, transpose_a, transpose_b):
    out = output_tensor((out_shape.shape[0],), "int64")
    for i in const_range(out_shape.shape[0]):
        out[i] = out_shape[i]
    inner_a = a[a.shape[0] - 1]
    if transpose_a:
        inner_a = a[a.shape[0] - 2]
    inner_b = b[0]
    if transpose_b:
        inner_b = b[1]
    assert inner_a == inner_b, "matmul: the inner dimensions differ"
    return out


@script
def _broadcastable(data_shape, out_shape):
    out = output_tensor((out_shape.shape[0],), "int64")
    for i in const_range(out_shape.shape[0]):
        out[i] = out_shape[i]
    for i in const_range(data_shape.shape[0]):
        assert out_shape.shape[0] >= data_shape.shape[0], (
            "broadcast_to: the target has fewer dimensions than the tensor"
        )
        d = data_shape[data_shape.shape[0] - 1 - i]
        t = out_shape[out_shape.shape[0] - 1 - i]
        assert d == 1 or d == t, "broadcast_to: the tensor's shape does not broadcast to the target shape"
    return out


@script
def _k_within(data_shape, k, axis, outputs):
    out = output_tensor((outputs.shape[0],), "int64")
    for i in const_range(outputs.shape[0]):
        out[i] = outputs[i]
    if int64(k[0]) >= int64(1):  # k < 1 takes all of the axis
        assert int64(k[0]) <= int64(data_shape[axis]), "topk: k is larger than the axis"
    return out


@script
def _take_from_nonempty(data_shape, indices_shape, out_shape, axis):
    out = output_tensor((out_shape.shape[0],), "int64")
    for i in const_range(out_shape.shape[0]):
        out[i] = out_shape[i]
    count = allocate((2,), "int64")
    count[0] = int64(1)
    count[1] = int64(1)
    for i in const_range(indices_shape.shape[0]):
        count[0] = count[0] * indices_shape[i]
    for i in const_range(data_shape.shape[0]):
        if axis < 0 or i == axis:
            count[1] = count[1] * data_shape[i]
    assert count[1] > int64(0) or count[0] == int64(0), "take: indices into an empty axis"
    return out


@script
def _non_negative_reps(data, reps, out_shape):
    out = output_tensor((out_shape.shape[0],), "int64")
    for i in const_range(out_shape.shape[0]):
        out[i] = out_shape[i]
    for i in const_range(reps.shape[0]):
        assert int64(reps[i]) >= int64(0), "tile: a repetition is negative"
    # each extent is an input extent times its repetition (aligned at the last axis), which
    # TVM's shape function computes in int64: 4 times 2^62 wrapped to an empty axis. (2^63 - 1
    # is made of int32 literals: hybrid script reads every literal as int32.)
    half = int64(1073741824) * int64(1073741824) * int64(4)
    largest = half - int64(1) + half
    for k in const_range(out_shape.shape[0]):
        r = int64(1)
        d = int64(1)
        if k >= out_shape.shape[0] - reps.shape[0]:
            r = int64(reps[k - (out_shape.shape[0] - reps.shape[0])])
        if k >= out_shape.shape[0] - len(data.shape):
            d = int64(data.shape[k - (out_shape.shape[0] - len(data.shape))])
        if r > int64(0):
            assert d <= largest // r, "tile: an extent times its repetition exceeds 2^63"
    return out


def _check_reshape(attrs, inputs, outputs):
    if len(inputs[0].shape) == 0:  # a 0-d input: its shape tensor is 0-d
        return outputs
    return [_same_size(inputs[0], outputs[0])]


def _check_dense(attrs, inputs, outputs):
    return [_same_inner_dim(inputs[0], inputs[1], outputs[0])]


def _check_matmul(attrs, inputs, outputs):
    flags = [tvm.tir.IntImm("bool", bool(attrs.transpose_a)), tvm.tir.IntImm("bool", bool(attrs.transpose_b))]
    return [_matmul_inner_dims(inputs[0], inputs[1], outputs[0], *flags)]


def _check_batch_matmul(attrs, inputs, outputs):
    flags = [tvm.tir.IntImm("bool", bool(attrs.transpose_a)), tvm.tir.IntImm("bool", bool(attrs.transpose_b))]
    return [_batch_matmul_dims(inputs[0], inputs[1], outputs[0], *flags)]


def _check_concatenate(attrs, inputs, outputs):
    axis = int(attrs.axis)
    if axis < 0:
        axis += int(inputs[0].shape[0])
    out = outputs[0]
    for other in inputs[1:]:
        out = _same_other_dims(inputs[0], other, out, tvm.tir.const(axis, "int32"))
    return [out]


def _check_stack(attrs, inputs, outputs):
    out = outputs[0]
    for other in inputs[1:]:
        out = _same_shape(inputs[0], other, out)
    return [out]


def _check_broadcast_to(attrs, inputs, outputs):
    data = inputs[0]  # broadcast_to's shape functions read the data (for nothing)
    if len(data.shape) == 0:  # a 0-d tensor broadcasts to anything
        return outputs
    return [_broadcastable(_shape_tensor(data), outputs[0])]


def _check_topk(attrs, inputs, outputs):
    data = inputs[0]
    if len(inputs) == 1:  # topk, k an attribute; its shape function reads the data's shape
        shape, k = data, _static_values([int(attrs.k)], "k")
    else:  # dyn.topk, k read at run time; its shape function reads the data itself
        shape, k = _shape_tensor(data), inputs[1]
    axis = int(attrs.axis)
    if axis < 0:
        axis += int(shape.shape[0])
    return [_k_within(shape, k, tvm.tir.const(axis, "int32"), out) for out in outputs]


def _check_tile(attrs, inputs, outputs):
    # dyn.tile's shape function reads its inputs as data: the first is the tensor itself
    return [_non_negative_reps(inputs[0], inputs[1], outputs[0])]


def _check_take(attrs, inputs, outputs):
    data, indices = inputs[0], inputs[1]
    if len(indices.shape) == 0:  # 0-d indices: their shape tensor is 0-d; one index
        indices = _static_values([1], "one_index")
    if attrs.axis is None:  # the flattened data
        axis = -1
    else:
        axis = int(attrs.axis)
        axis = axis + int(data.shape[0]) if axis < 0 else axis
    return [_take_from_nonempty(data, indices, outputs[0], tvm.tir.const(axis, "int32"))]


def _shape_tensor(data):
    """The shape of ``data`` (a tensor a shape function reads as data) as an int64 tensor."""

    def dim(i):
        value = tvm.tir.Cast("int64", data.shape[0])
        for k in range(1, len(data.shape)):
            value = tvm.tir.if_then_else(i == k, tvm.tir.Cast("int64", data.shape[k]), value)
        return value

    return tvm.te.compute((len(data.shape),), dim, "data_shape")


#: Relay operator -> check(attrs, shape function inputs, outputs) -> outputs.
CHECKS = {
    "reshape": _check_reshape,
    "dyn.reshape": _check_reshape,
    "nn.dense": _check_dense,
    "nn.matmul": _check_matmul,
    "nn.batch_matmul": _check_batch_matmul,
    "concatenate": _check_concatenate,
    "stack": _check_stack,
    "broadcast_to": _check_broadcast_to,
    "dyn.broadcast_to": _check_broadcast_to,
    "topk": _check_topk,
    "dyn.topk": _check_topk,
    "take": _check_take,
    "dyn.tile": _check_tile,
}

"""Operators whose TVM kernels would read outside a tensor on some arguments, rewritten so that
they cannot (docs/guarantees.md).

``dyn.strided_slice`` reads ``x[begin + i * stride]`` with the ``begin`` it is given, as is: a
negative begin is not counted from the end and an out-of-range one is not clamped, so a begin of
-100 on an axis of 10 reads 100 elements before the tensor. Its begin is made numpy's here
(negative counts from the end, then clamped into the axis), from the data's shape at run time;
the output length follows numpy's rules too (``kernels/shape_rules.py``). A begin that selects
nothing for a negative stride (numpy's -1) is written as ``-1 - extent``, which counts from the
end to the same -1, so that the shape function, which applies numpy's rules again, agrees.

``nn.dense`` whose weight has a ``?`` number of rows gets TVM's x86 ``dense_pack`` kernel, which
packs the weight into blocks of 16 rows assuming there is a whole number of them: 4 or 9 rows
are read past the packed weight (garbage, or NaN). Such a ``dense`` becomes the ``nn.matmul``
it is (``transpose_b``), whose kernel reads only what it is given.

``dyn.nn.pad`` builds its kernel from the pad width's static number of rows: a ``?`` one
dereferences a null pointer inside TVM (the process dies: the VM's too), and fewer rows than the
data has axes make a kernel that reads past the pad width (TVM's ONNX importer does that for a
``Pad`` with ``axes``). A pad width with ``?`` dimensions is reshaped to a row of two per axis, which
checks its size at run time; one with other static dimensions is refused.
"""

from __future__ import annotations

import tvm
from tvm import relay

from ..errors import UnsupportedError
from .walk import nodes_where


class _NumpySliceBegin(relay.ExprMutator):
    def visit_call(self, call):
        types = [arg.checked_type for arg in call.args] if _is_dynamic_slice(call) else None
        call = super().visit_call(call)
        if types is None:
            return call
        data, begin, end, strides = call.args
        dtype, stride_dtype = types[1].dtype, types[3].dtype
        count = int(types[1].shape[0])
        zero, one = relay.const(0, dtype), relay.const(1, dtype)
        extent = relay.strided_slice(relay.shape_of(data, dtype), [0], [count])
        # Kernels of their own: fused with what computed ``begin`` (ONNX's importer clamps it in
        # a chain of ``where``), the inlined expression of this chain grows with each use of
        # a value, and TVM's simplifier took 80 s over the 17 elementwise int64 operations of
        # ONNX's Slice on three axes. Each part is a small kernel over the slice's ``rank``
        # elements.
        begin = relay.annotation.stop_fusion(begin)
        counted = relay.annotation.stop_fusion(relay.where(relay.less(begin, zero), relay.add(begin, extent), begin))
        forward = relay.minimum(relay.maximum(counted, zero), extent)
        backward = relay.minimum(relay.maximum(counted, relay.negative(one)), relay.subtract(extent, one))
        backward = relay.where(relay.less(backward, zero), relay.subtract(backward, extent), backward)
        if call.attrs.slice_mode == "size":  # the shape function steps by 1 there: so must the kernel
            strides = relay.ones_like(strides)
        numpy_begin = relay.where(relay.less(strides, relay.const(0, stride_dtype)), backward, forward)
        return relay.Call(call.op, [data, numpy_begin, end, strides], call.attrs, call.type_args, call.span)


def _is_dynamic_slice(call: relay.Call) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name == "dyn.strided_slice"


@tvm.transform.module_pass(opt_level=0, name="NumpySliceBegin")
def numpy_slice_begin(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:class:`_NumpySliceBegin` on every function of ``mod`` that has a ``dyn.strided_slice``
    (type-checked: the rewrite reads the begin's type)."""
    return rewrite_functions(mod, _is_dynamic_slice, _NumpySliceBegin)


def rewrite_functions(mod: tvm.IRModule, wanted, mutator) -> tvm.IRModule:
    """``mod`` with ``mutator()`` applied to each function that has a call ``wanted(call)``."""
    updates = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, relay.Function):
            if nodes_where(func, lambda n: isinstance(n, relay.Call) and wanted(n)):
                updates[gvar] = mutator().visit(func)
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


class _SlicesEndKernels(relay.ExprMutator):
    def visit_call(self, call):
        new = super().visit_call(call)
        if _is_slice(call) and _has_any_dim(call.checked_type):
            return relay.annotation.stop_fusion(new)
        return new


def _is_slice(call: relay.Call) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name == "strided_slice"


def _has_any_dim(ty) -> bool:
    return isinstance(ty, relay.TensorType) and any(isinstance(d, tvm.tir.Any) for d in ty.shape)


@tvm.transform.module_pass(opt_level=0, name="SlicesEndKernels")
def slices_end_kernels(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """A ``strided_slice`` whose result has a ``?`` extent ends its kernel (``stop_fusion``,
    which FuseOps removes). TOPI computes such a slice's extent as a variable of its own
    (``dim``): as the kernel's output it is the output buffer's extent, but a reshape or
    transpose fused after it reads it, and no argument binds it -- TVM failed the build ("variables
    [dim] are used, but are not passed in as API arguments"), on its VM too. Before FuseOps;
    type-checked input."""
    return rewrite_functions(mod, _is_slice, _SlicesEndKernels)


class _ZeroReshapesKept(relay.ExprMutator):
    def visit_call(self, call):
        new = super().visit_call(call)
        if _is_zero_reshape(call):
            return relay.annotation.stop_fusion(new)
        return new


def _is_zero_reshape(call: relay.Call) -> bool:
    return (
        isinstance(call.op, tvm.ir.Op)
        and call.op.name == "reshape"
        and bool(call.attrs.allowzero)
        and any(int(d) == 0 for d in call.attrs.newshape)
    )


@tvm.transform.module_pass(opt_level=0, name="ZeroReshapesKept")
def zero_reshapes_kept(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """A ``reshape`` to a literal 0 extent (``allowzero``) is kept from the reshape after it
    (``stop_fusion``, which FuseOps removes): TVM's SimplifyExpr merges two reshapes into one
    to the final static shape without ``allowzero``, where 0 copies an input extent instead --
    ``reshape(reshape(x, [0], allowzero=True), [-1])`` became ``reshape(x, [0])``, which turned
    a (1, 1) tensor into a (1,) one (the hostile campaign, fresh seed 9303)."""
    return rewrite_functions(mod, _is_zero_reshape, _ZeroReshapesKept)


def _vector_kernel_fails(call: relay.Call) -> bool:
    """Whether TVM's x86 strategy gives ``nn.dense`` ``call`` its hand-written matrix-vector
    kernel (``topi.x86.dense_dynamic``: one static row of data, a ``?`` extent in either operand)
    for a dtype other than float32: the kernel starts each sum at the float32 constant 0.0, and
    TVM's IR builder rejects it for a float64 or integer output ("data type does not match
    content type"; the dynamic campaign, fresh seed 57012)."""
    data, weight = (arg.checked_type for arg in call.args)
    one_row = isinstance(data.shape[0], tvm.tir.IntImm) and int(data.shape[0]) == 1
    return one_row and (_has_any_dim(data) or _has_any_dim(weight)) and call.checked_type.dtype != "float32"


class _UnpackedDynamicDense(relay.ExprMutator):
    def visit_call(self, call):
        dynamic = _is_dense(call) and (
            not isinstance(call.args[1].checked_type.shape[0], tvm.tir.IntImm) or _vector_kernel_fails(call)
        )
        call = super().visit_call(call)
        if not dynamic:
            return call
        attrs = call.attrs
        return relay.op.nn._make.matmul(call.args[0], call.args[1], attrs.units, attrs.out_dtype, False, True)


def _is_dense(call: relay.Call) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name == "nn.dense"


@tvm.transform.module_pass(opt_level=0, name="UnpackedDynamicDense")
def unpacked_dynamic_dense(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:class:`_UnpackedDynamicDense` on every function of ``mod`` with an ``nn.dense``
    (type-checked: the rewrite reads the weight's type): a dense whose weight has a ``?`` row
    count, or that TVM's matrix-vector kernel would fail (:func:`_vector_kernel_fails`), is the
    same ``matmul``."""
    return rewrite_functions(mod, _is_dense, _UnpackedDynamicDense)


class _StaticPadWidth(relay.ExprMutator):
    def visit_call(self, call):
        wanted = _is_dynamic_pad(call)
        call = super().visit_call(call)
        if not wanted:
            return call
        rank = len(call.args[0].checked_type.shape)
        shape = call.args[1].checked_type.shape
        static = [int(dim) if isinstance(dim, tvm.tir.IntImm) else None for dim in shape]
        if static == [rank, 2]:
            return call
        if any(dim is not None and dim != want for dim, want in zip(static, (rank, 2))):
            raise UnsupportedError(
                f"dyn.nn.pad of a tensor of rank {rank} with a pad width of shape {tuple(shape)} "
                f"(it needs ({rank}, 2): TVM's ONNX importer makes this for a Pad with axes)"
            )
        width = relay.reshape(call.args[1], [rank, 2])
        return relay.Call(call.op, [call.args[0], width, *call.args[2:]], call.attrs, call.type_args, call.span)


def _is_dynamic_pad(call: relay.Call) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name == "dyn.nn.pad"


@tvm.transform.module_pass(opt_level=0, name="StaticPadWidth")
def static_pad_width(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:class:`_StaticPadWidth` on every function of ``mod`` with a ``dyn.nn.pad`` (type-checked:
    the rewrite reads the pad width's type)."""
    return rewrite_functions(mod, _is_dynamic_pad, _StaticPadWidth)

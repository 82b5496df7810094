"""The ``?`` extents of unpacked kernels as parameters, for standalone packages.

TVM's unpacked calling convention (``tir.MakeUnpackedAPI``, the AOT executor's
``unpacked-api``) passes one data pointer per buffer and nothing else: a kernel over ``?``
dimensions would read its extents from the DLTensor it no longer gets, and its size variables
would be left unbound. Here each size variable of a kernel's buffers (inputs, outputs, a shape
function's data) becomes one more scalar parameter after the buffers (and after any scratch
parameters): the caller passes the extent it knows from the tensor the buffer is. A variable
shared by several buffers is passed once, from the first; the shape function has checked
before that the buffers agree. Stride variables (TVM leaves them for buffers of ``?`` shape) are
replaced by the compact strides: every tensor of a package is compact.
"""

from __future__ import annotations

import tvm
from tvm import tir

from .scratch import rewrite


def to_params(func: tir.PrimFunc) -> tuple[tir.PrimFunc, tuple[tuple[int, int, str], ...]]:
    """``func`` with each size variable of its buffers' shapes as a trailing parameter; and,
    per such parameter, (index of the buffer among ``func``'s parameters, dimension, the
    parameter's dtype: ``int32`` as TVM makes them)."""
    found: dict[tir.Var, tuple[int, int, str]] = {}
    strides: dict[tir.Var, tir.PrimExpr] = {}
    for index, param in enumerate(func.params):
        buffer = func.buffer_map.get(param)
        if buffer is None:
            continue
        for dim, extent in enumerate(buffer.shape):
            if isinstance(extent, tir.Var) and extent not in found:
                found[extent] = (index, dim, str(extent.dtype))
        # the package's tensors are compact: a stride variable is the product of the inner extents
        inner = tir.const(1, "int32")
        for dim in reversed(range(len(buffer.strides))):
            stride = buffer.strides[dim]
            if isinstance(stride, tir.Var):
                strides[stride] = tir.Cast(stride.dtype, inner) if stride.dtype != inner.dtype else inner
            inner = inner * buffer.shape[dim]
    if not found and not strides:
        return func, ()
    body = tir.stmt_functor.substitute(func.body, strides) if strides else func.body
    params = list(func.params) + list(found)
    new = tir.PrimFunc(params, body, func.ret_type, func.buffer_map, func.attrs, func.span)
    return new, tuple(found.values())


def apply(merged: tvm.IRModule, symbols) -> tuple[tvm.IRModule, dict[str, tuple[tuple[int, int, str], ...]]]:
    """:func:`to_params` on the functions of ``merged`` named in ``symbols`` (the kernels and
    shape functions the generated code calls); per symbol with any, its extent parameters."""
    out, done = rewrite(merged, symbols, to_params)
    return out, {name: extents for name, extents in done.items() if extents}

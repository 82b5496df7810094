"""Kernels that only move data, recognised so that compiled code can move it with ``memcpy``,
or not at all.

A kernel over ``?`` dimensions computes every index with divisions by shape variables; for a
kernel that only copies, that is most of its time (the scan output of an ONNX ``Loop`` is
concatenated with one more row at every step). A static concatenation costs a copy of its
pieces, which their kernels can avoid by writing their slices of it (``ir/in_place.py``). Three
forms are recognised:

* :data:`CONCAT_FLAT` -- ``concatenate`` along an axis before which every output dimension is
  1, of parameters reached through order-preserving operators only (``reshape``,
  ``passes/layouts.py``): the output is the parameters' bytes one after another;
* :data:`SAME_SHAPE_COPY` -- ``broadcast_to``/``dyn.broadcast_to`` of a parameter, in a kernel
  with ``?`` dimensions: when the shape computed at run time is the parameter's own, the output
  is a copy of it;
* :data:`VIEW` -- a static kernel whose output is a parameter through order-preserving
  operators only (``passes/layouts.py``): the parameter's bytes as they are, under another
  shape. Among them are ``layout_transform`` calls that move nothing: a convolution over 3
  channels packed one channel per block (``NCHW`` -> ``NCHW1c``) takes the input as it is.

``Kernel.copy`` holds the form and the parameter index of each piece. The C++ backend moves the
bytes itself (``shape.h``), or shares them (a view of a tensor no caller sees), and calls the
kernel only when a form does not apply at run time; the kernel is always built, and the Python
backend and standalone packages always call it: they all compute the same values.
"""

from __future__ import annotations

import tvm
from tvm import relay

from .. import ir
from ..ir import CONCAT_FLAT, SAME_SHAPE_COPY, VIEW
from ..passes.layouts import preserves_order


def _param_through_views(expr: relay.Expr, params: list) -> int | None:
    """The index of the parameter ``expr`` is a view of, or None."""
    while isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op) and preserves_order(expr):
        expr = expr.args[0]
    for index, param in enumerate(params):
        if expr.same_as(param) and isinstance(param.checked_type, relay.TensorType):
            return index
    return None


def copy_form(func: relay.Function, result: ir.Type, dynamic: bool) -> ir.CopyForm | None:
    """The data-movement form of primitive function ``func`` (result type ``result``; ``dynamic``:
    the kernel has ``?`` dimensions), if any."""
    body = func.body
    if not (isinstance(body, relay.Call) and isinstance(body.op, tvm.ir.Op) and isinstance(result, ir.TensorType)):
        return None
    params = list(func.params)
    name = body.op.name
    if name == "concatenate" and isinstance(body.args[0], relay.Tuple):
        axis = int(body.attrs.axis)
        rank = len(result.shape)
        axis = axis + rank if axis < 0 else axis
        if any(d != 1 for d in result.shape[:axis]):
            return None
        pieces = [p for f in body.args[0].fields if (p := _param_through_views(f, params)) is not None]
        if len(pieces) != len(body.args[0].fields):
            return None
        return ir.CopyForm(CONCAT_FLAT, tuple(pieces))
    source = _param_through_views(body, params) if not dynamic and result.is_static else None
    if source is not None:  # body (a call) reaches a parameter through order-preserving operators
        return ir.CopyForm(VIEW, (source,))
    if name in ("broadcast_to", "dyn.broadcast_to") and dynamic:
        sources = [i for i, p in enumerate(params) if body.args[0].same_as(p)]  # the parameter itself
        return ir.CopyForm(SAME_SHAPE_COPY, (sources[0],)) if sources else None
    return None

"""Matrix products of transposed operands, as Relay's gradient of ``nn.dense`` writes them.

``nn.dense(x, w)`` is ``x · wᵀ``. Its registered gradient is ``nn.dense(g, transpose(w))`` for
``x`` and ``nn.dense(transpose(g), transpose(x))`` for ``w``. ``FuseOps`` fuses neither
transpose into the product (a matrix product takes only elementwise consumers), so each is a
kernel of its own that copies its operand; and a transpose of a large matrix is slow: 60 µs for
a 256×256 float32 one on the benchmark machine, four times the product it feeds.

* ``nn.dense(a, b)`` whose contracted extent is 1 (``a`` is ``m×1``, ``b`` is ``n×1``: the
  weight gradient at batch 1, ``a`` and ``b`` transposed rows) is an outer product,
  ``multiply(a, reshape(b, [1, n]))``: one elementwise kernel, into which the transposes fuse,
  and which fuses with the accumulation of the gradient that follows it too. Each element is
  one product either way, so the values are the same.
* ``nn.dense(a, transpose(w))`` takes the packed weight layout the target's schedules prefer
  (``nn.contrib_dense_pack`` of a ``layout_transform``), as ``AlterOpLayout`` would choose it
  for this call. The transform fuses with the transpose into one kernel that reads the
  transposed matrix in runs instead of one element at a time, and moves no more elements than
  the transpose alone did; so, unlike the layout changes of a whole module that
  :func:`~relay_aot.passes.alter_layout` weighs, this one costs nothing at run time. Only with
  a target at ``opt_level`` 3, where ``relay.build`` changes layouts too.
"""

from __future__ import annotations

import tvm
from tvm import relay, te

from .gradient_cleanup import static_tensor
from .walk import rewrite_functions


def _transposed_matrix(expr: relay.Expr) -> relay.Expr | None:
    """The operand of ``expr`` if ``expr`` swaps the two axes of a static matrix, else None."""
    if not (isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "transpose"):
        return None
    operand = expr.args[0]
    ty = operand.checked_type
    if not (static_tensor(ty) and len(ty.shape) == 2):
        return None
    axes = expr.attrs.axes
    if axes is not None and [int(a) % 2 for a in axes] != [1, 0]:
        return None
    return operand


def _plain_dense(call: relay.Expr) -> bool:
    """Whether ``call`` is ``nn.dense`` of two static float matrices of one dtype, into it."""
    if not (isinstance(call, relay.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name == "nn.dense"):
        return False
    types = [arg.checked_type for arg in call.args]
    if not all(static_tensor(t) and len(t.shape) == 2 for t in types):
        return False
    dtype = types[0].dtype
    return dtype.startswith("float") and types[1].dtype == dtype and call.attrs.out_dtype in ("", dtype)


#: The two rewrites: an outer product, and a product with a transposed weight (packed).
_OUTER, _PACKED = "outer", "packed"


def _form(node: relay.Expr, pack: bool) -> str | None:
    """Which rewrite applies to ``node`` (``pack``: the packed layout may be taken), if any."""
    if not _plain_dense(node):
        return None
    if int(node.args[0].checked_type.shape[1]) == 1:
        return _OUTER
    if pack and _transposed_matrix(node.args[1]) is not None:
        return _PACKED
    return None


class _Rewrite(relay.ExprMutator):
    def __init__(self, pack: bool):
        super().__init__()
        self.pack = pack
        self.changed = False

    def visit_call(self, call):
        new = super().visit_call(call)
        form = _form(call, self.pack)
        if form == _OUTER:
            # contracted extent 1: out[i, j] = data[i, 0] * weight[j, 0]
            self.changed = True
            return relay.multiply(new.args[0], relay.reshape(new.args[1], [1, int(call.args[1].checked_type.shape[0])]))
        if form == _PACKED:
            packed = _packed_dense(call, new.args[0], new.args[1])
            if packed is not None:
                self.changed = True
                return packed
        return new


def _packed_dense(call: relay.Call, data: relay.Expr, weight: relay.Expr) -> relay.Expr | None:
    """``call`` (``nn.dense``) with ``weight`` in the layout the target's ``FTVMAlterOpLayout``
    picks for it, or None when it keeps the plain layout."""
    alter = call.op.get_attr("FTVMAlterOpLayout")
    if alter is None:
        return None
    tinfos = [te.placeholder([int(d) for d in arg.checked_type.shape], arg.checked_type.dtype) for arg in call.args]
    altered = alter(call.attrs, [data, weight], tinfos, call.checked_type)
    if not (isinstance(altered, relay.Call) and altered.op.name == "nn.contrib_dense_pack"):
        return None
    layout = str(altered.attrs.weight_layout)
    return relay.nn.contrib_dense_pack(
        data, relay.layout_transform(weight, "NC", layout), layout, None, call.checked_type.dtype
    )


def _has_pattern(func: relay.Function, pack: bool) -> bool:
    found = False

    def visit(node):
        nonlocal found
        found = found or _form(node, pack) is not None

    relay.analysis.post_order_visit(func, visit)
    return found


def rewrite(mod: tvm.IRModule, pack: bool) -> tvm.IRModule:
    """``mod`` with the products above rewritten (type-checked again if any was); ``pack``:
    also the packed layout (needs the target as the current one)."""
    return rewrite_functions(mod, lambda func: _Rewrite(pack) if _has_pattern(func, pack) else None)

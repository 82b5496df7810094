"""TVM 0.19's LLVM code generator against LLVM 22: what a kernel must not contain.

TVM describes every ``let``-bound value to the debugger with ``llvm.dbg.declare``, which LLVM 22
accepts only for pointers and integers: a kernel whose parallel body binds a float (TVM's common
subexpression elimination binds them, ``cse_var_1: float32x16``) fails LLVM's verifier
("location of #dbg_declare must be a pointer or int"), and with it the whole build --
``image.resize2d`` over ``?`` dimensions did, on TVM's VM too. :func:`inline_float_lets`
substitutes such values into their uses; LLVM's own value numbering finds the common
subexpressions again. ``KernelTable.build`` then keeps TVM's second lowering (``tvm.build``
lowers the already lowered kernels again) from binding new ones.
"""

from __future__ import annotations

from tvm import tir


def _is_float(var: tir.Var) -> bool:
    return var.dtype.startswith(("float", "bfloat"))


def inline_float_lets(func: tir.PrimFunc) -> tir.PrimFunc:
    """``func`` without ``let`` statements that bind floating-point values (module docstring)."""
    found = []
    tir.stmt_functor.post_order_visit(
        func.body, lambda n: found.append(n) if isinstance(n, tir.LetStmt) and _is_float(n.var) else None)
    if not found:
        return func

    def inline(stmt):
        if isinstance(stmt, tir.LetStmt) and _is_float(stmt.var):
            return tir.stmt_functor.substitute(stmt.body, {stmt.var: stmt.value})
        return None

    return func.with_body(tir.stmt_functor.ir_transform(func.body, None, inline, ["tir.LetStmt"]))

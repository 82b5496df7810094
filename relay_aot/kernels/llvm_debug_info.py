"""TVM 0.19's LLVM code generator against LLVM 22: what a kernel must not contain.

TVM describes every ``let``-bound value to the debugger with ``llvm.dbg.declare``, which LLVM 22
accepts only for pointers and scalar integers: a kernel that binds a float (TVM's common
subexpression elimination binds them, ``cse_var_1: float32x16``) or a vector of integers
(``floor_mod``'s ``rmod``, vectorized to ``int32x6``) fails LLVM's verifier ("location of
#dbg_declare must be a pointer or int"), and with it the whole build -- ``image.resize2d`` over
``?`` dimensions, ``dft`` and ``floor_mod`` did, on TVM's VM too. :func:`for_llvm` substitutes
such values into their uses (after lowering custom datatypes and then TVM's intrinsics, which is
where ``floor_mod``'s let comes from); LLVM's own value numbering finds the common subexpressions again. Kernels printed as
C are not touched: C has no debug declarations, and LLVM's intrinsics cannot be printed as C. The
kernels are then built without lowering them again (``kernels._build_lowered``), so nothing binds
new ones.
"""

from __future__ import annotations

import tvm
from tvm import tir

from . import vector_exp


def _is_float(var: tir.Var) -> bool:
    """Whether LLVM 22 refuses a debug declaration of ``var``: anything but a pointer or an integer."""
    dtype = str(var.dtype)
    return dtype.startswith(("float", "bfloat")) or "x" in dtype  # "int32x6": a vector


def inline_float_lets(func: tir.PrimFunc) -> tir.PrimFunc:
    """``func`` without ``let`` statements or expressions that bind floating-point or vector
    values (module docstring)."""
    found = []
    tir.stmt_functor.post_order_visit(
        func.body, lambda n: found.append(n) if isinstance(n, (tir.LetStmt, tir.Let)) and _is_float(n.var) else None
    )
    if not found:
        return func

    def inline(node):
        if isinstance(node, (tir.LetStmt, tir.Let)) and _is_float(node.var):
            return tir.stmt_functor.substitute(node.body, {node.var: node.value})
        return None

    return func.with_body(tir.stmt_functor.ir_transform(func.body, None, inline, ["tir.LetStmt", "tir.Let"]))


def for_llvm(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Lowered kernels ``mod``, to be built for the LLVM ``target``, with TVM's intrinsics lowered
    for it (float32 ``exp`` in vectors: ``vector_exp``) and the lets LLVM cannot describe
    inlined (module docstring)."""
    funcs = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, tir.PrimFunc):
            func = func if "target" in (func.attrs or {}) else func.with_attr("target", target)
            # Custom datatypes first, as tvm.build's pipeline orders them: LowerIntrin would
            # turn an ``exp`` of a registered custom type into an LLVM intrinsic of that type.
            single = tir.transform.LowerCustomDatatypes()(tvm.IRModule({gvar: func}))
            with vector_exp.building():
                lowered = tir.transform.LowerIntrin()(single)
            func = inline_float_lets(lowered[gvar])
        funcs[gvar] = func
    lowered = tvm.IRModule(funcs)
    return lowered.with_attrs(mod.attrs) if mod.attrs is not None else lowered

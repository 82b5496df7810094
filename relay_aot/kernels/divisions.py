"""Integer divisions by zero in generated kernels become errors instead of ``SIGFPE``.

A TVM kernel over ``?`` dimensions divides by its extents to turn flat loop indices back into
coordinates, and a shape function divides by values it reads (``arange``'s step, the product
that a reshape's ``-1`` is inferred from). An integer division by zero traps and kills the
process. :func:`guard_divisions` puts an assertion before each such division of a lowered
``PrimFunc``, which fails the call with a message -- raised by the generated code as
``KernelError`` -- instead:

* a divisor that depends only on what is known on entry (shape variables, scalar parameters)
  is checked once, at the top of the function;
* with ``everywhere=True`` (shape functions, which run once per call and loop over ranks), every
  other divisor too, just before the statement that divides -- in a kernel that would be a test
  per element, so kernels keep only the checks on entry. Their remaining divisions are by values
  they load (integer ``divide`` of tensors), documented in docs/guarantees.md.
"""

from __future__ import annotations

import tvm
from tvm import tir

_DIVISIONS = (tir.Div, tir.Mod, tir.FloorDiv, tir.FloorMod)

#: The message of a failed check; the generated code names the kernel and its arguments' shapes.
MESSAGE = "division by zero: an extent, step or other divisor of the computation is 0"


def _divisors(expr) -> list[tir.PrimExpr]:
    """Integer divisors in ``expr`` that are not constants."""
    found: list[tir.PrimExpr] = []

    def visit(node):
        if isinstance(node, _DIVISIONS) and node.dtype.startswith(("int", "uint")):
            # vector divisors are by lanes of constants (vectorised loops over static extents)
            if not isinstance(node.b, tir.IntImm) and tvm.DataType(node.b.dtype).lanes == 1:
                found.append(node.b)

    tir.stmt_functor.post_order_visit(tir.Evaluate(expr) if isinstance(expr, tir.PrimExpr) else expr, visit)
    return found


def _loads(expr: tir.PrimExpr) -> bool:
    found = []
    tir.stmt_functor.post_order_visit(
        tir.Evaluate(expr), lambda n: found.append(n) if isinstance(n, tir.BufferLoad) else None
    )
    return bool(found)


def _check(conditions: list[tir.PrimExpr], body: tir.Stmt) -> tir.Stmt:
    """``body`` after an assertion that every one of ``conditions`` (divisor != 0, or the
    division does not run) holds."""
    condition = None
    for c in conditions:
        condition = c if condition is None else tir.And(condition, c)
    return tir.AssertStmt(condition, tir.StringImm(MESSAGE), body)


def _entry_vars(func: tir.PrimFunc) -> set:
    """The variables bound when ``func`` is entered: parameters, buffer shapes and strides."""
    bound = set(func.params)
    for buf in func.buffer_map.values():
        for d in list(buf.shape) + list(buf.strides) + [buf.elem_offset]:
            if isinstance(d, tir.Var):
                bound.add(d)
    return bound


def _known_on_entry(expr: tir.PrimExpr, bound: set) -> bool:
    if _loads(expr):
        return False
    free = tvm.tir.analysis.undefined_vars(expr, [])
    return all(v in bound for v in free)


#: Statements whose own expressions (not their bodies) may divide.
_OWN_EXPRESSIONS = {
    "tir.BufferStore": lambda s: [s.value, *s.indices],
    "tir.LetStmt": lambda s: [s.value],
    "tir.IfThenElse": lambda s: [s.condition],
    "tir.For": lambda s: [s.min, s.extent],
    "tir.Evaluate": lambda s: [s.value],
    "tir.Allocate": lambda s: list(s.extents),
}


def guard_divisions(func: tir.PrimFunc, everywhere: bool = False) -> tir.PrimFunc:
    """``func`` with a check before each integer division by a non-constant (module docstring).

    A divisor checked on entry is checked only where its statement runs: a division inside
    loops whose extents are known on entry may be by zero when one of them is 0 (a tile of an
    empty axis, summed: the sum's loop divides by the empty extent zero times)."""
    bound = _entry_vars(func)
    on_entry: list[tir.PrimExpr] = []
    seen: set = set()
    loops: list[tir.PrimExpr] = []  # the extents of the loops around the statement visited

    def enter(stmt):
        if isinstance(stmt, tir.For):
            loops.append(stmt.extent)
        return None

    def guard(stmt):
        if isinstance(stmt, tir.For):
            loops.pop()  # its own min and extent are computed outside it
        divisors = [d for e in _OWN_EXPRESSIONS[_key(stmt)](stmt) for d in _divisors(e)]
        inner = []
        for d in divisors:
            if _known_on_entry(d, bound):
                condition = tir.NE(d, tir.const(0, d.dtype))
                for extent in loops:
                    if _known_on_entry(extent, bound) and not isinstance(extent, tir.IntImm):
                        condition = tir.Or(condition, tir.EQ(extent, tir.const(0, extent.dtype)))
                key = str(condition)
                if key not in seen:
                    seen.add(key)
                    on_entry.append(condition)
            elif everywhere:
                inner.append(tir.NE(d, tir.const(0, d.dtype)))
        return _check(inner, stmt) if inner else None

    body = tir.stmt_functor.ir_transform(func.body, enter, guard, list(_OWN_EXPRESSIONS))
    if on_entry:
        body = _check(on_entry, body)
    if body.same_as(func.body):
        return func
    return func.with_body(body)


def _key(stmt) -> str:
    return "tir." + type(stmt).__name__


def explicit_asserts(func: tir.PrimFunc, report: str) -> tir.PrimFunc:
    """``func`` with each assertion made a test that passes its message to the function
    ``report`` (``int32_t report(void*)``) and returns -1, as LLVM's code for an assertion does
    with ``TVMAPISetLastError``: TVM's C code generator prints no assertions at all
    (``codegen_c_host.cc``: ``emit_asserts = false``)."""

    def post(node):
        if not isinstance(node, tir.AssertStmt):
            return None
        fail = tir.SeqStmt(
            [
                tir.Evaluate(tir.call_extern("int32", report, node.message)),
                tir.Evaluate(tir.ret(tir.const(-1, "int32"))),
            ]
        )
        return tir.SeqStmt([tir.IfThenElse(tir.Not(node.condition), fail, None), node.body])

    body = tir.stmt_functor.ir_transform(func.body, None, post, ["tir.AssertStmt"])
    return func if body.same_as(func.body) else func.with_body(body)

"""Which values can reach a caller: constants to copy fresh, kernel results never to alias.

A constant tensor lives in the library (C++) or the loaded module (Python) for the life of the
process, and generated code hands out the same ``NDArray`` every time it is evaluated. That is
right for kernel inputs -- kernels never write their inputs -- but a constant that ``main``
returns, or stores in a tuple, ADT, closure or reference, reaches the caller, who may write into
it (``copyfrom``, numpy through DLPack); every later call would then compute with the written
values. So a constant whose value may *escape* is evaluated as a fresh copy, and one used only
by kernels stays shared (a weight passed to an LSTM cell's global on every step is not copied).

A variable escapes when it is returned from its function, stored in a container (tuple, ADT,
closure capture, reference cell), passed to a function value the program cannot see into, or
passed to a parameter that escapes. Parameters' escapes are summarised per function and
iterated to a fixed point over the whole program (functions call each other recursively).

The same facts tell which kernel results never escape: such a result may be the kernel's
input itself when the kernel would only copy it (``kernels/copies.py``), since nothing but
kernels, which never write their inputs, will see it.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import nodes as ir

#: Right-hand sides that store operands where a caller may find them, and those operands.
_STORED = {
    ir.MakeTuple: lambda rhs: rhs.fields,
    ir.MakeAdt: lambda rhs: rhs.fields,
    ir.MakeClosure: lambda rhs: rhs.captures,
    ir.RefNew: lambda rhs: [rhs.value],
    ir.RefWrite: lambda rhs: [rhs.value],
}


def _branches(stmt: ir.Statement) -> list[ir.Block]:
    if isinstance(stmt, ir.If):
        return [stmt.then, stmt.else_]
    if isinstance(stmt, ir.Match):
        return [c.body for c in stmt.clauses]
    return []


def nested_blocks(block: ir.Block) -> Iterator[ir.Block]:
    """``block`` and every block nested in its statements."""
    pending = [block]
    while pending:
        current = pending.pop()
        yield current
        for stmt in current.stmts:
            pending += _branches(stmt)


class _Escapes:
    def __init__(self, program: ir.Program):
        self.functions = {f.id: f for f in program.functions}
        #: function id -> indices of its parameters whose argument may escape
        self.params: dict[str, set[int]] = {f.id: set() for f in program.functions}

    def escaping(self, func: ir.Function) -> set[int]:
        """Ids of the variables of ``func`` whose value may reach a caller."""
        escaped: set[int] = set()
        flows: list[tuple[int, int]] = []  # (source, destination): source escapes if destination does
        if isinstance(func.body.result, ir.Var):
            escaped.add(func.body.result.id)
        for block in nested_blocks(func.body):
            for stmt in block.stmts:
                if isinstance(stmt, ir.Let):
                    self._let(stmt.rhs, escaped)
                elif isinstance(stmt, (ir.If, ir.Match)):
                    for branch in _branches(stmt):
                        if isinstance(branch.result, ir.Var):
                            flows.append((branch.result.id, stmt.result.id))
            if isinstance(block.result, ir.TailCall):
                flows += [(a.id, p.id) for a, p in zip(block.result.args, func.params)]
        changed = True
        while changed:
            changed = False
            for source, destination in flows:
                if destination in escaped and source not in escaped:
                    escaped.add(source)
                    changed = True
        return escaped

    def _let(self, rhs: ir.Rhs, escaped: set[int]) -> None:
        stored = _STORED.get(type(rhs))
        if stored is not None:
            escaped.update(v.id for v in stored(rhs))
        elif isinstance(rhs, ir.CallClosure):
            escaped.update(a.id for a in rhs.args)
        elif isinstance(rhs, (ir.CallGlobal, ir.CallKnown)):
            summary = self.params[rhs.func]
            escaped.update(a.id for i, a in enumerate(rhs.args) if i in summary)

    def solve(self) -> None:
        """Iterate the parameter summaries to their fixed point."""
        changed = True
        while changed:
            changed = False
            for func in self.functions.values():
                escaped = self.escaping(func)
                summary = {i for i, p in enumerate(func.params) if p.id in escaped}
                if summary != self.params[func.id]:
                    self.params[func.id] = summary
                    changed = True


def mark_escapes(program: ir.Program) -> None:
    """Set ``fresh`` on every :class:`ir.Constant` whose value may reach a caller, and
    ``may_alias`` on every :class:`ir.KernelCall` whose result cannot."""
    analysis = _Escapes(program)
    analysis.solve()
    for func in program.functions:
        escaped = analysis.escaping(func)
        for stmt in ir.walk(func.body):
            if isinstance(stmt, ir.Let) and isinstance(stmt.rhs, ir.Constant):
                stmt.rhs.fresh = stmt.var.id in escaped
            elif isinstance(stmt, ir.Let) and isinstance(stmt.rhs, ir.KernelCall):
                stmt.rhs.may_alias = stmt.var.id not in escaped

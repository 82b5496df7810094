"""Where each variable of a function is used for the last time.

Emitters use this to hand a value over instead of copying it: in C++, copying an ``NDArray`` or
``ADT`` into a tuple field, a closure's captures or a call's argument array is an atomic
reference-count increment now and a decrement later, when the local dies; ``std::move`` at the
last use does neither. List-heavy programs do this for every element.

The analysis is the textbook backward liveness pass over the structured IR: a block is walked from
its result backwards; an ``If`` or ``Match`` is live-in with the union of its branches; a
self tail call ends the iteration, so its arguments are last uses (unless one is passed twice).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..dispatch import dispatch
from . import nodes as ir

#: (uid of a Let, Block or TailCall node, variable id) pairs: that node's use of that variable is
#: its last. For a Block the use is the block's result. (Keyed on the nodes' ``uid``, which a
#: copy keeps, not on ``id()``: an emitter that copies a node still finds its facts.)
LastUses = set


def rhs_uses(rhs: ir.Rhs) -> list[ir.Var]:
    """The variables ``rhs`` reads, in order (repeated where it reads one twice)."""
    fields = []
    for value in vars(rhs).values():
        if isinstance(value, ir.Var):
            fields.append(value)
        elif isinstance(value, list):
            fields.extend(v for v in value if isinstance(v, ir.Var))
    return fields


class _Liveness:
    def __init__(self) -> None:
        self.last: LastUses = set()
        self.used: set[int] = set()  # every variable read anywhere
        self._stmts: dict[type, Callable[..., set[int]]] = {ir.Let: self._let, ir.If: self._if, ir.Match: self._match}

    def block(self, block: ir.Block, live_out: set[int]) -> set[int]:
        """Record last uses inside ``block``; return the variables live on entry to it."""
        live = set(live_out)
        if isinstance(block.result, ir.TailCall):
            counts = Counter(a.id for a in block.result.args)
            for a in block.result.args:
                if counts[a.id] == 1:
                    self.last.add((block.result.uid, a.id))
            live = {a.id for a in block.result.args}  # the iteration ends: nothing else survives
            self.used |= live
        else:
            if block.result.id not in live:
                self.last.add((block.uid, block.result.id))
            live.add(block.result.id)
            self.used.add(block.result.id)
        for stmt in reversed(block.stmts):
            live = dispatch(self._stmts, stmt, live, what="statement")
        return live

    def _let(self, stmt: ir.Let, live: set[int]) -> set[int]:
        uses = rhs_uses(stmt.rhs)
        counts = Counter(v.id for v in uses)
        self.used |= counts.keys()
        for v in uses:
            if v.id not in live and counts[v.id] == 1:
                self.last.add((stmt.uid, v.id))
        return (live - {stmt.var.id}) | {v.id for v in uses}

    def _if(self, stmt: ir.If, live: set[int]) -> set[int]:
        after = live - {stmt.result.id}
        inside = self.block(stmt.then, after) | self.block(stmt.else_, after)
        self.used.add(stmt.cond.id)
        return inside | {stmt.cond.id}

    def _match(self, stmt: ir.Match, live: set[int]) -> set[int]:
        after = live - {stmt.result.id}
        inside: set[int] = set()
        for clause in stmt.clauses:
            inside |= self.block(clause.body, after) - {b.var.id for b in clause.binds}
        self.used.add(stmt.scrutinee.id)
        return inside | {stmt.scrutinee.id}


def liveness(func: ir.Function) -> tuple[LastUses, set[int]]:
    """The last uses of variables in ``func``'s body, and the ids of the variables it reads at
    all (a variable bound but never read: an emitter need not materialise the value of an
    effect, say)."""
    analysis = _Liveness()
    analysis.block(func.body, set())
    return analysis.last, analysis.used


def last_uses(func: ir.Function) -> LastUses:
    """The last uses of variables in ``func``'s body."""
    return liveness(func)[0]

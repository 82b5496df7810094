"""Walking Relay programs in the passes: ``let`` chains without recursion, patterns' variables.

A-normal form makes every program a few very long ``let`` chains; a mutator that recursed once
per ``let`` would exhaust Python's stack on them. :class:`ChainMutator` rewrites a chain in a
loop, one binding at a time, each into any number of bindings.
"""

from __future__ import annotations

from tvm import relay


def pattern_vars(pattern) -> list:
    """The variables a ``match`` pattern binds."""
    if isinstance(pattern, relay.PatternVar):
        return [pattern.var]
    if isinstance(pattern, (relay.PatternConstructor, relay.PatternTuple)):
        return [v for p in pattern.patterns for v in pattern_vars(p)]
    return []


class ChainMutator(relay.ExprMutator):
    """An ``ExprMutator`` that rewrites ``let`` chains iteratively, through :meth:`rebind`."""

    def rebind(self, var: relay.Var, value: relay.Expr) -> list:
        """The bindings ``let var = value`` becomes, in order (by default, itself visited)."""
        return [(var, self.visit(value))]

    def visit_let(self, let):
        bindings = []
        while isinstance(let, relay.Let):
            bindings.extend(self.rebind(let.var, let.value))
            let = let.body
        body = self.visit(let)
        for var, value in reversed(bindings):
            body = relay.Let(var, value, body)
        return body

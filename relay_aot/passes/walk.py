"""Walking Relay programs in the passes: ``let`` chains without recursion, patterns' variables.

A-normal form makes every program a few very long ``let`` chains; a mutator that recursed once
per ``let`` would exhaust Python's stack on them. :class:`ChainMutator` rewrites a chain in a
loop, one binding at a time, each into any number of bindings.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relay

from ..recursion import deep_recursion


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


class CallRewriter(relay.ExprMutator):
    """A mutator for :func:`rewrite_functions` that rewrites calls one at a time: each call, its
    arguments rewritten first, goes to :meth:`rewrite_call`; an answer other than None replaces
    it and sets ``changed``."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = False

    def visit_call(self, call):
        new = super().visit_call(call)
        replacement = self.rewrite_call(call, new)
        if replacement is None:
            return new
        self.changed = True
        return replacement

    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        """The replacement of ``call`` (type-checked; ``new`` is it with its arguments
        rewritten), or None to keep ``new``."""
        return None


def rewrite_functions(
    mod: tvm.IRModule, mutator_for: Callable[[relay.Function], relay.ExprMutator | None]
) -> tvm.IRModule:
    """``mod`` with each of its Relay functions visited by ``mutator_for(function)`` (None: left
    alone), type-checked again if any mutator set its ``changed`` (else ``mod`` itself: TVM's
    ``ExprMutator`` rebuilds every node it visits, so a new object does not say). For
    optimisations: a function nested too deep to walk even within :func:`deep_recursion` is
    kept as it is."""
    updated = {}
    for var, func in mod.functions.items():
        mutator = mutator_for(func) if isinstance(func, relay.Function) else None
        if mutator is None:
            continue
        try:
            with deep_recursion():
                new = mutator.visit(func)
        except RecursionError:
            continue
        if mutator.changed:
            updated[var] = new
    if not updated:
        return mod
    mod = tvm.IRModule(dict(mod.functions), mod.type_definitions, mod.attrs)
    for var, func in updated.items():
        mod[var] = func
    return relay.transform.InferType()(mod)


def op_name(expr: relay.Expr) -> str | None:
    """The name of the operator ``expr`` calls, or None (not a call, or a call of a function)."""
    if isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def nodes_where(expr: relay.Expr, wanted: Callable[[relay.Expr], bool]) -> list:
    """The nodes of ``expr`` (each once, in post-order) for which ``wanted`` holds."""
    found: list = []
    relay.analysis.post_order_visit(expr, lambda node: found.append(node) if wanted(node) else None)
    return found


def operator_calls(mod: tvm.IRModule) -> list:
    """The calls of operators (not of functions) in each Relay function of ``mod``, in
    post-order, each node once per function."""
    return [
        node
        for func in mod.functions.values()
        if isinstance(func, relay.Function)
        for node in nodes_where(func, lambda node: op_name(node) is not None)
    ]


def calls_any(func: relay.Function, operators: set) -> bool:
    """Whether ``func`` calls any of the ``operators`` (by name): a cheap test before a rewrite."""
    found = False

    def visit(node):
        nonlocal found
        found = found or op_name(node) in operators

    relay.analysis.post_order_visit(func, visit)
    return found

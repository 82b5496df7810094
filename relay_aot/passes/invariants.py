"""Loop invariants computed once: tensor work inside a repeatedly called function that depends
only on values bound outside it moves out, in front of the function.

Relay has no loops: a loop is a recursive function, and a loop body a function it calls. Work
in the body that depends only on values from outside -- a weight transposed or packed for a
product at every step, as Relay's gradient of ``nn.dense`` writes it inside each step's
backpropagator -- runs once per call. ``FuseOps`` and ``FoldConstant`` cannot help: the values
are not constants, and fusion never crosses a function boundary.

:func:`hoist` finds, inside each ``let``-bound function that is *called repeatedly* (recursive,
or called by name from within a function called repeatedly), the largest subexpressions made
only of operator calls, tuples, projections, constants and variables bound outside it (directly,
or through ``let``s inside it of such expressions), that contain an operator call; each is bound
by a new ``let`` just before the function's, and the function refers to that variable instead.
The function's closure then captures the result in place of the operands.

What moves is only what cannot fail or differ when run early or when the function is never
called: operators of static tensor types that are pure tensor maps (TVM's fusion patterns up to
``kOutEWiseFusable``), and not those that index with data (``take``, ``gather``, scatters) or
divide integers. It runs once per evaluation of the function's ``let`` instead of once per
call: the loop's calls have to outnumber the ``let``'s evaluations for that to pay, which is
what *called repeatedly* tests -- statically, so a recursive function whose recursion is never
taken pays the work once, where it would have paid it once in its only call.
"""

from __future__ import annotations

from collections import defaultdict

import tvm
from tvm import relay

from ..recursion import deep_recursion
from .gradient_cleanup import static_tensor
from .walk import ChainMutator, nodes_where, pattern_vars

#: Operators that index with their data (reading where the data says) or may trap (integer
#: division): they stay where the program put them.
_DATA_INDEXED = frozenset(
    {
        "take",
        "gather",
        "gather_nd",
        "adv_index",
        "scatter_elements",
        "scatter_nd",
        "scatter_add",
        "sparse_to_dense",
        "one_hot",
        "searchsorted",
        "unravel_index",
    }
)
_INTEGER_TRAPS = frozenset({"divide", "floor_divide", "trunc_divide", "mod", "floor_mod", "trunc_mod"})
_OUT_EWISE_FUSABLE = 4  # relay.op.OpPattern.OUT_ELEMWISE_FUSABLE


def _static(ty: relay.Type) -> bool:
    if isinstance(ty, relay.TupleType):
        return all(_static(field) for field in ty.fields)
    return static_tensor(ty)


def _movable_op(call: relay.Call) -> bool:
    """Whether the operator call may run early, or for nothing (see the module docstring)."""
    op = call.op
    if not isinstance(op, tvm.ir.Op) or op.name in _DATA_INDEXED or op.name.startswith("dyn."):
        return False
    pattern = op.get_attr("TOpPattern")
    if pattern is None or int(pattern) > _OUT_EWISE_FUSABLE:
        return False
    if not (_static(call.checked_type) and all(_static(arg.checked_type) for arg in call.args)):
        return False
    if op.name in _INTEGER_TRAPS and not call.checked_type.dtype.startswith("float"):
        return False
    return True


class _Functions(relay.ExprVisitor):
    """The ``let``-bound functions of a function, and which of them are called repeatedly."""

    def __init__(self):
        super().__init__()
        self.functions: dict[relay.Var, relay.Function] = {}
        self._stack: list = []  # the let-bound functions enclosing the current point
        self._calls: dict = defaultdict(list)  # callee -> the stacks of its call sites

    def visit_let(self, let):
        while isinstance(let, relay.Let):  # iterative: A-normal form chains are long
            if isinstance(let.value, relay.Function):
                self.functions[let.var] = let.value
                self._stack.append(let.var)
                self.visit(let.value)
                self._stack.pop()
            else:
                self.visit(let.value)
            let = let.body
        self.visit(let)

    def visit_call(self, call):
        if isinstance(call.op, relay.Var):
            self._calls[call.op].append(tuple(self._stack))
        super().visit_call(call)

    def repeated(self) -> set:
        """Functions on a cycle of calls, and those called from inside a repeated one."""
        callees = defaultdict(set)  # caller -> callees, the caller being the innermost function
        for callee, stacks in self._calls.items():
            for stack in stacks:
                if stack:
                    callees[stack[-1]].add(callee)

        def reaches(start, goal) -> bool:
            seen, work = set(), [start]
            while work:
                for callee in callees[work.pop()]:
                    if callee.same_as(goal):
                        return True
                    if callee not in seen:
                        seen.add(callee)
                        work.append(callee)
            return False

        repeated = {f for f in self.functions if reaches(f, f)}
        changed = True
        while changed:
            changed = False
            for f in self.functions:
                if f not in repeated and any(set(stack) & repeated for stack in self._calls.get(f, [])):
                    repeated.add(f)
                    changed = True
        return repeated


class _Bound(relay.ExprVisitor):
    """Variables bound inside a function (parameters, ``let``s, patterns, at any depth), and
    the values of its ``let``s."""

    def __init__(self, func: relay.Function):
        super().__init__()
        self.inner: set = set(func.params)
        self.values: dict = {}
        self.visit(func.body)

    def visit_function(self, fn):
        self.inner.update(fn.params)
        super().visit_function(fn)

    def visit_let(self, let):
        while isinstance(let, relay.Let):
            self.inner.add(let.var)
            self.values[let.var] = let.value
            self.visit(let.value)
            let = let.body
        self.visit(let)

    def visit_match(self, match):
        for clause in match.clauses:
            self.inner.update(pattern_vars(clause.lhs))
        super().visit_match(match)


class _HoistOut(relay.ExprMutator):
    """Replace the invariant subexpressions of one function by new variables (see :func:`hoist`)."""

    def __init__(self, func: relay.Function):
        super().__init__()
        self.bound = _Bound(func)
        self.hoisted: list = []  # (var, expression over outer variables), in order
        self._invariant: dict = {}

    def invariant(self, expr) -> bool:
        if expr in self._invariant:
            return self._invariant[expr]
        self._invariant[expr] = False  # a cycle through a recursive let is not invariant
        if isinstance(expr, relay.Constant):
            result = True
        elif isinstance(expr, relay.Var):
            value = self.bound.values.get(expr)
            result = expr not in self.bound.inner or (value is not None and self.invariant(value))
        elif isinstance(expr, relay.Call):
            result = _movable_op(expr) and all(self.invariant(arg) for arg in expr.args)
        elif isinstance(expr, relay.Tuple):
            result = all(self.invariant(field) for field in expr.fields)
        elif isinstance(expr, relay.TupleGetItem):
            result = self.invariant(expr.tuple_value)
        else:
            result = False
        self._invariant[expr] = result
        return result

    def _outside(self, expr):
        """``expr`` over variables bound outside the function (the inner ``let``s substituted)."""
        inner = {
            v: self._outside(self.bound.values[v]) for v in relay.analysis.free_vars(expr) if v in self.bound.inner
        }
        return relay.bind(expr, inner) if inner else expr

    def visit(self, expr):
        # invariant first (memoized): looking for an operator call walks the whole subexpression
        if (
            isinstance(expr, (relay.Call, relay.Tuple, relay.TupleGetItem))
            and self.invariant(expr)
            and (isinstance(expr, relay.Call) or _calls_an_op(expr))
        ):
            if expr not in self.memo_map:
                var = relay.var(f"invariant{len(self.hoisted)}", type_annotation=expr.checked_type)
                self.hoisted.append((var, self._outside(expr)))
                self.memo_map[expr] = var
            return self.memo_map[expr]
        return super().visit(expr)


def _calls_an_op(expr) -> bool:
    return bool(nodes_where(expr, lambda n: isinstance(n, relay.Call)))


class _Hoist(ChainMutator):
    def __init__(self, repeated: set):
        super().__init__()
        self.repeated = repeated
        self.count = 0

    def rebind(self, var, value):
        if not (isinstance(value, relay.Function) and var in self.repeated):
            return super().rebind(var, value)
        out = _HoistOut(value)
        body = out.visit(value.body)
        if not out.hoisted:
            return super().rebind(var, value)
        self.count += len(out.hoisted)
        value = relay.Function(value.params, body, value.ret_type, value.type_params, value.attrs)
        return [(v, self.visit(expr)) for v, expr in out.hoisted] + [(var, self.visit(value))]


def _loops(func) -> set:
    """The repeatedly called functions of a global function (none if it is not one, is
    primitive, or is too deeply nested to walk)."""
    if not isinstance(func, relay.Function) or (func.attrs and "Primitive" in func.attrs.keys()):
        return set()
    try:
        with deep_recursion():
            functions = _Functions()
            functions.visit(func)
            return functions.repeated()
    except RecursionError:
        return set()


def hoist(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with the invariants of its repeatedly called functions moved out (see the module
    docstring); type-checked. A function too deeply nested to walk is left as it is."""
    # a module without loops (most static models) is returned without a type inference
    names = [g.name_hint for g, f in mod.functions.items() if _loops(f)]
    if not names:
        return mod
    mod = relay.transform.InferType()(mod)  # the rewrite reads types; loops found again in it
    updates = {}
    for name in names:
        try:
            with deep_recursion():
                hoisting = _Hoist(_loops(mod[name]))
                new = hoisting.visit(mod[name])
        except RecursionError:
            continue
        if hoisting.count:
            updates[name] = new
    for name, func in updates.items():
        mod[name] = func
    return relay.transform.InferType()(mod) if updates else mod

"""Removing the work Relay's higher-order gradient does for nothing.

``relay.transform.gradient(..., mode="higher_order")`` pairs *every* value with a reference
that accumulates its gradient, and extends the backpropagator for every operator call. Much
of that is never observed: the gradient of a constant (the data bound by ``params=``), of an
integer literal, of an index. Computing it is not free: in an MLP, the gradient of the input
batch is a transpose of the first weight matrix and a product with it; in an LSTM over a list
of inputs bound as a constant, a loop that scatters each step's gradient into a zeroed copy of
the whole input. Neither TVM's ``DeadCodeElimination`` nor its ``FoldConstant`` removes it,
because the dead computation ends in a write to a reference.

:func:`cleanup` is a purely local analysis on the A-normal form of the function:

* a **dead cell** is a reference created by a ``let`` whose every use is known -- through
  variables, tuples and projections, also inside closures, and through the parameters of
  let-bound functions that are only ever called (with every cell passed for that parameter
  anywhere, as one group) -- and whose reads flow, through operator calls, tuples and
  projections only, into writes to the same cells: nothing outside ever sees their contents. Its writes become ``()``, and a cell created holding
  ``zeros_like(%x)`` is created holding ``%x`` (never read, its contents do not matter), so
  that the ``zeros_like`` kernel goes too;
* then **dead bindings** go: a ``let`` whose variable is unused and whose value has no effect
  (operator calls, tuples, projections, functions, reference creation and reads, calls of
  let-bound functions that write no reference and call only such functions). A dropped call
  of a pure function that would not terminate now terminates: the usual licence of dead-code
  elimination;
* ``collapse_sum_like(%x, %y)`` where both have the same static type is ``%x`` (the gradients
  of ``nn.dense``, ``add`` and ``multiply`` emit it for every argument, broadcast or not), and
  ``strided_set`` into zeros with constant bounds and unit strides is ``nn.pad``;
* a projection of a tuple literal is its field;
* a closure ``fn () { %p() }`` is ``%p`` (the backpropagator step of a value whose gradient is
  dead only calls the previous step), and ``ref_write(%r, %a)`` right after ``%a =
  ref_read(%r)``, with nothing in between that can write a cell, is ``()``: the step is not
  added to the backpropagator at all;
* last, ``zeros_like(%x)`` of a static type is a constant (one per type): every live cell
  starts at zero, and a kernel call that fills a new tensor with zeros costs a call and an
  allocation per cell and step, where a constant costs neither (tensors are immutable; a
  constant that reaches the caller is copied there, like any other).

What a function returns, and every effect it can have on what it returns, is unchanged: a
cell that escapes (passed to a call, returned, stored in a constructor or another cell) is
left alone.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import tvm
from tvm import relay

def static_tensor(ty: relay.Type) -> bool:
    """Whether ``ty`` is a tensor type with every extent known (no ``?``); the passes' one test."""
    return isinstance(ty, relay.TensorType) and all(isinstance(d, tvm.tir.IntImm) for d in ty.shape)


def _same_static_type(a: relay.Type, b: relay.Type) -> bool:
    return static_tensor(a) and static_tensor(b) and tvm.ir.structural_equal(a, b)


class _IdentityCollapseSums(relay.ExprMutator):
    """``collapse_sum_like(%x, %y)`` with equal static types becomes ``%x``."""

    def visit_call(self, call):
        new = super().visit_call(call)
        if (
            isinstance(call.op, tvm.ir.Op)
            and call.op.name == "collapse_sum_like"
            and _same_static_type(call.args[0].checked_type, call.args[1].checked_type)
        ):
            return new.args[0]
        return new


class _ZerosAsConstants(relay.ExprMutator):
    """``zeros_like(%x)`` with a static type becomes a zero constant, shared by equal types."""

    def __init__(self):
        super().__init__()
        self._zeros: dict[tuple, relay.Constant] = {}

    def visit_call(self, call):
        new = super().visit_call(call)
        ty = call.checked_type
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "zeros_like" and static_tensor(ty):
            key = (tuple(int(d) for d in ty.shape), ty.dtype)
            if key not in self._zeros:
                self._zeros[key] = relay.const(np.zeros(key[0], key[1]), key[1])  # else float64 becomes float32
            return self._zeros[key]
        return new


class _Uses:
    """Every let binding of a function in A-normal form, and every use of every variable.

    A use is ``(let_var, value)`` when the variable is a direct operand of the value bound to
    ``let_var`` (a call's callee or argument, a tuple field, a projection's tuple, a reference
    operation's operand, or the whole value); ``(None, expr)`` for any other occurrence (a
    function's or branch's result, an ``if`` condition, a ``match`` scrutinee).
    """

    def __init__(self, func: relay.Function):
        self.binding: dict[relay.Var, relay.Expr] = {}
        self.uses: dict[relay.Var, list] = defaultdict(list)
        self.param_of: dict[relay.Var, tuple] = {}  # parameter of a let-bound function -> (its var, index)
        self._expr(func.body)

    def _expr(self, expr):
        while isinstance(expr, relay.Let):  # iterative: A-normal form chains are long
            self.binding[expr.var] = expr.value
            if isinstance(expr.value, relay.Function):
                for k, param in enumerate(expr.value.params):
                    self.param_of[param] = (expr.var, k)
            self._value(expr.var, expr.value)
            expr = expr.body
        self._value(None, expr)

    def _operand(self, owner, value, operand):
        if isinstance(operand, relay.Var):
            self.uses[operand].append((owner, value))
        elif isinstance(operand, (relay.Constant, relay.GlobalVar, tvm.ir.Op, relay.Constructor)):
            pass
        else:  # not A-normal form here: a nested expression, whose operands escape
            self._value(None, operand)

    def _value(self, owner, value):
        if isinstance(value, relay.Var):
            self.uses[value].append((owner, value))
        elif isinstance(value, relay.Call):
            self._operand(owner, value, value.op)
            for arg in value.args:
                self._operand(owner, value, arg)
        elif isinstance(value, relay.Tuple):
            for field in value.fields:
                self._operand(owner, value, field)
        elif isinstance(value, relay.TupleGetItem):
            self._operand(owner, value, value.tuple_value)
        elif isinstance(value, relay.RefCreate):
            self._operand(owner, value, value.value)
        elif isinstance(value, relay.RefRead):
            self._operand(owner, value, value.ref)
        elif isinstance(value, relay.RefWrite):
            self._operand(owner, value, value.ref)
            self._operand(owner, value, value.value)
        elif isinstance(value, relay.Function):
            self._expr(value.body)
        elif isinstance(value, relay.If):
            self._operand(None, value, value.cond)
            self._expr(value.true_branch)
            self._expr(value.false_branch)
        elif isinstance(value, relay.Match):
            self._operand(None, value, value.data)
            for clause in value.clauses:
                self._expr(clause.rhs)
        elif isinstance(value, relay.Let):
            self._expr(value)


def _known_function(fn: relay.Var, uses: _Uses) -> bool:
    """Whether ``fn`` is bound to a function and only ever called (never passed or returned):
    every argument its parameters can hold is then one of its call sites' arguments."""
    if not isinstance(uses.binding.get(fn), relay.Function):
        return False
    return all(
        owner is not None and isinstance(user, relay.Call) and user.op.same_as(fn)
        and not any(a.same_as(fn) for a in user.args)
        for owner, user in uses.uses.get(fn, [])
    )


def _cell_accesses(cell: relay.Var, uses: _Uses):
    """``(aliases, reads, writes, cells)`` of the cell bound to ``cell`` and of every cell that
    shares a function parameter with it, or None if one of them escapes.

    Aliases are the variables that hold one of the cells; reads and writes are the let
    variables bound to ``ref_read`` / ``ref_write`` of an alias. A cell (or a tuple holding it)
    passed to a function that is only ever called makes that parameter an alias (a holder):
    then every argument passed there, at every call site, must be a cell of the group too --
    a tuple literal holding a cell made by a ``let``, or another such parameter.
    """
    aliases, holders, reads, writes, cells = set(), {}, [], [], set()
    work: list = []  # (var, indices): the var holds a cell (indices None) or a tuple of them

    def add(var, indices, known: bool = False) -> bool:
        """Make ``var`` part of the group; False if it may hold something else. ``known``: it
        was reached from the group (a copy, a projection, a parameter at a call site of it)."""
        if indices is None:
            if var in aliases:
                return True
            value = uses.binding.get(var)
            if isinstance(value, relay.RefCreate):
                cells.add(var)
            elif isinstance(value, relay.Var) and not known:
                if not add(value, None):
                    return False
            elif not known and var not in uses.param_of:
                return False
            aliases.add(var)
        else:
            if indices <= holders.get(var, set()):
                return True
            value = uses.binding.get(var)
            if isinstance(value, relay.Tuple) and not known:
                if not all(isinstance(value.fields[i], relay.Var) and add(value.fields[i], None) for i in indices):
                    return False
            elif isinstance(value, relay.Var) and not known:
                if not add(value, indices):
                    return False
            elif not known and var not in uses.param_of:
                return False
            holders[var] = holders.get(var, set()) | indices
        if var in uses.param_of:  # every argument passed for it joins the group
            fn, k = uses.param_of[var]
            if not _known_function(fn, uses):
                return False
            for owner, call in uses.uses.get(fn, []):
                arg = call.args[k]
                if not (isinstance(arg, relay.Var) and add(arg, indices)):
                    return False
        work.append((var, indices))
        return True

    def passed(var, indices, owner, user) -> bool:
        """``var`` is an argument of ``user``: fine if the callee is a known function."""
        if not (isinstance(user.op, relay.Var) and _known_function(user.op, uses)):
            return False
        params = uses.binding[user.op].params
        return all(add(params[k], indices, known=True) for k, a in enumerate(user.args) if a.same_as(var))

    if not add(cell, None, known=True):
        return None
    done = set()
    while work:
        var, indices = work.pop()
        if (var, None if indices is None else frozenset(indices)) in done:
            continue
        done.add((var, None if indices is None else frozenset(indices)))
        for owner, user in uses.uses.get(var, []):
            if owner is None:
                return None
            if isinstance(user, relay.Call) and not user.op.same_as(var):
                if not passed(var, indices, owner, user):
                    return None
            elif indices is not None:  # a tuple holding cells
                if isinstance(user, relay.Var):
                    if not add(owner, indices, known=True):
                        return None
                elif isinstance(user, relay.TupleGetItem):
                    if user.index in indices and not add(owner, None, known=True):
                        return None
                else:
                    return None
            elif isinstance(user, relay.Var):
                if not add(owner, None, known=True):
                    return None
            elif isinstance(user, relay.RefRead):
                reads.append(owner)
            elif isinstance(user, relay.RefWrite) and user.ref.same_as(var) and not user.value.same_as(var):
                writes.append(owner)
            elif isinstance(user, relay.Tuple):
                if not add(owner, {i for i, f in enumerate(user.fields) if f.same_as(var)}, known=True):
                    return None
            else:
                return None
    return aliases, reads, writes, cells


def _only_feeds_itself(aliases: set, reads: list, uses: _Uses) -> bool:
    """Whether the values read from the cell reach nothing but writes to the same cell."""
    seen = set(reads)
    work = list(reads)
    while work:
        value = work.pop()
        for owner, user in uses.uses.get(value, []):
            if owner is None:
                return False
            if isinstance(user, relay.RefWrite):
                if not (user.value.same_as(value) and user.ref in aliases):
                    return False
            elif isinstance(user, (relay.Var, relay.Tuple, relay.TupleGetItem)) or (
                isinstance(user, relay.Call) and isinstance(user.op, tvm.ir.Op)
            ):
                if owner not in seen:
                    seen.add(owner)
                    work.append(owner)
            else:
                return False
    return True


class _Rebind(relay.ExprMutator):
    """Replace the values bound to some let variables."""

    def __init__(self, values: dict):
        super().__init__()
        self.values = values

    def visit_let(self, let):
        bindings = []
        while isinstance(let, relay.Let):
            value = self.values.get(let.var, let.value)
            bindings.append((let.var, self.visit(value)))
            let = let.body
        body = self.visit(let)
        for var, value in reversed(bindings):
            body = relay.Let(var, value, body)
        return body


def _tuple_literal(var, uses: _Uses):
    """The tuple literal bound to ``var`` (through variables bound to variables), or None."""
    seen = set()
    value = uses.binding.get(var)
    while isinstance(value, relay.Var) and value not in seen:
        seen.add(value)
        value = uses.binding.get(value)
    return value if isinstance(value, relay.Tuple) else None


def _constant_ints(expr, uses: _Uses):
    """The values of an int constant (or a variable bound to one) as a list, else None."""
    if isinstance(expr, relay.Var):
        expr = uses.binding.get(expr)
    if not isinstance(expr, relay.Constant) or expr.data.dtype not in ("int32", "int64"):
        return None
    return [int(v) for v in expr.data.numpy().reshape(-1)]


def _zero_pad(value: relay.Call, uses: _Uses):
    """``strided_set(zeros_like(%x), %v, begin, end, strides)`` -- the gradient of
    ``strided_slice`` -- as ``nn.pad(%v, ...)`` when the slice is a static box with unit strides:
    the same tensor, made by one injective kernel that fuses with the accumulation after it,
    where strided_set with tensor bounds computes every element's index at run time."""
    data, update, begin, end, strides = value.args
    made = uses.binding.get(data) if isinstance(data, relay.Var) else None
    if not (isinstance(made, relay.Call) and isinstance(made.op, tvm.ir.Op) and made.op.name in ("zeros_like", "zeros")):
        return None
    out, piece = value.checked_type, update.checked_type
    if not (static_tensor(out) and static_tensor(piece)) or out.dtype != piece.dtype:
        return None
    dims, extents = [int(d) for d in out.shape], [int(d) for d in piece.shape]
    begin, end, strides = (_constant_ints(e, uses) for e in (begin, end, strides))
    if begin is None or end is None or strides is None or len(dims) != len(extents):
        return None
    if not (len(begin) == len(end) == len(dims) and all(s == 1 for s in strides)):
        return None
    if not all(0 <= b <= e <= d and e - b == n for b, e, d, n in zip(begin, end, dims, extents)):
        return None
    return relay.nn.pad(update, [(b, d - e) for b, e, d in zip(begin, end, dims)])


def _resolve(var, uses: _Uses):
    """The variable ``var`` is a copy of (through ``let %a = %b`` bindings), or ``var``."""
    seen = set()
    while isinstance(uses.binding.get(var), relay.Var) and var not in seen:
        seen.add(var)
        var = uses.binding[var]
    return var


def _forwarder(var, fn: relay.Function):
    """``%p`` if ``fn`` is ``fn () { %p() }`` (up to copies of the result), else None: the
    backpropagator step of a value whose gradient is dead, which only calls the previous one."""
    if fn.params or fn.type_params or (fn.attrs is not None and len(fn.attrs.keys()) > 0):
        return None
    body = fn.body
    if not isinstance(body, relay.Let):
        return None
    call, result = body.value, body.var
    if not (isinstance(call, relay.Call) and isinstance(call.op, relay.Var) and not call.args):
        return None
    body = body.body
    while isinstance(body, relay.Let) and isinstance(body.value, relay.Var) and body.value.same_as(result):
        result, body = body.var, body.body
    if not (isinstance(body, relay.Var) and body.same_as(result)) or call.op.same_as(var):
        return None
    return call.op


class _WriteBacks(relay.ExprVisitor):
    """``ref_write(%r, %a)`` where ``%a = ref_read(%r)`` earlier in the same ``let`` chain, with
    nothing in between that can write a cell: the write changes nothing."""

    def __init__(self, uses: _Uses, pure_functions: set):
        super().__init__()
        self.uses = uses
        self.pure_functions = pure_functions
        self.noops: list = []

    def visit_let(self, let):
        last_read: dict = {}
        while isinstance(let, relay.Let):
            value = let.value
            self.visit(value)
            if isinstance(value, relay.RefRead) and isinstance(value.ref, relay.Var):
                last_read[_resolve(value.ref, self.uses)] = let.var
            elif isinstance(value, relay.RefWrite) and isinstance(value.ref, relay.Var) and isinstance(
                value.value, relay.Var
            ) and last_read.get(_resolve(value.ref, self.uses)) is not None and _resolve(
                value.value, self.uses
            ).same_as(last_read[_resolve(value.ref, self.uses)]):
                self.noops.append(let.var)
            elif not isinstance(value, relay.Function) and not _effect_free(value, self.pure_functions):
                last_read.clear()
            let = let.body
        self.visit(let)


def _drop_dead_cells(func: relay.Function) -> tuple[relay.Function, int]:
    """Forward projections of tuple literals, pad for zero-based strided_sets, empty the writes
    of dead cells. Returns the function and how many bindings changed."""
    uses = _Uses(func)
    values: dict = {}
    changed = 0
    for var, value in uses.binding.items():
        # ``%t.i`` of a tuple literal is its field: the field is in scope wherever the tuple is,
        # and a tuple whose fields are all read this way (a value paired with a dead cell) goes.
        if isinstance(value, relay.TupleGetItem) and isinstance(value.tuple_value, relay.Var):
            literal = _tuple_literal(value.tuple_value, uses)
            field = None if literal is None else literal.fields[value.index]
            if isinstance(field, relay.Var):
                values[var] = field
                changed += 1
        if isinstance(value, relay.Function):
            target = _forwarder(var, value)
            if target is not None:
                values[var] = target
                changed += 1
        if isinstance(value, relay.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "strided_set":
            pad = _zero_pad(value, uses)
            if pad is not None:
                values[var] = pad
                changed += 1
    for var, value in uses.binding.items():
        if not isinstance(value, relay.RefCreate):
            continue
        if var in values:
            continue  # dead already, with the group of an earlier cell
        found = _cell_accesses(var, uses)
        if found is None:
            continue
        aliases, reads, writes, cells = found
        if not _only_feeds_itself(aliases, reads, uses):
            continue
        for write in writes:
            values[write] = relay.Tuple([])  # a fresh node each: a shared one would be bound once, outside
        for member in cells:
            init = uses.binding[member].value
            made = uses.binding.get(init) if isinstance(init, relay.Var) else None
            if (
                isinstance(made, relay.Call)
                and isinstance(made.op, tvm.ir.Op)
                and made.op.name == "zeros_like"
                and isinstance(made.args[0], (relay.Var, relay.Constant))
            ):
                values[member] = relay.RefCreate(made.args[0])
            else:
                values[member] = uses.binding[member]
        changed += bool(writes) or any(not values[m].same_as(uses.binding[m]) for m in cells)
    write_backs = _WriteBacks(uses, _pure_functions(uses))
    write_backs.visit(func.body)
    for var in write_backs.noops:
        if var not in values:
            values[var] = relay.Tuple([])
            changed += 1
    if not changed:
        return func, 0
    return relay.Function(func.params, _Rebind(values).visit(func.body), func.ret_type, func.type_params,
                          func.attrs), changed


def _effect_free(expr: relay.Expr, pure_functions: set) -> bool:
    """No reference write and no call of anything but operators, constructors and pure functions."""
    clean = True

    def visit(node):
        nonlocal clean
        if isinstance(node, relay.RefWrite):
            clean = False
        elif isinstance(node, relay.Call):
            callee = node.op
            if not (isinstance(callee, (tvm.ir.Op, relay.Constructor)) or callee in pure_functions):
                clean = False

    relay.analysis.post_order_visit(expr, visit)
    return clean


def _pure_functions(uses: _Uses) -> set:
    """Let-bound functions (and variables bound to them) whose calls have no effect."""

    def resolve(var):
        seen = set()
        while var in uses.binding and isinstance(uses.binding[var], relay.Var) and var not in seen:
            seen.add(var)
            var = uses.binding[var]
        return var

    functions = {v for v, value in uses.binding.items() if isinstance(value, relay.Function)}
    pure = set(functions)
    changed = True
    while changed:  # optimistic: a recursive function is pure unless something else is not
        changed = False
        names = pure | {v for v in uses.binding if resolve(v) in pure}
        for var in list(pure):
            if not _effect_free(uses.binding[var].body, names):
                pure.discard(var)
                changed = True
    return pure | {v for v in uses.binding if resolve(v) in pure}


class _DeadBindings(relay.ExprMutator):
    """Drop ``let``s whose variable is unused and whose value has no effect."""

    def __init__(self, pure_functions: set):
        super().__init__()
        self.pure_functions = pure_functions
        self.dropped = 0

    def _droppable(self, value) -> bool:
        if isinstance(value, relay.Function):
            return True
        if isinstance(value, (relay.Var, relay.Constant, relay.Tuple, relay.TupleGetItem, relay.RefCreate,
                              relay.RefRead, relay.Call, relay.If, relay.Match, relay.Let)):
            return _effect_free(value, self.pure_functions)
        return False

    def visit_let(self, let):
        bindings = []
        while isinstance(let, relay.Let):
            bindings.append((let.var, let.value))
            let = let.body
        body = self.visit(let)
        used = set(relay.analysis.free_vars(body))
        kept = []
        for var, value in reversed(bindings):
            if var not in used and self._droppable(value):
                self.dropped += 1
                continue
            value = self.visit(value)
            used.update(relay.analysis.free_vars(value))
            kept.append((var, value))
        for var, value in kept:
            body = relay.Let(var, value, body)
        return body


def cleanup(mod: tvm.IRModule, name: str = "main") -> tvm.IRModule:
    """``mod`` with the gradient's unobserved work removed from ``mod[name]`` (see the module
    docstring); type-checked. The values the function returns are unchanged."""
    mod = relay.transform.InferType()(mod)
    func = mod[name]
    func = relay.Function(func.params, _IdentityCollapseSums().visit(func.body), func.ret_type, func.type_params,
                          func.attrs)
    mod[name] = func
    mod = relay.transform.ToANormalForm()(mod)
    func = mod[name]
    for _ in range(6):  # a cell's writes gone can leave another cell's reads unobserved
        mod[name] = func
        func = relay.transform.InferType()(mod)[name]  # the rules read the types of new nodes
        func, changed = _drop_dead_cells(func)
        dce = _DeadBindings(_pure_functions(_Uses(func)))
        func = relay.Function(func.params, dce.visit(func.body), func.ret_type, func.type_params, func.attrs)
        if not changed and not dce.dropped:
            break
    mod[name] = relay.Function(func.params, _ZerosAsConstants().visit(func.body), func.ret_type, func.type_params,
                               func.attrs)
    return relay.transform.InferType()(mod)

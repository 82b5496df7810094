"""Removing the work Relay's higher-order gradient does for nothing.

``relay.transform.gradient(..., mode="higher_order")`` pairs *every* value with a reference
that accumulates its gradient, and extends the backpropagator for every operator call. Much
of that is never observed: the gradient of a constant (the data bound by ``params=``), of an
integer literal, of an index. Computing it is not free: in an MLP, the gradient of the input
batch is a transpose of the first weight matrix and a product with it; in an LSTM over a list
of inputs bound as a constant, a loop that scatters each step's gradient into a zeroed copy of
the whole input. Neither TVM's ``DeadCodeElimination`` nor its ``FoldConstant`` removes it,
because the dead computation ends in a write to a reference.

:func:`cleanup` works on the A-normal form of the function, in rounds (at most 12) until nothing
changes:

* a **dead cell** is a reference nothing outside its own writes observes. Which cells each
  variable may hold comes from a points-to analysis of the whole function (:class:`_PointsTo`):
  cells are followed through tuples, constructors and ``match``, closures, calls and their
  results, and other cells. A group of cells is dead when none escapes (to the result, to a
  global function, into an unknown cell) and every read that may read one of them feeds,
  through operator calls, tuples and projections only, writes into the group. Its writes
  become ``()``, and a cell created holding ``zeros_like(%x)`` is created holding ``%x`` (never
  read, its contents do not matter), so that the ``zeros_like`` kernel goes too. The
  gradient of data bound as a constant is such a group, also when it travels in a list;
* **known contents** (:class:`_Contents`): along a ``let`` chain, a read of a cell whose
  contents are known there (from its creation, a write or a read, with no write into a cell
  that may be the same and no call in between) is those contents; a write of what the cell
  already holds is ``()``, and so is a write that another replaces before anything may read;
* a function without parameters **called once** (and used for nothing else) is inlined at
  its call. Together with known contents this undoes the backpropagator's indirection: each
  step of it read the chain built so far from a cell and stored a closure calling it, so once
  those reads are known, each step is called once, by the next, and the steps of one forward
  call become one closure, in which the cells between steps are plain values;
* then **dead bindings** go: a ``let`` whose variable is unused and whose value has no effect
  (operator calls, tuples, projections, functions, reference creation and reads, calls of
  let-bound functions that write no reference and call only such functions). A dropped call
  of a pure function that would not terminate now terminates: the usual licence of dead-code
  elimination;
* ``collapse_sum_like(%x, %y)`` where both have the same static type is ``%x`` (the gradients
  of ``nn.dense``, ``add`` and ``multiply`` emit it for every argument, broadcast or not), and
  ``strided_set`` into zeros with constant bounds and unit strides is ``nn.pad``;
* a projection of a tuple literal is its field, and a closure ``fn () { %p() }`` is ``%p``
  (the backpropagator step of a value whose gradient is dead only calls the previous one);
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

from .walk import ChainMutator, pattern_vars


def static_tensor(ty: relay.Type) -> bool:
    """Whether ``ty`` is a tensor type with every extent known (no ``?``); the passes' one test."""
    return isinstance(ty, relay.TensorType) and all(isinstance(d, tvm.tir.IntImm) for d in ty.shape)


def static_extents(shape) -> list[int] | None:
    """``shape`` (a tensor type's, a TE tensor's) as ints, if every extent is known; else None."""
    return [int(d) for d in shape] if all(isinstance(d, tvm.tir.IntImm | int) for d in shape) else None


def static_shape(expr: relay.Expr) -> list[int] | None:
    """The extents of ``expr``'s (type-checked) tensor type, if every one is known; else None."""
    ty = expr.checked_type
    return static_extents(ty.shape) if isinstance(ty, relay.TensorType) else None


def same_static_type(a: relay.Type, b: relay.Type) -> bool:
    """Whether ``a`` and ``b`` are the same tensor type, every extent known."""
    return static_tensor(a) and static_tensor(b) and tvm.ir.structural_equal(a, b)


class _IdentityCollapseSums(relay.ExprMutator):
    """``collapse_sum_like(%x, %y)`` with equal static types becomes ``%x``."""

    def visit_call(self, call):
        new = super().visit_call(call)
        if (
            isinstance(call.op, tvm.ir.Op)
            and call.op.name == "collapse_sum_like"
            and same_static_type(call.args[0].checked_type, call.args[1].checked_type)
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
        self._original: dict = {}
        self._expr(func.body)

    def resolve(self, var):
        """The variable ``var`` is a copy of (through ``let %a = %b`` bindings), or ``var``;
        memoized, since copy chains are long and hashing a variable is a call into TVM."""
        chain = []
        while (
            var not in self._original
            and isinstance(self.binding.get(var), relay.Var)
            and len(chain) <= len(self.binding)
        ):
            chain.append(var)
            var = self.binding[var]
        root = self._original.get(var, var)
        for link in chain:
            self._original[link] = root
        return root

    def _expr(self, expr):
        while isinstance(expr, relay.Let):  # iterative: A-normal form chains are long
            self.binding[expr.var] = expr.value
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


_UNKNOWN = "unknown"  # the atom for cells and functions made outside the analysed function


def _may_hold(ty) -> bool:
    """Whether a value of type ``ty`` can contain a reference or a function (a tensor cannot)."""
    if isinstance(ty, relay.TensorType):
        return False
    if isinstance(ty, relay.TupleType):
        return any(_may_hold(field) for field in ty.fields)
    return True  # references, functions, algebraic data types, type variables


class _PointsTo:
    """Which cells and functions each variable of a function may hold.

    A flow- and context-insensitive (0-CFA) analysis, fields not told apart: atoms are the
    ``let`` variables bound to ``ref(...)`` (the cell made there), function nodes (the
    closures made from them), and ``_UNKNOWN``; nodes are variables, the contents of each cell
    (``("contents", atom)``), the result of each function (``("result", fn)``), one node per
    nested expression, and :attr:`escaped`, what code outside can see: the function's result,
    the arguments of global functions and unknown closures, what is written into unknown cells;
    closed under reading (an escaped cell's contents escape) and calling (an escaped closure's
    result escapes, its parameters are unknown). Cells follow values everywhere: through
    tuples, constructors and ``match``, closures, calls and results, other cells.

    :attr:`reads` and :attr:`writes` map the ``let`` variable of each ``ref_read`` /
    ``ref_write`` to the node of its reference operand; ``None`` keys the nested ones.
    """

    def __init__(self, func: relay.Function):
        self.sets: dict = defaultdict(set)
        self.reads: dict = defaultdict(list)
        self.writes: dict = defaultdict(list)
        self.escaped = ("escaped",)
        self._edges: dict = defaultdict(set)
        self._rules: dict = defaultdict(list)
        self._pending: list = []
        self._holds: dict = {}
        self._fresh = 0
        self._add(("contents", _UNKNOWN), {_UNKNOWN})
        self._flow(("contents", _UNKNOWN), self.escaped)
        self._watch(self.escaped, self._escape)
        for param in func.params:
            self._add(param, {_UNKNOWN})
        self._flow(self._eval(func.body), self.escaped)
        while self._pending:
            node, atoms = self._pending.pop()
            for target in list(self._edges[node]):
                self._add(target, atoms)
            for rule in list(self._rules[node]):
                for atom in atoms:
                    rule(atom)

    def cells(self, node) -> set:
        """The cells ``node`` may hold (``_UNKNOWN`` among them when it may hold others)."""
        return {a for a in self.sets.get(node, ()) if not isinstance(a, relay.Function)}

    # -- the solver: sets grow along edges, and rules run once per atom a node gets ----------

    def _accepts(self, node) -> bool:
        if not isinstance(node, relay.Var):
            return True
        if node not in self._holds:
            try:
                self._holds[node] = _may_hold(node.checked_type)
            except ValueError:  # no type inferred: assume the worst
                self._holds[node] = True
        return self._holds[node]

    def _add(self, node, atoms) -> None:
        if node is None or not self._accepts(node):
            return
        new = set(atoms) - self.sets[node]
        if new:
            self.sets[node] |= new
            self._pending.append((node, new))

    def _flow(self, source, target) -> None:
        if source is None or target is None or target in self._edges[source]:
            return
        self._edges[source].add(target)
        if self.sets.get(source):
            self._add(target, self.sets[source])

    def _watch(self, node, rule) -> None:
        if node is None:
            return
        self._rules[node].append(rule)
        for atom in list(self.sets.get(node, ())):
            rule(atom)

    def _node(self):
        self._fresh += 1
        return ("expr", self._fresh)

    def _escape(self, atom) -> None:
        if isinstance(atom, relay.Function):
            for param in atom.params:
                self._add(param, {_UNKNOWN})
            self._flow(("result", atom), self.escaped)
        elif atom is not _UNKNOWN:
            self._flow(("contents", atom), self.escaped)

    # -- constraints from the program ----------------------------------------------------------

    def _eval(self, expr, owner=None):
        """The node holding ``expr``'s value (None when it holds no cell or function);
        ``owner`` is the ``let`` variable ``expr`` is bound to."""
        if isinstance(expr, relay.Var):
            return expr
        if isinstance(expr, relay.Let):
            while isinstance(expr, relay.Let):  # iterative: A-normal form chains are long
                if isinstance(expr.value, relay.RefCreate):  # the cell is named by its variable
                    self._add(expr.var, {expr.var})
                    self._flow(self._eval(expr.value.value), ("contents", expr.var))
                else:
                    self._flow(self._eval(expr.value, expr.var), expr.var)
                expr = expr.body
            return self._eval(expr)
        if isinstance(expr, (relay.Constant, tvm.ir.Op, relay.Constructor)):
            return None
        node = self._node()
        if isinstance(expr, relay.GlobalVar):
            self._add(node, {_UNKNOWN})
        elif isinstance(expr, relay.Tuple):
            for field in expr.fields:
                self._flow(self._eval(field), node)
        elif isinstance(expr, relay.TupleGetItem):
            self._flow(self._eval(expr.tuple_value), node)
        elif isinstance(expr, relay.RefCreate):
            self._add(node, {expr})
            self._flow(self._eval(expr.value), ("contents", expr))
        elif isinstance(expr, relay.RefRead):
            ref = self._eval(expr.ref)
            self.reads[owner].append(ref)
            self._watch(ref, lambda atom: self._flow(("contents", atom), node))
        elif isinstance(expr, relay.RefWrite):
            ref, value = self._eval(expr.ref), self._eval(expr.value)
            self.writes[owner].append(ref)
            self._watch(ref, lambda atom: self._flow(value, ("contents", atom)))
            return None
        elif isinstance(expr, relay.Function):
            self._add(node, {expr})
            self._flow(self._eval(expr.body), ("result", expr))
        elif isinstance(expr, relay.Call):
            args = [self._eval(arg) for arg in expr.args]
            if isinstance(expr.op, tvm.ir.Op):
                return None  # operators take and make tensors
            if isinstance(expr.op, relay.Constructor):
                for arg in args:
                    self._flow(arg, node)
                return node
            self._watch(self._eval(expr.op), lambda atom: self._call(atom, args, node))
        elif isinstance(expr, relay.If):
            self._eval(expr.cond)
            self._flow(self._eval(expr.true_branch), node)
            self._flow(self._eval(expr.false_branch), node)
        elif isinstance(expr, relay.Match):
            data = self._eval(expr.data)
            for clause in expr.clauses:
                for var in pattern_vars(clause.lhs):
                    self._flow(data, var)
                self._flow(self._eval(clause.rhs), node)
        else:
            self._add(node, {_UNKNOWN})
        return node

    def _call(self, callee, args, result) -> None:
        if callee is _UNKNOWN:
            for arg in args:
                self._flow(arg, self.escaped)
            self._add(result, {_UNKNOWN})
        elif isinstance(callee, relay.Function) and len(callee.params) == len(args):
            for param, arg in zip(callee.params, args):
                self._flow(arg, param)
            self._flow(("result", callee), result)
        # a cell in callee position is an imprecision: the closure called is among the others


def _written_by(read: relay.Var, uses: _Uses):
    """The ``ref_write``s (their ``let`` variables) that the value read into ``read`` reaches
    through operator calls, tuples and projections; None if it reaches anything else."""
    seen, work, writes = {read}, [read], []
    while work:
        value = work.pop()
        for owner, user in uses.uses.get(value, []):
            if owner is None:
                return None
            if isinstance(user, relay.RefWrite):
                if not user.value.same_as(value) or user.ref.same_as(value):
                    return None  # a cell read from the cell chooses what is written: observed
                writes.append(owner)
            elif isinstance(user, (relay.Var, relay.Tuple, relay.TupleGetItem)) or (
                isinstance(user, relay.Call) and isinstance(user.op, tvm.ir.Op)
            ):
                if owner not in seen:
                    seen.add(owner)
                    work.append(owner)
            else:
                return None
    return writes


def _dead_cells(points: _PointsTo, uses: _Uses) -> tuple[set, list]:
    """The cells whose contents nothing observes, and the writes that only go into them.

    A cell is dead with its group: every cell that a value read from one of them can be
    written into. A group is dead when none of its cells escapes and every read that may read
    one of them feeds only writes (see :func:`_written_by`) that may write only into the group.
    """
    escaped = points.cells(points.escaped)
    readers: dict = defaultdict(list)  # cell -> the reads that may read it
    for owner, refs in points.reads.items():
        for ref in refs:
            for cell in points.cells(ref):
                readers[cell].append(owner)
    targets = {owner: set().union(*(points.cells(ref) for ref in refs)) for owner, refs in points.writes.items()}

    def closed_group(site):
        group, work = {site}, [site]
        while work:
            cell = work.pop()
            if cell in escaped or not isinstance(cell, relay.Var) or cell not in uses.binding:
                return None  # seen outside, made outside, or made by a nested ref()
            for read in readers[cell]:
                writes = None if read is None else _written_by(read, uses)
                if writes is None:
                    return None
                for write in writes:
                    new = targets.get(write, {_UNKNOWN}) - group
                    group |= new
                    work.extend(new)
        return group

    dead: set = set()
    for site, value in uses.binding.items():
        if isinstance(value, relay.RefCreate) and site not in dead:
            dead |= closed_group(site) or set()
    writes = [owner for owner, cells in targets.items() if owner is not None and cells and cells <= dead]
    return dead, writes


class _Rebind(ChainMutator):
    """Replace the values bound to some let variables."""

    def __init__(self, values: dict):
        super().__init__()
        self.values = values

    def rebind(self, var, value):
        return [(var, self.visit(self.values.get(var, value)))]


def _tuple_literal(var, uses: _Uses):
    """The tuple literal bound to ``var`` (through variables bound to variables), or None."""
    value = uses.binding.get(uses.resolve(var))
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
    if not (
        isinstance(made, relay.Call) and isinstance(made.op, tvm.ir.Op) and made.op.name in ("zeros_like", "zeros")
    ):
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


def _cell_key(var, uses: _Uses):
    """What names one cell in a ``let`` chain: the variable (through copies), or for a
    projection of a variable, that variable's key and the index; None for anything else."""
    var = uses.resolve(var)
    value = uses.binding.get(var)
    if isinstance(value, relay.TupleGetItem) and isinstance(value.tuple_value, relay.Var):
        inner = _cell_key(value.tuple_value, uses)
        return None if inner is None else (inner, value.index)
    return var


class _Contents(relay.ExprVisitor):
    """What each cell holds along a ``let`` chain, as far as it is known there.

    A cell's contents are known from its ``ref(%v)``, a ``ref_write(%r, %v)`` or a
    ``ref_read(%r)`` earlier in the same chain, until something may change them: a write into a
    cell that may be the same (per :class:`_PointsTo`), or a call of anything but an operator or
    a constructor (a function or closure may write any cell). Then:

    * :attr:`forwarded` -- a read of known contents is those contents (a variable);
    * :attr:`noops` -- a write of what the cell is known to hold changes nothing;
    * :attr:`overwritten` -- a write that another write into the same cell replaces before
      anything may read it (a read of a cell that may be the same, or a call) is unobserved.

    Each chain starts knowing nothing, branches and function bodies included.
    """

    def __init__(self, uses: _Uses, points: _PointsTo):
        super().__init__()
        self.uses = uses
        self.points = points
        self.forwarded: dict = {}
        self.noops: list = []
        self.overwritten: list = []

    def _aliases(self, ref_a, ref_b) -> bool:
        a, b = self.points.cells(ref_a), self.points.cells(ref_b)
        return not a or not b or bool(a & b) or _UNKNOWN in a or _UNKNOWN in b

    def visit_let(self, let):
        known: dict = {}  # cell key -> (a variable naming the cell, the variable it holds)
        unread: dict = {}  # cell key -> (a variable naming the cell, the write not yet read)
        while isinstance(let, relay.Let):
            var, value = let.var, let.value
            self.visit(value)
            if isinstance(value, relay.RefCreate) and isinstance(value.value, relay.Var):
                known[var] = (var, value.value)
            elif isinstance(value, relay.RefRead) and isinstance(value.ref, relay.Var):
                key = _cell_key(value.ref, self.uses)
                if key in known:
                    self.forwarded[var] = known[key][1]
                else:
                    for other in [k for k, (ref, _) in unread.items() if self._aliases(ref, value.ref)]:
                        del unread[other]
                    if key is not None:
                        known[key] = (value.ref, var)
            elif isinstance(value, relay.RefWrite) and isinstance(value.ref, relay.Var):
                key = _cell_key(value.ref, self.uses)
                held = known.get(key)
                if (
                    held is not None
                    and isinstance(value.value, relay.Var)
                    and self.uses.resolve(held[1]).same_as(self.uses.resolve(value.value))
                ):
                    self.noops.append(var)
                else:
                    for other in [k for k, (ref, _) in known.items() if self._aliases(ref, value.ref)]:
                        del known[other]
                    if key in unread:
                        self.overwritten.append(unread.pop(key)[1])
                    if key is not None and isinstance(value.value, relay.Var):
                        known[key] = (value.ref, value.value)
                    if key is not None:
                        unread[key] = (value.ref, var)
            elif (
                isinstance(value, relay.Call)
                and isinstance(value.op, (tvm.ir.Op, relay.Constructor))
                and all(isinstance(arg, (relay.Var, relay.Constant)) for arg in value.args)
            ):
                pass
            elif isinstance(value, (relay.Call, relay.If, relay.Match, relay.Let, relay.RefRead, relay.RefWrite)):
                known.clear()  # it may read and write any cell
                unread.clear()
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
    points = _PointsTo(func)
    dead, writes = _dead_cells(points, uses)
    for write in writes:
        values[write] = relay.Tuple([])  # a fresh node each: a shared one would be bound once, outside
    for member in dead:
        init = uses.binding[member].value
        made = uses.binding.get(init) if isinstance(init, relay.Var) else None
        if (
            isinstance(made, relay.Call)
            and isinstance(made.op, tvm.ir.Op)
            and made.op.name == "zeros_like"
            and isinstance(made.args[0], (relay.Var, relay.Constant))
        ):
            values[member] = relay.RefCreate(made.args[0])
            changed += 1
    changed += len(writes)
    contents = _Contents(uses, points)
    contents.visit(func.body)
    for var in contents.noops + contents.overwritten:
        if var not in values:
            values[var] = relay.Tuple([])
            changed += 1
    for var, held in contents.forwarded.items():
        if var not in values:
            values[var] = held
            changed += 1
    if not changed:
        return func, 0
    return relay.Function(
        func.params, _Rebind(values).visit(func.body), func.ret_type, func.type_params, func.attrs
    ), changed


class _Inline(ChainMutator):
    """Replace each call bound by a ``let`` in :attr:`at` by the body of the function called,
    its bindings spliced into the chain (so that what follows in the chain sees them)."""

    def __init__(self, at: dict):
        super().__init__()
        self.at = at

    def rebind(self, var, value):
        if var not in self.at:
            return super().rebind(var, value)
        body, bindings = self.visit(self.at[var].body), []
        while isinstance(body, relay.Let):
            bindings.append((body.var, body.value))
            body = body.body
        return bindings + [(var, body)]


def _inline_once_called(func: relay.Function) -> tuple[relay.Function, int]:
    """Inline each ``let``-bound function without parameters that is called exactly once and
    used for nothing else (through copies): a backpropagator step, once the cell that held it
    is gone (see :class:`_Contents`), is called only by the next step. The steps of one forward
    call become one closure; the cells between them, one chain. Returns the function and how
    many calls were inlined (the functions themselves are then unused)."""
    uses = _Uses(func)
    at: dict = {}
    for var, value in uses.binding.items():
        if not isinstance(value, relay.Function) or value.params or value.type_params:
            continue
        if value.attrs is not None and len(value.attrs.keys()) > 0:
            continue
        if any(free.same_as(var) for free in relay.analysis.free_vars(value)):
            continue  # recursive
        names, work, calls, other = {var}, [var], [], False
        while work:
            for owner, user in uses.uses.get(work.pop(), []):
                if isinstance(user, relay.Var) and owner is not None and owner not in names:
                    names.add(owner)
                    work.append(owner)
                elif isinstance(user, relay.Call) and owner is not None and not user.args and user.op in names:
                    calls.append(owner)
                elif not isinstance(user, relay.Var):
                    other = True
        if len(calls) == 1 and not other and calls[0] not in at:
            at[calls[0]] = value
    if not at:
        return func, 0
    return relay.Function(func.params, _Inline(at).visit(func.body), func.ret_type, func.type_params, func.attrs), len(
        at
    )


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
    copies = [(v, uses.resolve(v)) for v, value in uses.binding.items() if isinstance(value, relay.Var)]
    pure = {v for v, value in uses.binding.items() if isinstance(value, relay.Function)}
    changed = True
    while changed:  # optimistic: a recursive function is pure unless something else is not
        changed = False
        names = pure | {copy for copy, original in copies if original in pure}
        for var in list(pure):
            if not _effect_free(uses.binding[var].body, names):
                pure.discard(var)
                changed = True
    return pure | {copy for copy, original in copies if original in pure}


class _DeadBindings(relay.ExprMutator):
    """Drop ``let``s whose variable is unused and whose value has no effect."""

    def __init__(self, pure_functions: set):
        super().__init__()
        self.pure_functions = pure_functions
        self.dropped = 0

    def _droppable(self, value) -> bool:
        if isinstance(value, relay.Function):
            return True
        if isinstance(
            value,
            (
                relay.Var,
                relay.Constant,
                relay.Tuple,
                relay.TupleGetItem,
                relay.RefCreate,
                relay.RefRead,
                relay.Call,
                relay.If,
                relay.Match,
                relay.Let,
            ),
        ):
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
    func = relay.Function(
        func.params, _IdentityCollapseSums().visit(func.body), func.ret_type, func.type_params, func.attrs
    )
    mod[name] = func
    mod = relay.transform.ToANormalForm()(mod)
    func = mod[name]
    for _ in range(12):  # a cell's writes gone can leave another cell's reads unobserved, ...
        mod[name] = func
        func = relay.transform.InferType()(mod)[name]  # the rules read the types of new nodes
        func, changed = _drop_dead_cells(func)
        func, inlined = _inline_once_called(func)
        dce = _DeadBindings(_pure_functions(_Uses(func)))
        func = relay.Function(func.params, dce.visit(func.body), func.ret_type, func.type_params, func.attrs)
        if not changed and not inlined and not dce.dropped:
            break
    mod[name] = relay.Function(
        func.params, _ZerosAsConstants().visit(func.body), func.ret_type, func.type_params, func.attrs
    )
    return relay.transform.InferType()(mod)

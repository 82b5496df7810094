"""Named symbolic dimensions: a ``tir.Var`` in a tensor type is a run-time extent.

``relay.var("x", shape=(n, 16))`` with ``n = tir.Var("n", "int64")`` (or a ``SizeVar``) says
two things: the extent is known only at run time, and every axis typed ``n`` has the same one.
relay_aot compiles the first as Relay's ``?`` -- its kernels, shape functions and allocation
for ``?`` dimensions are the ones used -- and checks the second at the entry: the axes of
``@main``'s parameters that share a variable must agree (:func:`shared_extents`, checked by
``check_shared_extents`` in ``runtime_cpp/relay_aot/check.h``).

:func:`erase` rewrites every type annotation of the module before type inference, so that no
symbolic variable reaches TVM's passes or kernels: TVM's kernel compiler binds an ``int64``
variable against an ``int32`` one and fails ("arg.dtype() == value.dtype()"), which TVM's own
VM does too.
"""

from __future__ import annotations

import tvm
from tvm import relay

from .. import ir
from .walk import ChainMutator


def is_symbolic(dim) -> bool:
    """Whether a dimension of a Relay shape is neither an extent nor ``?`` (a variable, or an
    expression of variables such as ``n*2`` or ``?*8``): a run-time extent too."""
    return not isinstance(dim, (tvm.tir.IntImm, tvm.tir.Any))


def shared_extents(func: relay.Function) -> tuple[ir.SharedExtent, ...]:
    """The variables that name more than one axis of ``func``'s parameters (through tuples),
    with those axes, in the order the parameters mention them.

    Only a plain variable states an equality the entry can check; an expression of variables
    in a parameter's type (``n*2``) is only a run-time extent. A variable inside an ADT,
    reference or function type is a run-time extent too (values of those types are not
    checked axis by axis).
    """
    groups: list[tuple[tvm.tir.Var, list[ir.Axis]]] = []

    def visit(ty: relay.Type | None, param: int, path: tuple[int, ...]) -> None:
        if isinstance(ty, relay.TupleType):
            for index, field in enumerate(ty.fields):
                visit(field, param, path + (index,))
        elif isinstance(ty, relay.TensorType):
            for axis, dim in enumerate(ty.shape):
                if isinstance(dim, tvm.tir.Var):
                    group = next((g for g in groups if g[0].same_as(dim)), None)
                    if group is None:
                        group = (dim, [])
                        groups.append(group)
                    group[1].append(ir.Axis(param, path, axis))

    for index, param in enumerate(func.params):
        visit(param.type_annotation, index, ())
    return tuple(ir.SharedExtent(var.name, tuple(axes)) for var, axes in groups if len(axes) > 1)


def erase_type(ty):
    """``ty`` with every symbolic dimension (:func:`is_symbolic`) made ``?``; None when it has
    none (so the caller keeps its type, and its identity)."""
    if isinstance(ty, relay.TensorType):
        if not any(is_symbolic(d) for d in ty.shape):
            return None
        return relay.TensorType([relay.Any() if is_symbolic(d) else d for d in ty.shape], ty.dtype)
    if isinstance(ty, relay.TupleType):
        fields = [erase_type(f) for f in ty.fields]
        return _rebuilt(fields, ty.fields, relay.TupleType)
    if isinstance(ty, relay.FuncType):
        parts = [erase_type(t) for t in [*ty.arg_types, ty.ret_type]]
        return _rebuilt(
            parts,
            [*ty.arg_types, ty.ret_type],
            lambda p: relay.FuncType(p[:-1], p[-1], ty.type_params, ty.type_constraints),
        )
    if isinstance(ty, relay.RefType):
        return _rebuilt([erase_type(ty.value)], [ty.value], lambda p: relay.RefType(p[0]))
    if isinstance(ty, relay.TypeCall):
        return _rebuilt([erase_type(a) for a in ty.args], ty.args, lambda p: relay.TypeCall(ty.func, p))
    return None


def _rebuilt(erased: list, original, make):
    """``make`` of the parts, each erased or original; None when no part was erased."""
    if all(e is None for e in erased):
        return None
    return make([o if e is None else e for e, o in zip(erased, original)])


class _Erase(ChainMutator):
    """Every annotated variable (parameters, ``let`` and pattern variables) and function result
    type, with symbolic dimensions made ``?``; type inference then derives ``?`` from them."""

    def __init__(self):
        super().__init__()
        self.renamed: dict[relay.Var, relay.Var] = {}

    def visit_var(self, var):
        if var in self.renamed:
            return self.renamed[var]
        erased = erase_type(var.type_annotation) if var.type_annotation is not None else None
        if erased is None:
            return var
        self.renamed[var] = relay.Var(var.name_hint, erased)
        return self.renamed[var]

    def rebind(self, var, value):
        return [(self.visit(var), self.visit(value))]

    def visit_function(self, fn):
        params = [self.visit(p) for p in fn.params]
        ret = (erase_type(fn.ret_type) or fn.ret_type) if fn.ret_type is not None else None
        return relay.Function(params, self.visit(fn.body), ret, fn.type_params, fn.attrs)

    def _pattern(self, pattern):
        if isinstance(pattern, relay.PatternVar):
            return relay.PatternVar(self.visit(pattern.var))
        if isinstance(pattern, relay.PatternConstructor):
            return relay.PatternConstructor(pattern.constructor, [self._pattern(p) for p in pattern.patterns])
        if isinstance(pattern, relay.PatternTuple):
            return relay.PatternTuple([self._pattern(p) for p in pattern.patterns])
        return pattern

    def visit_match(self, match):
        clauses = [relay.Clause(self._pattern(c.lhs), self.visit(c.rhs)) for c in match.clauses]
        return relay.Match(self.visit(match.data), clauses, match.complete)


def _mentions_symbolic(func: relay.Function) -> bool:
    found = []

    def visit(node):
        ty = (
            node.type_annotation
            if isinstance(node, relay.Var)
            else node.ret_type
            if isinstance(node, relay.Function)
            else None
        )
        if ty is not None and erase_type(ty) is not None:
            found.append(node)

    relay.analysis.post_order_visit(func, visit)
    return bool(found)


def erase(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every symbolic dimension of its functions' annotations made ``?`` (the
    module itself when there is none, so a program without them is left exactly as it was)."""
    updates = {
        gvar: func
        for gvar, func in mod.functions.items()
        if isinstance(func, relay.Function) and _mentions_symbolic(func)
    }
    if not updates:
        return mod
    mod = tvm.IRModule(dict(mod.functions.items()), type_definitions=mod.type_definitions)
    for gvar, func in updates.items():
        mod[gvar] = _Erase().visit(func)
    return mod


@tvm.transform.module_pass(opt_level=0, name="EraseSymbolicDims")
def erase_pass(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`erase` as a pass. After fusion, it makes the parameters of kernels ``?`` where type
    inference gave them an expression (``?*8`` from a ``layout_transform``): TVM lowers a
    kernel's inputs at the shapes of its parameters' types, and cannot lower a ``?`` inside an
    expression (its outputs' shapes come from the operators' own computation)."""
    return erase(mod)

"""Hypothesis strategies that generate random, well-typed Relay modules (with arguments).

Generation is type-directed: :class:`Generator` is asked for an expression of a type in an
environment of typed variables and picks, by drawing from Hypothesis, one of the productions
that can make a value of that type -- a variable, a constant, a tensor operator, a ``let``, an
``if``, a tuple or a projection, a constructor, a ``match``, a closure or a call of one, a call
of a (possibly recursive) global, a reference operation. Depth and size budgets keep programs
small; every production has a leaf form, so generation always ends.

What it covers (see ``node_counts`` and the generator's own tests):

* tensors of several dtypes (:data:`DTYPES`) and small static shapes, with elementwise,
  comparison, cast, reduction, ``nn.dense``, ``concatenate``, ``split``, ``reshape`` and
  ``where`` operators;
* ``let`` chains, ``if``, tuples and projections;
* closures capturing variables, passed to and returned from functions, recursive ``let``-bound
  closures, globals and constructors used as function values;
* user-defined ADTs with random constructors and arities, optionally polymorphic, recursive ones
  built to a bounded depth and consumed by structural recursion;
* ``match`` with constructor, nested, tuple, variable and wildcard patterns (always complete);
* references (create, read, write), captured by closures and stored in tuples;
* recursive globals whose depth is bounded by a "fuel" argument.

Values stay small and exact where it matters: tensors hold small integers (halves for floats),
integer arithmetic that could overflow a 32- or 64-bit integer (undefined behaviour in TVM's
kernels) is limited, and floats are never cast to integers, so every executor must agree.

Use :func:`programs` for one program per example, or :func:`batches` for several independent
programs in one module (``@main`` returns the tuple of their results), which lets a test compile
many programs with one C++ build.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from hypothesis import strategies as st
from tvm import relay

from ..passes.walk import nodes_where
from . import hostile

DTYPES = ("float32", "float64", "int32", "int64", "int8", "uint8", "bool")
FLOATS = ("float32", "float64")
INTS = ("int32", "int64", "int8", "uint8")
SHAPES = ((), (1,), (2,), (3,), (4,), (2, 2), (2, 3), (3, 2), (1, 3))

#: Node kinds, pattern kinds and dtypes the coverage counts (``node_counts``) report.
NODE_KINDS = (
    "Var",
    "GlobalVar",
    "Constant",
    "Tuple",
    "TupleGetItem",
    "Let",
    "If",
    "Function",
    "Call",
    "Constructor",
    "Match",
    "RefCreate",
    "RefRead",
    "RefWrite",
)
PATTERN_KINDS = ("PatternWildcard", "PatternVar", "PatternConstructor", "PatternTuple")

# ----------------------------------------------------------------------------------------
# Generator-side types (hashable, cheap to compare; converted to Relay types on demand)


@dataclasses.dataclass(frozen=True)
class TensorT:
    shape: tuple
    dtype: str


@dataclasses.dataclass(frozen=True)
class TupleT:
    fields: tuple


@dataclasses.dataclass(frozen=True)
class AdtT:
    index: int
    args: tuple = ()


@dataclasses.dataclass(frozen=True)
class FuncT:
    params: tuple
    ret: Any


@dataclasses.dataclass(frozen=True)
class RefT:
    value: Any


@dataclasses.dataclass(frozen=True)
class ParamT:
    """The type parameter of a polymorphic ADT (only inside constructor field types)."""


Ty = TensorT | TupleT | AdtT | FuncT | RefT
BOOL = TensorT((), "bool")
FUEL = TensorT((), "int32")


@dataclasses.dataclass
class AdtDef:
    """A generated ADT: its type variable, constructors and field types (may hold ParamT)."""

    gtv: relay.GlobalTypeVar
    type_var: relay.TypeVar | None
    ctors: list  # relay.Constructor
    fields: list  # per constructor: tuple of generator types
    recursive: list  # per constructor: whether a field is the ADT itself
    has_functions: bool = False  # whether a value can hold a closure


@dataclasses.dataclass
class Global:
    gvar: relay.GlobalVar
    type: FuncT
    kind: str = "plain"  # or "fuel" (the first parameter bounds the recursion) or "fold"

    @property
    def fuel(self) -> bool:
        return self.kind == "fuel"


@dataclasses.dataclass
class Program:
    """A generated module and arguments for its ``@main``.

    ``cases`` names the globals holding independent programs when the module is a batch
    (``@main`` returns the tuple of their results); :meth:`case` extracts one of them.
    """

    module: tvm.IRModule
    args: tuple
    cases: list = dataclasses.field(default_factory=list)
    case_args: list = dataclasses.field(default_factory=list)

    def case(self, index: int) -> Program:
        """Case ``index`` of a batch as a program of its own (its global becomes ``@main``)."""
        mod = self.module
        skip = {"main", *(g.name_hint for g in self.cases)}
        funcs = {g: f for g, f in mod.functions.items() if g.name_hint not in skip}
        single = tvm.IRModule(funcs, type_definitions=mod.type_definitions)
        single["main"] = mod[self.cases[index]]
        single = relay.transform.InferType()(single)
        return Program(single, self.case_args[index])

    def text(self) -> str:
        """The module as Relay text (with a metadata section if it holds tensor constants)."""
        return self.module.astext(show_meta_data=True)


def substitute(ty, arg):
    """``ty`` with the ADT type parameter replaced by ``arg``."""
    if isinstance(ty, ParamT):
        return arg
    if isinstance(ty, TupleT):
        return TupleT(tuple(substitute(f, arg) for f in ty.fields))
    if isinstance(ty, AdtT):
        return AdtT(ty.index, tuple(substitute(a, arg) for a in ty.args))
    if isinstance(ty, FuncT):
        return FuncT(tuple(substitute(p, arg) for p in ty.params), substitute(ty.ret, arg))
    if isinstance(ty, RefT):
        return RefT(substitute(ty.value, arg))
    return ty


_UNARY = {
    "float": ("negative", "abs", "exp", "tanh", "sigmoid", "floor"),
    "int": ("negative", "abs"),
    "uint": (),
    "bool": ("logical_not",),
}
_BINARY = {
    "float": ("add", "subtract", "multiply", "maximum", "minimum", "divide"),
    "int": ("add", "subtract", "maximum", "minimum"),
    "uint": ("add", "subtract", "maximum", "minimum"),
    "bool": ("logical_and", "logical_or"),
}
_COMPARE = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
_REDUCE = {
    "float": ("sum", "max", "min", "mean"),
    "int": ("sum", "max", "min"),
    "uint": ("sum", "max", "min"),
    "bool": ("all", "any"),
}


def _kind(dtype: str) -> str:
    if dtype == "bool":
        return "bool"
    if dtype in FLOATS:
        return "float"
    return "uint" if dtype.startswith("uint") else "int"


def _can_cast(src: str, dst: str) -> bool:
    # Float-to-integer casts of out-of-range values are undefined in TVM's kernels.
    return src != dst and not (_kind(src) == "float" and _kind(dst) != "float" and dst != "bool")


def _returns_function(ty) -> bool:
    """Whether ``ty`` holds (in tuples and references too) a function returning a function."""
    if isinstance(ty, FuncT):
        return _holds_function(ty.ret) or any(_returns_function(p) for p in ty.params)
    if isinstance(ty, TupleT):
        return any(_returns_function(f) for f in ty.fields)
    if isinstance(ty, RefT):
        return _returns_function(ty.value)
    return False


def _holds_function(ty) -> bool:
    if isinstance(ty, FuncT):
        return True
    if isinstance(ty, TupleT):
        return any(_holds_function(f) for f in ty.fields)
    if isinstance(ty, RefT):
        return _holds_function(ty.value)
    return False


def _op(name: str) -> Callable:
    return getattr(relay, name)


class Generator:
    """Draws one module's worth of Relay from Hypothesis (``draw`` is ``data.draw``)."""

    def __init__(
        self,
        draw,
        max_depth: int = 4,
        max_size: int = 60,
        max_globals: int = 5,
        odd_names: bool = True,
        dynamic: bool = False,
    ):
        self.draw = draw
        self.dynamic = dynamic
        self.max_depth = max_depth
        self.size_left = max_size
        self.max_globals = max_globals
        self.odd_names = odd_names
        self.adts: list[AdtDef] = []
        self.globals: list[Global] = []
        self.folds: dict = {}
        self._folding: set = set()  # folds whose bodies are being generated
        self.global_count = 0
        self.module = tvm.IRModule()
        self._names = 0
        # Each module works with a few dtypes and shapes, so that values of equal types meet
        # often (variables get used, operators get combined); see :meth:`choose_palette`.
        self.dtypes: list = list(DTYPES)
        self.shapes: list = list(SHAPES)

    def choose_palette(self) -> None:
        """Pick the dtypes and shapes most tensors of this module will have."""
        self.dtypes = self.draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=3, unique=True))
        self.shapes = self.draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3, unique=True))

    # -- small helpers -----------------------------------------------------------------------

    def choose(self, options: list):
        """One of ``options`` (shrinks toward the first)."""
        return options[self.draw(st.integers(0, len(options) - 1))] if len(options) > 1 else options[0]

    def flip(self, p_true: int = 1, out_of: int = 2) -> bool:
        return self.draw(st.integers(0, out_of - 1)) < p_true

    def name(self, prefix: str) -> str:
        """A fresh name; now and then with characters generated code must escape."""
        self._names += 1
        plain = f"{prefix}{self._names}"
        if self.odd_names and self.draw(st.integers(0, 19)) == 0:
            return plain + self.choose(['"q', "\\n*/", " sp", "\u00e9", "'", "?"])
        return plain

    def relay_type(self, ty) -> relay.Type:
        """The Relay type of a generator type."""
        if isinstance(ty, TensorT):
            return relay.TensorType(ty.shape, ty.dtype)
        if isinstance(ty, TupleT):
            return relay.TupleType([self.relay_type(f) for f in ty.fields])
        if isinstance(ty, AdtT):
            return relay.TypeCall(self.adts[ty.index].gtv, [self.relay_type(a) for a in ty.args])
        if isinstance(ty, FuncT):
            return relay.FuncType([self.relay_type(p) for p in ty.params], self.relay_type(ty.ret))
        if isinstance(ty, RefT):
            return relay.RefType(self.relay_type(ty.value))
        raise TypeError(ty)

    def var(self, ty, prefix: str = "x") -> relay.Var:
        annotation = self.relay_type(ty)
        if self.dynamic and self.flip(1, 2):
            annotation = self.erase_dims(annotation)
        return relay.Var(self.name(prefix), annotation)

    def erase_dims(self, ty: relay.Type) -> relay.Type:
        """``ty`` with some tensor dimensions made ``?`` (a variable's annotation, with
        ``dynamic``): the values stay the same, their types become dynamic, and type inference
        carries the ``?`` through everything computed from them."""
        if isinstance(ty, relay.TensorType):
            return relay.TensorType([relay.Any() if self.flip(1, 2) else d for d in ty.shape], ty.dtype)
        if isinstance(ty, relay.TupleType):
            return relay.TupleType([self.erase_dims(f) for f in ty.fields])
        return ty

    # -- types -------------------------------------------------------------------------------

    def tensor_type(self) -> TensorT:
        if self.flip(1, 8):  # now and then anything, so every combination stays reachable
            return TensorT(self.choose(list(SHAPES)), self.choose(list(DTYPES)))
        return TensorT(self.choose(self.shapes), self.choose(self.dtypes))

    def data_type(self, depth: int = 2, adts: bool = True, functions: bool = True) -> Ty:
        """A tensor, tuple or ADT type (no function or reference types; ADTs whose values can hold
        closures only if ``functions``)."""
        allowed = [i for i, a in enumerate(self.adts) if functions or not a.has_functions] if adts else []
        options = ["tensor"] * 4 + (["tuple"] if depth > 0 else []) + (["adt"] if allowed else [])
        kind = self.choose(options)
        if kind == "tensor":
            return self.tensor_type()
        if kind == "tuple":
            count = self.draw(st.integers(0, 3))
            return TupleT(tuple(self.data_type(depth - 1, adts, functions) for _ in range(count)))
        return self.adt_instance(depth, allowed)

    def adt_instance(self, depth: int = 1, allowed: list | None = None) -> AdtT:
        index = self.choose(allowed) if allowed else self.draw(st.integers(0, len(self.adts) - 1))
        if self.adts[index].type_var is None:
            return AdtT(index)
        return AdtT(index, (self.data_type(max(depth - 1, 0), adts=False),))

    def any_type(self, depth: int = 2) -> Ty:
        """A type for a let-bound value: data, functions and references."""
        kind = self.choose(["data", "data", "func", "ref", "ref"] if depth > 0 else ["data"])
        if kind == "data":
            return self.data_type(depth)
        if kind == "func":
            return self.func_type(depth)
        # References never hold closures: a closure that calls what a reference holds, written
        # into that reference, would recurse forever (Landin's knot).
        return RefT(self.data_type(depth - 1, functions=False))

    def func_type(self, depth: int = 1, ret=None) -> FuncT:
        params = tuple(self.data_type(depth - 1) for _ in range(self.draw(st.integers(0, 2))))
        return FuncT(params, ret if ret is not None else self.data_type(depth - 1))

    # -- ADT definitions -----------------------------------------------------------------------

    def define_adts(self, count: int) -> None:
        """Define ``count`` ADTs; each may use the ones before it and (recursively) itself."""
        for _ in range(count):
            index = len(self.adts)
            gtv = relay.GlobalTypeVar(self.name("T"))
            poly = self.flip(1, 3)
            type_var = relay.TypeVar("a") if poly else None
            self_type = AdtT(index, (ParamT(),) if poly else ())
            adt = AdtDef(gtv, type_var, [], [], [])
            self.adts.append(adt)  # visible to its own constructors
            ctor_count = self.draw(st.integers(1, 3))
            recursive_type = self.flip(1, 2)
            for c in range(ctor_count):
                fields: list[Ty | ParamT] = []
                for _ in range(self.draw(st.integers(0, 3))):
                    options = ["tensor", "tensor", "tuple"] + (["adt"] if index > 0 else [])
                    options += ["param"] if poly else []
                    options += ["func"] if not poly else []  # closures in polymorphic ADTs break TVM
                    kind = self.choose(options)
                    if kind == "tensor":
                        fields.append(self.tensor_type())
                    elif kind == "tuple":
                        fields.append(TupleT(tuple(self.tensor_type() for _ in range(self.draw(st.integers(1, 2))))))
                    elif kind == "adt":
                        other = self.draw(st.integers(0, index - 1))
                        args = (self.tensor_type(),) if self.adts[other].type_var is not None else ()
                        fields.append(AdtT(other, args))
                    elif kind == "param":
                        fields.append(ParamT())
                    else:
                        fields.append(FuncT((self.tensor_type(),), self.tensor_type()))
                # The first constructor is never recursive, so every value can be finite.
                is_rec = recursive_type and c > 0
                if is_rec:
                    fields.insert(self.draw(st.integers(0, len(fields))), self_type)
                adt.fields.append(tuple(fields))
                adt.recursive.append(is_rec)
            adt.has_functions = any(
                isinstance(f, FuncT) or (isinstance(f, AdtT) and f.index != index and self.adts[f.index].has_functions)
                for fields in adt.fields
                for f in fields
            )
            adt.ctors = []
            for fields in adt.fields:
                inputs = [self._field_relay_type(f, adt) for f in fields]
                adt.ctors.append(relay.Constructor(self.name("C"), inputs, gtv))
            self.module[gtv] = relay.TypeData(gtv, [type_var] if poly else [], adt.ctors)

    def _field_relay_type(self, ty, adt: AdtDef) -> relay.Type:
        if isinstance(ty, ParamT):
            return adt.type_var
        if isinstance(ty, AdtT):
            args = [self._field_relay_type(a, adt) for a in ty.args]
            return relay.TypeCall(self.adts[ty.index].gtv, args)
        if isinstance(ty, TupleT):
            return relay.TupleType([self._field_relay_type(f, adt) for f in ty.fields])
        if isinstance(ty, FuncT):
            return relay.FuncType(
                [self._field_relay_type(p, adt) for p in ty.params], self._field_relay_type(ty.ret, adt)
            )
        return self.relay_type(ty)

    def ctor_fields(self, ty: AdtT, c: int) -> tuple:
        """Field types of constructor ``c`` of the ADT instance ``ty``."""
        fields = self.adts[ty.index].fields[c]
        return tuple(substitute(f, ty.args[0]) if ty.args else f for f in fields)

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, ty, env: list, depth: int) -> relay.Expr:
        """An expression of type ``ty`` whose free variables are in ``env``."""
        self.size_left -= 1
        if self.size_left <= 0:
            depth = 0
        options: list[Callable[[], relay.Expr]] = []
        same = [v for v, t in env if t == ty]
        if same:
            options += [lambda: self.choose(same)] * 2
        options += self.leaf_options(ty, env)
        if depth > 0:
            options += self.options(ty, env, depth)
        return self.choose(options)()

    def leaf_options(self, ty, env) -> list:
        if isinstance(ty, TensorT):
            return [lambda: self.constant(ty)]
        if isinstance(ty, TupleT):
            return [lambda: relay.Tuple([self.expr(f, env, 0) for f in ty.fields])]
        if isinstance(ty, AdtT):
            return [lambda: self.construct(ty, env, 0)]
        if isinstance(ty, FuncT):
            return [lambda: self.function(ty, env, 0)]
        if isinstance(ty, RefT):
            return [lambda: relay.RefCreate(self.expr(ty.value, env, 0))]
        raise TypeError(ty)

    def options(self, ty, env, depth) -> list:
        d = depth - 1
        opts = [
            lambda: self.let(ty, env, depth),
            lambda: self.let(ty, env, depth),
            lambda: self.project(ty, env, d),
            lambda: self.call_closure(ty, env, d),
            lambda: self.higher_order(ty, env, d),
            lambda: self.call_global(ty, env, d),
            lambda: self.ref_read(ty, env, d),
            lambda: self.ref_write_then(ty, env, depth),
            lambda: self.counter_closure(ty, env, d),
        ]
        if not _returns_function(ty):
            # TVM's device planning (run by the interpreter and the VM) fails on an if or match
            # whose value is a function returning a function.
            opts += [
                lambda: relay.If(self.expr(BOOL, env, d), self.expr(ty, env, d), self.expr(ty, env, d)),
                lambda: self.match(ty, env, depth),
                lambda: self.recursive_closure(ty, env, d),
            ]
        if any(isinstance(t, AdtT) and self.adts[t.index].recursive.count(True) for _, t in env):
            opts.append(lambda: self.fold(ty, env, d))
        if isinstance(ty, TensorT):
            opts += [lambda: self.tensor_op(ty, env, d)] * 8
        elif isinstance(ty, TupleT):
            opts += [lambda: relay.Tuple([self.expr(f, env, d) for f in ty.fields])] * 2
        elif isinstance(ty, AdtT):
            opts += [lambda: self.construct(ty, env, d)] * 2
            if not ty.args:  # TVM's executors reject polymorphic constructors used as values
                opts += [lambda: self.construct_via_value(ty, env, d)] * 2
        elif isinstance(ty, FuncT):
            opts += [lambda: self.function(ty, env, d)] * 2
            opts += [lambda: self.global_as_value(ty, env, d)] * 2
        elif isinstance(ty, RefT):
            opts.append(lambda: relay.RefCreate(self.expr(ty.value, env, d)))
        return opts

    def constant(self, ty: TensorT) -> relay.Expr:
        size = int(np.prod(ty.shape, dtype=np.int64))
        if ty.dtype == "bool":
            values = self.draw(st.lists(st.booleans(), min_size=size, max_size=size))
        else:
            low = 0 if ty.dtype.startswith("uint") else -4
            values = self.draw(st.lists(st.integers(low, 4), min_size=size, max_size=size))
            if _kind(ty.dtype) == "float" and self.flip(1, 3):
                values = [v / 2 for v in values]
        # relay.const narrows int64 and float64 data unless the dtype is given.
        return relay.const(np.array(values, dtype=ty.dtype).reshape(ty.shape), dtype=ty.dtype)

    def let(self, ty, env, depth) -> relay.Expr:
        """``let %v = value; body``, sometimes a chain of several."""
        bound_ty = self.any_type(2)
        var = self.var(bound_ty)
        value = self.expr(bound_ty, env, depth - 1)
        body = self.expr(ty, env + [(var, bound_ty)], depth - 1 if self.flip(1, 2) else depth)
        return relay.Let(var, value, body)

    def project(self, ty, env, d) -> relay.Expr:
        others = [self.data_type(1) for _ in range(self.draw(st.integers(0, 2)))]
        index = self.draw(st.integers(0, len(others)))
        fields = others[:index] + [ty] + others[index:]
        return relay.TupleGetItem(self.expr(TupleT(tuple(fields)), env, d), index)

    def function(self, ty: FuncT, env, d) -> relay.Expr:
        params = [self.var(p, "p") for p in ty.params]
        inner = env + list(zip(params, ty.params))
        return relay.Function(params, self.expr(ty.ret, inner, d), self.relay_type(ty.ret))

    def call_closure(self, ty, env, d) -> relay.Expr:
        fty = self.func_type(1, ret=ty)
        callee = self.expr(fty, env, d)
        return relay.Call(callee, [self.expr(p, env, d) for p in fty.params])

    def higher_order(self, ty, env, d) -> relay.Expr:
        """A function taking a function, applied: a global ``@h(%g, %a)`` or a let-bound closure."""
        a_ty = self.data_type(0)
        g_ty = FuncT((a_ty,), ty)
        g, a = self.var(g_ty, "g"), self.var(a_ty, "a")
        inner = [(g, g_ty), (a, a_ty)]
        as_global = self.flip() and self.global_count < self.max_globals
        self.global_count += as_global
        arg = self.expr(a_ty, inner if as_global else env + inner, max(d - 1, 0))
        body = relay.Call(g, [arg])
        if self.flip():  # use the result once more, so it is not always in tail position
            r = self.var(ty, "r")
            body = relay.Let(r, body, self.expr(ty, (inner if as_global else env + inner) + [(r, ty)], max(d - 1, 0)))
        func = relay.Function([g, a], body, self.relay_type(ty))
        if as_global:
            gvar = relay.GlobalVar(self.name("h"))
            self.globals.append(Global(gvar, FuncT((g_ty, a_ty), ty)))
            self.module[gvar] = func
            callee = gvar
        else:
            callee = func
        return relay.Call(callee, [self.expr(g_ty, env, d), self.expr(a_ty, env, d)])

    def counter_closure(self, ty, env, d) -> relay.Expr:
        """A closure that writes a reference it captured, called twice, then the reference read:
        ``let %r = ref(..); let %f = fn (%a) { %r := ..; .. }; let %x = %f(..); let %y = %f(..); ..``."""
        cell_ty = self.data_type(1, functions=False)
        a_ty = self.data_type(0)
        r = self.var(RefT(cell_ty), "r")
        a = self.var(a_ty, "a")
        f_ty = FuncT((a_ty,), ty)
        f = self.var(f_ty, "f")
        inner = env + [(r, RefT(cell_ty)), (a, a_ty)]
        unit = relay.Var(self.name("u"), relay.TupleType([]))
        old = self.var(cell_ty, "old")
        write = relay.RefWrite(r, self.expr(cell_ty, inner + [(old, cell_ty)], max(d - 1, 0)))
        body = relay.Let(
            old, relay.RefRead(r), relay.Let(unit, write, self.expr(ty, inner + [(old, cell_ty)], max(d - 1, 0)))
        )
        x, y = self.var(ty, "x"), self.var(ty, "y")
        after = env + [(r, RefT(cell_ty)), (f, f_ty), (x, ty), (y, ty)]
        rest = relay.Let(
            x,
            relay.Call(f, [self.expr(a_ty, env, 0)]),
            relay.Let(y, relay.Call(f, [self.expr(a_ty, env, 0)]), self.expr(ty, after, max(d - 1, 0))),
        )
        return relay.Let(
            r,
            relay.RefCreate(self.expr(cell_ty, env, 0)),
            relay.Let(f, relay.Function([a], body, self.relay_type(ty)), rest),
        )

    def ref_read(self, ty, env, d) -> relay.Expr:
        return relay.RefRead(self.expr(RefT(ty), env, d))

    def ref_write_then(self, ty, env, depth) -> relay.Expr:
        """``let %_ = (%r := value); body`` for a reference in scope (or a new one)."""
        refs = [(v, t) for v, t in env if isinstance(t, RefT)]
        if refs:
            ref, rty = self.choose(refs)
            target = ref
        else:
            rty = RefT(self.data_type(1, functions=False))
            target = relay.RefCreate(self.expr(rty.value, env, 0))
        unit = relay.Var(self.name("u"), relay.TupleType([]))
        write = relay.RefWrite(target, self.expr(rty.value, env, depth - 1))
        return relay.Let(unit, write, self.expr(ty, env, depth - 1))

    # -- ADTs and match --------------------------------------------------------------------------

    def construct(self, ty: AdtT, env, d) -> relay.Expr:
        adt = self.adts[ty.index]
        # At depth 0 only non-recursive constructors: recursive values are bounded by depth.
        choices = [c for c in range(len(adt.ctors)) if d > 0 or not adt.recursive[c]]
        c = self.choose(choices)
        return relay.Call(adt.ctors[c], [self.expr(f, env, max(d - 1, 0)) for f in self.ctor_fields(ty, c)])

    def construct_via_value(self, ty: AdtT, env, d) -> relay.Expr:
        """A constructor used as a function value: ``let %f = Ctor; %f(fields)``."""
        adt = self.adts[ty.index]
        c = self.choose([c for c in range(len(adt.ctors)) if not adt.recursive[c]])
        fields = self.ctor_fields(ty, c)
        fty = FuncT(fields, ty)
        var = self.var(fty, "ctor")
        call = relay.Call(var, [self.expr(f, env, d) for f in fields])
        return relay.Let(var, adt.ctors[c], call)

    def pattern(self, ty, depth: int, binds: list):
        """A pattern for values of ``ty``; variables it binds are appended to ``binds``."""
        kind = self.choose(["var", "wild"] + (["nested"] * 4 if depth > 0 and isinstance(ty, (AdtT, TupleT)) else []))
        if kind == "var":
            var = self.var(ty, "m")
            binds.append((var, ty))
            return relay.PatternVar(var)
        if kind == "wild":
            return relay.PatternWildcard()
        if isinstance(ty, TupleT):
            return relay.PatternTuple([self.pattern(f, depth - 1, binds) for f in ty.fields])
        c = self.draw(st.integers(0, len(self.adts[ty.index].ctors) - 1))
        subs = [self.pattern(f, depth - 1, binds) for f in self.ctor_fields(ty, c)]
        return relay.PatternConstructor(self.adts[ty.index].ctors[c], subs)

    def irrefutable(self, ty, depth: int, binds: list):
        """A pattern every value of ``ty`` matches: a variable, a wildcard or a tuple of those."""
        if isinstance(ty, TupleT) and depth > 0 and self.flip(1, 3):
            return relay.PatternTuple([self.irrefutable(f, depth - 1, binds) for f in ty.fields])
        if self.flip():
            var = self.var(ty, "m")
            binds.append((var, ty))
            return relay.PatternVar(var)
        return relay.PatternWildcard()

    def match(self, ty, env, depth) -> relay.Expr:
        """A complete ``match``: one clause per constructor, or random patterns and a catch-all."""
        d = depth - 1
        candidates = [(v, t) for v, t in env if isinstance(t, (AdtT, TupleT))]
        if candidates and self.flip(2, 3):
            scrutinee, sty = self.choose(candidates)
        else:
            sty = (
                self.adt_instance()
                if self.adts and self.flip(3, 4)
                else TupleT(tuple(self.data_type(1) for _ in range(self.draw(st.integers(1, 3)))))
            )
            scrutinee = self.expr(sty, env, d)
        clauses = []
        if isinstance(sty, AdtT) and self.flip():
            adt = self.adts[sty.index]
            for c in range(len(adt.ctors)):
                binds: list = []
                subs = [self.irrefutable(f, 1, binds) for f in self.ctor_fields(sty, c)]
                clauses.append(
                    relay.Clause(relay.PatternConstructor(adt.ctors[c], subs), self.expr(ty, env + binds, d))
                )
        else:
            for _ in range(self.draw(st.integers(0, 3))):
                binds = []
                lhs = self.pattern(sty, 3, binds)
                clauses.append(relay.Clause(lhs, self.expr(ty, env + binds, d)))
            binds = []
            catch_all = self.irrefutable(sty, 1, binds)
            clauses.append(relay.Clause(catch_all, self.expr(ty, env + binds, d)))
        return relay.Match(scrutinee, clauses, complete=True)

    def fold(self, ty, env, d) -> relay.Expr:
        """Structural recursion over a recursive ADT value in scope, by a generated global."""
        values = [(v, t) for v, t in env if isinstance(t, AdtT) and any(self.adts[t.index].recursive)]
        value, vty = self.choose(values)
        key = (vty, ty)
        if key in self._folding:
            # Inside this fold's own body only the structural calls made below may recurse.
            return self.expr(ty, env, 0)
        if key not in self.folds:
            if self.global_count >= self.max_globals:
                return self.expr(ty, env, 0)
            self.global_count += 1
            gvar = relay.GlobalVar(self.name("fold"))
            self.folds[key] = gvar
            self._folding.add(key)
            param = self.var(vty, "t")
            adt = self.adts[vty.index]
            clauses = []
            for c in range(len(adt.ctors)):
                fields = self.ctor_fields(vty, c)
                fvars = [self.var(f, "f") for f in fields]
                body_env = [(param, vty)] + list(zip(fvars, fields))
                lets = []
                for fv, fty in zip(fvars, fields):
                    if fty == vty:
                        r = self.var(ty, "r")
                        lets.append((r, relay.Call(gvar, [fv])))
                        body_env.append((r, ty))
                body = self.expr(ty, body_env, min(d, 2))
                for r, call in reversed(lets):
                    body = relay.Let(r, call, body)
                pattern = relay.PatternConstructor(adt.ctors[c], [relay.PatternVar(v) for v in fvars])
                clauses.append(relay.Clause(pattern, body))
            func = relay.Function([param], relay.Match(param, clauses), self.relay_type(ty))
            self._folding.discard(key)
            self.globals.append(Global(gvar, FuncT((vty,), ty), "fold"))
            self.module[gvar] = func
        return relay.Call(self.folds[key], [value])

    # -- globals and recursion ---------------------------------------------------------------------

    def call_global(self, ty, env, d) -> relay.Expr:
        existing = [g for g in self.globals if g.type.ret == ty and g.kind != "fold"]
        kind = self.choose((["reuse"] if existing else []) + ["new"] + ([] if _returns_function(ty) else ["recursive"]))
        if kind != "reuse" and self.global_count >= self.max_globals:
            if not existing:
                return self.expr(ty, env, 0)
            kind = "reuse"
        if kind == "reuse":
            g = self.choose(existing)
        elif kind == "new":
            g = self.new_global(self.func_type(2, ret=ty), d)
        else:
            g = self.new_recursive_global(ty, d)
        if g.fuel:
            return relay.Call(g.gvar, [self.fuel(env)] + [self.expr(p, env, d) for p in g.type.params[1:]])
        return relay.Call(g.gvar, [self.expr(p, env, d) for p in g.type.params])

    def fuel(self, env) -> relay.Expr:
        """A small recursion depth: a constant 0..4, or an int32 scalar in scope clipped to it."""
        scalars = [v for v, t in env if t == FUEL]
        if scalars and self.flip(1, 3):
            return relay.clip(self.choose(scalars), 0, 4)
        return relay.const(np.int32(self.draw(st.integers(0, 4))))

    def new_global(self, fty: FuncT, d) -> Global:
        # A global becomes callable only once its body is complete: the call graph stays acyclic
        # apart from the bounded self-recursion of fuel and fold globals.
        self.global_count += 1
        gvar = relay.GlobalVar(self.name("g"))
        g = Global(gvar, fty)
        params = [self.var(p, "a") for p in fty.params]
        body = self.expr(fty.ret, list(zip(params, fty.params)), max(d, 1))
        self.module[gvar] = relay.Function(params, body, self.relay_type(fty.ret))
        self.globals.append(g)
        return g

    def fuel_body(self, callee: relay.Expr, n: relay.Var, params: list, ret, env: list, d: int) -> relay.Expr:
        """``if (n <= 0) { base } else { ... callee(n - 1, ...) ... }``, the call in tail position or not."""
        inner = env + [(n, FUEL)] + params
        base = self.expr(ret, inner, d)
        step = relay.subtract(n, relay.const(np.int32(1)))
        call = relay.Call(callee, [step] + [self.expr(t, inner, max(d - 1, 0)) for _, t in params])
        if self.flip():
            recur = call  # a self tail call: compiled as a loop
        else:
            r = self.var(ret, "r")
            recur = relay.Let(r, call, self.expr(ret, inner + [(r, ret)], d))
        return relay.If(relay.less_equal(n, relay.const(np.int32(0))), base, recur)

    def new_recursive_global(self, ret, d) -> Global:
        gvar = relay.GlobalVar(self.name("rec"))
        ptypes = [self.data_type(1) for _ in range(self.draw(st.integers(0, 2)))]
        g = Global(gvar, FuncT((FUEL, *ptypes), ret), "fuel")
        self.global_count += 1
        n = relay.Var(self.name("n"), self.relay_type(FUEL))
        params = [(self.var(t, "a"), t) for t in ptypes]
        body = self.fuel_body(gvar, n, params, ret, [], max(d, 1))
        self.module[gvar] = relay.Function([n] + [v for v, _ in params], body, self.relay_type(ret))
        self.globals.append(g)
        return g

    def recursive_closure(self, ty, env, d) -> relay.Expr:
        """``let %f = fn (%n, ...) { ... %f(%n - 1, ...) ... }; %f(fuel, ...)`` (captures ``env``)."""
        ptypes = [self.data_type(1) for _ in range(self.draw(st.integers(0, 1)))]
        fty = FuncT((FUEL, *ptypes), ty)
        fvar = self.var(fty, "loop")
        n = relay.Var(self.name("n"), self.relay_type(FUEL))
        params = [(self.var(t, "a"), t) for t in ptypes]
        body = self.fuel_body(fvar, n, params, ty, env, d)
        func = relay.Function([n] + [v for v, _ in params], body, self.relay_type(ty))
        call = relay.Call(fvar, [self.fuel(env)] + [self.expr(t, env, d) for t in ptypes])
        return relay.Let(fvar, func, call)

    def global_as_value(self, ty: FuncT, env, d) -> relay.Expr:
        """A global function used as a value (not called directly)."""
        # Never a fuel-bounded global: called through a value, its depth would be unbounded.
        existing = [g for g in self.globals if g.type == ty and not g.fuel]
        if existing:
            return self.choose(existing).gvar
        if self.global_count >= self.max_globals:
            return self.function(ty, env, d)
        return self.new_global(ty, d).gvar

    # -- tensor operators ------------------------------------------------------------------------

    def tensor_op(self, ty: TensorT, env, d) -> relay.Expr:
        kind = _kind(ty.dtype)
        shape, dtype = ty.shape, ty.dtype
        options = []
        if _UNARY[kind]:
            options.append(lambda: _op(self.choose(list(_UNARY[kind])))(self.expr(ty, env, d)))
        options += [lambda: self.binary(ty, env, d)] * 2
        if kind == "bool":
            options += [lambda: self.compare(ty, env, d)] * 2
        casts = [s for s in self.dtypes if _can_cast(s, dtype)] or [s for s in DTYPES if _can_cast(s, dtype)]
        options.append(lambda: relay.cast(self.expr(TensorT(shape, self.choose(casts)), env, d), dtype))
        if len(shape) < 2:
            options.append(lambda: self.reduce(ty, env, d))
        if kind == "float" and len(shape) == 2:
            options += [lambda: self.dense(ty, env, d)] * 3
        if any(n >= 2 for n in shape):
            options.append(lambda: self.concatenate(ty, env, d))
        if shape:
            options.append(lambda: self.split(ty, env, d))
        options.append(lambda: self.reshape(ty, env, d))
        options.append(
            lambda: relay.where(self.expr(TensorT(shape, "bool"), env, d), self.expr(ty, env, d), self.expr(ty, env, d))
        )
        return self.choose(options)()

    def binary(self, ty: TensorT, env, d) -> relay.Expr:
        kind = _kind(ty.dtype)
        names = list(_BINARY[kind])
        if kind in ("int", "uint"):
            # multiply only by a small constant: products of products overflow int32 (undefined
            # behaviour in TVM's kernels, so executors may legitimately differ).
            names.append("multiply")
        name = self.choose(names)
        lhs = self.expr(ty, env, d)
        if name == "multiply" and kind in ("int", "uint"):
            return relay.multiply(
                lhs, relay.const(np.array(self.draw(st.integers(0, 2)), dtype=ty.dtype), dtype=ty.dtype)
            )
        rhs_ty = TensorT((), ty.dtype) if ty.shape and self.flip(1, 4) else ty  # broadcasting
        return _op(name)(lhs, self.expr(rhs_ty, env, d))

    def compare(self, ty: TensorT, env, d) -> relay.Expr:
        src = TensorT(
            ty.shape, self.choose([t for t in self.dtypes if t != "bool"] or [t for t in DTYPES if t != "bool"])
        )
        return _op(self.choose(list(_COMPARE)))(self.expr(src, env, d), self.expr(src, env, d))

    def reduce(self, ty: TensorT, env, d) -> relay.Expr:
        axis = self.draw(st.integers(0, len(ty.shape)))
        size = self.draw(st.integers(1, 3))
        src = TensorT(ty.shape[:axis] + (size,) + ty.shape[axis:], ty.dtype)
        name = self.choose(list(_REDUCE[_kind(ty.dtype)]))
        return _op(name)(self.expr(src, env, d), axis=axis)

    def dense(self, ty: TensorT, env, d) -> relay.Expr:
        rows, units = ty.shape
        k = self.draw(st.integers(1, 3))
        x = self.expr(TensorT((rows, k), ty.dtype), env, d)
        w = self.expr(TensorT((units, k), ty.dtype), env, d)
        return relay.nn.dense(x, w)

    def concatenate(self, ty: TensorT, env, d) -> relay.Expr:
        axis = self.choose([i for i, n in enumerate(ty.shape) if n >= 2])
        first = self.draw(st.integers(1, ty.shape[axis] - 1))
        parts = []
        for size in (first, ty.shape[axis] - first):
            shape = ty.shape[:axis] + (size,) + ty.shape[axis + 1 :]
            parts.append(self.expr(TensorT(shape, ty.dtype), env, d))
        return relay.concatenate(parts, axis)

    def split(self, ty: TensorT, env, d) -> relay.Expr:
        axis = self.draw(st.integers(0, len(ty.shape) - 1))
        sections = self.draw(st.integers(2, 3))
        shape = ty.shape[:axis] + (ty.shape[axis] * sections,) + ty.shape[axis + 1 :]
        parts = relay.split(self.expr(TensorT(shape, ty.dtype), env, d), sections, axis).astuple()
        return relay.TupleGetItem(parts, self.draw(st.integers(0, sections - 1)))

    def reshape(self, ty: TensorT, env, d) -> relay.Expr:
        size = int(np.prod(ty.shape, dtype=np.int64))
        shapes = [s for s in SHAPES if int(np.prod(s, dtype=np.int64)) == size and s != ty.shape]
        shapes.append((size,))
        src = self.choose(shapes)
        return relay.reshape(self.expr(TensorT(src, ty.dtype), env, d), list(ty.shape))

    # -- programs --------------------------------------------------------------------------------

    def case(self, index: int) -> tuple[relay.GlobalVar, list, tuple, Any]:
        """One independent program: a global ``@case<i>`` with its parameters, arguments and type."""
        ptypes = [self.param_type() for _ in range(self.draw(st.integers(0, 3)))]
        params = [self.var(t, "in") for t in ptypes]
        ret = self.data_type(2) if self.flip(7, 8) else RefT(self.data_type(1, functions=False))
        body = self.expr(ret, list(zip(params, ptypes)), self.max_depth)
        gvar = relay.GlobalVar(f"case{index}")
        self.module[gvar] = relay.Function(params, body, self.relay_type(ret))
        args = tuple(self.argument(t) for t in ptypes)
        return gvar, params, args, ret

    def param_type(self) -> Ty:
        if self.flip(1, 5):
            return TupleT(tuple(self.tensor_type() for _ in range(self.draw(st.integers(1, 2)))))
        return self.tensor_type()

    def argument(self, ty) -> Any:
        if isinstance(ty, TupleT):
            return tuple(self.argument(f) for f in ty.fields)
        return self.constant(ty).data.numpy()


def generate(
    draw,
    cases: int = 1,
    max_depth: int = 4,
    max_size: int = 60,
    max_adts: int = 2,
    odd_names: bool = True,
    dynamic: bool = False,
) -> Program:
    """Draw a module with ``cases`` independent programs, called from ``@main``; with
    ``dynamic``, about half the variables' tensor annotations have ``?`` dimensions."""
    gen = Generator(draw, max_depth=max_depth, max_size=max_size * cases, odd_names=odd_names, dynamic=dynamic)
    gen.choose_palette()
    gen.define_adts(draw(st.integers(0, max_adts)))
    built = []
    for index in range(cases):
        gen.size_left = max(gen.size_left, max_size)
        built.append(gen.case(index))
    main_params: list[relay.Var] = []
    calls: list[relay.Call] = []
    args: list[Any] = []
    rets: list[Ty] = []
    for gvar, params, case_args, ret in built:
        fresh = [relay.Var(p.name_hint, p.type_annotation) for p in params]
        main_params += fresh
        calls.append(relay.Call(gvar, fresh))
        args += case_args
        rets.append(ret)
    mod = gen.module
    if cases == 1:
        mod["main"] = relay.Function(main_params, calls[0], gen.relay_type(rets[0]))
    else:
        mod["main"] = relay.Function(main_params, relay.Tuple(calls), gen.relay_type(TupleT(tuple(rets))))
    mod = relay.transform.InferType()(mod)
    return Program(mod, tuple(args), [g for g, *_ in built], [a for _, _, a, _ in built])


@st.composite
def programs(
    draw, max_depth: int = 4, max_size: int = 60, max_adts: int = 2, odd_names: bool = True, dynamic: bool = False
) -> Program:
    """A random well-typed module (one program) with arguments for ``@main``."""
    return generate(draw, 1, max_depth, max_size, max_adts, odd_names, dynamic)


@st.composite
def batches(
    draw,
    cases: int = 8,
    max_depth: int = 4,
    max_size: int = 60,
    max_adts: int = 2,
    odd_names: bool = True,
    dynamic: bool = False,
) -> Program:
    """``cases`` independent random programs in one module; ``@main`` returns their results."""
    return generate(draw, cases, max_depth, max_size, max_adts, odd_names, dynamic)


# ----------------------------------------------------------------------------------------
# Coverage


#: Operator families the generator must reach (see :func:`node_counts`).
OP_FAMILIES = {
    "elementwise": (
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
        "negative",
        "abs",
        "exp",
        "tanh",
        "sigmoid",
        "floor",
        "logical_not",
        "logical_and",
        "logical_or",
        "where",
        "cast",
    ),
    "comparison": _COMPARE,
    "reduction": ("sum", "max", "min", "mean", "all", "any"),
    "dense": ("nn.dense",),
    "concatenate": ("concatenate",),
    "split": ("split",),
    "reshape": ("reshape",),
}

#: Program features the generator must reach (keys ``"feature:<name>"`` of :func:`node_counts`).
FEATURES = (
    "closure_capture",
    "recursive_closure",
    "call_of_function_value",
    "function_argument",
    "global_as_value",
    "constructor_as_value",
    "recursive_global",
    "recursive_adt",
    "polymorphic_adt",
    "nested_pattern",
    "reference_in_closure",
)


def _is_global(gvar: relay.GlobalVar, node) -> bool:
    return isinstance(node, relay.GlobalVar) and node.same_as(gvar)


def node_counts(mod: tvm.IRModule) -> Counter:
    """How often each Relay node kind, pattern kind, operator, dtype and feature occurs in ``mod``.

    Keys are node class names (``"Let"``), pattern class names (``"PatternTuple"``),
    ``"op:<name>"``, ``"family:<operator family>"`` (:data:`OP_FAMILIES`), ``"dtype:<dtype>"``
    (dtypes of every typed expression) and ``"feature:<name>"`` (:data:`FEATURES`).
    """
    counts: Counter = Counter()
    families = {op: family for family, ops in OP_FAMILIES.items() for op in ops}

    def pattern(p, nested):
        counts[type(p).__name__] += 1
        if nested and isinstance(p, (relay.PatternConstructor, relay.PatternTuple)):
            counts["feature:nested_pattern"] += 1
        for sub in getattr(p, "patterns", ()):
            pattern(sub, True)

    def as_value(expr):
        if isinstance(expr, relay.GlobalVar):
            counts["feature:global_as_value"] += 1
        elif isinstance(expr, relay.Constructor):
            counts["feature:constructor_as_value"] += 1

    def visit(node):
        counts[type(node).__name__] += 1
        if isinstance(node, relay.Call):
            if isinstance(node.op, tvm.ir.Op):
                counts["op:" + node.op.name] += 1
                counts["family:" + families.get(node.op.name, "other")] += 1
            elif not isinstance(node.op, (relay.GlobalVar, relay.Constructor)):
                counts["feature:call_of_function_value"] += 1
            for arg in node.args:
                as_value(arg)
                if isinstance(_type_of(arg), relay.FuncType) and not isinstance(node.op, relay.Constructor):
                    counts["feature:function_argument"] += 1
        elif isinstance(node, relay.Let):
            as_value(node.value)
            if isinstance(node.value, relay.Function) and any(
                v.same_as(node.var) for v in relay.analysis.free_vars(node.value)
            ):
                counts["feature:recursive_closure"] += 1
        elif isinstance(node, relay.Tuple):
            for field in node.fields:
                as_value(field)
        elif isinstance(node, relay.Function):
            free = relay.analysis.free_vars(node)
            if free:
                counts["feature:closure_capture"] += 1
                if any(isinstance(v.checked_type, relay.RefType) for v in free):
                    counts["feature:reference_in_closure"] += 1
        elif isinstance(node, relay.Match):
            for clause in node.clauses:
                pattern(clause.lhs, False)
        if isinstance(node, (tvm.ir.Op, relay.Constructor)):
            return
        for t in _tensor_types(_type_of(node)):
            counts["dtype:" + t.dtype] += 1

    for gvar, func in mod.functions.items():
        if not isinstance(func, relay.Function):
            continue
        relay.analysis.post_order_visit(func, visit)
        if nodes_where(func.body, functools.partial(_is_global, gvar)):
            counts["feature:recursive_global"] += 1
    for gtv in mod.get_global_type_vars():
        data = mod[gtv]
        if data.type_vars:
            counts["feature:polymorphic_adt"] += 1
        if any(_mentions(field, gtv) for ctor in data.constructors for field in ctor.inputs):
            counts["feature:recursive_adt"] += 1
    return counts


def _type_of(expr) -> relay.Type | None:
    try:
        return expr.checked_type
    except (ValueError, tvm.error.TVMError):
        return None


def _mentions(ty, gtv) -> bool:
    """Whether type ``ty`` refers to the ADT ``gtv``."""
    if isinstance(ty, relay.GlobalTypeVar):
        return ty.name_hint == gtv.name_hint  # (Type.same_as recurses forever in this TVM)
    if isinstance(ty, relay.TypeCall):
        return _mentions(ty.func, gtv) or any(_mentions(a, gtv) for a in ty.args)
    if isinstance(ty, relay.TupleType):
        return any(_mentions(f, gtv) for f in ty.fields)
    if isinstance(ty, relay.FuncType):
        return _mentions(ty.ret_type, gtv) or any(_mentions(a, gtv) for a in ty.arg_types)
    if isinstance(ty, relay.RefType):
        return _mentions(ty.value, gtv)
    return False


def _tensor_types(ty):
    if isinstance(ty, relay.TensorType):
        yield ty
    elif isinstance(ty, relay.TupleType):
        for f in ty.fields:
            yield from _tensor_types(f)


# ----------------------------------------------------------------------------------------
# Hostile dynamic shapes


@st.composite
def hostile_programs(draw, arg_sets: int = 8, operators: list | None = None):
    """A small program over ``?`` dimensions around one dynamic-shape operator, with
    ``arg_sets`` hostile argument sets and its numpy reference (a
    :class:`relay_aot.testing.hostile.HostileProgram`; ``operators`` picks among
    :data:`relay_aot.testing.hostile.OPERATORS`)."""
    choices = hostile.Choices(lambda lo, hi: draw(st.integers(lo, hi)))
    return hostile.draw_program(choices, arg_sets, operators)

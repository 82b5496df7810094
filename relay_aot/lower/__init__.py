"""Stage 3: lower prepared Relay (fused, A-normal form) into the control IR.

What happens here, once, for both backends:

* closure conversion: every non-primitive local ``fn`` becomes a lifted :class:`ir.Function`
  whose free variables are explicit captures; a let-bound recursive function refers to itself
  through ``self`` instead of capturing itself;
* kernels: calls of ``Primitive=1`` functions become :class:`ir.KernelCall` (the function is
  lowered once, see ``kernels.py``);
* pattern matching: each clause becomes a list of tag tests along field paths plus the
  variable bindings, tried in clause order on a scrutinee evaluated once;
* self tail calls (of a global, or of a recursive let-bound closure) become
  :class:`ir.TailCall`, which the emitters compile as loops;
* globals and constructors used as values get small wrapper closures.

Evaluation order follows TVM's Relay interpreter: call arguments left to right, then the callee.
"""

from __future__ import annotations

import dataclasses
import re

import tvm
from tvm import relay

from .. import cpu, ir, names
from ..config import Config
from ..dispatch import method_for
from ..errors import RelayAotError, UnsupportedError
from ..ir.escapes import mark_escapes
from ..kernels import KernelTable
from ..recursion import deep_recursion
from .types import TypeLowering, untyped_tensor

Binding = ir.Var | ir.Kernel
Result = ir.Var | ir.TailCall

# Relay passes (ANF) name new variables with TVM's Var::GenSym, "x_<n>" from a process-wide
# counter. Kept as hints, they would make the generated source -- and so the build cache key --
# depend on what the process compiled before. (A user's own variable named like that loses its
# name in comments too: the source must not depend on guessing which is which.)
_GENSYM = re.compile(r"x_[0-9]+")


def is_primitive(func: relay.Function) -> bool:
    """Whether ``func`` is a fused primitive function (``Primitive=1``)."""
    return func.attrs is not None and "Primitive" in func.attrs and int(func.attrs["Primitive"]) == 1


def _returns_var(body: relay.Expr, var: relay.Var) -> bool:
    """Whether ``body`` just returns ``var`` (possibly through ``let %a = %var; ...`` aliases)."""
    while isinstance(body, relay.Let) and isinstance(body.value, relay.Var) and body.value.same_as(var):
        var, body = body.var, body.body
    return isinstance(body, relay.Var) and body.same_as(var)


_PATTERN_TEXT = {
    relay.PatternWildcard: lambda p: "_",
    relay.PatternVar: lambda p: f"%{p.var.name_hint}",
    relay.PatternConstructor: lambda p: (
        p.constructor.name_hint + (f"({', '.join(pattern_text(s) for s in p.patterns)})" if len(p.patterns) else "")
    ),
    relay.PatternTuple: lambda p: f"({', '.join(pattern_text(s) for s in p.patterns)})",
}


def pattern_text(pat) -> str:
    """Relay-like text of a match pattern, for comments."""
    handler = method_for(_PATTERN_TEXT, pat)
    return handler(pat) if handler is not None else type(pat).__name__


class ProgramLowering:
    """Lowers a prepared module: one instance per compilation."""

    def __init__(self, mod: tvm.IRModule, model: str, target: tvm.target.Target, config: Config):
        self.mod = mod
        self.types = TypeLowering(mod)
        self.kernels = KernelTable(model, target, self.types.lower, config)
        self.cpu = cpu.requirement(target)
        self.functions: list[ir.Function] = []
        self.constants: list = []
        self._constant_ids: dict[tuple, int] = {}
        #: (global name, type arguments) -> function id; type arguments are () for the generic
        #: version of a polymorphic global, and concrete types for a specialised one
        self._global_ids: dict[tuple, str] = {}
        self._pending: list[tuple[relay.GlobalVar, tuple]] = []
        self._wrappers: dict[object, str] = {}
        self._var_count = 0
        self._func_count = 0

    # -- naming --------------------------------------------------------------------------

    def new_var(self, ty: ir.Type, hint: str = "") -> ir.Var:
        """A fresh variable."""
        var = ir.Var(self._var_count, ty, hint)
        self._var_count += 1
        return var

    def name_of(self, var: relay.Var | None) -> str:
        """The Relay name of ``var`` for comments; "" for names TVM's passes made up (``_GENSYM``)."""
        if var is None or _GENSYM.fullmatch(var.name_hint):
            return ""
        return var.name_hint

    def new_func_id(self) -> str:
        """A fresh function id."""
        func_id = f"{names.FUNC}{self._func_count}"
        self._func_count += 1
        return func_id

    def global_id(self, gvar: relay.GlobalVar, type_args: tuple = ()) -> str:
        """The function id of global ``gvar`` -- specialised to ``type_args`` if given -- queueing
        it for lowering on first use.

        A polymorphic global called with concrete type arguments (``@map`` on a list of int32)
        is compiled once per instantiation: its values then have C++ types (unboxed scalars,
        typed closure calls) instead of the generic version's ``ObjectRef``.
        """
        name = gvar.name_hint
        key = (name, type_args)
        if key not in self._global_ids:
            if not isinstance(self.mod[name], relay.Function):
                raise UnsupportedError(f"global @{name} is not a Relay function")
            self._global_ids[key] = self.new_func_id()
            self._pending.append((self.mod.get_global_var(name), type_args))
        return self._global_ids[key]

    def specialisation(self, gvar: relay.GlobalVar, type_args: tuple) -> tuple:
        """``type_args`` if a call of ``gvar`` with them should use a specialised version, else ()."""
        func = self.mod[gvar.name_hint]
        params = getattr(func, "type_params", None) or []
        if not params or len(params) != len(type_args) or not all(ir.is_concrete(t) for t in type_args):
            return ()
        return type_args

    def constant(self, const: relay.Constant) -> int:
        """Index of ``const`` in the program's constant table."""
        array = ir.constant_array(const.data)
        key = (ir.constant_dtype(array), array.shape, array.tobytes())  # equal constants share a slot
        if key not in self._constant_ids:
            self._constant_ids[key] = len(self.constants)
            self.constants.append(array)
        return self._constant_ids[key]

    # -- whole program -------------------------------------------------------------------

    def run(self) -> ir.Program:
        """Lower ``main`` and everything it reaches."""
        main = self.mod.get_global_var("main")
        main_id = self.global_id(main)
        try:
            with deep_recursion():
                while self._pending:
                    self._lower_global(*self._pending.pop(0))
        except RecursionError:
            raise UnsupportedError("the Relay program is nested too deeply to lower") from None
        main_func = self.mod["main"]
        params = [ir.Param(p.name_hint, self.types.lower(p.checked_type)) for p in main_func.params]
        self.functions.sort(key=lambda f: int(f.id[len(names.FUNC) :]))
        return ir.Program(
            functions=self.functions,
            main=main_id,
            params=params,
            ret=self.types.lower(main_func.ret_type),
            kernels=self.kernels.kernels,
            constants=self.constants,
            adts=self.types.adts,
            cpu=self.cpu,
        )

    def _lower_global(self, gvar: relay.GlobalVar, type_args: tuple) -> None:
        func = self.mod[gvar]
        name = "@" + gvar.name_hint
        subst = None
        if type_args:
            subst = {tp.name_hint: t for tp, t in zip(func.type_params, type_args)}
        body = FunctionLowering(self, name, self_global=(gvar.name_hint, type_args), subst=subst)
        params = [body.bind_param(p) for p in func.params]
        block = body.block(func.body, tail=True)
        self.functions.append(
            ir.Function(
                id=self._global_ids[(gvar.name_hint, type_args)],
                hint=name,
                params=params,
                ret=self.types.lower(func.ret_type, subst),
                body=block,
                has_tail_call=body.has_tail_call,
                signature=self.signature(name, func, subst),
            )
        )

    def signature(self, name: str, func: relay.Function, subst: dict | None = None) -> str:
        """Relay-like signature text of ``func``, for comments."""
        fmt = lambda ty: ir.format_type(self.types.lower(ty, subst), self.types.adts)  # noqa: E731
        params = ", ".join(f"%{self.name_of(p)}: {fmt(p.checked_type)}" for p in func.params)
        ret = func.ret_type if func.ret_type is not None else func.body.checked_type
        return f"{name}({params}) -> {fmt(ret)}"

    def global_wrapper(self, gvar: relay.GlobalVar) -> str:
        """A closure function that calls global ``gvar`` (for globals used as values)."""
        key = ("global", gvar.name_hint)
        if key not in self._wrappers:
            callee = self.global_id(gvar)
            func = self.mod[gvar.name_hint]
            params = [self.new_var(self.types.lower(p.checked_type), self.name_of(p)) for p in func.params]
            ret = self.types.lower(func.ret_type)
            result = self.new_var(ret)
            body = ir.Block([ir.Let(result, ir.CallGlobal(callee, list(params)))], result)
            self._wrappers[key] = self._add_wrapper(f"@{gvar.name_hint} as a value", params, ret, body)
        return self._wrappers[key]

    def constructor_wrapper(self, ctor: relay.Constructor) -> str:
        """A closure function that applies constructor ``ctor`` (for constructors used as values)."""
        adt, index = self.types.constructor(ctor)
        key = ("ctor", adt, index)
        if key not in self._wrappers:
            params = [self.new_var(ir.AnyType()) for _ in ctor.inputs]
            ret = ir.AdtType(adt, ())
            result = self.new_var(ret)
            body = ir.Block([ir.Let(result, ir.MakeAdt(adt, index, list(params)))], result)
            self._wrappers[key] = self._add_wrapper(f"constructor {ctor.name_hint} as a value", params, ret, body)
        return self._wrappers[key]

    def _add_wrapper(self, hint: str, params: list[ir.Var], ret: ir.Type, body: ir.Block) -> str:
        func_id = self.new_func_id()
        self.functions.append(ir.Function(func_id, hint, params, ret, body, is_closure=True, signature=hint))
        return func_id


class FunctionLowering:
    """Lowers the body of one function (global or lifted closure) into statements."""

    def __init__(
        self,
        prog: ProgramLowering,
        hint: str,
        self_global: tuple | None = None,
        self_closure: relay.Var | None = None,
        subst: dict | None = None,
    ):
        self.prog = prog
        self.hint = hint
        self.self_global = self_global  # (name, type arguments) of the global being lowered
        self.subst = subst  # type variable name -> type, in a specialised polymorphic global
        self.self_closure = self_closure
        self.env: dict[relay.Var, Binding] = {}
        #: variables known to hold a closure of a given lifted function (by variable id)
        self.known: dict[int, str] = {}
        self.params: list[ir.Var] = []
        self.has_tail_call = False
        self._handlers = {
            relay.Var: self._var,
            relay.GlobalVar: self._global_var,
            relay.Constant: self._constant,
            relay.Tuple: self._tuple,
            relay.TupleGetItem: self._tuple_get_item,
            relay.Let: self._let,
            relay.If: self._if,
            relay.Function: self._function,
            relay.Call: self._call,
            relay.Constructor: self._constructor,
            relay.Match: self._match,
            relay.RefCreate: self._ref_create,
            relay.RefRead: self._ref_read,
            relay.RefWrite: self._ref_write,
        }
        self._patterns = {
            relay.PatternWildcard: self._pattern_wildcard,
            relay.PatternVar: self._pattern_var,
            relay.PatternConstructor: self._pattern_constructor,
            relay.PatternTuple: self._pattern_tuple,
        }

    # -- helpers ---------------------------------------------------------------------------

    def lower_type(self, ty: relay.Type) -> ir.Type:
        """A Relay type of this function's body as a control-IR type."""
        return self.prog.types.lower(ty, self.subst)

    def bind_param(self, param: relay.Var) -> ir.Var:
        """Bind a Relay parameter to a fresh variable."""
        var = self.prog.new_var(self.lower_type(param.checked_type), self.prog.name_of(param))
        self.env[param] = var
        self.params.append(var)
        return var

    def lookup(self, var: relay.Var) -> Binding:
        """The binding of Relay variable ``var``."""
        try:
            return self.env[var]
        except KeyError:
            raise RelayAotError(f"variable %{var.name_hint} is not bound in {self.hint}") from None

    def result_var(self, expr: relay.Expr, dest: relay.Var | None) -> ir.Var:
        """A fresh variable for the value of ``expr``, named after ``dest`` if given."""
        return self.prog.new_var(self.lower_type(expr.checked_type), self.prog.name_of(dest))

    def emit(self, stmts: list[ir.Statement], expr, rhs: ir.Rhs, dest, note: str = "") -> ir.Var:
        """Append ``let v = rhs`` for the value of ``expr`` and return ``v``."""
        var = self.result_var(expr, dest)
        stmts.append(ir.Let(var, rhs, note))
        return var

    def atoms(self, exprs, stmts: list[ir.Statement]) -> list[ir.Var]:
        """Lower ``exprs`` left to right to variables."""
        return [self.value(e, stmts) for e in exprs]

    def value(self, expr: relay.Expr, stmts: list[ir.Statement], dest: relay.Var | None = None) -> ir.Var:
        """Lower ``expr`` (not in tail position) to a variable holding its value."""
        result = self.expr(expr, stmts, False, dest)
        assert isinstance(result, ir.Var)
        return result

    def block(self, expr: relay.Expr, tail: bool) -> ir.Block:
        """Lower ``expr`` into a block of its own."""
        stmts: list[ir.Statement] = []
        result = self.expr(expr, stmts, tail, None)
        return ir.Block(stmts, result)

    def expr(self, expr: relay.Expr, stmts: list[ir.Statement], tail: bool, dest: relay.Var | None) -> Result:
        """Lower ``expr``, appending statements; in tail position the result may be a tail call."""
        handler = method_for(self._handlers, expr)
        if handler is None:
            raise UnsupportedError(f"unsupported Relay construct {type(expr).__name__} in {self.hint}")
        return handler(expr, stmts, tail, dest)

    # -- one handler per Relay expression node ---------------------------------------------

    def _var(self, expr, stmts, tail, dest):
        binding = self.lookup(expr)
        if isinstance(binding, ir.Kernel):
            raise UnsupportedError(f"a fused primitive function is used as a value in {self.hint}")
        return binding

    def _global_var(self, expr, stmts, tail, dest):
        wrapper = self.prog.global_wrapper(expr)
        return self.emit(stmts, expr, ir.MakeClosure(wrapper, []), dest, f"@{expr.name_hint} as a value")

    def _constant(self, expr, stmts, tail, dest):
        index = self.prog.constant(expr)
        return self.emit(stmts, expr, ir.Constant(index, zeros=not self.prog.constants[index].any()), dest, "constant")

    def _tuple(self, expr, stmts, tail, dest):
        return self.emit(stmts, expr, ir.MakeTuple(self.atoms(expr.fields, stmts)), dest, "tuple")

    def _tuple_get_item(self, expr, stmts, tail, dest):
        value = self.value(expr.tuple_value, stmts)
        return self.emit(stmts, expr, ir.Proj(value, int(expr.index)), dest, f".{int(expr.index)}")

    def _let(self, expr, stmts, tail, dest):
        # Let chains in A-normal form are thousands deep: walk them with a loop, not recursion.
        while isinstance(expr, relay.Let):
            var, value = expr.var, expr.value
            if isinstance(value, relay.Function) and is_primitive(value):
                if any(untyped_tensor(p.checked_type) is not None for p in value.params):
                    self.env[var] = value  # no kernel can take it: its call is refused, naming the argument
                else:
                    self.env[var] = self.prog.kernels.add(value)
            elif isinstance(value, relay.Function):
                recursive = any(v.same_as(var) for v in relay.analysis.free_vars(value))
                self.env[var] = self.closure(value, stmts, var, recursive)
            elif isinstance(value, relay.Var):
                self.env[var] = self.lookup(value)
            else:
                result = self.expr(value, stmts, tail and _returns_var(expr.body, var), var)
                if isinstance(result, ir.TailCall):
                    return result
                self.env[var] = result
            expr = expr.body
        return self.expr(expr, stmts, tail, dest)

    def _if(self, expr, stmts, tail, dest):
        cond = self.value(expr.cond, stmts)
        result = self.result_var(expr, dest)
        then = self.block(expr.true_branch, tail)
        else_ = self.block(expr.false_branch, tail)
        stmts.append(ir.If(cond, then, else_, result))
        return result

    def _function(self, expr, stmts, tail, dest):
        if is_primitive(expr):
            raise UnsupportedError(f"a fused primitive function is used as a value in {self.hint}")
        return self.closure(expr, stmts, dest, recursive=False)

    def _constructor(self, expr, stmts, tail, dest):
        wrapper = self.prog.constructor_wrapper(expr)
        return self.emit(stmts, expr, ir.MakeClosure(wrapper, []), dest, f"constructor {expr.name_hint} as a value")

    def _call(self, expr, stmts, tail, dest):
        op = expr.op
        if isinstance(op, tvm.ir.Op):
            raise UnsupportedError(
                f"operator {op.name} is called outside a fused kernel in {self.hint}; "
                "relay_aot compiles operators only through TVM's FuseOps"
            )
        if isinstance(op, relay.Function) and is_primitive(op):
            self._refuse_untyped(expr)
            return self._kernel_call(self.prog.kernels.add(op), expr, stmts, dest)
        if isinstance(op, relay.Var) and isinstance(self.lookup(op), ir.Kernel):
            return self._kernel_call(self.lookup(op), expr, stmts, dest)
        if isinstance(op, relay.Var) and isinstance(self.lookup(op), relay.Function):
            self._refuse_untyped(expr)
            return self._kernel_call(self.prog.kernels.add(self.lookup(op)), expr, stmts, dest)  # refused there
        if isinstance(op, relay.Constructor):
            adt, index = self.prog.types.constructor(op)
            fields = self.atoms(expr.args, stmts)
            return self.emit(stmts, expr, ir.MakeAdt(adt, index, fields), dest, op.name_hint)
        args = self.atoms(expr.args, stmts)
        if isinstance(op, relay.GlobalVar):
            type_args = self.prog.specialisation(op, tuple(self.lower_type(t) for t in expr.type_args))
            if tail and (op.name_hint, type_args) == self.self_global:
                self.has_tail_call = True
                return ir.TailCall(args)
            callee = self.prog.global_id(op, type_args)
            return self.emit(stmts, expr, ir.CallGlobal(callee, args), dest, f"@{op.name_hint}(...)")
        if tail and self.self_closure is not None and isinstance(op, relay.Var) and op.same_as(self.self_closure):
            self.has_tail_call = True
            return ir.TailCall(args)
        closure = self.value(op, stmts)
        if closure.id in self.known:
            func = self.known[closure.id]
            return self.emit(stmts, expr, ir.CallKnown(func, closure, args), dest, f"call of {func}")
        return self.emit(stmts, expr, ir.CallClosure(closure, args), dest, "closure call")

    def _refuse_untyped(self, call: relay.Call) -> None:
        """``UnsupportedError`` naming the argument of a kernel call that is a tensor with no
        element type (see ``types.untyped_tensor``): no kernel can compute on one."""
        for arg in call.args:
            untyped = untyped_tensor(arg.checked_type)
            if untyped is not None:
                hint = getattr(self.lookup(arg), "hint", "") if isinstance(arg, relay.Var) else ""
                name = f"%{hint}" if hint else "an argument"
                shape = ", ".join(str(d) for d in untyped.shape)
                raise UnsupportedError(
                    f"{name} has the type Tensor[({shape}), ], a tensor with no element type (TVM's ONNX importer makes one "
                    f"of an ONNX optional input), and reaches a kernel in {self.hint}: no kernel can compute on it. "
                    "relay_aot takes such a value only where the program passes it along or ignores it"
                )

    def _kernel_call(self, kernel: ir.Kernel, expr, stmts, dest):
        args = self.atoms(expr.args, stmts)
        note = "kernel: " + ", ".join(dict.fromkeys(kernel.ops))
        return self.emit(stmts, expr, ir.KernelCall(kernel.index, args), dest, note)

    def _match(self, expr, stmts, tail, dest):
        scrutinee = self.value(expr.data, stmts)
        result = self.result_var(expr, dest)
        clauses = []
        for clause in expr.clauses:
            tests: list[ir.TagTest] = []
            binds: list[ir.Bind] = []
            self.pattern(clause.lhs, (), tests, binds)
            body = self.block(clause.rhs, tail)
            clauses.append(ir.Clause(tests, binds, body, pattern_text(clause.lhs)))
        stmts.append(ir.Match(scrutinee, clauses, result, self.hint))
        return result

    def _ref_create(self, expr, stmts, tail, dest):
        return self.emit(stmts, expr, ir.RefNew(self.value(expr.value, stmts)), dest, "ref")

    def _ref_read(self, expr, stmts, tail, dest):
        return self.emit(stmts, expr, ir.RefRead(self.value(expr.ref, stmts)), dest, "ref read")

    def _ref_write(self, expr, stmts, tail, dest):
        ref = self.value(expr.ref, stmts)
        value = self.value(expr.value, stmts)
        return self.emit(stmts, expr, ir.RefWrite(ref, value), dest, "ref write")

    # -- patterns: one handler per pattern node ----------------------------------------------

    def pattern(self, pat, path: tuple[int, ...], tests: list[ir.TagTest], binds: list[ir.Bind]) -> None:
        """Add the tests and bindings of ``pat`` applied to the value at ``path``."""
        handler = method_for(self._patterns, pat)
        if handler is None:
            raise UnsupportedError(f"unsupported pattern {type(pat).__name__} in {self.hint}")
        handler(pat, path, tests, binds)

    def _pattern_wildcard(self, pat, path, tests, binds):
        pass

    def _pattern_var(self, pat, path, tests, binds):
        var = self.prog.new_var(self.lower_type(pat.var.checked_type), self.prog.name_of(pat.var))
        self.env[pat.var] = var
        binds.append(ir.Bind(var, path))

    def _pattern_constructor(self, pat, path, tests, binds):
        adt, index = self.prog.types.constructor(pat.constructor)
        tests.append(ir.TagTest(path, self.prog.types.adts[adt].ctors[index].tag))
        for i, sub in enumerate(pat.patterns):
            self.pattern(sub, path + (i,), tests, binds)

    def _pattern_tuple(self, pat, path, tests, binds):
        for i, sub in enumerate(pat.patterns):
            self.pattern(sub, path + (i,), tests, binds)

    # -- closures --------------------------------------------------------------------------

    def closure(self, func: relay.Function, stmts, dest: relay.Var | None, recursive: bool) -> ir.Var:
        """Lift ``func`` into its own function and bind a closure value over its free variables."""
        func_id = self.prog.new_func_id()
        name = f"%{self.prog.name_of(dest)}" if self.prog.name_of(dest) else "fn"
        hint = f"{name} in {self.hint}"
        inner = FunctionLowering(self.prog, hint, self_closure=dest if recursive else None, subst=self.subst)
        captured_outer: list[ir.Var] = []
        captured_inner: list[ir.Var] = []
        captured_by: dict = {}  # outer variable id -> its capture
        for free in relay.analysis.free_vars(func):
            if recursive and free.same_as(dest):
                continue
            binding = self.lookup(free)
            if isinstance(binding, ir.Kernel):
                inner.env[free] = binding
                continue
            if binding.id in captured_by:  # two names for one value (copies): one capture
                inner.env[free] = captured_by[binding.id]
                continue
            captured = captured_by[binding.id] = self.prog.new_var(binding.type, binding.hint)
            inner.env[free] = captured
            if binding.id in self.known:
                inner.known[captured.id] = self.known[binding.id]
            captured_outer.append(binding)
            captured_inner.append(captured)
        func_type = self.lower_type(func.checked_type)
        self_var = None
        if recursive:
            self_var = self.prog.new_var(func_type, self.prog.name_of(dest))
            inner.env[dest] = self_var
            inner.known[self_var.id] = func_id
        params = [inner.bind_param(p) for p in func.params]
        body = inner.block(func.body, tail=True)
        ret = self.lower_type(func.ret_type if func.ret_type is not None else func.body.checked_type)
        self.prog.functions.append(
            ir.Function(
                id=func_id,
                hint=hint,
                params=params,
                ret=ret,
                body=body,
                is_closure=True,
                captures=captured_inner,
                self_var=self_var,
                has_tail_call=inner.has_tail_call,
                signature=self.prog.signature(name, func),
            )
        )
        var = self.prog.new_var(func_type, self.prog.name_of(dest))
        stmts.append(ir.Let(var, ir.MakeClosure(func_id, captured_outer), f"closure {name}"))
        self.known[var.id] = func_id
        return var


def lower_program(
    mod: tvm.IRModule,
    model: str,
    target: tvm.target.Target,
    config: Config,
    shared_extents: tuple[ir.SharedExtent, ...] = (),
) -> tuple[ir.Program, KernelTable]:
    """Lower a prepared module (see ``passes.prepare_with_extents``, which also gives the
    ``shared_extents`` of its entry) to a control-IR program."""
    lowering = ProgramLowering(mod, model, target, config)
    program = dataclasses.replace(lowering.run(), shared_extents=tuple(shared_extents))
    mark_escapes(program)
    return program, lowering.kernels

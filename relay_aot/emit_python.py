"""Stage 4b: print a control-IR program as Python source, and load it (the Python backend).

The Python backend needs no C++ compiler: kernels are built by TVM into an in-memory LLVM module
(``KernelTable.build``) and the generated Python calls them through that module's PackedFuncs,
looked up once when the source is loaded. The source mirrors the C++ backend's structure:

* one Python function per global (``f0``, ``f1``, ...);
* one factory per lifted closure (``Closure_f3(captures...)``) returning a nested function
  ``f3`` that reads its captures as Python closure variables and refers to itself by name when
  it is recursive;
* self tail calls rebind the parameters and ``continue`` a ``while True`` loop;
* ``main(*args)``, the entry, converts TVM runtime values in and out (``pyruntime.py``).

Identifiers come from ``names.py``; Relay names appear only in escaped comments and in
string literals written with ``repr``. ``pyruntime.py`` describes the values generated code
works on.
"""

from __future__ import annotations

import hashlib
import linecache
import sys
from typing import Callable, Optional

import tvm

from . import __version__, ir, names
from .dispatch import dispatch
from .emitter import Emitter
from .errors import UnsupportedError
from .kernels import KernelTable
from .metadata import Signature
from .runtime import CompiledModule
from .scalars import is_native_scalar

#: Runtime helpers the generated source imports from ``relay_aot.pyruntime``.
_HELPERS = (
    "Adt", "box", "call_guarded", "call_kernel", "copy_tensor", "empty", "export_value", "import_value", "int_div",
    "int_floor_div", "int_floor_mod", "int_mod", "match_failure", "truthy", "unbox",
)


def var(v: ir.Var) -> str:
    """The identifier of ``v``."""
    return names.var(v.id)


def path_expr(root: str, path: tuple[int, ...]) -> str:
    """Expression for the value at ``path`` (field indices) inside ``root``."""
    return root + "".join(f"[{index}]" for index in path)


def _float(dtype: str) -> bool:
    return dtype.startswith("float")


def _integer_or_float(int_helper: str, float_form: str):
    return lambda a, d, t: float_form.format(*a) if _float(d) else f"{int_helper}({a[0]}, {a[1]})"


#: Python for each scalar operator on numpy scalars: (operands, operand dtype, result dtype) ->
#: expression. numpy scalars carry TVM's semantics: wrapping integers, IEEE floats of the
#: operand's width; division and modulo of integers go through pyruntime (truncating, checked).
_SCALAR_OPS = {
    "add": lambda a, d, t: f"({a[0]} + {a[1]})",
    "subtract": lambda a, d, t: f"({a[0]} - {a[1]})",
    "multiply": lambda a, d, t: f"({a[0]} * {a[1]})",
    "divide": _integer_or_float("int_div", "({0} / {1})"),
    "floor_divide": _integer_or_float("int_floor_div", "np.floor({0} / {1})"),
    "mod": _integer_or_float("int_mod", "np.fmod({0}, {1})"),
    "floor_mod": _integer_or_float("int_floor_mod", "({0} - np.floor({0} / {1}) * {1})"),
    "maximum": lambda a, d, t: f"({a[0]} if {a[0]} > {a[1]} else {a[1]})",
    "minimum": lambda a, d, t: f"({a[0]} if {a[0]} < {a[1]} else {a[1]})",
    "equal": lambda a, d, t: f"({a[0]} == {a[1]})",
    # LLVM's ordered not-equal for floats: false when either side is NaN
    "not_equal": lambda a, d, t: f"np.bool_({a[0]} < {a[1]} or {a[0]} > {a[1]})" if _float(d) else f"({a[0]} != {a[1]})",
    "less": lambda a, d, t: f"({a[0]} < {a[1]})",
    "less_equal": lambda a, d, t: f"({a[0]} <= {a[1]})",
    "greater": lambda a, d, t: f"({a[0]} > {a[1]})",
    "greater_equal": lambda a, d, t: f"({a[0]} >= {a[1]})",
    "logical_and": lambda a, d, t: f"np.bool_({a[0]} and {a[1]})",
    "logical_or": lambda a, d, t: f"np.bool_({a[0]} or {a[1]})",
    "logical_not": lambda a, d, t: f"np.bool_(not {a[0]})",
    "negative": lambda a, d, t: f"(-{a[0]})",
    "abs": lambda a, d, t: f"abs({a[0]})",
    "copy": lambda a, d, t: a[0],
    "cast": lambda a, d, t: (f"np.bool_({a[0]} < 0 or {a[0]} > 0)" if t == "bool" and _float(d) else
                             f"np.bool_({a[0]} != 0)" if t == "bool" else f"np.{t}({a[0]})"),
    "where": lambda a, d, t: f"({a[1]} if {a[0]} else {a[2]})",
}


def _tuple_expr(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


class PythonEmitter:
    """Prints one program; see :func:`emit_python`."""

    def __init__(self, program: ir.Program, model: str):
        self.program = program
        self.model = model
        self.functions = {f.id: f for f in program.functions}
        self._stmts = ir.bind_handlers(self, ir.STATEMENT_HANDLERS)
        self._rhs = ir.bind_handlers(self, ir.RHS_HANDLERS)
        self.out = Emitter(comment_prefix="#", indent_unit="    ")
        self.func: Optional[ir.Function] = None
        self._scalar_consts: dict[tuple, str] = {}  # (dtype, value text) -> module-level name

    # -- whole module ----------------------------------------------------------------------

    def emit(self) -> str:
        """The module's source text."""
        e = self.out
        e.decl_comment(f"Generated by relay_aot {__version__} for model {self.model} (python backend). Do not edit.")
        e.decl_comment(f"Loading binds {names.PY_KERNEL_MODULE} (the kernels' tvm.runtime.Module) and "
                       f"{names.PY_CONSTANTS} (the constant tensors).")
        e.decl("import numpy as np")
        e.decl(f"from relay_aot.pyruntime import {', '.join(_HELPERS)}")
        e.decl()
        e.decl_comment("0-d constants, unboxed once (numpy scalars: see relay_aot.pyruntime).")
        for i, const in enumerate(self.program.constants):
            if const.ndim == 0 and is_native_scalar(ir.TensorType((), str(const.dtype))):
                e.decl(f"{names.PY_CONSTANTS}{i} = unbox({names.PY_CONSTANTS}[{i}])")
        self.emit_kernels()
        for f in self.program.functions:
            e.line()
            e.line()
            self.emit_function(f)
        e.line()
        e.line()
        self.emit_entry()
        return e.text()

    def emit_kernels(self) -> None:
        """Bind each kernel's PackedFunc once, at load time."""
        e = self.out
        if self.program.kernels:
            e.line()
        for k in self.program.kernels:
            if k.scalar is not None:
                continue  # computed natively (scalar_expr), never called: not built
            e.line(
                f"{names.KERNEL}{k.index} = {names.PY_KERNEL_MODULE}[{k.symbol!r}]",
                comment=", ".join(k.ops) or "no operators",
            )

    def emit_entry(self) -> None:
        """``main(*args)``: the program's entry, on TVM runtime values."""
        e = self.out
        main = self.functions[self.program.main]
        arity = len(main.params)
        e.line(f"def {names.PY_ENTRY}(*{names.ARGS}):")
        with e.indent():
            e.comment("TVM runtime values in, TVM runtime values out (see relay_aot.pyruntime).")
            e.line(f"if len({names.ARGS}) != {arity}:")
            with e.indent():
                e.line(f'raise TypeError(f"the program takes {arity} arguments, got {{len({names.ARGS})}}")')
            e.line(f"return export_value(call_guarded({main.id}, [import_value(a) for a in {names.ARGS}]), top=True)")

    # -- functions -----------------------------------------------------------------------

    def emit_function(self, f: ir.Function) -> None:
        """Print a global function, or the factory of a lifted closure."""
        e = self.out
        if not f.is_closure:
            self.emit_body(f)
            return
        captures = ", ".join(var(c) for c in f.captures)
        e.line(f"def {names.CLOSURE_CLASS}{f.id}({captures}):")
        with e.indent():
            e.comment(f"closure {f.hint}; captures: " + (", ".join(f"%{c.hint}" for c in f.captures) or "none"))
            self.emit_body(f)
            e.line(f"return {f.id}")

    def emit_body(self, f: ir.Function) -> None:
        """``def f<N>(params):`` and its statements."""
        e = self.out
        self.func = f
        e.line(f"def {f.id}({', '.join(var(p) for p in f.params)}):")
        with e.indent():
            e.comment(f.signature or f.hint)
            if f.self_var is not None:
                e.line(f"{var(f.self_var)} = {f.id}", comment=f"%{f.self_var.hint} (itself)")
            if f.has_tail_call:
                e.line("while True:", comment="self tail calls continue here")
                with e.indent():
                    self.emit_block(f.body, lambda v: e.line(f"return {var(v)}"))
            else:
                self.emit_block(f.body, lambda v: e.line(f"return {var(v)}"))

    def emit_block(self, block: ir.Block, on_result: Callable[[ir.Var], None]) -> None:
        """Print ``block``; ``on_result`` prints what happens to its value."""
        for stmt in block.stmts:
            dispatch(self._stmts, stmt, what="statement")
        if isinstance(block.result, ir.TailCall):
            self.emit_tail_call(block.result)
        else:
            on_result(block.result)

    def emit_tail_call(self, call: ir.TailCall) -> None:
        """Rebind all parameters at once (arguments may read them) and loop."""
        e = self.out
        params = self.func.params
        if params:
            targets = ", ".join(var(p) for p in params)
            values = ", ".join(var(a) for a in call.args)
            e.line(f"{targets} = {values}", comment="self tail call")
        e.line("continue")

    # -- statements ------------------------------------------------------------------------

    def _let(self, stmt: ir.Let) -> None:
        dispatch(self._rhs, stmt.rhs, stmt, what="right-hand side")

    def _if(self, stmt: ir.If) -> None:
        e = self.out
        assign = self.assign_to(stmt.result)
        cond = var(stmt.cond) if is_native_scalar(stmt.cond.type) else f"truthy({var(stmt.cond)})"
        e.line(f"if {cond}:", comment=f"{self.hint_of(stmt.result)}if")
        with e.indent():
            self.emit_block(stmt.then, assign)
        e.line("else:")
        with e.indent():
            self.emit_block(stmt.else_, assign)

    def _match(self, stmt: ir.Match) -> None:
        e = self.out
        s = var(stmt.scrutinee)
        assign = self.assign_to(stmt.result)
        failure = f"match_failure({stmt.where!r})"
        if not stmt.clauses:
            e.line(failure, comment=f"{self.hint_of(stmt.result)}match with no clauses")
            return
        for i, clause in enumerate(stmt.clauses):
            tests = [f"{path_expr(s, t.path)}.tag == {t.tag}" for t in clause.tests]
            keyword = "if" if i == 0 else "elif"
            note = (f"{self.hint_of(stmt.result)}match " if i == 0 else "") + clause.note
            e.line(f"{keyword} {' and '.join(tests) or 'True'}:", comment=note)
            with e.indent():
                for b in clause.binds:
                    e.line(f"{var(b.var)} = {path_expr(s, b.path)}", comment=f"%{b.var.hint}")
                self.emit_block(clause.body, assign)
            if not clause.tests:
                return  # an irrefutable clause: later clauses and the failure are unreachable
        e.line("else:")
        with e.indent():
            e.line(failure)

    def assign_to(self, result: ir.Var) -> Callable[[ir.Var], None]:
        """A block-result printer assigning to ``result``."""
        return lambda v: self.out.line(f"{var(result)} = {var(v)}")

    @staticmethod
    def hint_of(v: ir.Var) -> str:
        """``%name = `` for a comment, if the variable has a Relay name."""
        return f"%{v.hint} = " if v.hint else ""

    # -- right-hand sides ------------------------------------------------------------------

    def define(self, stmt: ir.Let, expr: str, note: Optional[str] = None) -> None:
        """Print ``v = expr`` with the Relay construct as a comment."""
        v = stmt.var
        self.out.line(f"{var(v)} = {expr}", comment=self.hint_of(v) + (stmt.note if note is None else note))

    def _constant(self, rhs: ir.Constant, stmt: ir.Let) -> None:
        const = self.program.constants[rhs.index]
        value = f"{names.PY_CONSTANTS}[{rhs.index}]"
        if is_native_scalar(stmt.var.type):
            value = f"{names.PY_CONSTANTS}{rhs.index}"
        elif rhs.fresh:  # it may reach a caller, who may write into it: a copy of its own
            value = f"copy_tensor({value})"
        self.define(stmt, value, f"constant {const.dtype}{list(const.shape)}")

    def _kernel_call(self, rhs: ir.KernelCall, stmt: ir.Let) -> None:
        e = self.out
        kernel = self.program.kernels[rhs.kernel]
        v = stmt.var
        note = f"{self.hint_of(v)}{stmt.note} ({names.KERNEL}{kernel.index})"
        if kernel.scalar is not None and is_native_scalar(v.type):
            self.out.line(f"{var(v)} = {self.scalar_expr(kernel.scalar, [var(a) for a in rhs.args])}", comment=note)
            return
        inputs: list[str] = []
        for arg, ptype in zip(rhs.args, kernel.params):
            self.flatten(var(arg), ptype, inputs)
        single = isinstance(kernel.result, ir.TensorType)
        outputs = [var(v)] if single else [f"{var(v)}_{j}" for j in range(len(kernel.outputs))]
        tensors = [f"{name}_out" if is_native_scalar(out) else name for name, out in zip(outputs, kernel.outputs)]
        e.comment(note)
        for name, out in zip(tensors, kernel.outputs):
            e.line(f"{name} = empty({_tuple_expr([str(d) for d in out.shape])}, {out.dtype!r})")
        e.line(f"call_kernel({names.KERNEL}{kernel.index}, {kernel.symbol!r}, {', '.join(inputs + tensors)})")
        for name, tensor, out in zip(outputs, tensors, kernel.outputs):
            if name != tensor:
                e.line(f"{name} = unbox({tensor})")
        if not single:
            e.line(f"{var(v)} = {self.rebuild(kernel.result, iter(outputs))}")

    def scalar_expr(self, expr: ir.ScalarExpr, operands: list[str]) -> str:
        """Python (numpy scalar arithmetic) for a scalar kernel body over ``operands``."""
        if isinstance(expr, ir.ScalarParam):
            return operands[expr.index]
        if isinstance(expr, ir.ScalarConst):
            return self.scalar_const(expr)
        args = [self.scalar_expr(a, operands) for a in expr.args]
        operand_dtype = expr.args[-1].dtype if expr.op == "where" else expr.args[0].dtype
        return _SCALAR_OPS[expr.op](args, operand_dtype, expr.dtype)

    def scalar_const(self, const: ir.ScalarConst) -> str:
        """A module-level numpy scalar holding ``const`` (built once, at load)."""
        if const.dtype == "bool":
            return "np.True_" if const.value else "np.False_"
        text = f"float.fromhex({float(const.value).hex()!r})" if _float(const.dtype) else str(int(const.value))
        key = (const.dtype, text)
        if key not in self._scalar_consts:
            name = f"{names.PY_SCALAR}{len(self._scalar_consts)}"
            self._scalar_consts[key] = name
            self.out.decl(f"{name} = np.{const.dtype}({text})")
        return self._scalar_consts[key]

    def flatten(self, expr: str, ty: ir.Type, out: list[str]) -> None:
        """Append the kernel arguments for ``expr`` (a tensor or nested tuple of tensors)."""
        if isinstance(ty, ir.TupleType):
            for i, f in enumerate(ty.fields):
                self.flatten(f"{expr}[{i}]", f, out)
        elif is_native_scalar(ty):
            out.append(f"box({expr}, {ty.dtype!r})")
        else:
            out.append(expr)

    def rebuild(self, ty: ir.Type, outputs) -> str:
        """The (nested) tuple of type ``ty`` made of the next names in ``outputs``."""
        if isinstance(ty, ir.TupleType):
            return _tuple_expr([self.rebuild(f, outputs) for f in ty.fields])
        return next(outputs)

    def _make_tuple(self, rhs: ir.MakeTuple, stmt: ir.Let) -> None:
        self.define(stmt, _tuple_expr([var(f) for f in rhs.fields]))

    def _proj(self, rhs: ir.Proj, stmt: ir.Let) -> None:
        self.define(stmt, f"{var(rhs.value)}[{rhs.index}]")

    def _make_adt(self, rhs: ir.MakeAdt, stmt: ir.Let) -> None:
        ctor = self.program.adts[rhs.adt].ctors[rhs.ctor]
        fields = _tuple_expr([var(f) for f in rhs.fields])
        self.define(stmt, f"Adt({ctor.tag}, {fields})", ctor.name)

    def _make_closure(self, rhs: ir.MakeClosure, stmt: ir.Let) -> None:
        captures = ", ".join(var(c) for c in rhs.captures)
        self.define(stmt, f"{names.CLOSURE_CLASS}{rhs.func}({captures})")

    def _call_global(self, rhs: ir.CallGlobal, stmt: ir.Let) -> None:
        self.define(stmt, f"{rhs.func}({', '.join(var(a) for a in rhs.args)})")

    def _call_closure(self, rhs: ir.CallClosure, stmt: ir.Let) -> None:
        self.define(stmt, f"{var(rhs.closure)}({', '.join(var(a) for a in rhs.args)})")

    def _call_known(self, rhs: ir.CallKnown, stmt: ir.Let) -> None:
        # A Python closure is called the same way whether or not its function is known.
        self.define(stmt, f"{var(rhs.closure)}({', '.join(var(a) for a in rhs.args)})")

    def _ref_new(self, rhs: ir.RefNew, stmt: ir.Let) -> None:
        self.define(stmt, f"[{var(rhs.value)}]")

    def _ref_read(self, rhs: ir.RefRead, stmt: ir.Let) -> None:
        self.define(stmt, f"{var(rhs.ref)}[0]")

    def _ref_write(self, rhs: ir.RefWrite, stmt: ir.Let) -> None:
        self.out.line(f"{var(rhs.ref)}[0] = {var(rhs.value)}", comment=stmt.note)
        self.define(stmt, "()", "unit")


def emit_python(program: ir.Program, model: str) -> str:
    """Print ``program`` as the source of one Python module."""
    return PythonEmitter(program, model).emit()


def load_python(source: str, model: str, kernel_module: Optional[tvm.runtime.Module], constants: list) -> Callable:
    """Execute generated ``source`` against its kernels and constants; return its entry.

    The source is registered with ``linecache`` under a name carrying the model and a hash of
    the source, so tracebacks through generated code show its lines.
    """
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<relay_aot python backend: {model} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        code = compile(source, filename, "exec")
    except (SyntaxError, RecursionError, MemoryError) as err:
        # CPython limits how deeply blocks may nest (about 100 indentation levels).
        raise UnsupportedError(
            f"the program's control flow is nested too deeply for the python backend ({type(err).__name__}: {err}); "
            "use the cpp backend"
        ) from None
    namespace = {
        "__name__": f"relay_aot_generated_{model}",
        names.PY_KERNEL_MODULE: kernel_module,
        names.PY_CONSTANTS: [tvm.nd.array(c, device=tvm.cpu()) for c in constants],
    }
    exec(code, namespace)  # noqa: S102 - our own generated code
    return namespace[names.PY_ENTRY]


def compile_python(
    program: ir.Program, kernels: KernelTable, name: str, cache: bool = True, verbose: bool = False
) -> CompiledModule:
    """The Python backend: build the kernels in memory, print and load the Python control code.

    ``cache`` is accepted for symmetry with the C++ backend; nothing is written to disk (the
    kernels are built in memory on every compile).
    """
    del cache
    source = emit_python(program, name)
    module = kernels.build()
    entry = load_python(source, name, module, program.constants)
    if verbose:
        print(
            f"relay_aot: python backend: {len(program.functions)} functions, {len(program.kernels)} kernels "
            f"built in memory, {len(source.splitlines())} lines of Python",
            file=sys.stderr,
        )
    return CompiledModule(
        module,
        Signature.of_program(program, name),
        name,
        backend="python",
        source=source,
        entry=entry,
    )


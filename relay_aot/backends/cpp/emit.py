"""Stage 4a: print a control-IR program as C++ against the ``runtime_cpp`` headers.

Output layout (see :class:`CppSources`):

* ``program.h`` -- kernel symbols, closure classes, function prototypes; included by the
  function units;
* ``unit<N>.cc`` -- the functions, one C++ function per Relay function (global or lifted
  closure), in groups so that large programs compile in parallel;
* ``entry.cc`` -- the constant, shape and type tables, the signature and the exported entry
  points: everything that depends on the program's interface and data rather than on its
  control code, in a unit of its own that includes nothing generated but the C API's header,
  so a program whose functions change reuses its object file from the cache;
* ``exports.map`` -- the linker version script listing the exported symbols (see
  :func:`version_script`).

Static types map to C++ types (tensor: ``NDArray``, tuple/ADT: ``ADT``, function: ``Closure``,
reference: ``Ref``, erased type variable: ``ObjectRef``); values read out of containers or
returned by closures are converted with ``as<T>``. Everything lives in a namespace named after
the model and has hidden visibility, so only the model-prefixed entry points are exported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

import tvm

from ... import ir, names
from ...dispatch import dispatch
from ...ir.in_place import InPlace, Slice, concat_in_place
from ...ir.liveness import liveness
from ...ir.profile import ProfileTable
from ...ir.signature import Signature
from ...ir.typetable import TypeTable
from ...kernels.copies import CONCAT_FLAT, SAME_SHAPE_COPY, VIEW
from ...kernels.scalar_ops import SCALAR_OPS, spelling
from ...kernels.scalars import NATIVE_DTYPES, hex_literal, is_native_scalar, scalar_operand_dtype
from ...kernels.shape_funcs import shape_function_args
from ..emitter import Emitter, cpp_string_literal, escape_comment

_CTYPES = {
    ir.TensorType: "NDArray",
    ir.TupleType: "ADT",
    ir.AdtType: "ADT",
    ir.FuncType: "Closure",
    ir.RefType: "Ref",
    ir.AnyType: "ObjectRef",
}

_DL_CODES = {0: "kDLInt", 1: "kDLUInt", 2: "kDLFloat", 4: "kDLBfloat"}

#: Functions per translation unit: enough that small programs are one unit.
FUNCTIONS_PER_UNIT = 48

#: The unit holding the tables and entry points (:meth:`CppEmitter.entry_unit`).
ENTRY_UNIT = "entry.cc"


class OnResult(Protocol):
    """What :meth:`CppEmitter.emit_block` does with its block's value ``v``; ``moved``: the
    block's last use of it, so it may be moved from."""

    def __call__(self, v: ir.Var, moved: bool = False) -> None: ...


def ctype(ty: ir.Type) -> str:
    """The C++ type holding values of static type ``ty`` (0-d numeric tensors are unboxed)."""
    if is_native_scalar(ty):
        return NATIVE_DTYPES[ty.dtype]
    return _CTYPES[type(ty)]


def convert(expr: str, src: ir.Type, dst: ir.Type) -> str:
    """C++ expression for ``expr`` (static type ``src``) used where ``dst`` is expected."""
    source, target = ctype(src), ctype(dst)
    if source == target:
        return expr
    if is_native_scalar(dst):
        return f"unbox<{target}>({expr})"
    if is_native_scalar(src):
        return f"box({expr})"
    if target == "ObjectRef":
        return expr
    return f"as<{target}>({expr})"


def boxed(v: ir.Var) -> str:
    """Variable ``v`` as a runtime object (boxing an unboxed scalar)."""
    return convert(var(v), v.type, ir.AnyType())


def dtype_literal(dtype: str) -> str:
    """A ``DLDataType`` literal for a TVM dtype string."""
    dt = tvm.runtime.DataType(dtype)
    code = _DL_CODES.get(dt.type_code, str(dt.type_code))
    return f"DLDataType{{{code}, {dt.bits}, {dt.lanes}}}"


def var(v: ir.Var) -> str:
    """The identifier of ``v``."""
    return names.var(v.id)


def path_expr(root: str, path: tuple[int, ...]) -> str:
    """Expression for the value at ``path`` (field indices) inside ``root``."""
    expr = root
    for index in path:
        expr = f"field({expr}, {index})"
    return expr


_INT_MIN = {"int8": -(2**7), "int16": -(2**15), "int32": -(2**31), "int64": -(2**63)}


def _scalar_const(c: ir.ScalarConst) -> str:
    t = NATIVE_DTYPES[c.dtype]
    if c.dtype == "bool":
        return "true" if c.value else "false"
    if c.dtype.startswith("float"):
        return hex_literal(c.value, c.dtype)
    if c.value == _INT_MIN.get(c.dtype):
        return f"std::numeric_limits<{t}>::min()"
    return f"{t}({int(c.value)}{'ULL' if c.dtype.startswith('u') else 'LL'})"


def scalar_cpp(expr: ir.ScalarExpr, operands: list[str]) -> str:
    """Native C++ for a scalar kernel body, with ``operands`` naming its parameters."""
    if isinstance(expr, ir.ScalarParam):
        return operands[expr.index]
    if isinstance(expr, ir.ScalarConst):
        return _scalar_const(expr)
    args = [scalar_cpp(a, operands) for a in expr.args]
    operand_dtype = scalar_operand_dtype(expr)
    template = spelling(SCALAR_OPS[expr.op], "cpp", operand_dtype, expr.dtype)
    return template.format(*args, T=NATIVE_DTYPES[expr.dtype], t=NATIVE_DTYPES[operand_dtype])


@dataclasses.dataclass
class CppSources:
    """Generated C++ files by name; ``units`` are the translation units to compile."""

    files: dict[str, str]
    units: list[str]
    #: symbols exported besides the entry, metadata and kernels (the profile function)
    exports: list[str] = dataclasses.field(default_factory=list)

    def text(self) -> str:
        """All files, concatenated with separators (for display)."""
        return "".join(f"// ===== {name} =====\n{text}\n" for name, text in self.files.items())


def emit_type_table(table: TypeTable, e: Emitter) -> None:
    """Print ``table`` as check.h's arrays and ``kTypes`` (rows are ``{kind, text, tensor, fields, ctors}``)."""
    none, no_tensor = "0, nullptr", "DLDataType{kDLInt, 0, 0}, 0, nullptr"

    def ints(name: str, values) -> str:
        if not values:
            return none
        e.line(f"const int {name}[] = {{{', '.join(str(v) for v in values)}}};")
        return f"{len(values)}, {name}"

    e.comment("Types of the values that cross the library boundary, checked on entry (see check.h).")
    rows = []
    for i, row in enumerate(table.rows()):
        tensor, fields, ctors = no_tensor, none, none
        if row.kind == "tensor":
            shape = "nullptr"
            if row.shape:
                shape = f"{names.TYPE_SHAPE}{i}"
                e.line(f"const int64_t {shape}[] = {{{', '.join(str(d) for d in row.shape)}}};")
            tensor = f"{dtype_literal(row.dtype)}, {len(row.shape)}, {shape}"
        elif row.kind in ("tuple", "ref"):
            fields = ints(f"{names.TYPE_FIELDS}{i}", row.fields)
        elif row.kind == "adt":
            descs = [
                f"{{{c.tag}, {ints(f'{names.TYPE_FIELDS}{i}_{k}', c.fields)}, {cpp_string_literal(c.name)}}}"
                for k, c in enumerate(row.ctors)
            ]
            e.line(f"const CtorDesc {names.TYPE_CTORS}{i}[] = {{{', '.join(descs)}}};")
            ctors = f"{len(descs)}, {names.TYPE_CTORS}{i}"
        kind = "Kind::k" + row.kind.capitalize()
        rows.append(f"{{{kind}, {cpp_string_literal(row.text)}, {tensor}, {fields}, {ctors}}},  // {i}")
    e.line(f"const TypeDesc {names.TYPE_TABLE}[] = {{")
    e.lines(rows)
    e.line("};")


class CppEmitter:
    """Prints one program; see :func:`emit_cpp`.

    ``profile``: print the instrumented variant (``runtime_cpp/relay_aot/profile.h``): a
    ``FunctionScope`` in every function, kernels called through ``profiled_call_kernel``,
    allocations ``counted``, and the exported ``<model>__profile``. Without it, nothing of
    profiling is printed: plain libraries carry no instrumentation at all.
    """

    def __init__(self, program: ir.Program, model: str, constants_file: str | None, profile: bool = False):
        self.program = program
        self.profile = ProfileTable.of_program(program) if profile else None
        self.model = model
        self.namespace = names.model_namespace(model)
        self.constants_file = constants_file
        self.functions = {f.id: f for f in program.functions}
        self._stmts = ir.bind_handlers(self, ir.STATEMENT_HANDLERS)
        self._rhs = ir.bind_handlers(self, ir.RHS_HANDLERS)
        self.out = Emitter()
        self.func: ir.Function | None = None
        self.last: set = set()  # last uses in the function being printed (liveness.py)
        self.used: set = set()  # variables it reads (liveness.py)
        #: ids of the printed function's variables bound by const reference (parameters,
        #: captures, shared constants: the caller, the closure or the program owns them), as
        #: far as it is printed
        self.borrowed: set[int] = set()
        #: the printed function's concatenations written in place (ir/in_place.py)
        self.in_place = InPlace()
        self.types = TypeTable(program.adts)
        self.shapes: dict[tuple[int, ...], int] = {}
        #: C++ signatures of the typed closure entries, numbered (see ClosureObj::signature)
        self.signatures: dict[str, int] = {}
        for f in program.functions:
            if f.is_closure:
                self.signatures.setdefault(
                    self.typed_signature([p.type for p in f.params], f.ret), len(self.signatures)
                )
        self._collect_tables()

    def _collect_tables(self) -> None:
        """Number every output shape and every type checked at the boundary, before printing."""
        for kernel in self.program.kernels:
            for out in kernel.outputs:
                if not is_native_scalar(out) and out.is_static:
                    self.shapes.setdefault(out.shape, len(self.shapes))
        for p in self.program.params:
            self.types.index(p.type)
        if self.program.main in self.functions:  # the executor module's outputs
            self.types.index(self.functions[self.program.main].ret)
        for f in self.program.functions:
            if f.is_closure:
                for param in f.params:
                    self.types.index(param.type)
            for stmt in ir.walk(f.body):
                if isinstance(stmt, ir.Let) and isinstance(stmt.rhs, ir.CallClosure):
                    self.types.index(stmt.var.type)

    # -- value representation (the hooks a runtime profile overrides) ---------------------

    def ctype(self, ty: ir.Type) -> str:
        """The C++ type of values of static type ``ty`` (see :func:`ctype`)."""
        return ctype(ty)

    def convert(self, expr: str, src: ir.Type, dst: ir.Type) -> str:
        """``expr`` of static type ``src`` used where ``dst`` is expected (see :func:`convert`)."""
        return convert(expr, src, dst)

    def moved(self, expr: str) -> str:
        """``expr`` handed over at its last use."""
        return f"std::move({expr})"

    def match_failure(self, where: str) -> str:
        """The statement run when no clause of a match in ``where`` fits."""
        return f"raise_match_failure({cpp_string_literal(where)});"

    # -- files ---------------------------------------------------------------------------

    def kernel_declarations(self, k: ir.Kernel) -> list[str]:
        """The C declarations of kernel ``k`` (and of its shape function): TVM's packed signature."""
        packed = "(TVMValue*, int*, int, TVMValue*, int*, void*);"
        return [f"int {k.symbol}{packed}"] + ([f"int {k.shape_func}{packed}"] if k.shape_func is not None else [])

    def _begin_header(self, banner: str, include: str, kernels_comment: str) -> Emitter:
        """Start ``program.h``: its banner, its one ``#include``, the kernels' declarations."""
        e = Emitter()
        for line in banner.splitlines():
            e.decl(line)
        e.decl("#pragma once")
        e.decl(f"#include {include}")
        e.decl()
        called = [k for k in self.program.kernels if k.scalar is None]  # scalar ones are inline C++
        if called:
            e.decl(f"// {kernels_comment}")
            e.decl('extern "C" {')
            for k in called:
                e.decl_comment(f"k{k.index}: " + ", ".join(k.ops))
                for line in self.kernel_declarations(k):
                    e.decl(line)
            e.decl('}  // extern "C"')
            e.decl()
        return e

    def header(self, banner: str) -> str:
        """``program.h``: declarations shared by all units."""
        e = self._begin_header(
            banner, "<relay_aot/runtime.h>", "Kernels generated by TVM (linked into the same library)."
        )
        e.decl(f"namespace {self.namespace} {{")
        e.decl("using namespace relay_aot;")
        e.decl()
        e.decl("const std::vector<NDArray>& constants();")
        e.decl("const std::vector<ShapeTuple>& shapes();")
        e.decl(f"extern const TypeDesc {names.TYPE_TABLE}[];")
        closures = [f for f in self.program.functions if f.is_closure]
        for f in closures:
            e.decl(f"ObjectRef {names.CLOSURE_ENTRY}{f.id}(const ClosureObj* self, const ObjectRef* args);")
            typed_params = "".join(f", {self.typed_param(p.type, var(p))}" for p in f.params)
            e.decl(f"{ctype(f.ret)} {names.TYPED_ENTRY}{f.id}(const ClosureObj* self{typed_params});")
        for f in closures:
            e.decl()
            e.decl_comment(f"environment of {f.hint}")
            cls = names.CLOSURE_CLASS + f.id
            e.decl(f"struct {cls} final : ClosureObj {{")
            for i, cap in enumerate(f.captures):
                e.decl(f"  {ctype(cap.type)} {names.CAPTURE}{i};  // {escape_comment(cap.hint)}")
            params = ", ".join(f"{ctype(c.type)} {names.CAPTURE}{i}" for i, c in enumerate(f.captures))
            inits = "".join(f", {names.CAPTURE}{i}(std::move({names.CAPTURE}{i}))" for i in range(len(f.captures)))
            explicit = "explicit " if len(f.captures) == 1 else ""
            param_types = "nullptr"
            if f.params:
                param_types = names.CLOSURE_PARAM_TYPES
                indices = ", ".join(str(self.types.index(p.type)) for p in f.params)
                e.decl(f"  static constexpr int {param_types}[] = {{{indices}}};")
            signature = self.signatures[self.typed_signature([p.type for p in f.params], f.ret)]
            typed = f"reinterpret_cast<const void*>(&{names.TYPED_ENTRY}{f.id})"
            base = (
                f"ClosureObj(&{names.CLOSURE_ENTRY}{f.id}, {len(f.params)}, {names.TYPE_TABLE}, {param_types}, "
                f"{typed}, {signature})"
            )
            e.decl(f"  {explicit}{cls}({params}) : {base}{inits} {{}}")
            e.decl("};")
        e.decl()
        for f in self.program.functions:
            e.decl(f"{self.prototype(f)};  // {escape_comment(f.hint)}")
        e.decl()
        e.decl(f"}}  // namespace {self.namespace}")
        return e.declarations

    def _begin_unit(self, banner: str, include: str) -> Emitter:
        """Start a translation unit: its banner, its one ``#include``, the model's namespace."""
        self.out = e = Emitter()
        for line in banner.splitlines():
            e.decl(line)
        e.decl(f"#include {include}")
        e.line(f"namespace {self.namespace} {{")
        return e

    def entry_unit(self, banner: str) -> str:
        """``entry.cc``: the constant and shape tables, the type table, the entry points.

        It does not include ``program.h``: what it needs of the functions is ``@main``'s
        prototype, written here. So its text, and its object file, stay the same when only
        the functions change (same constants, shapes, types and ``@main`` signature), and the
        build cache reuses the object (``units/`` in the cache, see ``relay_aot.builder``).
        """
        e = self._begin_unit(banner, "<relay_aot/runtime.h>")
        e.line("using namespace relay_aot;")
        e.line()
        e.line(f"extern const TypeDesc {names.TYPE_TABLE}[];", comment="defined below, used by every unit")
        main = self.functions[self.program.main]
        e.line(f"{self.prototype(main)};", comment=escape_comment(main.hint))
        e.line()
        self.emit_constants()
        self.emit_shapes()
        self.emit_main_adapter()
        if self.profile is not None:
            self.emit_profile_names()
        e.line(f"}}  // namespace {self.namespace}")
        self.emit_entry_points()
        return e.text()

    def unit(self, banner: str, functions: list[ir.Function]) -> str:
        """One translation unit holding ``functions``."""
        e = self._begin_unit(banner, '"program.h"')
        for index, f in enumerate(functions):
            if index:
                e.line()
            self.emit_function(f)
        e.line(f"}}  // namespace {self.namespace}")
        return e.text()

    # -- functions -----------------------------------------------------------------------

    def prototype(self, f: ir.Function) -> str:
        """The C++ signature of ``f``."""
        params = [
            f"const {ctype(p.type)}& {var(p)}" if self.by_reference(f, p) else f"{ctype(p.type)} {var(p)}"
            for p in f.params
        ]
        if f.is_closure:
            params.insert(0, f"const {names.CLOSURE_CLASS}{f.id}* self")
        return f"{ctype(f.ret)} {f.id}({', '.join(params)})"

    def emit_function(self, f: ir.Function) -> None:
        """Print ``f`` (and, for closures, its uniform entry)."""
        e = self.out
        self.func = f
        self.last, self.used = liveness(f)
        self.in_place = concat_in_place(f, self.program)
        self.borrowed = {c.id for c in f.captures} | {p.id for p in f.params if self.by_reference(f, p)}
        e.comment(f.signature or f.hint)
        e.line(self.prototype(f) + " {")
        if self.calls_functions(f):  # a leaf (only kernels) cannot recurse: no check needed
            args = ", ".join((["self"] if f.is_closure else []) + [var(p) for p in f.params])
            e.line(f"if (stack_low()) return on_new_stack([&] {{ return {f.id}({args}); }});", comment="deep recursion")
        if self.profile is not None:  # after the stack check: a call moved to a new segment counts once
            e.line(f"const FunctionScope profile_scope({self.profile.function_ids[f.id]});", comment="profiling")
        for i, cap in enumerate(f.captures):
            ref = "" if is_native_scalar(cap.type) else "&"
            e.line(f"const {ctype(cap.type)}{ref} {var(cap)} = self->{names.CAPTURE}{i};")
        if f.self_var is not None:
            e.line(f"Closure {var(f.self_var)} = closure_ref(self);", comment=f"%{f.self_var.hint} (itself)")
        if f.has_tail_call:
            e.line("while (true) {", comment="self tail calls continue here")
        self.emit_block(f.body, lambda v, moved=False: e.line(f"return {convert(var(v), v.type, f.ret)};"))
        if f.has_tail_call:
            e.line("}")
        e.line("}")
        if f.is_closure:
            cls = names.CLOSURE_CLASS + f.id
            args = ", ".join(self.entry_arg(i, p.type) for i, p in enumerate(f.params))
            e.line()
            e.line(f"ObjectRef {names.CLOSURE_ENTRY}{f.id}(const ClosureObj* self, const ObjectRef* args) {{")
            sep = ", " if args else ""
            call = f"{f.id}(static_cast<const {cls}*>(self){sep}{args})"
            e.line(f"return {convert(call, f.ret, ir.AnyType())};")
            e.line("}")
            typed_params = "".join(f", {self.typed_param(p.type, var(p))}" for p in f.params)
            forwarded = "".join(f", {var(p)}" for p in f.params)
            e.line()
            e.line(f"{ctype(f.ret)} {names.TYPED_ENTRY}{f.id}(const ClosureObj* self{typed_params}) {{")
            e.line(f"return {f.id}(static_cast<const {cls}*>(self){forwarded});")
            e.line("}")

    @staticmethod
    def by_reference(f: ir.Function, p: ir.Var) -> bool:
        """Whether ``f`` takes parameter ``p`` by const reference: objects, unless ``f`` loops
        (its self tail calls assign its parameters)."""
        return not (f.has_tail_call or is_native_scalar(p.type))

    def drop_dead_tensors(self, stmt: ir.Let, args: list[ir.Var]) -> None:
        """Let go of the local tensors that ``stmt``'s kernel call used for the last time.

        A tensor otherwise lives to the end of its C++ scope: in a model's straight-line body
        every intermediate would stay allocated until ``@main`` returns (ShuffleNet: 94 of them).
        Released here, its block returns to the thread's cache while still in the CPU's cache
        and the next kernel's output of that size takes it: the buffer reuse a static storage
        plan gives the graph executor.
        """
        for a in dict.fromkeys(args):
            if (stmt.uid, a.id) in self.last and a.id not in self.borrowed and ctype(a.type) == "NDArray":
                self.out.line(f"{var(a)} = NDArray();", comment="last use")

    def use(self, v: ir.Var, node: ir.Let) -> str:
        """``v`` where ``node`` uses it: moved from if this is its last use, boxed if unboxed.

        Moving from a ``const`` reference (a parameter, a capture, a constant) is a copy, so
        only locals actually hand their value over.
        """
        if is_native_scalar(v.type):
            return boxed(v)
        return f"std::move({var(v)})" if (node.uid, v.id) in self.last else var(v)

    @staticmethod
    def typed_param(ty: ir.Type, name: str = "") -> str:
        """A parameter of a typed closure entry: scalars by value, objects by const reference."""
        text = ctype(ty) if is_native_scalar(ty) else f"const {ctype(ty)}&"
        return f"{text} {name}".rstrip()

    def typed_signature(self, params: list[ir.Type], ret: ir.Type) -> str:
        """The C++ function type of a typed closure entry with these parameter and result types."""
        return f"{ctype(ret)}(const ClosureObj*{''.join(', ' + self.typed_param(p) for p in params)})"

    @staticmethod
    def calls_functions(f: ir.Function) -> bool:
        """Whether ``f`` calls a global or a closure (only then can a call chain through it recurse)."""
        calls = (ir.CallGlobal, ir.CallClosure, ir.CallKnown)
        return f.has_tail_call or any(isinstance(s, ir.Let) and isinstance(s.rhs, calls) for s in ir.walk(f.body))

    @staticmethod
    def entry_arg(i: int, ty: ir.Type) -> str:
        """Argument ``i`` of a closure entry as parameter type ``ty`` (viewed, not copied)."""
        if is_native_scalar(ty) or ctype(ty) == "ObjectRef":
            return convert(f"args[{i}]", ir.AnyType(), ty)
        return f"view<{ctype(ty)}>(args[{i}])"

    def emit_block(self, block: ir.Block, on_result: OnResult) -> None:
        """Print ``block``; ``on_result`` prints what happens to its value."""
        for stmt in block.stmts:
            dispatch(self._stmts, stmt, what="statement")
        if isinstance(block.result, ir.TailCall):
            self.emit_tail_call(block.result)
        elif (block.uid, block.result.id) in self.last and not is_native_scalar(block.result.type):
            on_result(block.result, moved=True)
        else:
            on_result(block.result)

    def emit_tail_call(self, call: ir.TailCall) -> None:
        """Rebind the parameters (through temporaries: arguments may read them) and loop."""
        e = self.out
        assert self.func is not None  # a tail call is inside the function being printed
        params = self.func.params
        changed = [(i, p, a) for i, (p, a) in enumerate(zip(params, call.args)) if a is not p]
        e.line("{", comment="self tail call")
        for i, p, a in changed:
            moved = (call.uid, a.id) in self.last and not is_native_scalar(a.type)
            value = self.moved(var(a)) if moved else var(a)
            e.line(f"{self.ctype(p.type)} t{i} = {self.convert(value, a.type, p.type)};")
        for i, p, _ in changed:
            e.line(f"{var(p)} = {self.moved(f't{i}')};")
        e.line("}")
        e.line("continue;")

    # -- statements ------------------------------------------------------------------------

    def _let(self, stmt: ir.Let) -> None:
        dispatch(self._rhs, stmt.rhs, stmt, what="right-hand side")

    def _if(self, stmt: ir.If) -> None:
        e = self.out
        r = stmt.result
        e.line(f"{self.ctype(r.type)} {var(r)};", comment=self.describe(r, "if"))
        cond = var(stmt.cond) if is_native_scalar(stmt.cond.type) else f"truthy({var(stmt.cond)})"
        e.line(f"if ({cond}) {{")
        self.emit_block(stmt.then, self.assign_to(r))
        e.line("} else {")
        self.emit_block(stmt.else_, self.assign_to(r))
        e.line("}")

    def _match(self, stmt: ir.Match) -> None:
        e = self.out
        r = stmt.result
        s = var(stmt.scrutinee)
        e.line(f"{self.ctype(r.type)} {var(r)};", comment=self.describe(r, "match"))
        for i, clause in enumerate(stmt.clauses):
            tests = [f"tag({path_expr(s, t.path)}) == {t.tag}" for t in clause.tests]
            keyword = "if" if i == 0 else "} else if"
            e.line(f"{keyword} ({' && '.join(tests) or 'true'}) {{", comment=clause.note)
            for b in clause.binds:
                value = self.convert(path_expr(s, b.path), ir.AnyType(), b.var.type)
                e.line(f"{self.ctype(b.var.type)} {var(b.var)} = {value};", comment=f"%{b.var.hint}")
            self.emit_block(clause.body, self.assign_to(r))
        failure = self.match_failure(stmt.where)
        if stmt.clauses:
            e.line("} else {")
            e.line(failure)
            e.line("}")
        else:
            e.line(failure)

    def assign_to(self, result: ir.Var) -> OnResult:
        """A block-result printer assigning to ``result`` (moving the value if it dies here)."""

        def assign(v: ir.Var, moved: bool = False) -> None:
            value = self.moved(var(v)) if moved else var(v)
            self.out.line(f"{var(result)} = {self.convert(value, v.type, result.type)};")

        return assign

    @staticmethod
    def describe(v: ir.Var, note: str) -> str:
        """Comment for a definition of ``v``: its Relay name and the construct it came from."""
        if not note:
            return f"%{v.hint}" if v.hint else ""
        return f"%{v.hint} = {note}" if v.hint else note

    # -- right-hand sides ------------------------------------------------------------------

    def define(self, stmt: ir.Let, expr: str, src: ir.Type | None = None) -> None:
        """Print ``T v = expr;`` converting from ``src`` (default: the variable's own type)."""
        v = stmt.var
        value = self.convert(expr, src, v.type) if src is not None else expr
        self.out.line(f"{self.ctype(v.type)} {var(v)} = {value};", comment=self.describe(v, stmt.note))

    def _constant(self, rhs: ir.Constant, stmt: ir.Let) -> None:
        v = stmt.var
        if is_native_scalar(v.type):
            value = convert(f"constants()[{rhs.index}]", ir.AnyType(), v.type)
            self.out.line(f"const {ctype(v.type)} {var(v)} = {value};", comment=self.describe(v, "constant"))
        elif rhs.fresh:  # it may reach a caller, who may write into it: a copy of its own
            make = "zero_tensor" if rhs.zeros else "copy_tensor"
            self.out.line(
                f"NDArray {var(v)} = {self.counted(f'{make}(constants()[{rhs.index}])')};",
                comment=self.describe(v, "constant"),
            )
        else:
            self.out.line(f"const NDArray& {var(v)} = constants()[{rhs.index}];", comment=self.describe(v, "constant"))
            self.borrowed.add(v.id)

    def _kernel_call(self, rhs: ir.KernelCall, stmt: ir.Let) -> None:
        e = self.out
        kernel = self.program.kernels[rhs.kernel]
        v = stmt.var
        note = self.describe(v, f"{stmt.note} (k{kernel.index})" if stmt.note else f"k{kernel.index}")
        if kernel.scalar is not None and is_native_scalar(v.type):
            value = scalar_cpp(kernel.scalar, [var(a) for a in rhs.args])
            e.line(f"{ctype(v.type)} {var(v)} = {value};", comment=note)
            return
        inputs: list[str] = []
        per_param: list[list[str]] = []
        for arg, ptype in zip(rhs.args, kernel.params):
            flat: list[str] = []
            self.flatten(var(arg), arg.type, ptype, flat)
            per_param.append(flat)
            inputs.extend(flat)
        single = isinstance(kernel.result, ir.TensorType)
        outputs = [var(v)] if single else [f"{var(v)}_{j}" for j in range(len(kernel.outputs))]
        e.comment(note)
        if kernel.shape_func is not None:
            self.shape_function_call(kernel, per_param, outputs)
        if rhs.may_alias and kernel.copy is not None and kernel.copy.kind == SAME_SHAPE_COPY:
            self.alias_or_copy(kernel, rhs.args[kernel.copy.params[0]], inputs, v)
            self.drop_dead_tensors(stmt, rhs.args)
            return
        viewed = rhs.args[kernel.copy.params[0]] if kernel.copy is not None and kernel.copy.kind == VIEW else None
        if rhs.may_alias and viewed is not None and ctype(viewed.type) == "NDArray" and ctype(v.type) == "NDArray":
            self.view_or_copy(kernel, var(viewed), inputs, v)
            self.drop_dead_tensors(stmt, rhs.args)
            return
        if stmt.uid in self.in_place.concats:
            e.line("// its pieces' kernels wrote it in place (ir/in_place.py)")
            self.drop_dead_tensors(stmt, rhs.args)
            return
        grown = self.grown_in_place(kernel, rhs, stmt)
        out_args = []
        for name, out in zip(outputs, kernel.outputs):
            if is_native_scalar(out):
                e.line(f"{ctype(out)} {name};")
                out_args.append(f"scalar_arg(&{name}).get()")
            else:
                if kernel.shape_func is None:
                    shape = f"shapes()[{self.shapes[out.shape]}]"
                else:
                    shape = f"{name}_shape.shape({self.shape_check(kernel, out)})"
                allocated = self.counted(f"alloc_tensor({shape}, {dtype_literal(out.dtype)})")
                described = str(out.shape) if out.is_static else ir.format_type(out, ())
                piece = self.in_place.slices.get(v.id) if single else None
                if piece is not None:
                    self.slice_of_concatenation(piece, name, out)
                elif grown is not None:
                    assert kernel.copy is not None  # grown_in_place: a concatenation
                    rest = ", ".join(per_param[i][0] for i in kernel.copy.params[1:])
                    e.line(
                        f"NDArray {name} = append_in_place({var(grown)}, {shape}, {dtype_literal(out.dtype)}, {{{rest}}});",
                        comment=f"{described}: in {var(grown)}'s block if it has room",
                    )
                    e.line(f"if (!{name}.defined()) {{")
                    e.line(f"{name} = {allocated};")
                else:
                    e.line(f"NDArray {name} = {allocated};", comment=described)
                out_args.append(f"arg({name})")
        call = f"{self.kernel_call(kernel, inputs + out_args)};"
        conditions = [] if kernel.shape_func is None else [self.not_all_empty(outputs)]
        if kernel.copy is not None:  # data movement: memcpy where the form applies at run time, else the kernel
            pieces = [per_param[i][0] for i in kernel.copy.params]
            copied = (
                f"copy_if_same_shape({out_args[0]}, {pieces[0]})"
                if kernel.copy.kind == SAME_SHAPE_COPY
                else f"concat_flat({out_args[0]}, {{{', '.join(pieces)}}})"
            )  # a view's bytes: one piece
            conditions.append(f"!{copied}")
        e.line(f"if ({' && '.join(conditions)}) {call}" if conditions else call)
        if grown is not None:
            e.line("}")
        if not single:
            pairs = iter(zip(outputs, kernel.outputs))
            e.line(f"ADT {var(v)} = {self.counted(self.rebuild(kernel.result, pairs))};")
        self.drop_dead_tensors(stmt, rhs.args)

    def slice_of_concatenation(self, piece: Slice, name: str, out: ir.TensorType) -> None:
        """Output ``name`` of a kernel as its slice of the concatenation it is a piece of, which
        the first piece's kernel allocates (``ir/in_place.py``)."""
        whole, ty = piece.concat, piece.concat.type
        assert isinstance(ty, ir.TensorType)  # concat_in_place: static tensors only
        if piece.first:
            allocated = self.counted(f"alloc_tensor(shapes()[{self.shapes[ty.shape]}], {dtype_literal(ty.dtype)})")
            self.out.line(f"NDArray {var(whole)} = {allocated};", comment=f"{ty.shape}: its pieces write it")
        self.out.line(
            f"NDArray {name} = view_tensor({var(whole)}, shapes()[{self.shapes[out.shape]}], "
            f"{dtype_literal(out.dtype)}, {piece.offset});",
            comment=f"{out.shape}: a slice of {var(whole)}",
        )

    def grown_in_place(self, kernel: ir.Kernel, rhs: ir.KernelCall, stmt: ir.Let) -> ir.Var | None:
        """The first piece of a concatenation with `?` dimensions that may become its result
        (runtime append_in_place: a scan output grown by a row per step copies the row, not
        itself), or None. It must be a tensor this code owns, used for the last time here."""
        if kernel.copy is None or kernel.copy.kind != CONCAT_FLAT or kernel.shape_func is None:
            return None
        if not isinstance(kernel.result, ir.TensorType):
            return None
        first = rhs.args[kernel.copy.params[0]]
        owned = (stmt.uid, first.id) in self.last and first.id not in self.borrowed
        return first if owned and ctype(first.type) == "NDArray" else None

    def kernel_call(self, kernel: ir.Kernel, args: list[str]) -> str:
        """The call of ``kernel`` on ``args`` (timed in a profiled build)."""
        symbol = f"&{kernel.symbol}, {cpp_string_literal(kernel.symbol)}, {', '.join(args)}"
        if self.profile is None:
            return f"call_kernel({symbol})"
        return f"profiled_call_kernel({self.profile.kernel_ids[kernel.index]}, {symbol})"

    def counted(self, expr: str, closure_class: str | None = None) -> str:
        """``expr``, a new object, counted in a profiled build (``closure_class``: of a closure)."""
        if self.profile is None:
            return expr
        return f"counted_closure<{closure_class}>({expr})" if closure_class else f"counted({expr})"

    def alias_or_copy(self, kernel: ir.Kernel, source: ir.Var, inputs: list[str], v: ir.Var) -> None:
        """A broadcast whose result no caller sees: its input itself when the shape computed
        is the input's own, else the kernel's result."""
        out = kernel.outputs[0]
        name = var(v)
        check = self.shape_check(kernel, out)
        e = self.out
        e.line(f"NDArray {name};")
        e.line(f"if ({name}_shape.is_shape_of({var(source)}, {check})) {{")
        e.line(f"{name} = {var(source)};", comment="the same shape: nothing to broadcast")
        e.line("} else {")
        e.line(f"{name} = {self.counted(f'alloc_tensor({name}_shape.shape({check}), {dtype_literal(out.dtype)})')};")
        e.line(f"if ({self.not_all_empty([name])}) {self.kernel_call(kernel, inputs + [f'arg({name})'])};")
        e.line("}")

    def view_or_copy(self, kernel: ir.Kernel, source: str, inputs: list[str], v: ir.Var) -> None:
        """A reshape whose result no caller sees: the input's bytes under the output's shape,
        shared with the input; the kernel's result where the input is not compact."""
        out = kernel.outputs[0]
        name = var(v)
        shape = f"shapes()[{self.shapes[out.shape]}]"
        e = self.out
        # not counted: a view allocates no tensor memory
        e.line(f"NDArray {name} = view_of({source}, {shape});", comment=f"{out.shape}: its input's bytes")
        e.line(f"if (!{name}.defined()) {{")
        e.line(f"{name} = {self.counted(f'alloc_tensor({shape}, {dtype_literal(out.dtype)})')};")
        e.line(f"{self.kernel_call(kernel, inputs + [f'arg({name})'])};")
        e.line("}")

    @staticmethod
    def not_all_empty(outputs: list[str]) -> str:
        """Whether a kernel with ``?`` dimensions has anything to write (``shape.h``'s
        ``all_empty``: a kernel whose outputs are all empty is not called)."""
        return f"!all_empty({', '.join(f'{name}_shape' for name in outputs)})"

    def shape_check(self, kernel: ir.Kernel, out: ir.TensorType) -> str:
        """The arguments with which a computed shape is checked (``ShapeOutput::shape``): the
        kernel's name for errors and, for an output of static type, that shape."""
        expected = f", &shapes()[{self.shapes[out.shape]}]" if out.is_static else ""
        return cpp_string_literal(kernel.symbol) + expected

    def shape_function_call(self, kernel: ir.Kernel, per_param: list[list[str]], outputs: list[str]) -> None:
        """Run the shape function of a kernel with ``?`` dimensions into one ``ShapeOutput``
        per output: each parameter's tensors as data, as shapes, or both (``shape_states``)."""
        args = shape_function_args(kernel.shape_states, per_param, lambda a: f"shape_of({a}).get()")
        for name, out in zip(outputs, kernel.outputs):
            self.out.line(f"ShapeOutput<{len(out.shape)}> {name}_shape;")
            args.append(f"{name}_shape.arg()")
        inputs = ", ".join(a for flat in per_param for a in flat)
        call_args = f"&{kernel.shape_func}, {cpp_string_literal(kernel.symbol)}, {{{inputs}}}, {', '.join(args)}"
        if self.profile is None:
            self.out.line(f"call_shape_function({call_args});")
        else:
            self.out.line(f"profiled_call_shape_function({self.profile.shape_ids[kernel.index]}, {call_args});")

    def flatten(self, expr: str, src: ir.Type, ty: ir.Type, out: list[str]) -> None:
        """Append the kernel arguments for ``expr`` (a tensor or nested tuple of tensors)."""
        if isinstance(ty, ir.TupleType):
            for i, f in enumerate(ty.fields):
                self.flatten(f"field({expr}, {i})", ir.AnyType(), f, out)
        elif is_native_scalar(src):
            out.append(f"scalar_arg(&{expr}).get()")
        elif isinstance(src, ir.AnyType):  # a field of a tuple: always a boxed tensor
            out.append(f"arg({expr})")
        else:
            out.append(f"arg({expr})")

    def rebuild(self, ty: ir.Type, outputs) -> str:
        """The (nested) tuple of type ``ty`` made of the next (name, type) pairs in ``outputs``."""
        if isinstance(ty, ir.TupleType):
            return f"make_adt({', '.join(['0'] + [self.rebuild(f, outputs) for f in ty.fields])})"
        name, out = next(outputs)
        return convert(name, out, ir.AnyType())

    def _make_tuple(self, rhs: ir.MakeTuple, stmt: ir.Let) -> None:
        self.define(stmt, self.counted(f"make_adt({', '.join(['0'] + [self.use(f, stmt) for f in rhs.fields])})"))

    def _proj(self, rhs: ir.Proj, stmt: ir.Let) -> None:
        v = stmt.var
        if rhs.value.id in self.borrowed and not is_native_scalar(v.type):
            # A field of a tuple that outlives the call (a parameter, a capture) lives as long,
            # and tuples are immutable: a view of it, where a copy costs two atomic counts.
            value = f"field({var(rhs.value)}, {rhs.index})"
            if ctype(v.type) != "ObjectRef":
                value = f"view<{ctype(v.type)}>({value})"
            self.out.line(f"const {ctype(v.type)}& {var(v)} = {value};", comment=self.describe(v, stmt.note))
            self.borrowed.add(v.id)
            return
        self.define(stmt, f"field({var(rhs.value)}, {rhs.index})", ir.AnyType())

    def _make_adt(self, rhs: ir.MakeAdt, stmt: ir.Let) -> None:
        ctor = self.program.adts[rhs.adt].ctors[rhs.ctor]
        fields = [self.use(f, stmt) for f in rhs.fields]
        self.define(
            dataclasses.replace(stmt, note=ctor.name), self.counted(f"make_adt({', '.join([str(ctor.tag)] + fields)})")
        )

    def _make_closure(self, rhs: ir.MakeClosure, stmt: ir.Let) -> None:
        captures = ", ".join(self.use(c, stmt) if not is_native_scalar(c.type) else var(c) for c in rhs.captures)
        cls = names.CLOSURE_CLASS + rhs.func
        self.define(stmt, self.counted(f"make_closure<{cls}>({captures})", cls))

    def _call_global(self, rhs: ir.CallGlobal, stmt: ir.Let) -> None:
        callee = self.functions[rhs.func]
        args = ", ".join(convert(var(a), a.type, p.type) for a, p in zip(rhs.args, callee.params))
        self.define(stmt, f"{callee.id}({args})", callee.ret)

    def _call_closure(self, rhs: ir.CallClosure, stmt: ir.Let) -> None:
        signature = self.signatures.get(self.typed_signature([a.type for a in rhs.args], stmt.var.type))
        if signature is not None and isinstance(rhs.closure.type, ir.FuncType):
            # The static type says which C++ signature a closure of this program would have:
            # call its typed entry directly; anything else goes through call_closure.
            v, e = stmt.var, self.out
            function_type = self.typed_signature([a.type for a in rhs.args], v.type).replace("(", "(*)(", 1)
            e.line(f"{ctype(v.type)} {var(v)};", comment=self.describe(v, stmt.note))
            e.line(f"if (const ClosureObj* c = typed_closure({var(rhs.closure)}, {signature})) {{")
            args = "".join(f", {var(a)}" for a in rhs.args)
            e.line(f"{var(v)} = reinterpret_cast<{function_type}>(c->typed_entry)(c{args});")
            e.line("} else {")
            self._uniform_call(rhs, stmt, lambda call: e.line(f"{var(v)} = {convert(call, ir.AnyType(), v.type)};"))
            e.line("}")
            return
        self._uniform_call(rhs, stmt, lambda call: self.define(stmt, call, ir.AnyType()))

    def _uniform_call(self, rhs: ir.CallClosure, stmt: ir.Let, finish) -> None:
        """Call a closure through its uniform entry (boxed arguments); ``finish(call)`` prints the
        use of the call expression."""
        args = var(stmt.var) + "_args"
        if rhs.args:
            self.out.line(f"ObjectRef {args}[] = {{{', '.join(self.use(a, stmt) for a in rhs.args)}}};")
        else:
            args = "nullptr"
        ret_type = self.types.index(stmt.var.type)
        finish(f"call_closure({var(rhs.closure)}, {args}, {len(rhs.args)}, {names.TYPE_TABLE}, {ret_type})")

    def _call_known(self, rhs: ir.CallKnown, stmt: ir.Let) -> None:
        callee = self.functions[rhs.func]
        env = f"static_cast<const {names.CLOSURE_CLASS}{callee.id}*>({var(rhs.closure)}.get())"
        args = "".join(f", {convert(var(a), a.type, p.type)}" for a, p in zip(rhs.args, callee.params))
        self.define(stmt, f"{callee.id}({env}{args})", callee.ret)

    def _ref_new(self, rhs: ir.RefNew, stmt: ir.Let) -> None:
        self.define(stmt, self.counted(f"ref_new({self.use(rhs.value, stmt)})"))

    def _ref_read(self, rhs: ir.RefRead, stmt: ir.Let) -> None:
        self.define(stmt, f"ref_read({var(rhs.ref)})", ir.AnyType())

    def _ref_write(self, rhs: ir.RefWrite, stmt: ir.Let) -> None:
        # Its value, the shared unit object, only when read: taking it costs two atomic count updates.
        used = stmt.var.id in self.used
        self.out.line(
            f"ref_write({var(rhs.ref)}, {self.use(rhs.value, stmt)});",
            comment="" if used else self.describe(stmt.var, stmt.note),
        )
        if used:
            self.define(stmt, "unit()")

    # -- constants and entry points ------------------------------------------------------

    def emit_constants(self) -> None:
        """The constant table, loaded once from the blob assembled into the library."""
        e = self.out
        consts = self.program.constants
        e.comment(f"{len(consts)} constant tensors")
        if not consts:
            e.line("const std::vector<NDArray>& constants() {")
            e.line("static const std::vector<NDArray>* table = new std::vector<NDArray>();")
            e.line("return *table;")
            e.line("}")
            return
        blob = f"{self.model}_constant_blob"
        assert self.constants_file is not None  # None only for the standalone emitter, whose constants are arrays
        e.line(
            'asm(".section .rodata\\n.balign 64\\n.globl '
            + blob
            + "\\n.hidden "
            + blob
            + "\\n"
            + blob
            + ':\\n.incbin \\"'
            + self.constants_file
            + '\\"\\n.previous");'
        )
        e.line(f'extern "C" const unsigned char {blob}[];')
        dims = [d for c in consts for d in c.shape]
        e.line(f"const int64_t kConstantShapes[] = {{{', '.join(str(d) for d in dims) or '0'}}};")
        e.line("const ConstantSpec kConstantSpecs[] = {")
        offset = shape_offset = 0
        for i, c in enumerate(consts):
            dtype = ir.constant_dtype(c)
            spec = f"{offset}, {c.nbytes}, {dtype_literal(dtype)}, {c.ndim}, {shape_offset}"
            e.line(f"{{{spec}}},", comment=f"constant {i}: {dtype}{list(c.shape)}")
            offset += _aligned(c.nbytes)
            shape_offset += c.ndim
        e.line("};")
        e.line("const std::vector<NDArray>& constants() {")
        e.line("// Built once, never destroyed: no destructor runs at exit after TVM is gone.")
        e.line(
            f"static const std::vector<NDArray>* table = load_constants({blob}, kConstantSpecs, kConstantShapes, {len(consts)});"
        )
        e.line("return *table;")
        e.line("}")

    def emit_shapes(self) -> None:
        """The table of kernel output shapes, shared by every tensor of that shape."""
        e = self.out
        e.line()
        e.comment("Shapes of kernel outputs (one shared ShapeTuple each: allocation only allocates data).")
        e.line("const std::vector<ShapeTuple>& shapes() {")
        e.line("static const std::vector<ShapeTuple>* table = new std::vector<ShapeTuple>{")
        for shape, index in sorted(self.shapes.items(), key=lambda item: item[1]):
            e.line(f"ShapeTuple(std::vector<int64_t>{{{', '.join(str(d) for d in shape)}}}),", comment=str(index))
        e.line("};")
        e.line("return *table;")
        e.line("}")

    def emit_main_adapter(self) -> None:
        """``call_main``: the entry function's body, converting arguments to their static types."""
        e = self.out
        main = self.functions[self.program.main]
        args = ", ".join(convert(f"a[{i}]", ir.AnyType(), p.type) for i, p in enumerate(main.params))
        e.line()
        e.line("ObjectRef call_main(const ObjectRef* a) {")
        e.line(f"return {convert(f'{main.id}({args})', main.ret, ir.AnyType())};")
        e.line("}")
        e.line()
        emit_type_table(self.types, e)
        e.line()
        params = main.params
        param_types, param_names = "nullptr", "nullptr"
        if params:
            param_types, param_names = "kMainParamTypes", "kMainParamNames"
            e.line(f"const int {param_types}[] = {{{', '.join(str(self.types.index(p.type)) for p in params)}}};")
            names_list = ", ".join(cpp_string_literal(p.name) for p in self.program.params)
            e.line(f"const char* const {param_names}[] = {{{names_list}}};")
        self.emit_cpu_requirement()
        shared = self.emit_shared_extents()
        e.line(
            f"const EntrySignature {names.ENTRY_SIGNATURE}{{{len(params)}, {names.TYPE_TABLE}, {param_types}, "
            f"{param_names}, &{names.CPU_REQUIREMENT}, {self.types.index(main.ret)}{shared}}};"
        )
        signature = Signature.of_program(self.program, self.model).to_json().encode()
        e.line()
        e.comment("The program's signature as JSON (see relay_aot/ir/signature.py).")
        e.line(f"const char kMetadata[{len(signature)}] = {{")
        for start in range(0, len(signature), 24):
            e.line(", ".join(str(b) for b in signature[start : start + 24]) + ",")
        e.line("};")

    def emit_shared_extents(self) -> str:
        """The named dimensions the entry's parameters share (``SharedExtentDesc``, check.h), which
        the entry checks after their types; the initialisers ``EntrySignature`` then takes ("":
        none, the defaults)."""
        shared = self.program.shared_extents
        if not shared:
            return ""
        e = self.out
        e.comment("Named dimensions several parameters share: their extents must agree (see check.h).")
        for g, group in enumerate(shared):
            axes = []
            for a, axis in enumerate(group.axes):
                path = "nullptr"
                if axis.path:
                    path = f"kSharedPath{g}_{a}"
                    e.line(f"const int {path}[] = {{{', '.join(str(i) for i in axis.path)}}};")
                axes.append(f"{{{axis.param}, {len(axis.path)}, {path}, {axis.axis}}}")
            e.line(f"const AxisDesc kSharedAxes{g}[] = {{{', '.join(axes)}}};")
        groups = ", ".join(
            f"{{{cpp_string_literal(group.name)}, {len(group.axes)}, kSharedAxes{g}}}" for g, group in enumerate(shared)
        )
        e.line(f"const SharedExtentDesc kSharedExtents[] = {{{groups}}};")
        return f", {len(shared)}, kSharedExtents"

    def emit_cpu_requirement(self) -> None:
        """``kCpu``: the target of the kernels and the CPU features it enables, which the entries
        check before anything runs (``cpu.h``; none recorded: nothing to check)."""
        e = self.out
        cpu = self.program.cpu
        target, features = (cpu.target, cpu.features) if cpu is not None else ("", ())
        e.comment("What the kernels need of the CPU: every entry checks it before anything runs (see cpu.h).")
        array = "nullptr"
        if features:
            array = "kCpuFeatures"
            e.line(f"const char* const {array}[] = {{")
            e.lines(
                [
                    ", ".join(cpp_string_literal(f) for f in features[i : i + 8]) + ","
                    for i in range(0, len(features), 8)
                ]
            )
            e.line("};")
        e.line(
            f"const CpuRequirement {names.CPU_REQUIREMENT}{{{cpp_string_literal(target)}, {array}, {len(features)}, {{0}}}};"
        )

    def emit_profile_names(self) -> None:
        """The names the profile reports calls by (``ir/profile.py``), for ``<model>__profile``."""
        e = self.out
        table = self.profile
        assert table is not None  # printed for a profiled library only
        e.line()
        e.comment("Profiling: the names of functions and kernels by profile id (relay_aot.ir.profile).")
        for array, entries in (("kProfileFunctions", table.functions), ("kProfileKernels", table.kernels)):
            e.line(f"const char* const {array}[] = {{")
            e.lines([f"{cpp_string_literal(name)},  // {i}" for i, name in enumerate(entries)] + ["nullptr,"])
            e.line("};")
        e.line(
            f"const ProfileNames kProfileNames{{kProfileFunctions, {len(table.functions)}, "
            f"kProfileKernels, {len(table.kernels)}}};"
        )

    def emit_entry_points(self) -> None:
        """The exported entry (``<model>``) and metadata (``<model>__metadata``) functions."""
        e = self.out
        packed = "(TVMValue* args, int* type_codes, int num_args, TVMValue* ret, int* ret_type_code, void* resource)"
        ns = self.namespace
        visible = 'extern "C" __attribute__((visibility("default")))'
        exported = f"{visible} int"
        e.line()
        e.comment("Exported entry points, in TVM's packed C calling convention.")
        e.line(f'{exported} relay_aot_main{packed} __asm__("{self.model}");')
        e.line(f"int relay_aot_main{packed} {{")
        if self.profile is not None:
            e.line("const relay_aot::FunctionScope profile_scope(0);", comment="profiling: the whole call")
        e.line(
            f"return relay_aot::packed_entry(args, type_codes, num_args, ret, ret_type_code, "
            f"{ns}::{names.ENTRY_SIGNATURE}, {ns}::call_main);"
        )
        e.line("}")
        e.line()
        meta = names.metadata_symbol(self.model)
        e.line(f'{exported} relay_aot_metadata{packed} __asm__("{meta}");')
        e.line(f"int relay_aot_metadata{packed} {{")
        e.line(f"return relay_aot::packed_metadata({ns}::kMetadata, sizeof({ns}::kMetadata), ret, ret_type_code);")
        e.line("}")
        if self.profile is not None:
            e.line()
            e.comment("Built for profiling: start (1) or stop (0) a profile of this thread's calls (profile.h).")
            e.line(f'{exported} relay_aot_profile{packed} __asm__("{names.profile_symbol(self.model)}");')
            e.line(f"int relay_aot_profile{packed} {{")
            e.line(
                f"return relay_aot::packed_profile(args, type_codes, num_args, ret, ret_type_code, {ns}::kProfileNames);"
            )
            e.line("}")
        e.line()
        e.comment("TVM's name of the entry function: load_module(path).entry_func is the program.")
        e.comment("(Overrides the weak one TVM's kernel object defines when there is one kernel.)")
        e.line(f"{visible} const char __tvm_main__[] = {cpp_string_literal(self.model)};")


def _aligned(nbytes: int, alignment: int = 64) -> int:
    return (nbytes + alignment - 1) // alignment * alignment


def constants_blob(constants: list) -> bytes:
    """The constants laid out as :meth:`CppEmitter.emit_constants` describes (64-byte aligned)."""
    out = bytearray()
    for c in constants:
        data = c.tobytes()
        out += data + bytes(_aligned(len(data)) - len(data))
    return bytes(out)


def emit_cpp(
    program: ir.Program,
    model: str,
    banner: Callable[[str], str],
    constants_file: str | None = "constants.bin",
    functions_per_unit: int = FUNCTIONS_PER_UNIT,
    profile: bool = False,
) -> CppSources:
    """Print ``program`` as C++ sources.

    ``banner(file_name)`` gives each file's leading comment (the build layer puts the exact
    compile command there); ``constants_file`` is the blob of :func:`constants_blob`, relative
    to the directory the compiler runs in; ``profile`` prints the instrumented variant (see
    :class:`CppEmitter`).
    """
    emitter = CppEmitter(program, model, constants_file, profile)
    files = {"program.h": emitter.header(banner("program.h"))}
    files[ENTRY_UNIT] = emitter.entry_unit(banner(ENTRY_UNIT))
    units = [ENTRY_UNIT]
    funcs = program.functions
    for index, start in enumerate(range(0, len(funcs), functions_per_unit)):
        name = f"unit{index}.cc"
        files[name] = emitter.unit(banner(name), funcs[start : start + functions_per_unit])
        units.append(name)
    exports = [names.profile_symbol(model)] if profile else []
    files[VERSION_SCRIPT] = version_script(model, exports)
    return CppSources(files, units, exports)


#: The linker version script among the generated files (``build.BuildFlags`` passes it to ``ld``).
VERSION_SCRIPT = "exports.map"


def version_script(model: str, extra: Sequence[str] = ()) -> str:
    """The linker version script: what the library of ``model`` exports; everything else is local.

    Exported: the entry and metadata functions, the kernels (``<model>_k*``, so
    ``load_module(path)[kernel]`` works as for any TVM library) and TVM's loader protocol
    symbols (``names.TVM_LOADER_SYMBOLS``), and the ``extra`` names (the C API's, see
    ``capi.py``). This hides what would otherwise leak with default
    visibility -- libstdc++ template instantiations from TVM's headers, LLVM's float16 helpers
    in the kernel object -- so every exported name but the protocol's carries the model prefix.
    Exact names are quoted (no globbing, and a model may be called ``local``).
    """
    exact = [model, names.metadata_symbol(model), *names.TVM_LOADER_SYMBOLS, *extra]
    lines = [f"/* Generated by relay_aot: the symbols the library of model {model} exports. */", "{", "  global:"]
    lines += [f'    "{symbol}";' for symbol in exact]
    lines += [f"    {model}_{names.KERNEL}*;", "  local:", "    *;", "};", ""]
    return "\n".join(lines)

"""The standalone runtime profile: the C++ emitter's output for a package with no TVM runtime.

:class:`StandaloneEmitter` is the C++ emitter (``backends/cpp/emit.py``) printing the same control
IR through the same handler table; it overrides only what the profile changes
(``runtime_cpp/standalone/relay_aot_standalone.h`` is its runtime):

* **values**: a tensor is a pointer to its data (static shapes are known here; in a program with
  ``?`` dimensions every tensor's extents precede its data, and kernels over ``?`` dimensions
  run after their shape functions, taking their extents as ``int32`` parameters); tuples,
  constructor values, closures and references are cells of pointers; 0-d numeric tensors stay
  native scalars, boxed into one element where a pointer is needed;
* **memory**: every tensor and cell comes from the package's arena, a bump allocator reset at
  each run; a program that is one straight line of kernel calls instead gets its storage
  planned here, at compile time (:mod:`.plan`), and writes its result straight into the caller's
  buffer;
* **errors**: return paths, not exceptions: after each step that can fail the generated code
  tests ``state.error`` and returns; the entry point returns non-zero;
* **kernels**: called directly through TVM's unpacked signature (one ``void*`` per buffer,
  ``int32_t`` result), no ``TVMValue`` or type codes; constants are ``const`` arrays read in place.

Output files: ``program.h``, ``unit<N>.cc`` (the functions), ``constants.cc`` and ``entry.cc``
(the state, the arena, the C API). :func:`refusal` says, by name, what a program uses that a
package cannot run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from ... import ir, names
from ...errors import UnsupportedError
from ...ir.liveness import liveness
from ...kernels.scalars import NATIVE_DTYPES, is_native_scalar
from ...kernels.scratch import Scratch
from ...kernels.shape_funcs import shape_function_args
from ..cpp.capi import CApi, _element_bytes
from ..cpp.emit import CppEmitter, cpp_string_literal, escape_comment, path_expr, scalar_cpp, var
from ..emitter import Emitter
from .plan import StoragePlan, plan_storage

#: The runtime header every generated file includes (copied into the package).
RUNTIME_HEADER = "relay_aot_standalone.h"

#: The line that returns from a generated function when the run has failed.
CHECK = "if (state.error) return {};"

#: Kernel operators whose native scalar form may divide by zero.
_DIVISIONS = frozenset({"divide", "mod", "floor_divide", "floor_mod", "trunc_divide", "trunc_mod"})


def refusal(program: ir.Program, unsupported_dtypes: Sequence[str] = (), target: str = "") -> str | None:
    """Why ``program`` cannot be a standalone package for ``target`` (None: it can)."""
    for kernel in program.kernels:
        for t in kernel.inputs + kernel.outputs:
            if t.dtype in unsupported_dtypes and kernel.scalar is None:
                what = ", ".join(dict.fromkeys(kernel.ops)) or "no operators"
                return f"the kernel of {what} computes on {t.dtype}, which TVM's kernels do not support on {target}"
            bits = _element_bytes(t.dtype) * 8 if t.dtype != "bool" else 8
            if t.dtype not in NATIVE_DTYPES and not t.dtype.startswith("float16") or bits == 0:
                return f"the dtype {t.dtype} has no C element type in a standalone package"
    # ? dimensions inside the program are served by the arena; the C API's buffers have static sizes
    for what, ty in [(f"parameter %{p.name}", p.type) for p in program.params] + [("result", program.ret)]:
        for t in _tensor_types(ty):
            if not t.is_static:
                return (
                    f"@main's {what} has the dynamic type {ir.format_type(t, program.adts)}: a standalone "
                    "package's inputs and outputs have static shapes (? dimensions inside the program are supported)"
                )
    return None


def _tensor_types(ty: ir.Type) -> list:
    """The tensor types in ``ty`` (through tuples)."""
    if isinstance(ty, ir.TensorType):
        return [ty]
    if isinstance(ty, ir.TupleType):
        return [t for f in ty.fields for t in _tensor_types(f)]
    return []


def has_dynamic_shapes(program: ir.Program) -> bool:
    """Whether ``program`` has a tensor with a ``?`` dimension (its tensors then carry extents)."""
    if any(not t.is_static for k in program.kernels for t in k.inputs + k.outputs):
        return True
    for f in program.functions:
        for p in f.params + f.captures:
            if any(not t.is_static for t in _tensor_types(p.type)):
                return True
        for stmt in ir.walk(f.body):
            var_ = stmt.var if isinstance(stmt, ir.Let) else stmt.result
            if any(not t.is_static for t in _tensor_types(var_.type)):
                return True
    return False


def _vars_read(node) -> list:
    """The variables a right-hand side, statement or block result reads."""
    if isinstance(node, ir.Var):
        return [node]
    if isinstance(node, ir.TailCall):
        return list(node.args)
    if isinstance(node, ir.If):
        return [node.cond]
    if isinstance(node, ir.Match):
        return [node.scrutinee]
    found = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, ir.Var):
            found.append(value)
        elif isinstance(value, list):
            found += [x for x in value if isinstance(x, ir.Var)]
    return found


def released_tensors(program: ir.Program, f: ir.Function) -> dict[int, ir.TensorType]:
    """The tensors of ``f`` released at their last use: made by a kernel in ``f`` and read only
    by kernels (never stored in a cell, captured, passed to a function or returned), so no
    pointer to them outlives that use (of static shape). Variable id -> type."""
    made: dict[int, ir.TensorType] = {}
    escaped: set[int] = set()
    pending = [f.body]
    while pending:
        block = pending.pop()
        escaped.update(v.id for v in _vars_read(block.result))
        for stmt in block.stmts:
            if isinstance(stmt, ir.Let):
                rhs = stmt.rhs
                if isinstance(rhs, ir.KernelCall):
                    kernel = program.kernels[rhs.kernel]
                    result = kernel.result
                    if isinstance(result, ir.TensorType) and not is_native_scalar(result) and result.is_static:
                        made[stmt.var.id] = result
                else:
                    escaped.update(v.id for v in _vars_read(rhs))
            else:
                escaped.update(v.id for v in _vars_read(stmt))
                if isinstance(stmt, ir.If):
                    pending += [stmt.then, stmt.else_]
                else:
                    pending += [c.body for c in stmt.clauses]
    return {i: n for i, n in made.items() if i not in escaped}


def _nbytes(t: ir.TensorType) -> int:
    return math.prod(t.shape) * _element_bytes(t.dtype)


class StandaloneEmitter(CppEmitter):
    """Prints one program as a standalone package's C++ (see the module's docstring)."""

    def __init__(
        self,
        program: ir.Program,
        model: str,
        api: CApi,
        alignment: int,
        scratch: Mapping[str, Scratch] = {},
        extents: Mapping[str, Sequence[tuple[int, int, str]]] = {},
    ):
        """``scratch``: per kernel symbol, its scratch parameters (``Kernels.scratch_plan``),
        for a program whose storage is planned (:func:`.plan.straight_line`); else empty.
        ``extents``: per kernel or shape function symbol, its extent parameters
        (``Kernels.extent_plan``)."""
        super().__init__(program, model, constants_file=None)
        self.api = api
        self.alignment = alignment
        self.scratch = dict(scratch)
        self.extents = dict(extents)
        #: the program has ? dimensions: every tensor carries its extents (the runtime's header)
        self.dynamic = has_dynamic_shapes(program)
        sizes = {symbol: s.sizes for symbol, s in self.scratch.items()}
        self.plan: StoragePlan | None = plan_storage(program, api, alignment, _nbytes, sizes)
        #: per function, the tensors released at their last use (see :func:`released_tensors`)
        self.released = {f.id: released_tensors(program, f) for f in program.functions} if self.plan is None else {}
        #: size classes of released tensors: bytes of the block -> class index
        self.size_classes: dict[int, int] = {}
        for ids in self.released.values():
            for t in ids.values():
                self.size_classes.setdefault(self.block_bytes(t), len(self.size_classes))

    def block_bytes(self, t: ir.TensorType) -> int:
        """Bytes of the arena block of a tensor of static type ``t``: its data, after its
        extents' header in a program with ? dimensions (blocks of one size class are reused for
        tensors of other shapes and ranks)."""
        return _nbytes(t) + (self._header_words(len(t.shape)) * 4 if self.dynamic else 0)

    # -- value representation ------------------------------------------------------------

    def ctype(self, ty: ir.Type) -> str:
        return NATIVE_DTYPES[ty.dtype] if is_native_scalar(ty) else "Value"

    def convert(self, expr: str, src: ir.Type, dst: ir.Type) -> str:
        if is_native_scalar(dst) and not is_native_scalar(src):
            return f"unbox<{NATIVE_DTYPES[dst.dtype]}>({expr})"
        if is_native_scalar(src) and not is_native_scalar(dst):
            return f"box<{NATIVE_DTYPES[src.dtype]}>(state, {expr})"
        return expr

    def moved(self, expr: str) -> str:
        return expr  # pointers and scalars: nothing to hand over

    def match_failure(self, where: str) -> str:
        return f"return fail(state, {cpp_string_literal('no clause matched the value in ' + where)});"

    def use(self, v: ir.Var, node: object) -> str:
        return self.convert(var(v), v.type, ir.AnyType())

    def allocate(self, v: ir.Var, name: str, out: ir.TensorType) -> str:
        """The storage of kernel output ``name`` (of variable ``v``): planned, or from the arena."""
        if self.plan is not None:
            return self.plan.expr(v, name)
        assert self.func is not None  # a kernel's output is allocated inside the function being printed
        released = v.id in self.released.get(self.func.id, {})
        size = f"{_nbytes(out)}, {self.alignment}"
        if self.dynamic:  # the block begins with the tensor's extents
            dims = ", ".join(str(d) for d in out.shape)
            if released:
                return f"take_static<{dims}>(state, {self.size_classes[self.block_bytes(out)]}, {size})"
            return f"alloc_static<{dims}>(state, {size})"
        if released:
            return f"take_block(state, {self.size_classes[self.block_bytes(out)]}, {size})"
        return f"arena_alloc(state, {size})"

    # -- files ---------------------------------------------------------------------------

    def kernel_declarations(self, k: ir.Kernel) -> list[str]:
        scratch = len(self.scratch[k.symbol].sizes) if k.symbol in self.scratch else 0
        params = ["void*"] * (len(k.inputs) + len(k.outputs) + scratch) + self._extent_types(k.symbol)
        declarations = [f"int32_t {k.symbol}({', '.join(params)});"]
        if k.shape_func is not None:  # its inputs (data, shapes) and one int64 array per output
            count = len(shape_function_args(k.shape_states, self._per_param(k), lambda a: a)) + len(k.outputs)
            params = ["void*"] * count + self._extent_types(k.shape_func)
            declarations.append(f"int32_t {k.shape_func}({', '.join(params)});")
        return declarations

    def _extent_types(self, symbol: str) -> list[str]:
        """The C types of the extent parameters of kernel or shape function ``symbol``."""
        return [NATIVE_DTYPES[dtype] for _, _, dtype in self.extents.get(symbol, ())]

    @staticmethod
    def _per_param(k: ir.Kernel) -> list[list[ir.TensorType]]:
        """Per Relay parameter of ``k``, its flattened tensor types."""
        return [_tensor_types(p) for p in k.params]

    def header(self, banner: str) -> str:
        e = self._begin_header(
            banner,
            f'"{RUNTIME_HEADER}"',
            "Kernels generated by TVM, unpacked: one pointer per buffer, inputs, outputs, then scratch.",
        )
        e.decl(f"namespace {self.namespace} {{")
        e.decl("using namespace relay_aot_standalone;")
        e.decl()
        e.decl("extern State state;")
        for i, c in enumerate(self.program.constants):
            e.decl(f"extern const {_word_type(c)} {_constant_name(i)}[];  // {ir.constant_dtype(c)}{list(c.shape)}")
        for f in self.program.functions:
            if f.is_closure:
                e.decl(f"Value {names.CLOSURE_ENTRY}{f.id}(Value self, const Value* args);")
        e.decl()
        if self.plan is None:
            for f in self.program.functions:
                e.decl(f"{self.prototype(f)};  // {escape_comment(f.hint)}")
            e.decl()
        e.decl(f"}}  // namespace {self.namespace}")
        return e.declarations

    def prototype(self, f: ir.Function) -> str:
        params = [f"{self.ctype(p.type)} {var(p)}" for p in f.params]
        if self.plan is not None and self.plan.direct_output:
            params.append(f"Value {self.plan.output_pointer}")  # the caller's buffer the last kernel writes
        if f.is_closure:
            params.insert(0, "Value self")
        # a planned program's one function lives in entry.cc alone, inlined into the entry
        linkage = "static inline " if self.plan is not None else ""
        return f"{linkage}{self.ctype(f.ret)} {f.id}({', '.join(params)})"

    def constants_unit(self, banner: str) -> str:
        """``constants.cc``: the constants as ``const`` arrays (in flash on a microcontroller)."""
        e = self._begin_unit(banner, '"program.h"')
        for i, c in enumerate(self.program.constants):
            words = _words(c)
            if self.dynamic and c.ndim:  # its extents first, just before its data (the runtime's header)
                head = ["0x00000000"] * (self._header_words(c.ndim) - c.ndim)
                words = head + [f"0x{d:08x}" for d in c.shape] + words
            e.line(f"// constant {i}: {ir.constant_dtype(c)}{list(c.shape)}")
            e.line(f"alignas({self.alignment}) extern const {_word_type(c)} {_constant_name(i)}[{len(words)}] = {{")
            for start in range(0, len(words), 8):
                e.line(", ".join(words[start : start + 8]) + ",")
            e.line("};")
        e.line(f"}}  // namespace {self.namespace}")
        return e.text()

    # -- functions -----------------------------------------------------------------------

    def emit_function(self, f: ir.Function) -> None:
        e = self.out
        self.func = f
        self.last, self.used = liveness(f)
        self.borrowed = set()
        e.comment(f.signature or f.hint)
        e.line(self.prototype(f) + " {")
        if self.calls_functions(f):  # a leaf (only kernels) cannot recurse: no check needed
            e.line(
                "if (reinterpret_cast<const char*>(__builtin_frame_address(0)) < state.stack_floor) "
                'return fail(state, "recursion deeper than the stack budget");'
            )
        for i, cap in enumerate(f.captures):
            e.line(
                f"{self.ctype(cap.type)} {var(cap)} = {self.convert(f'field(self, {i})', ir.AnyType(), cap.type)};",
                comment=f"%{cap.hint}" if cap.hint else "",
            )
        if f.self_var is not None:
            e.line(f"Value {var(f.self_var)} = self;", comment=f"%{f.self_var.hint} (itself)")
        if f.has_tail_call:
            e.line("while (true) {", comment="self tail calls continue here")
        self.emit_block(f.body, lambda v, moved=False: e.line(f"return {self.convert(var(v), v.type, f.ret)};"))
        if f.has_tail_call:
            e.line("}")
        e.line("}")
        if f.is_closure:
            args = ", ".join(
                ["self"] + [self.convert(f"args[{i}]", ir.AnyType(), p.type) for i, p in enumerate(f.params)]
            )
            e.line()
            e.line(f"Value {names.CLOSURE_ENTRY}{f.id}(Value self, const Value* args) {{")
            e.line(f"return {self.convert(f'{f.id}({args})', f.ret, ir.AnyType())};")
            e.line("}")

    def check(self) -> None:
        """Return from the function being printed if the run has failed."""
        self.out.line(CHECK)

    # -- statements ------------------------------------------------------------------------

    def _let(self, stmt: ir.Let) -> None:
        super()._let(stmt)
        rhs = stmt.rhs
        if isinstance(rhs, (ir.MakeTuple, ir.MakeAdt, ir.MakeClosure, ir.RefNew, ir.CallGlobal, ir.CallKnown)):
            self.check()
        elif isinstance(rhs, ir.RefWrite) and is_native_scalar(rhs.value.type):
            self.check()  # the value was boxed

    def _if(self, stmt: ir.If) -> None:
        super()._if(stmt)
        if not is_native_scalar(stmt.result.type):
            self.check()  # a branch's value may have been boxed

    def _match(self, stmt: ir.Match) -> None:
        super()._match(stmt)
        if not is_native_scalar(stmt.result.type):
            self.check()

    # -- right-hand sides ------------------------------------------------------------------

    def _constant(self, rhs: ir.Constant, stmt: ir.Let) -> None:
        v = stmt.var
        name = _constant_name(rhs.index)
        if is_native_scalar(v.type):
            value = f"unbox<{self.ctype(v.type)}>(constant({name}))"
            self.out.line(f"const {self.ctype(v.type)} {var(v)} = {value};", comment=self.describe(v, "constant"))
        else:  # read in place: kernels never write their inputs, results are copied out
            ndim = self.program.constants[rhs.index].ndim
            data = f"{name} + {self._header_words(ndim)}" if self.dynamic and ndim else name
            self.out.line(f"Value {var(v)} = constant({data});", comment=self.describe(v, "constant"))

    def _header_words(self, ndim: int) -> int:
        """32-bit words of the extents header of a tensor of rank ``ndim`` (``header_bytes``)."""
        return -(-ndim * 4 // self.alignment) * self.alignment // 4

    def _kernel_call(self, rhs: ir.KernelCall, stmt: ir.Let) -> None:
        e = self.out
        kernel = self.program.kernels[rhs.kernel]
        v = stmt.var
        note = self.describe(v, f"{stmt.note} (k{kernel.index})" if stmt.note else f"k{kernel.index}")
        if kernel.scalar is not None and is_native_scalar(v.type):
            value = scalar_cpp(kernel.scalar, [var(a) for a in rhs.args])
            e.line(f"{self.ctype(v.type)} {var(v)} = {value};", comment=note)
            if _DIVISIONS.intersection(kernel.ops):
                e.line('if (zero_division()) return fail(state, "integer division by zero");')
            return
        per_param: list[list[str]] = []
        for arg, ptype in zip(rhs.args, kernel.params):
            flat: list[str] = []
            self.flatten(var(arg), arg.type, ptype, flat)
            per_param.append(flat)
        inputs = [a for flat in per_param for a in flat]
        single = isinstance(kernel.result, ir.TensorType)
        outputs = [var(v)] if single else [f"{var(v)}_{j}" for j in range(len(kernel.outputs))]
        e.comment(note)
        if self.plan is not None and v.id in self.plan.views:
            assert isinstance(v.type, ir.TensorType)  # a view's kernel makes one static tensor
            e.line(f"Value {var(v)} = {var(self.plan.views[v.id])};", comment=f"{v.type.shape}: its input's bytes")
            return
        if kernel.shape_func is not None:
            self.shape_function_call(kernel, per_param, outputs)
        out_args, allocated = [], False
        for name, out in zip(outputs, kernel.outputs):
            if is_native_scalar(out):
                e.line(f"{self.ctype(out)} {name};")
                out_args.append(f"&{name}")
                continue
            if kernel.shape_func is not None:  # at the shape it computed, checked first
                expected = "nullptr"
                if out.is_static and out.shape:
                    expected = f"{name}_expected"
                    e.line(f"static const int32_t {expected}[] = {{{', '.join(str(d) for d in out.shape)}}};")
                storage = (
                    f"alloc_computed(state, {cpp_string_literal(kernel.symbol)}, {name}_dims, {len(out.shape)}, "
                    f"{_element_bytes(out.dtype)}, {expected}, {self.alignment})"
                )
            else:
                storage = self.allocate(v, name, out)
            allocated = allocated or self.plan is None  # planned storage cannot run out
            e.line(
                f"Value {name} = {storage};", comment=ir.format_type(out, ()) if not out.is_static else str(out.shape)
            )
            out_args.append(name)
        if allocated:
            self.check()
        if self.plan is not None:
            out_args += [self.plan.at(offset) for offset in self.plan.scratch.get(v.id, ())]
        ranks = [len(t.shape) for t in kernel.inputs + kernel.outputs]
        extents = self.extent_args(kernel.symbol, list(zip(inputs + out_args, ranks)))
        call = f"{kernel.symbol}({', '.join(inputs + out_args + extents)})"
        if kernel.symbol in self.scratch and not self.scratch[kernel.symbol].fallible:
            e.line(f"{call};", comment="no workspace call, no assertion: it cannot fail")
        else:
            # TVM's unpacked kernels fail when their scratch memory does, which said why first,
            # or on a check of their extents, which said why through TVMAPISetLastError
            test = f"{call} != 0"
            if kernel.shape_func is not None:  # a kernel whose outputs are all empty is not called
                written = [
                    f"has_elements({n}, {len(o.shape)})"
                    for n, o in zip(outputs, kernel.outputs)
                    if not is_native_scalar(o)
                ]
                if written:
                    test = f"({' || '.join(written)}) && {test}"
            e.line(f'if ({test}) return fail(state, "a kernel failed");')
        if not single:
            rest = iter(zip(outputs, kernel.outputs))
            e.line(f"Value {var(v)} = {self.rebuild(kernel.result, rest)};")
            self.check()
        assert self.func is not None  # a kernel call is inside the function being printed
        released = self.released.get(self.func.id, {})
        for a in dict.fromkeys(rhs.args):
            if (stmt.uid, a.id) in self.last and a.id in released:
                rank = len(released[a.id].shape)
                block = f"block_of({var(a)}, {rank}, {self.alignment})" if self.dynamic else var(a)
                e.line(
                    f"give_block(state, {self.size_classes[self.block_bytes(released[a.id])]}, {block});",
                    comment="last use",
                )

    def extent_args(self, symbol: str, buffers: list[tuple[str, int]]) -> list[str]:
        """The extent arguments of kernel or shape function ``symbol`` (``kernels/extents.py``),
        read from its buffers ``(expression, rank)`` in parameter order."""
        args = []
        for index, dim, _ in self.extents.get(symbol, ()):
            expr, rank = buffers[index]
            args.append(f"extent({expr}, {rank}, {dim})")
        return args

    def shape_function_call(self, kernel: ir.Kernel, per_param: list[list[str]], outputs: list[str]) -> None:
        """Run the shape function of a kernel with ``?`` dimensions into one ``int64_t`` array
        per output (``<output>_dims``): each parameter's tensors as data, as shapes (``int64_t``
        arrays of their extents), or both (``shape_states``)."""
        e = self.out
        assert kernel.shape_func is not None  # called for a kernel with ? dimensions only
        types = dict(zip([a for flat in per_param for a in flat], kernel.inputs))
        ranks = {a: len(t.shape) for a, t in types.items()}
        arrays: list[str] = []

        def shape_of(a: str) -> str:
            rank = ranks[a]
            name = f"{outputs[0]}_shape{len(arrays)}"
            dims = [str(d) if d != ir.ANY_DIM else f"extent({a}, {rank}, {i})" for i, d in enumerate(types[a].shape)]
            e.line(f"alignas({self.alignment}) int64_t {name}[] = {{{', '.join(dims or ['0'])}}};")
            arrays.append(name)
            return name

        args = shape_function_args(kernel.shape_states, per_param, shape_of)
        buffers = [(a, 1 if a in arrays else ranks[a]) for a in args]
        for name, out in zip(outputs, kernel.outputs):
            e.line(f"alignas({self.alignment}) int64_t {name}_dims[{max(len(out.shape), 1)}];")
            args.append(f"{name}_dims")
            buffers.append((f"{name}_dims", 1))
        args += self.extent_args(kernel.shape_func, buffers)
        e.line(f'if ({kernel.shape_func}({", ".join(args)}) != 0) return fail(state, "a shape function failed");')

    def flatten(self, expr: str, src: ir.Type, ty: ir.Type, out: list[str]) -> None:
        if isinstance(ty, ir.TupleType):
            for i, f in enumerate(ty.fields):
                self.flatten(f"field({expr}, {i})", ir.AnyType(), f, out)
        elif is_native_scalar(src):
            out.append(f"const_cast<{self.ctype(src)}*>(&{expr})")
        else:
            out.append(expr)

    def rebuild(self, ty: ir.Type, outputs) -> str:
        if isinstance(ty, ir.TupleType):
            return f"make_adt(state, 0{''.join(', ' + self.rebuild(f, outputs) for f in ty.fields)})"
        name, out = next(outputs)
        return self.convert(name, out, ir.AnyType())

    def _make_tuple(self, rhs: ir.MakeTuple, stmt: ir.Let) -> None:
        self.define(stmt, f"make_adt(state, 0{''.join(', ' + self.use(f, stmt) for f in rhs.fields)})")

    def _proj(self, rhs: ir.Proj, stmt: ir.Let) -> None:
        self.define(stmt, f"field({var(rhs.value)}, {rhs.index})", ir.AnyType())

    def _make_adt(self, rhs: ir.MakeAdt, stmt: ir.Let) -> None:
        ctor = self.program.adts[rhs.adt].ctors[rhs.ctor]
        fields = "".join(", " + self.use(f, stmt) for f in rhs.fields)
        self.define(dataclasses.replace(stmt, note=ctor.name), f"make_adt(state, {ctor.tag}{fields})")

    def _make_closure(self, rhs: ir.MakeClosure, stmt: ir.Let) -> None:
        captures = "".join(", " + self.use(c, stmt) for c in rhs.captures)
        self.define(stmt, f"make_closure(state, &{names.CLOSURE_ENTRY}{rhs.func}{captures})")

    def _call_global(self, rhs: ir.CallGlobal, stmt: ir.Let) -> None:
        callee = self.functions[rhs.func]
        args = ", ".join(self.convert(var(a), a.type, p.type) for a, p in zip(rhs.args, callee.params))
        self.define(stmt, f"{callee.id}({args})", callee.ret)

    def _call_known(self, rhs: ir.CallKnown, stmt: ir.Let) -> None:
        callee = self.functions[rhs.func]
        args = "".join(f", {self.convert(var(a), a.type, p.type)}" for a, p in zip(rhs.args, callee.params))
        self.define(stmt, f"{callee.id}({var(rhs.closure)}{args})", callee.ret)

    def _call_closure(self, rhs: ir.CallClosure, stmt: ir.Let) -> None:
        v, e = stmt.var, self.out
        args = "nullptr"
        if rhs.args:
            args = f"{var(v)}_args"
            e.line(f"const Value {args}[] = {{{', '.join(self.use(a, stmt) for a in rhs.args)}}};")
            if any(is_native_scalar(a.type) for a in rhs.args):
                self.check()  # an argument was boxed
        e.line(f"Value {var(v)}_result = call_closure({var(rhs.closure)}, {args});")
        self.check()
        self.define(stmt, f"{var(v)}_result", ir.AnyType())

    def _ref_new(self, rhs: ir.RefNew, stmt: ir.Let) -> None:
        self.define(stmt, f"ref_new(state, {self.use(rhs.value, stmt)})")

    def _ref_read(self, rhs: ir.RefRead, stmt: ir.Let) -> None:
        self.define(stmt, f"ref_read({var(rhs.ref)})", ir.AnyType())

    def _ref_write(self, rhs: ir.RefWrite, stmt: ir.Let) -> None:
        used = stmt.var.id in self.used
        self.out.line(
            f"ref_write({var(rhs.ref)}, {self.use(rhs.value, stmt)});",
            comment="" if used else self.describe(stmt.var, stmt.note),
        )
        if used:
            self.define(stmt, "unit()")

    # -- the entry -------------------------------------------------------------------------

    def entry_unit(self, banner: str) -> str:
        # A host library's entry (constant blob, type table, packed entry points) has no place
        # in a package, and the package's needs what is known only once its kernels are built.
        raise TypeError("a standalone package's entry.cc is StandaloneEmitter.package_entry_unit")

    def package_entry_unit(self, banner: str, workspace_size: int, stack_budget: int, c_kernels: bool = False) -> str:
        """``entry.cc``: the package's state and arena, TVM's workspace hooks, and the C API."""
        api, model = self.api, self.model
        self.workspace_size = workspace_size
        e = self._begin_unit(banner, '"program.h"')
        self.out.decl(f'#include "{api.header_name}"')
        e.line()
        self.fails = True
        if self.plan is not None:
            # file-local: the compiler keeps the output pointer in a register
            if self.plan.size:
                e.line(
                    f"alignas({self.alignment}) static uint8_t {self.plan.storage}[{self.plan.size}];",
                    comment="the storage planned at compile time",
                )
            e.line()
            # One straight-line function: here, beside the entry that calls it once, the C++
            # compiler inlines it (its out-of-line copy is left to --gc-sections).
            start = len(e.body)
            for f in self.program.functions:
                self.emit_function(f)
                e.line()
            # its kernels cannot fail (no workspace call, no assertion) and it divides by no
            # scalar, and it needs no arena: the entry's checks of the buffers are all that fails
            if not workspace_size and "fail(" not in e.body[start:]:
                self.fails = False
                self._lean_entry(e, stack_budget)
                return e.text()
        if workspace_size:
            e.line(f"alignas({self.alignment}) uint8_t default_arena[{workspace_size}];")
        # a planned program's messages have no numbers (its sizes are fixed at compile time)
        message = "message" if self.plan is None else "nullptr"
        if self.plan is None:
            e.line(f"char {message}[{224 if workspace_size else 1}];", comment="last_error's text, when it has numbers")
        message_size = "sizeof message" if self.plan is None else "0"
        arena = "default_arena" if workspace_size else "nullptr"
        lists, count = "nullptr", len(self.size_classes)
        if count:
            lists = "free_lists"
            e.line(f"Value {lists}[{count}];", comment="released blocks, per size class")
        e.line(
            f"State state = {{nullptr, {arena}, {workspace_size}, 0, 0, nullptr, {message}, {message_size}, {lists}}};"
        )
        e.line()
        e.comment("TVM's kernels ask for scratch memory here: served from the arena, in stack order.")
        e.line("void* alloc_workspace(int, int, uint64_t nbytes, int, int) {")
        if self.plan is None:
            e.line('if (nbytes > 0xffffffffu) return fail(state, "a kernel asked for more than 4 GiB of workspace");')
            e.line(f"return arena_alloc(state, static_cast<uint32_t>(nbytes), {self.alignment});")
        else:  # sized from the kernels' TIR at compile time: no message with numbers to format
            e.line(
                f"Value block = nbytes > 0xffffffffu ? nullptr : bump(state, static_cast<uint32_t>(nbytes), {self.alignment});"
            )
            e.line('if (!block) return fail(state, "out of the kernels\' planned workspace");')
            e.line("return block;")
        e.line("}")
        e.line("int free_workspace(int, int, void* data) {")
        e.line("workspace_free(state, data);")
        e.line("return 0;")
        e.line("}")
        # a kernel's failed check (over ? dimensions: a divisor of 0; a shape function's) says why here
        e.line("void set_last_error(const char* message) { fail(state, message); }")
        e.line(f"}}  // namespace {self.namespace}")
        e.line()
        ns = self.namespace
        e.line('extern "C" {')
        if c_kernels:
            e.comment(
                "TVM's C kernels call the workspace functions of TVM's C runtime API, and report a failed check here."
            )
            e.line(
                "void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes, int code, int bits) {"
            )
            e.line(f"return {ns}::alloc_workspace(device_type, device_id, nbytes, code, bits);")
            e.line("}")
            e.line(
                f"int TVMBackendFreeWorkspace(int device_type, int device_id, void* data) {{ "
                f"return {ns}::free_workspace(device_type, device_id, data); }}"
            )
            e.line(f"int32_t {names.kernel_error_symbol(self.model)}(void* message) {{")
            e.line(f"{ns}::set_last_error(static_cast<const char*>(message));")
            e.line("return -1;")
            e.line("}")
        else:
            e.comment(
                "The slots TVM's LLVM kernels call the workspace and error functions through (a loader would fill them)."
            )
            e.line(f"void* (*__TVMBackendAllocWorkspace)(int, int, uint64_t, int, int) = &{ns}::alloc_workspace;")
            e.line(f"int (*__TVMBackendFreeWorkspace)(int, int, void*) = &{ns}::free_workspace;")
            e.line(f"void (*__TVMAPISetLastError)(const char*) = &{ns}::set_last_error;")
        e.line()
        self._emit_run(e, stack_budget)
        e.line()
        c = names.c_api
        e.line(f'const char* {c(model, "last_error")}(void) {{ return {ns}::state.error ? {ns}::state.error : ""; }}')
        e.line()
        e.line(f"uint32_t {c(model, 'workspace_peak')}(void) {{ return {ns}::state.peak; }}")
        e.line()
        e.line(f"int32_t {c(model, 'set_workspace')}(void* buffer, uint32_t size) {{")
        e.line(f"{ns}::State& s = {ns}::state;")
        e.line("if (!buffer) {")
        e.line(f"s.arena = {f'{ns}::default_arena' if workspace_size else 'nullptr'};")
        e.line(f"s.arena_size = {workspace_size};")
        e.line("return 0;")
        e.line("}")
        e.line(
            f"uintptr_t skip = (-reinterpret_cast<uintptr_t>(buffer)) & {self.alignment - 1}u;",
            comment="align the start",
        )
        e.line("if (size < skip) return -1;")
        e.line("s.arena = static_cast<uint8_t*>(buffer) + skip;")
        e.line("s.arena_size = size - static_cast<uint32_t>(skip);")
        e.line("return 0;")
        e.line("}")
        e.line('}  // extern "C"')
        return e.text()

    def _lean_entry(self, e: Emitter, stack_budget: int) -> None:
        """The rest of ``entry.cc`` for a planned program that needs no arena and cannot fail
        past its checks of the buffers: no State, no workspace hooks; the one message it can
        give is set where it fails and kept, as the host library keeps the last failure's."""
        model, ns = self.model, self.namespace
        e.line('const char* error = "";', comment="last_error's")
        e.line(f"}}  // namespace {ns}")
        e.line()
        e.line('extern "C" {')
        self._emit_run(e, stack_budget, f"{ns}::error")
        e.line()
        c = names.c_api
        e.line(f"const char* {c(model, 'last_error')}(void) {{ return {ns}::error; }}")
        e.line()
        e.comment("It uses no arena: none is ever used, and a buffer given for one is left alone.")
        e.line(f"uint32_t {c(model, 'workspace_peak')}(void) {{ return 0; }}")
        e.line()
        e.line(f"int32_t {c(model, 'set_workspace')}(void*, uint32_t) {{ return 0; }}")
        e.line('}  // extern "C"')

    def _emit_run(self, e: Emitter, stack_budget: int, error: str = "state.error") -> None:
        api, ns = self.api, self.namespace
        main = self.functions[self.program.main]
        inputs, outputs = api.struct("inputs"), api.struct("outputs")
        e.line(f"int32_t {names.c_api(self.model, 'run')}({inputs}* inputs, {outputs}* outputs) {{")
        e.line(f"using namespace {ns};")
        # a new run: no error, an empty arena; only what the program uses is reset (a run that
        # cannot fail past its checks of the buffers keeps the last failure's message, as the
        # host library does)
        if self.fails:
            e.line("state.error = nullptr;")
        if self.plan is None or self.workspace_size:
            e.line("state.used = state.peak = 0;")
        if any(self.calls_functions(f) for f in self.program.functions):
            e.line(f"state.stack_floor = reinterpret_cast<const char*>(__builtin_frame_address(0)) - {stack_budget};")
        if self.size_classes:
            e.line("for (Value& list : free_lists) list = nullptr;")
        nulls = (["!inputs"] if api.inputs else []) + (["!outputs"] if api.outputs else [])
        nulls += [f"!inputs->{f.name}" for f in api.inputs] + [f"!outputs->{f.name}" for f in api.outputs]
        if nulls:  # one message: its text is flash on a microcontroller
            e.line(f'if ({" || ".join(nulls)}) return {error} = "a NULL buffer", -1;', comment="its first step")
        args = []
        for i, f in enumerate(api.inputs):  # main's parameters, in order, as tensor types
            value = f"inputs->{f.name}"
            if self.dynamic and not is_native_scalar(f.type):  # into the arena, after its extents
                dims = ", ".join(str(d) for d in f.type.shape)
                e.line(f"Value input{i} = copy_static<{dims}>(state, {value}, {_nbytes(f.type)}, {self.alignment});")
                e.line("if (state.error) return -1;")
                value = f"input{i}"
            args.append(self.convert(value, ir.AnyType(), f.type))
        if self.plan is not None and self.plan.direct_output:
            args.append(f"outputs->{api.outputs[0].name}")
        e.line(f"{self.ctype(main.ret)} result = {main.id}({', '.join(args)});")
        if self.fails:
            e.line("if (state.error) return -1;")
        for f in api.outputs:
            if self.plan is not None and self.plan.direct_output:
                continue
            if is_native_scalar(main.ret):
                e.line(f"*static_cast<{_stored_type(main.ret.dtype)}*>(outputs->{f.name}) = result;")
            else:
                e.line(f"memmove(outputs->{f.name}, {path_expr('result', f.path)}, {f.nbytes});")
        e.line("return 0;")
        e.line("}")


def _stored_type(dtype: str) -> str:
    return "uint8_t" if dtype == "bool" else NATIVE_DTYPES[dtype]


def _word_type(c: np.ndarray) -> str:
    return "uint32_t"


def _constant_name(index: int) -> str:
    return f"kConstant{index}"


def _words(c: np.ndarray) -> list[str]:
    """The bytes of constant ``c`` as little-endian 32-bit words (padded with zeros)."""
    data = np.ascontiguousarray(c)
    raw = data.astype(np.uint8).tobytes() if data.dtype == np.bool_ else data.tobytes()
    raw += bytes(-len(raw) % 4) if raw else bytes(4)
    return [f"0x{w:08x}" for w in np.frombuffer(raw, dtype="<u4")]


def standalone_header_extra(
    api: CApi, workspace_size: int, plan: StoragePlan | None, stack: tuple[int, str] | None = None
) -> list[str]:
    """The declarations a standalone package's header adds to the host C API's; ``stack``: the
    bytes of stack a run needs and the compiler command that measured it (``stack.py``)."""
    macro, c = names.c_api_macro, names.c_api
    planned = plan.size if plan is not None else 0
    measured = []
    if stack is not None:
        measured = [
            "/* Bytes of stack a run needs: the deepest chain of calls (the entry, a kernel, the function it",
            " * calls), each function's frame as GCC's -fstack-usage gave it when the package was written,",
            f" * compiled with {stack[1]}",
            " * (another compiler or other flags need another measure; the C library's memcpy and memset",
            " * not counted). */",
            f"#define {macro(api.model, 'STACK_SIZE')} {stack[0]}",
        ]
    return [
        "/* Standalone package: memory. The arena serves the tensors, tuples, ADT cells, closures and",
        " * references a run makes (reset at the start of each run) and the kernels' scratch memory. */",
        f"#define {macro(api.model, 'WORKSPACE_SIZE')} {workspace_size} /* bytes of the built-in arena */",
        f"#define {macro(api.model, 'PLANNED_SIZE')} {planned} /* bytes of storage planned at compile time */",
        *measured,
        "",
        "/* The most arena bytes the last run used (size a workspace with it). */",
        f"uint32_t {c(api.model, 'workspace_peak')}(void);",
        "",
        "/* Use `size` bytes at `buffer` as the arena from the next run on (NULL: the built-in one).",
        " * Returns 0, or -1 if the buffer cannot hold one aligned byte. */",
        f"int32_t {c(api.model, 'set_workspace')}(void* buffer, uint32_t size);",
    ]


def check_supported(program: ir.Program, unsupported_dtypes: Sequence[str] = (), target: str = "") -> None:
    """:raises UnsupportedError: naming what ``program`` uses that a package cannot run."""
    problem = refusal(program, unsupported_dtypes, target)
    if problem:
        raise UnsupportedError(f"no standalone package: {problem}")

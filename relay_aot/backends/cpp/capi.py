"""The plain C API of a compiled library: the header ``tvmgen_<model>.h`` and its typed entry.

TVM's AOT convention (issue 15, the W1 level of the AOT RFCs): a C program includes the
generated header, fills a struct with one data pointer per parameter of ``@main`` and a struct
with one per result tensor (flattened depth first), and calls
``int32_t tvmgen_<model>_run(inputs, outputs)``: no type codes, no ``TVMValue`` arrays, no TVM
loader step. ``tvmgen_<model>_last_error()`` says why a run returned non-zero.

Every library whose ``@main`` takes and returns only tensors of static shape (a result may be a
tuple of them, nested) gets the entry; the header is written on request
(``CompiledModule.export_library(path, c_header=...)``, ``relay-aot compile --c-header``), which
raises :class:`~relay_aot.errors.UnsupportedError` naming the parameter or result that a C
struct cannot carry. The header is also one of the generated sources, and ``entry.cc`` includes
it, so the C++ compiler checks it against the definition and it is part of the build's key.

The generated code here is the C side of the library: the typed entry calls ``@main``'s C++
function (``runtime_cpp/relay_aot/capi.h`` converts inputs and outputs), and the library defines
TVM's runtime slots (``names.TVM_SLOTS``) itself, so kernels work when no loader ran.
"""

from __future__ import annotations

import dataclasses
import math
import re

import tvm

from ... import ir, names
from ...errors import UnsupportedError
from ...ir.signature import Signature
from ...kernels.scalars import NATIVE_DTYPES, is_native_scalar
from ..emitter import Emitter, cpp_string_literal, escape_comment
from .emit import ENTRY_UNIT, VERSION_SCRIPT, CppSources, ctype, dtype_literal, path_expr, version_script

#: What each of TVM's slots holds: the runtime function a loader would store (C++ expression);
#: the thread pool's launch is relay_aot's, TVM's without a system call per parallel loop.
_SLOT_VALUES = {
    "__tvm_module_ctx": ("void*", "nullptr"),
    "__TVMFuncCall": ("decltype(&TVMFuncCall)", "&TVMFuncCall"),
    "__TVMAPISetLastError": ("decltype(&TVMAPISetLastError)", "&TVMAPISetLastError"),
    "__TVMBackendGetFuncFromEnv": ("decltype(&TVMBackendGetFuncFromEnv)", "&relay_aot::get_func_from_env"),
    "__TVMBackendAllocWorkspace": ("decltype(&TVMBackendAllocWorkspace)", "&TVMBackendAllocWorkspace"),
    "__TVMBackendFreeWorkspace": ("decltype(&TVMBackendFreeWorkspace)", "&TVMBackendFreeWorkspace"),
    "__TVMBackendParallelLaunch": ("decltype(&TVMBackendParallelLaunch)", "&relay_aot::parallel_launch"),
    "__TVMBackendParallelBarrier": ("decltype(&TVMBackendParallelBarrier)", "&TVMBackendParallelBarrier"),
}
assert tuple(_SLOT_VALUES) == names.TVM_SLOTS

#: Keywords of C99 and C++ (the header is both), never field names.
_KEYWORDS = frozenset(
    """
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    _Bool _Complex _Imaginary alignas alignof and and_eq asm bitand bitor bool catch char8_t char16_t char32_t
    class compl concept consteval constexpr constinit const_cast co_await co_return co_yield decltype delete
    dynamic_cast explicit export false friend mutable namespace new noexcept not not_eq nullptr operator or
    or_eq private protected public reinterpret_cast requires static_assert static_cast template this
    thread_local throw true try typeid typename using virtual wchar_t xor xor_eq NULL
""".split()
)
#: Macros of <stdint.h>, which the header includes (a field so named would be replaced).
_STDINT_MACRO = re.compile(
    r"U?INT(_LEAST|_FAST)?(8|16|32|64|MAX|PTR)_(MIN|MAX|C)\Z|"
    r"(SIZE|PTRDIFF|SIG_ATOMIC|WCHAR|WINT)_(MIN|MAX)\Z"
)
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")

#: Generated names of entry.cc's C side.
_RUN = "run_c"  #: the entry's body, in the model's namespace
_RESULT = "result"
_INPUT = "in"  #: converted inputs: in0, in1, ...
_SHAPE = "kInputShape"  #: shapes of tensor inputs: kInputShape0, ...


@dataclasses.dataclass(frozen=True)
class CField:
    """One ``void*`` of the input or output struct: a tensor of static shape."""

    name: str  #: the C identifier
    what: str  #: the Relay parameter (``%x``) or result path (``result[1][0]``)
    type: ir.TensorType
    path: tuple[int, ...] = ()  #: field indices inside the result (outputs)

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer: elements times element size (bool: one byte)."""
        return math.prod(self.type.shape) * _element_bytes(self.type.dtype)


@dataclasses.dataclass(frozen=True)
class CApi:
    """The C API of one model: its struct fields, in order, and its names."""

    model: str
    inputs: tuple[CField, ...]
    outputs: tuple[CField, ...]
    result: ir.Type  #: @main's result type (a tensor, or a nested tuple of tensors)
    target: str = ""  #: the target the kernels were compiled for ("": not recorded)

    @property
    def header_name(self) -> str:
        """The header's file name, ``tvmgen_<model>.h``."""
        return names.c_api(self.model) + ".h"

    def struct(self, part: str) -> str:
        """``struct tvmgen_<model>_<part>``."""
        return f"struct {names.c_api(self.model, part)}"

    def size_macro(self, field: CField) -> str:
        """``TVMGEN_<MODEL>_<FIELD>_SIZE``."""
        return names.c_api_macro(self.model, f"{field.name}_SIZE")


def _element_bytes(dtype: str) -> int:
    t = tvm.runtime.DataType(dtype)
    return 1 if t.bits == 1 else t.bits * t.lanes // 8


def _c_buffer_problem(ty: ir.Type, adts) -> str | None:
    """Why values of ``ty`` cannot be one C buffer (None: they can)."""
    if not isinstance(ty, ir.TensorType):
        return f"has type {ir.format_type(ty, adts)}: the C API passes tensors (and returns tuples of them) only"
    if not all(isinstance(d, int) and d >= 0 for d in ty.shape):
        return f"has the dynamic type {ir.format_type(ty, adts)}: the C API needs static shapes"
    t = tvm.runtime.DataType(ty.dtype)
    if t.lanes != 1 or (t.bits % 8 and t.bits != 1):
        return f"has dtype {ty.dtype}, which has no C element type"
    return None


def _flatten_result(ty: ir.Type, path: tuple[int, ...], adts, out: list) -> None:
    if isinstance(ty, ir.TupleType):
        for i, f in enumerate(ty.fields):
            _flatten_result(f, path + (i,), adts, out)
        return
    what = "result" + "".join(f"[{i}]" for i in path)
    problem = _c_buffer_problem(ty, adts)
    if problem:
        raise UnsupportedError(f"no C API for @main: {what} {problem}")
    out.append((what, ty, path))


def c_identifier(text: str) -> str:
    """``text`` as a C (and C++) identifier: other characters become ``_``; a leading digit or
    reserved spelling gets ``p_``, a keyword or a <stdint.h> macro a trailing ``_``."""
    name = _NOT_IDENTIFIER.sub("_", text) or "p"
    if name[0].isdigit() or name.startswith("__") or re.match(r"_[A-Z]", name):
        name = "p_" + name.lstrip("_")
    if name in _KEYWORDS or _STDINT_MACRO.match(name):
        name += "_"
    return name


def _unique(name: str, used: set) -> str:
    """``name``, or ``name_2``, ``name_3``, ...: unique ignoring case (macros are upper case)."""
    candidate, k = name, 2
    while candidate.upper() in used:
        candidate, k = f"{name}_{k}", k + 1
    used.add(candidate.upper())
    return candidate


def c_api(signature: Signature) -> CApi:
    """The C API of a program with ``signature``.

    :raises UnsupportedError: a parameter or a part of the result is not a tensor of static
        shape and C element type (an ADT, a closure, a reference, a ``?`` dimension); the
        message names it.
    """
    adts = signature.adts
    param_types: list[ir.TensorType] = []
    for p in signature.params:
        problem = _c_buffer_problem(p.type, adts)
        if problem:
            raise UnsupportedError(f"no C API for @main: parameter %{p.name} {problem}")
        assert isinstance(p.type, ir.TensorType)  # a type other than a tensor's is a problem
        param_types.append(p.type)
    results: list = []
    _flatten_result(signature.ret, (), adts, results)
    used: set = set()
    single = not isinstance(signature.ret, ir.TupleType)
    # named as TVM's AOT executor names them: after the model's output tensors when the program
    # has their names, else output (one) or output0, output1, ...
    named = len(signature.output_names) == len(results)
    outputs = tuple(
        CField(
            _unique(c_identifier(signature.output_names[i]) if named else "output" if single else f"output{i}", used),
            what,
            ty,
            path,
        )
        for i, (what, ty, path) in enumerate(results)
    )
    inputs = tuple(
        CField(_unique(c_identifier(p.name), used), f"%{p.name}", t) for p, t in zip(signature.params, param_types)
    )
    return CApi(signature.model, inputs, outputs, signature.ret, signature.cpu.target if signature.cpu else "")


def c_api_or_none(signature: Signature) -> CApi | None:
    """:func:`c_api`, or None when the program has no C API (its PackedFunc entry is unaffected)."""
    try:
        return c_api(signature)
    except UnsupportedError:
        return None


#: How the library's header says it is used (the standalone package's says otherwise).
LIBRARY_USAGE = (
    " * non-zero, and {last_error}() says why, for the calling thread. Link the model's",
    " * library and libtvm_runtime.so; calls from several threads may run at once.",
)


def header_text(api: CApi, usage: tuple = LIBRARY_USAGE, extra: tuple = ()) -> str:
    """The header ``tvmgen_<model>.h``: valid C99 and C++ (``usage``: the end of its leading
    comment, formatted with ``last_error``; ``extra``: declarations after the entry's)."""
    model, guard = api.model, names.c_api_macro(api.model, "H_")
    run, last_error = names.c_api(model, "run"), names.c_api(model, "last_error")
    lines = [
        f"/* Generated by relay_aot for model {model}: the C API of its library. Do not edit.",
        " *",
        f" * {run} runs @main on C-contiguous buffers of the declared dtype and shape (a 0-d",
        " * tensor is one element; bool is one byte per element): the inputs, never modified, and the",
        " * outputs, which the caller allocates and the run writes. It returns 0 on success; otherwise",
        *(line.format(last_error=last_error) for line in usage),
        *(
            [
                " *",
                " * The kernels were compiled for this target (on a CPU without a feature it enables, the run",
                " * returns non-zero, naming the missing ones):",
                f" *   {escape_comment(api.target)}",
            ]
            if api.target
            else []
        ),
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "/* Bytes of each buffer. */",
    ]
    for f in api.inputs + api.outputs:
        lines.append(f"#define {api.size_macro(f)} {f.nbytes} /* {_describe(f)} */")
    for part, fields, what in (
        ("inputs", api.inputs, "parameter of @main"),
        ("outputs", api.outputs, "result tensor, depth first"),
    ):
        lines += ["", f"/* One buffer per {what}. */", f"{api.struct(part)} {{"]
        lines += [f"  void* {f.name}; /* {_describe(f)} */" for f in fields]
        if not fields:
            lines.append(f"  void* unused; /* @main has no {'parameters' if part == 'inputs' else 'result tensors'} */")
        lines.append("};")
    lines += [
        "",
        f"int32_t {run}({api.struct('inputs')}* inputs, {api.struct('outputs')}* outputs);",
        "",
        f'/* Why the calling thread\'s last failed {run} failed ("" if none did). */',
        f"const char* {last_error}(void);",
        "",
        *extra,
        *([""] if extra else []),
        "#ifdef __cplusplus",
        '}  /* extern "C" */',
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)


def _describe(field: CField) -> str:
    return escape_comment(f"{field.what}: {ir.format_type(field.type, [])}")


def add_c_api(sources: CppSources, program: ir.Program, model: str) -> CppSources:
    """``sources`` (what ``emit.emit_cpp`` printed) with the C side of the library: TVM's slots
    in the entry unit, and, when ``@main`` has a C API, the header, the typed entry and
    ``last_error`` (exported by the version script)."""
    api = c_api_or_none(Signature.of_program(program, model))
    files = dict(sources.files)
    e = Emitter()
    _emit_slots(e)
    exported: list[str] = []
    if api is not None:
        files[api.header_name] = header_text(api)
        _emit_entry(e, program, api)
        exported = [names.c_api(model, "run"), names.c_api(model, "last_error")]
    files[ENTRY_UNIT] += e.text()
    files[VERSION_SCRIPT] = version_script(model, sources.exports + exported)
    return CppSources(files, sources.units, sources.exports)


def _emit_slots(e: Emitter) -> None:
    e.line()
    e.comment("TVM's kernels call the runtime through these slots; TVM's loader would fill them. Defined")
    e.comment("here, hidden, so that the kernels work when a C program calls the typed entry directly.")
    e.line('extern "C" {')
    for slot, (slot_type, value) in _SLOT_VALUES.items():
        e.line(f'__attribute__((visibility("hidden"))) {slot_type} {slot} = {value};')
    e.line('}  // extern "C"')


def _emit_entry(e: Emitter, program: ir.Program, api: CApi) -> None:
    """The typed entry: convert the inputs, call @main's C++ function, write the outputs."""
    main = program.function(program.main)
    namespace = names.model_namespace(api.model)
    e.line()
    e.comment(f"The C API ({api.header_name}): @main on caller buffers, without TVM's calling convention.")
    e.line(f'#include "{api.header_name}"')
    e.line()
    e.line(f"namespace {namespace} {{")
    e.line(f"void {_RUN}(const {api.struct('inputs')}* inputs, const {api.struct('outputs')}* outputs) {{")
    e.line(f"require_cpu({names.CPU_REQUIREMENT});", comment="before anything runs (cpu.h)")
    if api.inputs:
        e.line('c_require(inputs, "inputs");')
    if api.outputs:
        e.line('c_require(outputs, "outputs");')
    args = []
    for i, f in enumerate(api.inputs):  # main's parameters, in order, as tensor types
        what = cpp_string_literal(f"input {f.name} ({f.what})")
        if is_native_scalar(f.type):
            native = NATIVE_DTYPES[f.type.dtype]
            e.line(f"{native} {_INPUT}{i} = c_scalar<{native}>(inputs->{f.name}, {what});")
        else:
            dims = ", ".join(str(d) for d in f.type.shape)
            e.line(f"static const ShapeTuple& {_SHAPE}{i} = leaked_shape({{{dims}}});")
            e.line(
                f"NDArray {_INPUT}{i} = c_input(inputs->{f.name}, {_SHAPE}{i}, {dtype_literal(f.type.dtype)}, {what});"
            )
        args.append(f"{_INPUT}{i}")
    e.line(f"{ctype(main.ret)} {_RESULT} = {main.id}({', '.join(args)});")
    for f in api.outputs:
        what = cpp_string_literal(f"output {f.name} ({f.what})")
        if is_native_scalar(main.ret):
            e.line(f"c_output_scalar({_RESULT}, outputs->{f.name}, {what});")
        else:
            e.line(f"c_output({path_expr(_RESULT, f.path)}, outputs->{f.name}, {f.nbytes}, {what});")
    e.line("}")
    e.line(f"}}  // namespace {namespace}")
    e.line()
    visible = 'extern "C" __attribute__((visibility("default")))'
    e.line(
        f"{visible} int32_t {names.c_api(api.model, 'run')}({api.struct('inputs')}* inputs, "
        f"{api.struct('outputs')}* outputs) {{"
    )
    e.line(f"return relay_aot::c_call({namespace}::{_RUN}, inputs, outputs);")
    e.line("}")
    e.line()
    e.line(
        f"{visible} const char* {names.c_api(api.model, 'last_error')}(void) {{ return relay_aot::c_last_error(); }}"
    )

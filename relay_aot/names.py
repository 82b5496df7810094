"""Every prefix and suffix of a generated identifier or exported symbol, in one place.

User-supplied Relay names never become identifiers: variables, functions, closure classes and
kernels are numbered with these prefixes, and original names appear only (escaped) in comments
and string literals (the C API header's field names are the one exception: C identifiers made
from the parameter names, see ``backends/cpp/capi.py``). Exported symbols all start with the model
name (the C API's with ``tvmgen_<model>_``) so that several compiled models can share one
process or one binary.
"""

import functools
import os
import re

VAR = "v"  #: local variables: v0, v1, ...
FUNC = "f"  #: functions (globals and lifted closures): f0, f1, ...
CLOSURE_CLASS = "Closure_"  #: C++ class of a lifted closure's environment: Closure_f3
CLOSURE_ENTRY = "entry_"  #: uniform closure entry of a lifted function: entry_f3
TYPED_ENTRY = "typed_"  #: typed closure entry of a lifted function: typed_f3
CAPTURE = "c"  #: captured-value members of a closure class: c0, c1, ...
ARGS = "args"  #: the argument array of a closure entry
KERNEL = "k"  #: kernel table index part of a kernel symbol
SELF = "self"  #: the running closure, inside a lifted function
TEMP = "t"  #: temporaries of a self tail call: t0, t1, ...

#: The type table of values crossing the library boundary, and its parts (see check.h).
TYPE_TABLE = "kTypes"
TYPE_SHAPE = "kShape"  #: kShape<type index>
TYPE_FIELDS = "kFields"  #: kFields<type index>[_<constructor>]
TYPE_CTORS = "kCtors"  #: kCtors<type index>
CLOSURE_PARAM_TYPES = "kParamTypes"  #: static member of each closure class
ENTRY_SIGNATURE = "kEntrySignature"
CPU_REQUIREMENT = "kCpu"  #: what the kernels need of the CPU, checked by every entry (cpu.h)

# Python backend (emit_python.py): module-level names of the generated source.
PY_KERNEL_MODULE = "kernel_module"  #: the kernels' tvm.runtime.Module, bound at load time
PY_CONSTANTS = "constants"  #: the constant tensors (a list of NDArray), bound at load time
PY_SCALAR = "n"  #: module-level numpy scalar constants of the Python backend: n0, n1, ...
PY_ENTRY = "main"  #: the entry function, on TVM runtime values

#: Suffix of the exported function that returns the program's metadata (JSON).
METADATA_SUFFIX = "__metadata"

#: Suffix of the function a library built for profiling exports: ``<model>__profile(command,
#: max_events)`` starts (1) or stops (0) a profile (see ``runtime_cpp/relay_aot/profile.h``).
PROFILE_SUFFIX = "__profile"

#: Profile ids: function 0 is the entry (argument checks, conversions), function ``i + 1`` the
#: program's function ``i``; kernels are numbered as in the kernel table, shape functions after.
PROFILE_ENTRY = "(entry)"

#: TVM kernel-name prefix given to the TE compiler; symbols are then renamed to kernel_symbol().
TE_MOD_NAME = "relay_aot"

#: The symbol of TVM's library-loading protocol a library exports under TVM's fixed name
#: (TVM's src/runtime/library_module.cc), so it cannot carry the model prefix: a string naming
#: the entry function. Our generated code defines it as the model name, so
#: ``load_module(path).entry_func`` is the program.
TVM_MAIN = "__tvm_main__"

#: The pointer slots through which TVM's kernels call the runtime (error reporting, workspaces,
#: the thread pool, packed calls), named by TVM's LLVM backend. TVM's loader would fill them
#: through ``dlsym``; our libraries define them instead, hidden, initialised to the runtime's
#: functions (``backends/cpp/capi.py``), so that a library works when a C program calls its
#: typed entry directly, without TVM's loader. Hidden, they are not exported and the loader
#: leaves them alone; each library has its own.
TVM_SLOTS = (
    "__tvm_module_ctx",
    "__TVMFuncCall",
    "__TVMAPISetLastError",
    "__TVMBackendGetFuncFromEnv",
    "__TVMBackendAllocWorkspace",
    "__TVMBackendFreeWorkspace",
    "__TVMBackendParallelLaunch",
    "__TVMBackendParallelBarrier",
)

#: Every symbol a library exports without the model prefix (see ``TVM_MAIN``).
TVM_LOADER_SYMBOLS = (TVM_MAIN,)

#: Prefix of the plain C API of model ``<name>`` (TVM's AOT convention): the header
#: ``tvmgen_<name>.h``, its structs ``tvmgen_<name>_inputs``/``_outputs``, the exported
#: functions ``tvmgen_<name>_run``/``_last_error`` and the macros ``TVMGEN_<NAME>_*``.
C_API_PREFIX = "tvmgen_"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def is_model_name(name) -> bool:
    """Whether ``name`` is usable as a model name (1-64 identifier characters)."""
    return isinstance(name, str) and bool(_IDENTIFIER.match(name)) and len(name) <= 64


#: The shared libraries a relay_aot library is loaded next to or linked with (the C library,
#: libm, the C++ and compiler runtimes, TVM's runtime): a model name one of them defines would
#: be exported twice, and the library's entry would replace the C library's function for the
#: whole process (``memcpy``, ``strlen``: a crash while compiling; ``malloc``: a C program
#: linking the library dies before its first ``printf``).
_SYSTEM_LIBRARIES = ("c", "m", "stdc++", "gcc_s", "pthread", "dl", "rt")


@functools.cache
def _system_libraries() -> tuple:
    import ctypes
    import ctypes.util

    found = []
    for short in _SYSTEM_LIBRARIES:
        path = ctypes.util.find_library(short)
        if path:
            try:
                found.append((path, ctypes.CDLL(path)))
            except OSError:
                pass
    try:
        # libtvm.so, already loaded: its C symbols include those of libtvm_runtime.so, which a C
        # or C++ program links, and which must not be loaded next to it (it would register
        # TVM's functions twice and abort).
        from tvm._ffi import base

        found.append((base._LIB._name, base._LIB))
    except (ImportError, AttributeError):
        pass
    return tuple(found)


def symbol_collision(name: str):
    """What already defines the symbol ``name`` that a library of model ``name`` would export
    (a library's basename), or None.

    Names beginning with ``_`` are reserved to the C implementation at file scope (C17 7.1.3:
    newlib's ``_write``, ``_sbrk``, the compiler runtime's ``__aeabi_*``), so a standalone
    package's cannot be checked against a library on this machine: they are all refused.
    """
    if name.startswith("_"):
        return "the C implementation (names beginning with '_' are reserved to it)"
    for path, library in _system_libraries():
        if hasattr(library, name):
            return os.path.basename(path)
    return None


def check_model_name(name: str) -> str:
    """Validate a model name (the prefix of every exported symbol, and the entry's own symbol)
    and return it."""
    if not is_model_name(name):
        raise ValueError(
            f"model name {name!r} is not usable as a symbol prefix: use 1-64 letters, digits and "
            "underscores, not starting with a digit"
        )
    owner = symbol_collision(name)
    if owner is not None:
        raise ValueError(
            f"model name {name!r} is a symbol of {owner}: a library exports its entry under the model "
            "name, which would replace that function in every program loading it; choose another name"
        )
    return name


def model_namespace(model: str) -> str:
    """The C++ namespace of the generated code of model ``model``."""
    return f"{model}_relay_aot"


def var(index: int) -> str:
    """Identifier of local variable number ``index``."""
    return f"{VAR}{index}"


def kernel_symbol(model: str, index: int, fused_name: str) -> str:
    """Exported symbol of kernel ``index``: model prefix, index, and the fused op names."""
    readable = _UNSAFE.sub("_", fused_name)[:48].strip("_")
    return f"{model}_{KERNEL}{index}_{readable}" if readable else f"{model}_{KERNEL}{index}"


def kernel_error_symbol(model: str) -> str:
    """The function a standalone package's C kernels report a failed check through (their
    ``TVMAPISetLastError``, under a name of the model's)."""
    return f"{model}_kernel_error"


def metadata_symbol(model: str) -> str:
    """Exported symbol of the metadata function of model ``model``."""
    return model + METADATA_SUFFIX


def profile_symbol(model: str) -> str:
    """Exported symbol of the profile function of a library of ``model`` built for profiling."""
    return model + PROFILE_SUFFIX


def model_of_metadata_symbol(symbol: str):
    """The model name whose metadata function is ``symbol``, or None if it is not one."""
    if not symbol.endswith(METADATA_SUFFIX):
        return None
    model = symbol[: -len(METADATA_SUFFIX)]
    return model if is_model_name(model) else None


def c_api(model: str, part: str = "") -> str:
    """Identifier of the C API of ``model``: ``tvmgen_<model>`` or ``tvmgen_<model>_<part>``."""
    return f"{C_API_PREFIX}{model}_{part}" if part else f"{C_API_PREFIX}{model}"


def c_api_macro(model: str, part: str) -> str:
    """Macro of the C API of ``model``: ``TVMGEN_<MODEL>_<PART>`` (upper case)."""
    return c_api(model, part).upper()

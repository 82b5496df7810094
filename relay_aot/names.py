"""Every prefix and suffix of a generated identifier or exported symbol, in one place.

User-supplied Relay names never become identifiers: variables, functions, closure classes and
kernels are numbered with these prefixes, and original names appear only (escaped) in comments
and string literals. Exported symbols all start with the model name so that several compiled
models can share one process or one binary.
"""

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

# Python backend (emit_python.py): module-level names of the generated source.
PY_KERNEL_MODULE = "kernel_module"  #: the kernels' tvm.runtime.Module, bound at load time
PY_CONSTANTS = "constants"  #: the constant tensors (a list of NDArray), bound at load time
PY_SCALAR = "n"  #: module-level numpy scalar constants of the Python backend: n0, n1, ...
PY_ENTRY = "main"  #: the entry function, on TVM runtime values

#: Suffix of the exported function that returns the program's metadata (JSON).
METADATA_SUFFIX = "__metadata"

#: TVM kernel-name prefix given to the TE compiler; symbols are then renamed to kernel_symbol().
TE_MOD_NAME = "relay_aot"

#: Symbols of TVM's library-loading protocol, which a library must export under exactly these
#: names (TVM's src/runtime/library_module.cc and include/tvm/runtime/module.h), so they cannot
#: carry the model prefix. ``__tvm_main__`` is a string naming the entry function (our
#: generated code defines it as the model name, so ``load_module(path).entry_func`` is the
#: program); ``__tvm_module_ctx`` and ``__TVM*`` are pointer slots that
#: ``tvm.runtime.load_module`` fills through ``dlsym`` with the loading runtime's functions,
#: used by TVM's kernels (error reporting, workspaces, the thread pool); ``__tvm_dev_mblob``
#: would hold imported device modules. The linker binds each library's own references to its
#: own slots (``-Bsymbolic``, see ``build.BuildFlags``), so two libraries exporting the same
#: slot names never share them.
TVM_LOADER_SYMBOLS = (
    "__tvm_main__",
    "__tvm_module_ctx",
    "__tvm_dev_mblob",
    "__TVMFuncCall",
    "__TVMAPISetLastError",
    "__TVMBackendGetFuncFromEnv",
    "__TVMBackendAllocWorkspace",
    "__TVMBackendFreeWorkspace",
    "__TVMBackendParallelLaunch",
    "__TVMBackendParallelBarrier",
)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def is_model_name(name) -> bool:
    """Whether ``name`` is usable as a model name (1-64 identifier characters)."""
    return isinstance(name, str) and bool(_IDENTIFIER.match(name)) and len(name) <= 64


def check_model_name(name: str) -> str:
    """Validate a model name (the prefix of every exported symbol) and return it."""
    if not is_model_name(name):
        raise ValueError(
            f"model name {name!r} is not usable as a symbol prefix: use 1-64 letters, digits and "
            "underscores, not starting with a digit"
        )
    return name


def var(index: int) -> str:
    """Identifier of local variable number ``index``."""
    return f"{VAR}{index}"


def kernel_symbol(model: str, index: int, fused_name: str) -> str:
    """Exported symbol of kernel ``index``: model prefix, index, and the fused op names."""
    readable = _UNSAFE.sub("_", fused_name)[:48].strip("_")
    return f"{model}_{KERNEL}{index}_{readable}" if readable else f"{model}_{KERNEL}{index}"


def metadata_symbol(model: str) -> str:
    """Exported symbol of the metadata function of model ``model``."""
    return model + METADATA_SUFFIX


def model_of_metadata_symbol(symbol: str):
    """The model name whose metadata function is ``symbol``, or None if it is not one."""
    if not symbol.endswith(METADATA_SUFFIX):
        return None
    model = symbol[: -len(METADATA_SUFFIX)]
    return model if is_model_name(model) else None

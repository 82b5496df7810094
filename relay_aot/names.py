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

#: Suffix of the exported function that returns the program's metadata (JSON).
METADATA_SUFFIX = "__metadata"

#: TVM kernel-name prefix given to the TE compiler; symbols are then renamed to kernel_symbol().
TE_MOD_NAME = "relay_aot"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def check_model_name(name: str) -> str:
    """Validate a model name (the prefix of every exported symbol) and return it."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name) or len(name) > 64:
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

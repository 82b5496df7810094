"""relay_aot: an ahead-of-time compiler for TVM Relay programs with real control flow.

``relay_aot.compile(mod)`` lowers a Relay ``IRModule`` -- tensors, ADTs, closures, ``let``,
``if``/``match``, recursion and references -- to C++ around TVM-generated kernels, builds one
shared library, and returns a callable :class:`CompiledModule`.
"""

import os as _os

# TVM otherwise tries to download tuning logs on every kernel build (there is no network).
_os.environ.setdefault("TOPHUB_LOCATION", "NONE")

from .builder import clear_cache  # noqa: E402
from .compiler import compile, export_standalone  # noqa: E402,A001
from .errors import (  # noqa: E402
    CompileError,
    CpuFeatureError,
    KernelError,
    MatchError,
    RecursionDepthError,
    RelayAotError,
    TypeCheckError,
    UnsupportedError,
)
from .frontends import ImportedModel, read_tflite  # noqa: E402
from .runtime import Closure, CompiledModule, load  # noqa: E402
from .tuner import tune  # noqa: E402
from .version import __version__  # noqa: E402,F401

__all__ = [
    "export_standalone",
    "compile",
    "load",
    "tune",
    "read_tflite",
    "ImportedModel",
    "clear_cache",
    "CompiledModule",
    "Closure",
    "RelayAotError",
    "TypeCheckError",
    "UnsupportedError",
    "CompileError",
    "CpuFeatureError",
    "MatchError",
    "KernelError",
    "RecursionDepthError",
]

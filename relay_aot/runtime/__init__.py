"""Stage 6: running compiled programs from Python.

``module.py`` loads a library and wraps its entry (:class:`CompiledModule`, :func:`load`);
``values.py`` converts Python values to runtime values and back (reading the signature every
library embeds, ``relay_aot.ir.signature``); ``fastcall.py`` is the Python side of the
``_fastcall`` extension (calls without TVM's ctypes FFI, check.h's checks, the ADTs relay_aot
makes in Python, the profiler); ``profiling.py`` turns a profiled call into TVM's profiling
report and a Chrome trace; ``inspect.py`` puts any executor's values in one plain form.
"""

from .module import CompiledModule, exported_symbols, load, load_library, model_names, read_signature
from .values import Closure, Ref

__all__ = [
    "CompiledModule",
    "Closure",
    "Ref",
    "exported_symbols",
    "load",
    "load_library",
    "model_names",
    "read_signature",
]

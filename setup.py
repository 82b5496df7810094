"""Build script for the one compiled extension, relay_aot.runtime._fastcall (see its source).

Everything else is in pyproject.toml. The extension is required: it calls compiled libraries
without TVM's ctypes FFI, runs the checks of compiled code (``runtime_cpp/relay_aot/check.h``)
on values converted in Python, and makes the runtime ADTs relay_aot builds in Python, whose
fields it frees without recursion. It compiles against relay_aot's C++ runtime headers and
TVM's, which the TVM wheel ships (it is a build requirement, found without importing it), and
with the runtime's out-of-line functions (``runtime_cpp/relay_aot/runtime.cc``).
"""

import importlib.util
import os

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

_TVM = importlib.util.find_spec("tvm").submodule_search_locations[0]
_INCLUDES = ["runtime_cpp"] + [os.path.join(_TVM, d) for d in ("include", "3rdparty/dlpack/include",
                                                                 "3rdparty/dmlc-core/include")]

setup(
    ext_modules=[
        Pybind11Extension(
            "relay_aot.runtime._fastcall",
            ["relay_aot/runtime/_fastcall.cc", "runtime_cpp/relay_aot/runtime.cc"],
            cxx_std=17,
            include_dirs=_INCLUDES,
            define_macros=[("DMLC_USE_LOGGING_LIBRARY", "<tvm/runtime/logging.h>")],
        )
    ],
    cmdclass={"build_ext": build_ext},
)

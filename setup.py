"""Build script for the one compiled extension, relay_aot.runtime._fastcall (see its source for why).

Everything else is in pyproject.toml. The extension is required: besides calling compiled
libraries without TVM's ctypes FFI, it makes the runtime ADTs relay_aot builds in Python, whose
fields it frees without recursion (TVM's own ADTs overflow the C stack when a long list made in
Python is dropped). It needs only pybind11 and a C++17 compiler, not TVM's headers.
"""

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

setup(
    ext_modules=[Pybind11Extension("relay_aot.runtime._fastcall", ["relay_aot/runtime/_fastcall.cc"], cxx_std=17)],
    cmdclass={"build_ext": build_ext},
)

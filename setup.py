"""Build script for the one compiled extension, relay_aot._fastcall (see its source for why).

Everything else is in pyproject.toml. The extension is optional: if it cannot be built,
relay_aot calls compiled libraries through TVM's ctypes FFI instead.
"""

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

setup(
    ext_modules=[Pybind11Extension("relay_aot._fastcall", ["relay_aot/_fastcall.cc"], cxx_std=17, optional=True)],
    cmdclass={"build_ext": build_ext},
)

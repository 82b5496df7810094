"""Build script: which packages the distribution holds, and the one compiled extension,
relay_aot.runtime._fastcall (see its source). The metadata is in pyproject.toml.

The packages are found, not listed: every directory of ``relay_aot/`` with an ``__init__.py``,
and every directory of ``runtime_cpp/`` (the C++ runtime's headers and sources), installed as
``relay_aot.runtime_cpp.<directory>``, where ``relay_aot.builder.toolchain.runtime_include_dir``
finds them. The files in them other than modules are the ones MANIFEST.in puts into the sdist
(``include_package_data``), so the sdist and the wheel hold the same files;
``tests/test_install.py`` checks the wheel against the checkout.

The extension is required: it calls compiled libraries without TVM's ctypes FFI, runs the
checks of compiled code (``runtime_cpp/relay_aot/check.h``) on values converted in Python, and
makes the runtime ADTs relay_aot builds in Python, whose fields it frees without recursion. It
compiles against relay_aot's C++ runtime headers and TVM's, which the TVM wheel ships (it is a
build requirement, found without importing it), and with the runtime's out-of-line functions
(``runtime_cpp/relay_aot/runtime.cc``).

After the extension, the build compiles what every library of the installing toolchain shares
-- the precompiled runtime header and the runtime object -- into ``relay_aot/builder/_prebuilt``
(``relay_aot/builder/prebuilt.py``), so that a first compile into an empty cache need not. It
runs relay_aot's own code for that, in a child process; if it fails, the installation goes on
and the first compile builds them as before.
"""

import importlib.util
import os
import subprocess
import sys

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import find_packages, setup

_TVM = importlib.util.find_spec("tvm").submodule_search_locations[0]
_INCLUDES = ["runtime_cpp"] + [
    os.path.join(_TVM, d) for d in ("include", "3rdparty/dlpack/include", "3rdparty/dmlc-core/include")
]

_ROOT = os.path.dirname(os.path.abspath(__file__))


def _runtime_packages() -> dict[str, str]:
    """Package name -> directory, for every directory of runtime_cpp/ (installed inside relay_aot)."""
    return {
        "relay_aot." + directory.replace(os.sep, "."): directory for directory, _, _ in sorted(os.walk("runtime_cpp"))
    }


class BuildExtAndToolchain(build_ext):
    """The extension, then the toolchain objects libraries share (see the module docstring)."""

    def run(self):
        super().run()
        editable = self.inplace or getattr(self, "editable_mode", False)
        package_root = _ROOT if editable else os.path.abspath(self.build_lib)
        out = os.path.join(package_root, "relay_aot", "builder", "_prebuilt")
        code = "import sys; from pathlib import Path; from relay_aot.builder import prebuilt; prebuilt.build(Path(sys.argv[1]))"
        # pip's isolated build finds TVM through PYTHONPATH (its sitecustomize adds the build
        # environment): keep it, behind the package being built.
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, "TOPHUB_LOCATION": "NONE"}
        try:
            # In package_root: `python -c` puts its directory first on sys.path, and the
            # source tree's relay_aot has no extension outside an editable install.
            subprocess.run(
                [sys.executable, "-c", code, out],
                env=env,
                cwd=package_root,
                check=True,
                timeout=900,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        except (OSError, subprocess.SubprocessError) as err:
            output = getattr(err, "stdout", None) or ""
            print(
                f"relay_aot: the precompiled header and runtime object were not prebuilt ({err}); "
                f"the first compile will build them.\n{output[-4000:]}",
                file=sys.stderr,
            )


setup(
    packages=find_packages(include=["relay_aot", "relay_aot.*"]) + list(_runtime_packages()),
    package_dir=_runtime_packages(),
    include_package_data=True,
    ext_modules=[
        Pybind11Extension(
            "relay_aot.runtime._fastcall",
            ["relay_aot/runtime/_fastcall.cc", "runtime_cpp/relay_aot/runtime.cc"],
            cxx_std=17,
            include_dirs=_INCLUDES,
            define_macros=[("DMLC_USE_LOGGING_LIBRARY", "<tvm/runtime/logging.h>")],
        )
    ],
    cmdclass={"build_ext": BuildExtAndToolchain},
)

"""Write a standalone package: a directory that builds, with any GCC-compatible toolchain, into
``libtvmgen_<name>.a`` needing no TVM, no heap and no C++ runtime.

The request is lowered once, into the same control IR as every backend, with the standalone
output setting (``Config.standalone``: serial kernels with TVM's unpacked signature, built by
LLVM for the package's target). The package holds:

* ``tvmgen_<name>.h`` -- the host C API's header, plus the memory-sizing declarations;
* ``program.h``, ``unit<N>.cc``, ``constants.cc``, ``entry.cc`` -- the generated C++
  (:mod:`.emit`), and ``relay_aot_standalone.h``, its runtime (copied);
* ``kernels.o`` -- TVM's kernels, an object file for the target (absent if there are none);
* ``Makefile`` -- ``make -C DIR CC=.. CXX=.. AR=.. CFLAGS=.. CXXFLAGS=..``; the flags the
  package itself needs are in ``PKG_CXXFLAGS``, so the caller's five variables replace nothing.

No path of the building machine is written into it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Mapping, Optional

import tvm

from ... import names
from ...build.toolchain import runtime_include_dir
from ...errors import UnsupportedError
from ...ir.signature import Signature
from ...request import Request
from ...version import __version__
from ..cpp.capi import CApi, c_api, header_text
from .emit import RUNTIME_HEADER, StandaloneEmitter, check_supported, standalone_header_extra
from .targets import DEFAULT_WORKSPACE_SIZE, StandaloneTarget, resolve

#: The flags every package's C++ needs, whatever the caller's CXXFLAGS: no exceptions, RTTI or
#: thread-safe statics (no C++ runtime), TVM's wrapping integer semantics, and type punning of
#: constants (stored as 32-bit words, read at their dtype).
PACKAGE_CXXFLAGS = ("-std=c++17", "-fno-exceptions", "-fno-rtti", "-fno-threadsafe-statics",
                    "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-fwrapv", "-fno-strict-aliasing",
                    "-ffunction-sections", "-fdata-sections")

#: Functions per translation unit (as in the C++ backend, a fixed number: the same files everywhere).
FUNCTIONS_PER_UNIT = 48


@dataclasses.dataclass(frozen=True)
class Package:
    """A written package: its directory, model name, target and sizes."""

    directory: Path
    name: str
    target: StandaloneTarget
    workspace_size: int  #: bytes of the built-in arena (0: the program needs none)
    planned_size: int  #: bytes of storage planned at compile time
    files: tuple[str, ...]
    api: CApi  #: the C API: the fields of the input and output structs

    @property
    def library(self) -> Path:
        """Where ``make`` puts the archive."""
        return self.directory / f"lib{names.c_api(self.name)}.a"

    @property
    def header(self) -> Path:
        """The C API's header."""
        return self.directory / f"{names.c_api(self.name)}.h"


def export_standalone(
    mod: tvm.IRModule,
    directory,
    name: str = "default",
    target: str = "host",
    params: Optional[Mapping[str, object]] = None,
    workspace_size: Optional[int] = None,
    opt_level: int = 3,
) -> Package:
    """Write the standalone package of ``mod`` into ``directory`` (made if missing).

    :param target: a row of ``backends.standalone.targets.TARGETS`` (``host``,
        ``aarch64-linux``, ``cortex-m4``), or a TVM ``llvm`` target string.
    :param workspace_size: bytes of the arena for programs that allocate (ADTs, closures,
        references, calls); default :data:`~.targets.DEFAULT_WORKSPACE_SIZE`. A program that is
        one straight line of kernels gets its storage planned instead and an arena only for
        its kernels' scratch memory, sized at compile time.
    :raises UnsupportedError: the program uses what a package cannot run (``?`` shapes, an
        ``@main`` that takes or returns anything but tensors, e.g. a function for a Python
        callback); the message names it.
    """
    row = resolve(target)
    if workspace_size is not None and not 0 < workspace_size < 1 << 32:
        raise ValueError(f"workspace_size must be between 1 and 2**32 - 1 bytes, not {workspace_size}")
    request = Request.make(mod, row.tvm_target, params, name, opt_level).standalone()
    program, kernels = request.lower()
    check_supported(program, row.unsupported_dtypes, row.name)
    try:
        api = c_api(Signature.of_program(program, name))
    except UnsupportedError as err:
        raise UnsupportedError(f"no standalone package: {err}") from None
    emitter = StandaloneEmitter(program, name, api, row.alignment)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    kernel_object = out / "kernels.o"
    module = kernels.build()
    if module is not None:
        module.save(str(kernel_object))
    elif kernel_object.exists():
        kernel_object.unlink()
    if emitter.plan is not None:
        size = _kernel_workspace(kernels, row.alignment) if _asks_workspace(module) else 0
    else:
        size = DEFAULT_WORKSPACE_SIZE if workspace_size is None else workspace_size

    def banner(file_name: str) -> str:
        return f"// Generated by relay_aot {__version__} for model {name} (target {row.name}): {file_name}. Do not edit."

    files = {"program.h": emitter.header(banner("program.h"))}
    units = []
    for index, start in enumerate(range(0, len(program.functions), FUNCTIONS_PER_UNIT)):
        unit = f"unit{index}.cc"
        files[unit] = emitter.unit(banner(unit), program.functions[start:start + FUNCTIONS_PER_UNIT])
        units.append(unit)
    files["constants.cc"] = emitter.constants_unit(banner("constants.cc"))
    files["entry.cc"] = emitter.entry_unit(banner("entry.cc"), size, row.stack_budget)
    usage = (" * non-zero, and {last_error}() says why. A standalone package: link",
             f" * lib{names.c_api(name)}.a alone (no TVM, no C++ library); one run at a time. */")
    files[api.header_name] = header_text(api, usage, tuple(standalone_header_extra(api, size, emitter.plan)))
    files["Makefile"] = makefile(name, units + ["constants.cc", "entry.cc"], module is not None)
    for file_name, text in files.items():
        (out / file_name).write_text(text)
    shutil.copyfile(runtime_include_dir() / "standalone" / RUNTIME_HEADER, out / RUNTIME_HEADER)
    written = tuple(sorted([*files, RUNTIME_HEADER] + (["kernels.o"] if module is not None else [])))
    return Package(out, name, row, size, emitter.plan.size if emitter.plan else 0, written, api)


def _asks_workspace(module) -> bool:
    """Whether the built kernels call the workspace hook (small scratch buffers are on the stack)."""
    if module is None:
        return False
    try:
        return "__TVMBackendAllocWorkspace" in module.get_source("ll")
    except tvm.error.TVMError:
        return True  # cannot tell: keep the arena


def _kernel_workspace(kernels, alignment: int) -> int:
    """The most scratch memory one kernel asks for (kernels run one at a time)."""
    if not kernels.needs_build:
        return 0
    with tvm.transform.PassContext():
        lowered = kernels.lower_all()
    most = 0
    for _, func in lowered.functions.items():
        if isinstance(func, tvm.tir.PrimFunc):
            most = max(most, int(tvm.tir.analysis.calculate_workspace_bytes(func, alignment)))
    return most


def makefile(name: str, sources: list[str], has_kernels: bool) -> str:
    """The package's Makefile: ``make CC=.. CXX=.. AR=.. CFLAGS=.. CXXFLAGS=..`` builds the archive."""
    library = f"lib{names.c_api(name)}.a"
    objects = " ".join(os.path.splitext(s)[0] + ".o" for s in sources)
    lines = [
        f"# Generated by relay_aot {__version__} for model {name}: builds {library}.",
        "# make CC=... CXX=... AR=... CFLAGS=... CXXFLAGS=... (any GCC-compatible toolchain for the",
        "# package's target). The package's own flags are in PKG_CXXFLAGS.",
        "CXX ?= g++",
        "AR ?= ar",
        f"PKG_CXXFLAGS = {' '.join(PACKAGE_CXXFLAGS)} -I.",
        f"OBJECTS = {objects}",
        f"KERNELS = {'kernels.o' if has_kernels else ''}",
        "",
        f"{library}: $(OBJECTS) $(KERNELS)",
        "\trm -f $@",
        "\t$(AR) rcs $@ $(OBJECTS) $(KERNELS)",
        "",
        f"%.o: %.cc program.h {RUNTIME_HEADER} {names.c_api(name)}.h",
        "\t$(CXX) $(PKG_CXXFLAGS) $(CXXFLAGS) -c $< -o $@",
        "",
        "clean:",
        f"\trm -f $(OBJECTS) {library}",
        "",
        ".PHONY: clean",
        "",
    ]
    return "\n".join(lines)

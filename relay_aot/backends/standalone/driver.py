"""Write a standalone package: a directory that builds, with any GCC-compatible toolchain, into
``libtvmgen_<name>.a`` needing no TVM, no heap and no C++ runtime.

The request is lowered once, into the same control IR as every backend, with the standalone
output setting (``Config.standalone``: serial kernels with TVM's unpacked signature, built by
LLVM for the package's target). The package holds:

* ``tvmgen_<name>.h`` -- the host C API's header, plus the memory-sizing declarations (with
  ``kernels.c``, when the target's GCC is installed, the stack a run needs: :mod:`.stack`);
* ``program.h``, ``unit<N>.cc``, ``constants.cc``, ``entry.cc`` -- the generated C++
  (:mod:`.emit`), and ``relay_aot_standalone.h``, its runtime (copied);
* TVM's kernels (none if the program has no kernel to build): ``kernels.o``, an object file
  LLVM made for the target, or, for targets with a ``kernel_c_target``, ``kernels.c`` from TVM's
  ``c`` target and the three TVM headers it includes (``tvm_include/``), for the toolchain;
* ``Makefile`` -- ``make -C DIR CC=.. CXX=.. AR=.. CFLAGS=.. CXXFLAGS=..``; the flags the
  package itself needs are in ``PKG_CXXFLAGS``, so the caller's five variables replace nothing.

No path of the building machine is written into it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import tvm

from ... import names
from ...builder.cache import check_replaceable, file_kind, write_atomic
from ...builder.toolchain import runtime_include_dir, tvm_include_dirs
from ...errors import CompileError, UnsupportedError
from ...ir.signature import Signature
from ...kernels import arm_dsp
from ...request import Request
from ...version import __version__
from ..cpp.capi import CApi, c_api, header_text
from .emit import RUNTIME_HEADER, StandaloneEmitter, check_supported, standalone_header_extra
from .plan import straight_line
from .stack import measure as measure_stack
from .targets import DEFAULT_WORKSPACE_SIZE, StandaloneTarget, resolve

#: The flags every package's C++ needs, whatever the caller's CXXFLAGS: no exceptions, RTTI or
#: thread-safe statics (no C++ runtime), TVM's wrapping integer semantics, and type punning of
#: constants (stored as 32-bit words, read at their dtype).
PACKAGE_CXXFLAGS = (
    "-std=c++17",
    "-fno-exceptions",
    "-fno-rtti",
    "-fno-threadsafe-statics",
    "-fno-asynchronous-unwind-tables",
    "-fno-unwind-tables",
    "-fwrapv",
    "-fno-strict-aliasing",
    "-ffunction-sections",
    "-fdata-sections",
)

#: The flags TVM's C kernels need (GNU C: TVM's C uses its extensions).
PACKAGE_CFLAGS = ("-std=gnu99", "-ffunction-sections", "-fdata-sections")

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
    #: bytes of stack a run needs, measured by the target's GCC (``stack.py``; None: not measured)
    stack_size: int | None = None

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
    target: str | None = None,
    params: Mapping[str, object] | None = None,
    workspace_size: int | None = None,
    opt_level: int = 3,
) -> Package:
    """Write the standalone package of ``mod`` into ``directory`` (made if missing): C++ sources,
    TVM's kernels for ``target``, the C API's header ``tvmgen_<name>.h`` and a ``Makefile`` that
    builds ``libtvmgen_<name>.a`` with any GCC-compatible toolchain -- no TVM runtime, no heap,
    no C++ runtime (docs/deployment.md, "Microcontrollers and boards").

    :param name: the model name (as for :func:`relay_aot.compile`).
    :param target: a row of ``relay_aot.backends.standalone.targets.TARGETS`` (``host``, the
        default: this machine's architecture, its baseline CPU; ``aarch64-linux``,
        ``cortex-m4``), or a TVM ``llvm`` target string.
    :param params: arrays bound to parameters of ``main`` by name (they become ``const`` arrays).
    :param workspace_size: bytes of the arena for programs that allocate (ADTs, closures,
        references, calls); default 65,536. A program that is
        one straight line of kernels gets its storage planned instead and an arena only for
        its kernels' scratch memory, sized at compile time.
    :raises UnsupportedError: the program uses what a package cannot run (an ``@main`` that
        takes or returns anything but tensors of static shape, e.g. a function for a Python
        callback; ``?`` dimensions inside the program are supported); the message names it.
    :returns: the :class:`Package` written.
    """
    row = resolve(target if target is not None else "host")
    if workspace_size is not None and not 0 < workspace_size < 1 << 32:
        raise ValueError(f"workspace_size must be between 1 and 2**32 - 1 bytes, not {workspace_size}")
    request = Request.make(mod, row.tvm_target, params, name, opt_level).standalone(bool(row.kernel_c_target))
    program, kernels = request.lower()
    check_supported(program, row.unsupported_dtypes, row.name)
    try:
        api = c_api(Signature.of_program(program, name))
    except UnsupportedError as err:
        raise UnsupportedError(f"no standalone package: {err}") from None
    # a planned program's kernels take their scratch buffers as parameters, planned with its tensors
    planned = straight_line(program)
    c_target = row.kernel_c_target or None
    emitter = StandaloneEmitter(
        program,
        name,
        api,
        row.alignment,
        kernels.scratch_plan(c_target) if planned else {},
        kernels.extent_plan(c_target),
    )
    out = Path(directory)
    # Every file's content is made before anything is written (a failed build leaves the
    # directory as it was), then each is checked and written atomically: the package's place
    # holds regular files only, as export_library's does.
    contents: dict[str, bytes | str | Path] = {}
    kernel_file, asks_workspace = None, False
    if row.kernel_c_target:
        source = kernels.build_c(row.kernel_c_target, scratch_params=planned)
        if source is not None:
            kernel_file = "kernels.c"
            contents[kernel_file] = source
            asks_workspace = "TVMBackendAllocWorkspace(" in source
            contents.update(_tvm_headers())
    else:
        module = kernels.build(scratch_params=planned)
        if module is not None:
            kernel_file = "kernels.o"
            contents[kernel_file] = _saved(module)
            asks_workspace = _asks_workspace(module)
    if emitter.plan is not None:
        size = _kernel_workspace(kernels, row.alignment, c_target) if asks_workspace else 0
    else:
        size = DEFAULT_WORKSPACE_SIZE if workspace_size is None else workspace_size

    def banner(file_name: str) -> str:
        return (
            f"// Generated by relay_aot {__version__} for model {name} (target {row.name}): {file_name}. Do not edit."
        )

    files = {"program.h": emitter.header(banner("program.h"))}
    units = []
    # a planned program's one function is printed into entry.cc, beside its only caller
    functions = [] if emitter.plan is not None else program.functions
    for index, start in enumerate(range(0, len(functions), FUNCTIONS_PER_UNIT)):
        unit = f"unit{index}.cc"
        files[unit] = emitter.unit(banner(unit), functions[start : start + FUNCTIONS_PER_UNIT])
        units.append(unit)
    files["constants.cc"] = emitter.constants_unit(banner("constants.cc"))
    files["entry.cc"] = emitter.package_entry_unit(
        banner("entry.cc"), size, row.stack_budget, kernel_file == "kernels.c"
    )
    usage: tuple[str, ...] = (
        " * non-zero, and {last_error}() says why. A standalone package: link",
        f" * lib{names.c_api(name)}.a alone (no TVM, no C++ library); one run at a time.",
    )
    if row.kernel_c_target:
        # C kernels are compiled by the user's toolchain: no LLVM target, and no CPU check
        usage += (
            " *",
            " * The kernels are C (kernels.c): TVM's schedules for",
            f" *   {row.tvm_target}",
            f" * printed by its C code generator ({row.kernel_c_target}), compiled by the toolchain",
            " * and CFLAGS the Makefile is given (no check of the CPU at run time).",
        )
        if kernel_file == "kernels.c" and arm_dsp.uses_micro_kernels(str(contents[kernel_file])):
            usage += (
                " * Its int8 products are relay_aot's own micro-kernels, in kernels.c too: Arm's DSP",
                " * instructions (SMLAD, SXTB16) where the compiler targets a core that has them",
                " * (__ARM_FEATURE_DSP), a plain C loop elsewhere.",
            )
        api = dataclasses.replace(api, target="")
    files[api.header_name] = header_text(api, usage, tuple(standalone_header_extra(api, size, emitter.plan)))
    files["Makefile"] = makefile(name, units + ["constants.cc", "entry.cc"], kernel_file)
    contents.update(files)
    contents[RUNTIME_HEADER] = runtime_include_dir() / "standalone" / RUNTIME_HEADER
    # the stack a run needs, measured by the target's GCC when it is installed (C kernels only)
    stack = measure_stack(
        contents, row, names.c_api(name, "run"), (*PACKAGE_CXXFLAGS, "-I."), (*PACKAGE_CFLAGS, f"-I{TVM_HEADERS_DIR}")
    )
    if stack is not None:
        extra = standalone_header_extra(api, size, emitter.plan, (stack, " ".join([row.tool("gcc"), *row.cflags])))
        files[api.header_name] = contents[api.header_name] = header_text(api, usage, tuple(extra))
    # the other kernel file of an earlier package in this directory would be linked too
    stale = [out / other for other in ("kernels.o", "kernels.c") if other != kernel_file]
    _write_package(out, contents, stale)
    written = tuple(sorted([*files, RUNTIME_HEADER] + ([kernel_file] if kernel_file else [])))
    return Package(out, name, row, size, emitter.plan.size if emitter.plan else 0, written, api, stack)


#: Where a package with C kernels keeps the three headers of TVM's C runtime API they include.
TVM_HEADERS_DIR = "tvm_include"
_TVM_HEADERS = ("tvm/runtime/c_runtime_api.h", "tvm/runtime/c_backend_api.h", "dlpack/dlpack.h")


def _tvm_headers() -> dict[str, Path]:
    """The headers TVM's C kernels include (declarations only: no TVM library is linked), by
    their path in the package."""
    found = {}
    for header in _TVM_HEADERS:
        for root in tvm_include_dirs():
            source = Path(root) / header
            if source.is_file():
                found[f"{TVM_HEADERS_DIR}/{header}"] = source
                break
        else:
            raise CompileError(f"TVM's header {header} is missing from the installation")
    return found


def _saved(module) -> bytes:
    """The object file of the kernels' module, as bytes (TVM writes it to a path)."""
    with tempfile.TemporaryDirectory(prefix="relay_aot-kernels-") as tmp:
        path = Path(tmp) / "kernels.o"
        module.save(str(path))
        return path.read_bytes()


def _write_package(out: Path, contents: Mapping[str, bytes | str | Path], stale) -> None:
    """Write each file of ``contents`` (text, bytes, or a ``Path`` to copy) under ``out``
    atomically, after checking that no path of the package (nor a stale file to remove) is a
    symbolic link, a directory, a FIFO or a device: ``ValueError`` names it, nothing is written."""
    what = "export_standalone"
    if out.exists() and not out.is_dir():
        raise ValueError(f"{what}: {out} exists and is not a directory")
    targets = [out / relative for relative in contents]
    for path in [*targets, *stale]:
        check_replaceable(path, what)
    # the package's own subdirectories (tvm_include/...): real directories, or new
    inner = {
        out.joinpath(*Path(relative).parts[:depth])
        for relative in contents
        for depth in range(1, len(Path(relative).parts))
    }
    for directory in sorted(inner):
        if directory.is_symlink() or directory.exists() and not directory.is_dir():
            raise ValueError(f"{what}: {directory} is {file_kind(directory.lstat().st_mode)}, not a directory")
    for directory in sorted(inner | {out}):
        directory.mkdir(parents=True, exist_ok=True)
    for path in stale:
        if path.exists():
            path.unlink()
    for path, content in zip(targets, contents.values()):
        write_atomic(path, content, mode=0o644)


def _asks_workspace(module) -> bool:
    """Whether the built kernels call the workspace hook (small scratch buffers are on the stack)."""
    if module is None:
        return False
    try:
        return "__TVMBackendAllocWorkspace" in module.get_source("ll")
    except tvm.error.TVMError:
        return True  # cannot tell: keep the arena


def _kernel_workspace(kernels, alignment: int, c_target: str | None) -> int:
    """The most workspace one kernel asks for (kernels run one at a time), of a planned
    program's kernels (what is left once their scratch buffers are parameters)."""
    if not kernels.needs_build:
        return 0
    lowered = kernels.lowered(c_target, scratch_params=True)[0]
    most = 0
    for _, func in lowered.functions.items():
        if isinstance(func, tvm.tir.PrimFunc):
            most = max(most, int(tvm.tir.analysis.calculate_workspace_bytes(func, alignment)))
    return most


def makefile(name: str, sources: list[str], kernel_file: str | None) -> str:
    """The package's Makefile: ``make CC=.. CXX=.. AR=.. CFLAGS=.. CXXFLAGS=..`` builds the archive
    (``kernel_file``: ``kernels.o`` made by LLVM, ``kernels.c`` to compile, or None)."""
    library = f"lib{names.c_api(name)}.a"
    objects = " ".join(os.path.splitext(s)[0] + ".o" for s in sources)
    c_kernels = kernel_file == "kernels.c"
    if c_kernels:
        objects += " kernels.o"
    lines = [
        f"# Generated by relay_aot {__version__} for model {name}: builds {library}.",
        "# make CC=... CXX=... AR=... CFLAGS=... CXXFLAGS=... (any GCC-compatible toolchain for the",
        "# package's target). The package's own flags are in PKG_CXXFLAGS.",
        "CXX ?= g++",
        "AR ?= ar",
        f"PKG_CXXFLAGS = {' '.join(PACKAGE_CXXFLAGS)} -I.",
        f"PKG_CFLAGS = {' '.join(PACKAGE_CFLAGS)} -I{TVM_HEADERS_DIR}",
        f"OBJECTS = {objects}",
        f"KERNELS = {kernel_file if kernel_file == 'kernels.o' else ''}",
        "",
        f"{library}: $(OBJECTS) $(KERNELS)",
        "\trm -f $@",
        "\t$(AR) rcs $@ $(OBJECTS) $(KERNELS)",
        "",
        f"%.o: %.cc program.h {RUNTIME_HEADER} {names.c_api(name)}.h",
        "\t$(CXX) $(PKG_CXXFLAGS) $(CXXFLAGS) -c $< -o $@",
        "",
        *(["kernels.o: kernels.c", "\t$(CC) $(PKG_CFLAGS) $(CFLAGS) -c $< -o $@", ""] if c_kernels else []),
        "clean:",
        f"\trm -f $(OBJECTS) {library}",
        "",
        ".PHONY: clean",
        "",
    ]
    return "\n".join(lines)

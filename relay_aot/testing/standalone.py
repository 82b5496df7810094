"""Build, link and run standalone packages on their targets (tests and the micro benchmark).

:func:`make_package` runs the package's ``Makefile`` with the target's toolchain;
:func:`undefined_symbols` lists what its archive needs from outside, and :func:`disallowed`
which of those are not libc's memory and string functions, libm's or the compiler runtime's;
:func:`run_c_main` writes a C99 ``main`` that calls the host C API on inputs embedded in it,
links it (no TVM, no C++ library) and runs it -- natively, under ``qemu-aarch64``, or on QEMU's
emulated Cortex-M4 with ``examples/standalone/cortex-m4`` -- and returns the outputs.
:func:`read_package` takes a package another process wrote (``relay-aot compile --standalone``)
from its header, for the same functions.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import ir, names
from ..backends.cpp.capi import CApi, CField
from ..backends.standalone.driver import Package
from ..backends.standalone.targets import TARGETS, StandaloneTarget

#: The start-up code and linker script of the Cortex-M4 board (QEMU's mps2-an386).
BOARD_DIR = Path(__file__).resolve().parent.parent.parent / "examples" / "standalone" / "cortex-m4"

_MEMORY = {"memcpy", "memmove", "memset", "memcmp", "memchr", "strlen", "strcmp", "strncmp", "strchr"}
_MATH = {
    base + suffix
    for base in (
        "sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 expm1 log log2 log10 log1p pow "
        "sqrt cbrt hypot erf erfc lgamma tgamma ceil floor trunc round lround nearbyint rint fmod remainder fabs fmin "
        "fmax fma copysign ldexp frexp sincos"
    ).split()
    for suffix in ("", "f")
}
#: The compiler runtime: libgcc's helpers (soft arithmetic, conversions, bit counts) and the ARM EABI's.
_COMPILER_RUNTIME = re.compile(
    r"__(aeabi_\w+|(add|sub|mul|div|mod|udiv|umod|udivmod|divmod|neg|cmp|ucmp|ashl|ashr|lshr|fix|fixuns|float|"
    r"floatun|extend|trunc|pow|clz|ctz|popcount|bswap|ffs|unord|eq|ne|lt|le|gt|ge)[a-z0-9]*)\Z"
)


class ToolMissing(RuntimeError):
    """The target's toolchain or emulator is not installed."""


def tool(row: StandaloneTarget, name: str) -> str:
    """The path of the target's ``name`` (``gcc``, ``nm``...); :class:`ToolMissing` if absent."""
    found = shutil.which(row.tool(name))
    if found is None:
        raise ToolMissing(f"{row.tool(name)} is not installed")
    return found


def require_tools(row: StandaloneTarget, tools: Sequence[str] = ("gcc", "g++", "ar", "nm")) -> None:
    """:class:`ToolMissing` unless the target's toolchain (``tools``) and emulator are installed."""
    for name in tools:
        tool(row, name)
    if row.run and shutil.which(row.run[0]) is None:
        raise ToolMissing(f"{row.run[0]} is not installed")


def skip_without_tools(row: StandaloneTarget, tools: Sequence[str] = ("gcc", "g++", "ar", "nm")) -> None:
    """For a test: :func:`require_tools`, skipping the test where they are missing -- except in
    CI (``CI`` set), whose script installs them: there a missing tool fails the test."""
    try:
        require_tools(row, tools)
    except ToolMissing as err:
        if os.environ.get("CI"):
            raise
        import pytest

        pytest.skip(str(err))


def _run(command: Sequence[str], cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def make_package(package: Package, extra_cflags: Sequence[str] = ()) -> Path:
    """Build the package's archive with its target's toolchain (the five variables on the command line)."""
    row = package.target
    flags = " ".join([*row.cflags, *extra_cflags])
    _run(
        [
            "make",
            "-s",
            "-C",
            str(package.directory),
            f"CC={tool(row, 'gcc')}",
            f"CXX={tool(row, 'g++')}",
            f"AR={tool(row, 'ar')}",
            f"CFLAGS={flags}",
            f"CXXFLAGS={flags}",
        ]
    )
    return package.library


#: A field of the header's structs: ``void* NAME; /* WHAT: Tensor[(D, ...), DTYPE] */``.
_FIELD = re.compile(r"^  void\* (\w+); /\* (.*): Tensor\[\(([^)]*)\), (\w+)\] \*/$", re.M)


def read_package(directory: str | Path, name: str, target: str = "host") -> Package:
    """The package that ``relay-aot compile --standalone DIR --name NAME --target TARGET`` wrote
    in ``directory``: its C API and sizes read back from its header ``tvmgen_<name>.h``."""
    directory = Path(directory)
    header = (directory / f"{names.c_api(name)}.h").read_text()
    fields: dict[str, list[CField]] = {}
    for part in ("inputs", "outputs"):
        struct = re.search(rf"^struct {names.c_api(name, part)} {{\n(.*?)^}};", header, re.M | re.S)
        if struct is None:
            raise ValueError(f"{directory}: the header has no struct {names.c_api(name, part)}")
        fields[part] = [
            CField(
                field,
                what,
                ir.TensorType(tuple(int(d) for d in shape.split(",") if d.strip()), dtype),
                tuple(int(i) for i in re.findall(r"\[(\d+)\]", what)) if part == "outputs" else (),
            )
            for field, what, shape, dtype in _FIELD.findall(struct.group(1))
        ]
    outputs = tuple(fields["outputs"])
    macro = names.c_api(name).upper()
    sizes = dict(re.findall(rf"^#define {macro}_(WORKSPACE_SIZE|PLANNED_SIZE) (\d+)", header, re.M))
    return Package(
        directory=directory,
        name=name,
        target=TARGETS[target],
        workspace_size=int(sizes["WORKSPACE_SIZE"]),
        planned_size=int(sizes["PLANNED_SIZE"]),
        files=tuple(sorted(p.name for p in directory.iterdir())),
        api=CApi(name, tuple(fields["inputs"]), outputs, _result_type(outputs)),
    )


def _result_type(outputs: Sequence[CField], prefix: tuple[int, ...] = ()) -> ir.Type:
    """@main's result type from its tensors' paths in it (depth first)."""
    here = [f for f in outputs if f.path[: len(prefix)] == prefix]
    if len(here) == 1 and here[0].path == prefix:
        return here[0].type
    count = 1 + max((f.path[len(prefix)] for f in here), default=-1)
    return ir.TupleType(tuple(_result_type(here, (*prefix, i)) for i in range(count)))


def undefined_symbols(package: Package) -> set[str]:
    """What the package's archive needs from outside (undefined in every member)."""
    out = _run([tool(package.target, "nm"), "-A", str(package.library)]).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-2] == "U":
            undefined.add(parts[-1])
        elif len(parts) >= 3:
            defined.add(parts[-1])
    return undefined - defined


def disallowed(symbols: set[str]) -> set[str]:
    """The symbols that are not libc's memory and string functions, libm's, or the compiler runtime's."""
    return {s for s in symbols if s not in _MEMORY and s not in _MATH and not _COMPILER_RUNTIME.match(s)}


def _c_array(name: str, array: np.ndarray) -> str:
    raw = np.ascontiguousarray(array).astype(np.uint8 if array.dtype == np.bool_ else array.dtype).tobytes()
    raw += bytes(-len(raw) % 4)
    words = np.frombuffer(raw or bytes(4), dtype="<u4")
    body = ",".join(f"0x{w:08x}u" for w in words)
    return f"static uint32_t {name}[{len(words)}] __attribute__((aligned(64))) = {{{body}}};"


def c_main(api: CApi, inputs: Sequence[np.ndarray], runs: int = 1) -> str:
    """A C99 program for the host C API: runs the model ``runs`` times on the embedded ``inputs``
    and prints ``rc``, ``last_error`` and each output's bytes as hexadecimal words."""
    model = api.model
    lines = ["#include <stdint.h>", "#include <stdio.h>", f'#include "tvmgen_{model}.h"', ""]
    for i, array in enumerate(inputs):
        lines.append(_c_array(f"input{i}", array))
    for i, f in enumerate(api.outputs):
        lines.append(f"static uint32_t output{i}[{(f.nbytes + 3) // 4 or 1}] __attribute__((aligned(64)));")
    lines += ["", "int main(void) {", f"  struct tvmgen_{model}_inputs in;", f"  struct tvmgen_{model}_outputs out;"]
    lines += [f"  in.{f.name} = input{i};" for i, f in enumerate(api.inputs)]
    lines += [f"  out.{f.name} = output{i};" for i, f in enumerate(api.outputs)]
    lines += [
        "  int32_t rc = 0;",
        f"  for (int r = 0; r < {runs}; ++r) rc |= tvmgen_{model}_run(&in, &out);",
        f'  printf("rc %d\\nerror %s\\npeak %lu\\n", (int)rc, tvmgen_{model}_last_error(), '
        f"(unsigned long)tvmgen_{model}_workspace_peak());",
    ]
    for i, f in enumerate(api.outputs):
        words = (f.nbytes + 3) // 4
        lines += [
            f'  printf("output{i}");',
            f'  for (int k = 0; k < {words}; ++k) printf(" %08lx", (unsigned long)output{i}[k]);',
            '  printf("\\n");',
        ]
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def link(package: Package, main_source: Path, executable: Path) -> Path:
    """Link ``main_source`` with the package's archive for its target (and the board's start-up
    code on bare metal): no TVM, no C++ library."""
    row = package.target
    command = [tool(row, "gcc"), "-std=c99", *row.cflags, str(main_source), "-I", str(package.directory)]
    if row.bare_metal:
        command += [
            str(BOARD_DIR / "startup.c"),
            "-T",
            str(BOARD_DIR / "mps2-an386.ld"),
            "-nostartfiles",
            "--specs=nano.specs",
            "--specs=rdimon.specs",
            "-Wl,--gc-sections",
        ]
    command += [str(package.library), "-lm", *row.ldflags, "-o", str(executable)]
    _run(command)
    return executable


def run(package: Package, executable: Path, timeout: float = 120) -> str:
    """Run ``executable`` on the package's target (natively or under its emulator); its output."""
    row = package.target
    command = [*row.run, str(executable)]
    if row.run:
        tool_path = shutil.which(row.run[0])
        if tool_path is None:
            raise ToolMissing(f"{row.run[0]} is not installed")
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def parse_outputs(api: CApi, text: str) -> tuple[int, str, list[np.ndarray]]:
    """``(rc, last_error, outputs)`` from the output of a :func:`c_main` program."""
    rc, error, outputs = None, "", {}
    for line in text.splitlines():
        if line.startswith("rc "):
            rc = int(line.split()[1])
        elif line.startswith("error"):
            error = line[len("error") :].strip()
        elif line.startswith("output"):
            head, *words = line.split()
            outputs[int(head[len("output") :])] = np.array([int(w, 16) for w in words], dtype="<u4").tobytes()
    if rc is None:
        raise RuntimeError(f"the program printed no result:\n{text}")
    arrays = []
    for i, f in enumerate(api.outputs):
        dtype = np.uint8 if f.type.dtype == "bool" else np.dtype(f.type.dtype)
        data = np.frombuffer(outputs[i][: f.nbytes], dtype=dtype).reshape(f.type.shape)
        arrays.append(data.astype(np.bool_) if f.type.dtype == "bool" else data.copy())
    return rc, error, arrays


def run_c_main(
    package: Package, inputs: Sequence[np.ndarray], work: Path | None = None, runs: int = 1
) -> tuple[int, str, list[np.ndarray]]:
    """Write, link and run :func:`c_main` on the package's target: ``(rc, last_error, outputs)``."""
    work = Path(work or package.directory)
    source = work / "main.c"
    source.write_text(c_main(package.api, inputs, runs))
    executable = link(package, source, work / "main.elf")
    return parse_outputs(package.api, run(package, executable))

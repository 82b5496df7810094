"""Build, link and run standalone packages on their targets (tests and the micro benchmark).

:func:`make_package` runs the package's ``Makefile`` with the target's toolchain;
:func:`undefined_symbols` lists what its archive needs from outside, and :func:`disallowed`
which of those are not libc's memory and string functions, libm's or the compiler runtime's;
:func:`run_c_main` writes a C99 ``main`` that calls the host C API on inputs embedded in it,
links it (no TVM, no C++ library) and runs it -- natively, under ``qemu-aarch64``, or on QEMU's
emulated Cortex-M4 with ``examples/standalone/cortex-m4`` -- and returns the outputs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..backends.cpp.capi import CApi
from ..backends.standalone.driver import Package
from ..backends.standalone.targets import StandaloneTarget

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

"""The Python backend's driver: build the kernels in memory, print and load the Python source."""

from __future__ import annotations

import hashlib
import linecache
import sys
from collections.abc import Callable
from typing import Any

import tvm

from ... import ir, names
from ...errors import UnsupportedError
from ...ir.profile import ProfileTable
from ...ir.signature import Signature
from ...request import Request
from ...runtime import CompiledModule, fastcall
from .emit import emit_python


def load_python(source: str, model: str, kernel_module: tvm.runtime.Module | None, constants: list) -> Callable:
    """Execute generated ``source`` against its kernels and constants; return its entry.

    The source is registered with ``linecache`` under a name carrying the model and a hash of
    the source, so tracebacks through generated code show its lines.
    """
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<relay_aot python backend: {model} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        code = compile(source, filename, "exec")
    except (SyntaxError, RecursionError, MemoryError) as err:
        # CPython limits how deeply blocks may nest (about 100 indentation levels).
        raise UnsupportedError(
            f"the program's control flow is nested too deeply for the python backend ({type(err).__name__}: {err}); "
            "use the cpp backend"
        ) from None
    namespace: dict[str, Any] = {
        "__name__": f"relay_aot_generated_{model}",
        names.PY_KERNEL_MODULE: kernel_module,
        names.PY_CONSTANTS: [ir.constant_ndarray(c) for c in constants],
    }
    exec(code, namespace)  # noqa: S102 - our own generated code
    return namespace[names.PY_ENTRY]


def compile_python(request: Request, cache: bool = True, verbose: bool = False) -> CompiledModule:
    """The Python backend: build the kernels in memory, print and load the Python control code.

    ``cache`` is accepted for symmetry with the C++ backend; nothing is written to disk (the
    kernels are built in memory on every compile). A target whose CPU features this machine
    lacks raises :class:`~relay_aot.errors.CpuFeatureError`: the kernels would run here.
    """
    del cache
    program, kernels = request.lower()
    name = request.name
    # Its kernels run in this process, so it needs the target's CPU (kernels would die of SIGILL).
    fastcall.check_cpu(program.cpu, f"model {name} (python backend)")
    profile = request.config.profile
    source = emit_python(program, name, profile)
    module = kernels.build()
    entry = load_python(source, name, module, program.constants)
    if verbose:
        print(
            f"relay_aot: python backend: {len(program.functions)} functions, {len(program.kernels)} kernels "
            f"built in memory, {len(source.splitlines())} lines of Python",
            file=sys.stderr,
        )
    profiler = None
    if profile:
        table = ProfileTable.of_program(program)
        profiler = fastcall.profile_control(table.functions, table.kernels)
    compiled = CompiledModule(
        module,
        Signature.of_program(program, name),
        name,
        backend="python",
        source=source,
        entry=entry,
        profiler=profiler,
    )
    if not profile:
        # CompiledModule.profile compiles the instrumented variant when it is first asked for.
        compiled.profiled_variant = lambda: compile_python(request.profiled(), verbose=verbose)
    return compiled


def generate_python(request: Request) -> str:
    """The Python source of ``request`` (printing it needs no kernels built)."""
    program, _ = request.lower()
    return emit_python(program, request.name, request.config.profile)

"""The public entry points: ``compile`` and ``generate_source``.

A :class:`~relay_aot.request.Request` (module, parameters, options, settings) goes to a backend's
driver, which runs the shared stages -- passes (``passes/``), kernels and control IR
(``kernels/``, ``lower/``) -- when it needs them, prints the IR (``backends/<name>/emit.py``),
and makes a callable: the C++ driver builds and caches a library (``build/``) and loads it
(``runtime/``); the Python driver loads generated Python in-process.
"""

from __future__ import annotations

from collections.abc import Mapping

import tvm

from .backends.cpp.driver import compile_cpp, generate_cpp
from .backends.python.driver import compile_python, generate_python
from .backends.standalone.driver import export_standalone  # noqa: F401 - public: relay_aot.export_standalone
from .ir.printer import format_program
from .kernels import tuning
from .request import Request
from .runtime import CompiledModule

#: Each backend's driver: (compile, generate source).
BACKENDS = {"cpp": (compile_cpp, generate_cpp), "python": (compile_python, generate_python)}


def _driver(backend: str):
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    return BACKENDS[backend]


def compile(  # noqa: A001 - the name users expect
    mod: tvm.IRModule,
    target=None,
    params: Mapping[str, object] | None = None,
    backend: str = "cpp",
    name: str = "default",
    opt_level: int = 3,
    *,
    cache: bool = True,
    verbose: bool = False,
    profile: bool = False,
    tuning_records=None,
) -> CompiledModule:
    """Compile ``mod["main"]`` (and what it reaches) into a callable.

    :param mod: the Relay program; ``main`` is its entry point.
    :param target: TVM target of the kernels: a CPU (``llvm ...``) target, or ``"host"``.
        By default (None) the CPU this process runs on, named explicitly
        (``llvm -mcpu=<cpu>`` and any feature it lacks or adds; ``RELAY_AOT_TARGET`` sets another
        default). The library then needs that CPU's features, and refuses with
        :class:`CpuFeatureError` to run where one is missing; ``target="llvm"`` builds for
        any x86-64 (docs/deployment.md, "Which CPU a library runs on").
    :param params: arrays bound to parameters of ``main`` by name, like ``relay.build``'s
        ``params``: they become constants of the library and leave the signature.
    :param backend: ``"cpp"`` (a shared library) or ``"python"`` (generated Python calling the
        same kernels; for debugging, needs no C++ compiler).
    :param name: the model name, which prefixes every symbol the library exports: 1-64
        letters, digits and underscores, not starting with a digit.
    :param opt_level: TVM's optimization level for the Relay passes and the kernels.
    :param cache: ``False`` builds in a private directory instead of the shared cache.
    :param verbose: ``True`` shows the build's commands on stderr.
    :param profile: build the variant instrumented for profiling (a library of its own, cached
        under its own key); only needed for a library to export and profile after
        :func:`relay_aot.load`: ``CompiledModule.profile`` builds the variant itself.
    :param tuning_records: an AutoTVM log (:func:`relay_aot.tune` writes one): kernels use its
        best records, as inside ``autotvm.apply_history_best(log)``; they are part of the cache key.
    :returns: the compiled program; call it like ``mod["main"]``.
    :raises UnsupportedError: the program uses something relay_aot does not compile (a
        non-CPU target, an operator TVM cannot lower, ...).
    :raises FileNotFoundError, ValueError: ``tuning_records`` is missing, not an AutoTVM log, or
        holds a record outside its task's configuration space (named by file, line, workload
        and knob).
    :raises RelayAotError: the program does not type-check, or ``params`` names no parameter.
    :raises CompileError: the generated C++ did not compile (its output and sources are kept).
    :raises ValueError: a bad model name, backend or target.

    The C++ backend caches libraries (see docs/build.md): a module compiled before with the
    same parameters, options, flags and relay_aot/TVM versions is loaded without running any
    pass. The result's ``build_result`` (:class:`relay_aot.builder.BuildResult`) tells whether
    it came from the cache (``.cached``) and its key.
    """
    compile_with, _ = _driver(backend)
    with tuning.records(tuning_records):
        request = Request.make(mod, target, params, name, opt_level, profile)
        if request.config.standalone or request.config.c_kernels:
            variable = "RELAY_AOT_STANDALONE" if request.config.standalone else "RELAY_AOT_C_KERNELS"
            raise ValueError(
                f"{variable} is set: standalone packages are written by export_standalone "
                "(relay-aot compile --standalone), not by compile"
            )
        return compile_with(request, cache=cache, verbose=verbose)


def generate_source(
    mod: tvm.IRModule,
    target=None,
    params: Mapping[str, object] | None = None,
    backend: str = "cpp",
    name: str = "default",
    opt_level: int = 3,
    profile: bool = False,
) -> str:
    """The source :func:`compile` generates for ``mod``, without building anything
    (``profile``: the variant instrumented for profiling)."""
    _, generate = _driver(backend)
    return generate(Request.make(mod, target, params, name, opt_level, profile))


def generate_ir(mod: tvm.IRModule, **options) -> str:
    """The control IR ``mod`` lowers to, as text (``relay-aot show --ir``), with each variable's
    last use marked ``^``. It is the same for both backends; ``options`` are
    :func:`generate_source`'s (``target``, ``params``, ``backend``, ``name``, ``opt_level``)."""
    backend = options.pop("backend", "cpp")
    _driver(backend)  # only checked
    program, _ = Request.make(mod, **options).lower()
    return format_program(program, liveness=True)

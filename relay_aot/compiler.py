"""The public entry point: ``compile`` runs the pipeline stage by stage.

passes (``passes.py``) -> kernels and control IR (``kernels.py``, ``lower.py``) -> emitter
(``emit_cpp.py``) -> build and cache (``build.py``) -> loading (``runtime.py``).
"""

from __future__ import annotations

import hashlib
import math
import sys
from typing import Mapping, Optional

import numpy as np
import tvm

from . import __version__, build, names, passes
from .config import Config
from .emit_cpp import FUNCTIONS_PER_UNIT, CppSources, constants_blob, emit_cpp
from .errors import CompileError, UnsupportedError
from .lower import lower_program
from .metadata import Signature
from .runtime import CompiledModule, load_library, read_signature

BACKENDS = ("cpp", "python")

# Pin the digest of relay_aot's code (part of every module-index key) to the code this process
# imported, before anyone edits the files on disk.
build.package_digest()
build.runtime_sources_digest()


def _target(target) -> tvm.target.Target:
    try:
        target = tvm.target.Target(target)
    except (tvm.error.TVMError, ValueError) as err:
        raise ValueError(f"invalid target {target!r}: {err}") from None
    if target.kind.name != "llvm":
        raise UnsupportedError(f"target {target.kind.name!r} is not supported; relay_aot targets the CPU (llvm)")
    return target


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")


def compile(  # noqa: A001 - the name users expect
    mod: tvm.IRModule,
    target="llvm",
    params: Optional[Mapping[str, object]] = None,
    backend: str = "cpp",
    name: str = "default",
    opt_level: int = 3,
    *,
    cache: bool = True,
    verbose: bool = False,
) -> CompiledModule:
    """Compile ``mod["main"]`` (and what it reaches) into a callable.

    :param mod: the Relay program; ``main`` is its entry point.
    :param target: TVM target of the kernels: a CPU (``llvm ...``) target.
    :param params: arrays bound to parameters of ``main`` by name, like ``relay.build``'s
        ``params``: they become constants of the library and leave the signature.
    :param backend: ``"cpp"`` (a shared library) or ``"python"`` (generated Python calling the
        same kernels; for debugging, needs no C++ compiler).
    :param name: the model name, which prefixes every symbol the library exports: 1-64
        letters, digits and underscores, not starting with a digit.
    :param opt_level: TVM's optimization level for the Relay passes and the kernels.
    :param cache: ``False`` builds in a private directory instead of the shared cache.
    :param verbose: ``True`` shows the build's commands on stderr.
    :returns: the compiled program; call it like ``mod["main"]``.
    :raises UnsupportedError: the program uses something relay_aot does not compile (dynamic
        shapes, a non-CPU target, ...).
    :raises RelayAotError: the program does not type-check, or ``params`` names no parameter.
    :raises CompileError: the generated C++ did not compile (its output and sources are kept).
    :raises ValueError: a bad model name, backend or target.

    The C++ backend caches libraries (see docs/build.md): a module compiled before with the
    same parameters, options, flags and relay_aot/TVM versions is loaded without running any
    pass. The result's ``build_result`` (:class:`relay_aot.build.BuildResult`) tells whether
    it came from the cache (``.cached``) and its key.
    """
    names.check_model_name(name)
    _check_backend(backend)
    target = _target(target)
    config = Config.from_environment()  # the settings of this compile, read once
    flags = module_key = None
    if backend == "cpp":
        flags = build.BuildFlags.default(config)
        flags = flags.with_pch(build.pch_directory(flags, config))
        module_key = _module_key(mod, params, target, name, opt_level, flags, config) if cache else None
        found = _load_indexed(module_key, name, verbose, config) if module_key is not None else None
        if found is not None:
            return found
    with tvm.transform.PassContext(opt_level=opt_level):
        program, kernels = _lower(mod, params, name, target, opt_level, config)
        if backend == "python":
            from .emit_python import compile_python

            return compile_python(program, kernels, name, cache=cache, verbose=verbose)
        return _compile_cpp(program, kernels, name, flags, config, cache, verbose, module_key)


def generate_source(
    mod: tvm.IRModule,
    target="llvm",
    params: Optional[Mapping[str, object]] = None,
    backend: str = "cpp",
    name: str = "default",
    opt_level: int = 3,
) -> str:
    """The source :func:`compile` generates for ``mod``, without building a C++ library.

    The Python backend's source comes from compiling (it builds no library, only kernels).
    """
    _check_backend(backend)
    if backend == "python":
        return compile(mod, target, params, backend, name, opt_level).source
    names.check_model_name(name)
    target = _target(target)
    config = Config.from_environment()
    with tvm.transform.PassContext(opt_level=opt_level):
        program, _ = _lower(mod, params, name, target, opt_level, config)
    return _cpp_sources(program, name, build.BuildFlags.default(config)).text()


def _lower(mod, params, name: str, target, opt_level: int, config: Config):
    prepared = passes.prepare(mod, params, opt_level, target)
    return lower_program(prepared, name, target, config)


def _params_text(params: Optional[Mapping[str, object]]) -> Optional[str]:
    """A digest of ``params`` for the module key (None if a value is not plain tensor data)."""
    if not params:
        return ""
    digest = hashlib.sha256()
    try:
        for key in sorted(params):
            value = params[key]
            array = value.numpy() if isinstance(value, tvm.nd.NDArray) else np.asarray(value)
            if array.dtype == object:
                return None
            digest.update(f"{key}\0{array.dtype}\0{array.shape}\0".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    except (TypeError, ValueError, tvm.error.TVMError):
        return None
    return digest.hexdigest()


def _module_key(
    mod, params, target, name: str, opt_level: int, flags: build.BuildFlags, config: Config
) -> Optional[str]:
    """The module-index key of this compile, or None when the input cannot be keyed (then the
    pipeline runs and reports what is wrong with it).

    Exact: the module's lossless fingerprint, the parameters' bytes, the options, the toolchain
    and every setting that changes generated code (``Config.output_key``).
    """
    if not isinstance(mod, tvm.IRModule):
        return None
    params_text = _params_text(params)
    try:
        fingerprint = passes.module_fingerprint(mod)
    except (tvm.error.TVMError, ValueError):
        return None
    if params_text is None:
        return None
    return build.index_key([fingerprint, params_text, str(target), name, str(opt_level), "cpp"], flags, config)


def _load_indexed(module_key: str, name: str, verbose: bool, config: Config) -> Optional[CompiledModule]:
    """The compiled module from the index, without running any pass (None: not there)."""
    found = build.find_indexed(module_key, config)
    if found is None:
        return None
    library = found.entry.library
    try:
        module = load_library(library)
        signature = read_signature(module, name)
        source = CppSources(found.read_files(), found.units).text()
    except (OSError, ValueError, tvm.error.TVMError):
        return None  # the full pipeline finds the entry again, and evicts it if it is damaged
    if verbose:
        print(f"[relay_aot] cache hit: {library}", file=sys.stderr)
    compiled = CompiledModule(module, signature, name, backend="cpp", source=source, library_path=library)
    compiled.build_result = build.BuildResult(library, found.entry.key, True, found.entry.directory)
    return compiled


def _functions_per_unit(count: int) -> int:
    """Functions per translation unit: at most ``FUNCTIONS_PER_UNIT``, in groups of equal size
    (50 functions compile as 25 + 25 in parallel, not 48 + 2). Not tied to the number of CPUs,
    so that the generated code, and the cache key, are the same on every machine."""
    units = max(1, math.ceil(count / FUNCTIONS_PER_UNIT))
    return max(1, math.ceil(count / units))


def _cpp_sources(program, name: str, flags: build.BuildFlags) -> CppSources:
    def banner(file_name: str) -> str:
        lines = [f"// Generated by relay_aot {__version__} for model {name}: {file_name}. Do not edit."]
        if file_name.endswith(".cc"):
            obj = build.object_name(file_name)
            lines.append(f"// Compiled with: {build.command_line(flags.compile_command(file_name, obj))}")
        else:
            lines.append("// Included by every translation unit of the program.")
        return "\n".join(lines)

    return emit_cpp(program, name, banner, functions_per_unit=_functions_per_unit(len(program.functions)))


def _compile_cpp(
    program, kernels, name: str, flags: build.BuildFlags, config: Config, cache: bool, verbose: bool,
    module_key: Optional[str],
) -> CompiledModule:
    sources = _cpp_sources(program, name, flags)
    inputs = build.BuildInputs(
        model=name,
        files=sources.files,
        units=sources.units,
        blobs={"constants.bin": constants_blob(program.constants)} if program.constants else {},
        kernel_digest=kernels.digest(),
        has_kernels=kernels.needs_build,
        build_kernels=kernels.write_object,
        flags=flags,
        config=config,
    )
    result = build.build_library(inputs, cache=cache, verbose=verbose)
    try:
        module = load_library(result.library)
    except tvm.error.TVMError as err:
        if not result.cached:
            raise CompileError(f"the built library {result.library} cannot be loaded: {err}") from None
        # A cache entry that passed its digest check but still does not load is rebuilt, not
        # trusted forever.
        build.discard(result, config)
        result = build.build_library(inputs, cache=cache, verbose=verbose)
        module = load_library(result.library)
    if module_key is not None and cache:
        build.remember(module_key, result, sources.files, sources.units, config)
    compiled = CompiledModule(
        module,
        Signature.of_program(program, name),
        name,
        backend="cpp",
        source=sources.text(),
        library_path=result.library,
    )
    # How the library was obtained (``.cached``: from the cache, no C++ compiled; ``.key``).
    compiled.build_result = result
    return compiled

"""Stage 5: compile generated C++ and TVM kernels into one shared library, with a cache.

:func:`build_library` writes the sources into a fresh private directory, writes a
``build.ninja`` (``ninja.py``) and runs the ``ninja`` of the PyPI package: the C++ units
compile while TVM builds the kernels (in a forked child of this process, ``kernels/isolated.py``;
or their object file comes from the kernel cache, when a library with the same kernels was built
before); the link waits for both.
The finished directory is published into the cache (``cache.py``) with an atomic ``rename``,
under an ``fcntl.flock`` lock per key, so concurrent processes build once and a build killed
halfway leaves nothing that looks finished. The library's file name carries the key, because ``dlopen`` returns the
already-loaded library for a path it has seen.

The pieces, one concern each: ``toolchain.py`` (compiler, flags, commands), ``ninja.py`` (the
ninja file and running it), ``pch.py`` (the precompiled header), ``prebuilt.py`` (it and the
runtime object as ``pip install`` built them), ``cache.py`` (directories,
atomic writes, locks, digests, the module index, kernel and runtime objects), ``progress.py``
(what a build prints). The runtime's out-of-line functions (``runtime_cpp/relay_aot/runtime.cc``)
are compiled once per toolchain into a cached object that every library links.

Settings (``relay_aot.config``): ``CXX``, ``RELAY_AOT_CXXFLAGS``, ``RELAY_AOT_JOBS``,
``RELAY_AOT_PCH=0``, ``RELAY_AOT_PREBUILT=0``, ``RELAY_AOT_CACHE_DIR``, ``RELAY_AOT_LOCK_TIMEOUT`` and
``RELAY_AOT_PROGRESS``. See ``docs/build.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from ..config import Config
from ..errors import CompileError
from . import prebuilt
from .cache import (
    Entry,
    IndexEntry,
    Lock,
    cache_root,
    check_replaceable,
    clear_cache,
    code_identity,
    evict,
    index_key,
    keep_until_exit,
    kernel_key,
    key_lock,
    library_intact,
    lookup_index,
    lookup_object,
    move_locked,
    new_build_dir,
    package_digest,
    record_digest,
    record_index,
    record_object,
    subdir,
    sweep_tmp,
    write_atomic,
)
from .ninja import NinjaRun, ninja_binary, ninja_file
from .pch import BackgroundCompile, PchBuild, RuntimeObjectBuild, pch_directory, pch_ready, wait_for_background
from .progress import Reporter, progress_enabled
from .toolchain import (
    RUNTIME_OBJECT,
    RUNTIME_SOURCE,
    BuildFlags,
    command_line,
    compiler_version,
    object_name,
    runtime_include_dir,
    runtime_object_identity,
    runtime_sources_digest,
)

__all__ = [
    "BuildFlags",
    "BuildInputs",
    "BuildResult",
    "Entry",
    "IndexEntry",
    "Lock",
    "build_library",
    "discard",
    "find_indexed",
    "remember",
    "runtime_sources_digest",
    "cache_root",
    "clear_cache",
    "command_line",
    "compiler_version",
    "index_key",
    "library_intact",
    "lookup_index",
    "object_name",
    "package_digest",
    "pch_directory",
    "wait_for_background",
    "record_index",
    "source_hook",
    "unit_inputs",
    "stats",
    "check_replaceable",
    "write_atomic",
]

#: ``build_kernels(path, progress)`` writes the kernels' object file; ``progress(done, total)``.
#: What it returns is not used.
KernelBuilder = Callable[[Path, Callable[[int, int], None]], object]


@dataclasses.dataclass
class BuildInputs:
    """Everything a library is built from.

    ``files`` are generated sources by name, ``units`` the ones to compile (the first a small
    one: a build without the precompiled header compiles it inside the second), ``blobs`` binary
    inputs by name (the constants), ``kernel_digest`` identifies the kernels, ``has_kernels``
    says whether there are any, and ``build_kernels`` writes their object file (called only on
    a cache miss, while the C++ units compile). The cache keeps that object by
    ``kernel_digest`` too, with ``kernel_identity()`` (the kernels' functions, exactly);
    ``kernels_match(identity)`` checks a kept one before a new library links it.
    """

    model: str
    files: dict[str, str]
    units: list[str]
    blobs: dict[str, bytes]
    kernel_digest: str
    has_kernels: bool
    build_kernels: KernelBuilder
    kernel_identity: Callable[[], str]
    kernels_match: Callable[[str], bool]
    flags: BuildFlags
    config: Config

    def key(self) -> str:
        """The cache key: hash of sources, blobs, kernels, flags, settings, toolchain and versions.

        The kernels' digest covers the Relay functions they come from, not the code that turns
        them into TIR (schedules, shape functions and their checks): relay_aot's own code is
        part of the key (``package_digest``), so a library is never reused by a relay_aot that
        would have built other kernels.
        """

        digest = hashlib.sha256()
        parts = [
            *code_identity(),
            self.flags.identity(),
            self.config.output_key(),
            runtime_sources_digest(),
            self.kernel_digest,
        ]
        for part in parts:
            digest.update(part.encode() + b"\0")
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + self.files[name].encode() + b"\0")
        for name in sorted(self.blobs):
            digest.update(name.encode() + b"\0" + hashlib.sha256(self.blobs[name]).digest())
        return digest.hexdigest()


@dataclasses.dataclass
class BuildResult:
    """A built library: its path, its key, whether it came from the cache, and its sources' directory."""

    library: Path
    key: str
    cached: bool
    directory: Path

    @property
    def entry(self) -> Entry:
        """The cache entry of the library."""
        return Entry(self.library, self.key)


@dataclasses.dataclass
class BuildStats:
    """What this process's builds did (read by tests and benchmarks)."""

    builds: int = 0  #: libraries compiled
    hits: int = 0  #: libraries found in the cache
    kernel_builds: int = 0  #: kernel object files built with TVM
    kernel_hits: int = 0  #: kernel object files taken from the cache for a new library
    runtime_builds: int = 0  #: builds that found no runtime object (their units include its source)
    unit_builds: int = 0  #: translation units compiled
    unit_hits: int = 0  #: translation units whose object came from the cache (same text and inputs)


stats = BuildStats()

_source_hook: Callable[[str, str], str] | None = None


@contextlib.contextmanager
def source_hook(hook: Callable[[str, str], str]) -> Iterator[None]:
    """Testing aid: rewrite every generated file as ``hook(name, text)`` before it is built.

    Used by the tests to inject a syntax error into generated code; the rewritten text is part
    of the cache key, so a broken build never shares an entry with a good one, and the module
    index is bypassed meanwhile.
    """
    global _source_hook
    previous, _source_hook = _source_hook, hook
    try:
        yield
    finally:
        _source_hook = previous


def library_name(model: str, key: str) -> str:
    """File name of a built library: the model name and the build key."""
    return f"{model}-{key[:24]}.so"


def _kernels(build_dir: Path, inputs: BuildInputs, root: Path, share: bool, reporter: Reporter) -> None:
    """Write ``kernels.o`` into ``build_dir``: from the cache if the same kernels were built
    before (``share``: the cache may be read and filled), else with TVM."""
    obj = build_dir / "kernels.o"
    key = kernel_key(inputs.kernel_digest) if share else None
    if key is not None and lookup_object(root, "kernels", key, obj, inputs.kernels_match):
        stats.kernel_hits += 1
        reporter.phase("kernels", "from the cache")
        return
    reporter.message("building the kernels with TVM")
    inputs.build_kernels(obj, reporter.kernels)
    stats.kernel_builds += 1
    if key is not None:
        record_object(root, "kernels", key, obj, inputs.kernel_identity())
    reporter.phase("kernels", "done")


def _object_key(identity: str) -> str:
    """Cache key of an object file (runtime or unit): the hash of what it is built from."""
    return hashlib.sha256(identity.encode()).hexdigest()


#: How a generated file names another one it reads: ``#include "program.h"``, and the
#: assembler's ``.incbin \"constants.bin\"`` (escaped inside the C++ string of an ``asm``).
_READS = re.compile(r'#include "([^"]+)"|\.incbin \\"([^"\\]+)\\"')


def unit_inputs(files: dict[str, str], blobs: dict[str, bytes], units: list[str]) -> dict[str, list[str]]:
    """For each unit, the generated files and blobs it reads, directly or through a generated
    header (found in the text, so nothing a unit reads can be missing from its object's key)."""
    reads: dict[str, list[str]] = {}
    for unit in units:
        found: list[str] = []
        pending = [unit]
        while pending:
            text = files[pending.pop()]
            for match in _READS.finditer(text):
                name = match.group(1) or match.group(2)
                if name in found or (name not in files and name not in blobs):
                    continue  # a system header, or already seen
                found.append(name)
                if name in files:
                    pending.append(name)
        reads[unit] = sorted(found)
    return reads


def _unit_identity(inputs: BuildInputs, unit: str, reads: list[str], runtime_source: str | None) -> str:
    """What a unit's object file is made from: this relay_aot (the runtime headers included)
    and TVM, the toolchain, the exact command, the unit's text and what it reads (by digest)."""
    command = command_line(inputs.flags.compile_command(unit, object_name(unit), runtime_source))
    lines = [*code_identity(), inputs.flags.compile_identity(), command]
    for name in [unit, *reads]:
        data = inputs.files[name].encode() if name in inputs.files else inputs.blobs[name]
        lines.append(f"{name} {hashlib.sha256(data).hexdigest()}")
    return "\n".join(lines)


#: The unit that compiles the first two units as one (see :func:`_combine_first_units`).
COMBINED_UNIT = "combined.cc"


def _combine_first_units(build_dir: Path, reads: dict[str, list[str]]) -> dict[str, list[str]]:
    """``reads`` with its first two units replaced by ``combined.cc``, which includes both
    (written into ``build_dir``). The C++ backend's first unit is the entry unit: tables and
    entry points, which compile in a fraction of the time a unit takes to parse TVM's headers."""
    (first, first_reads), (second, second_reads), *rest = reads.items()
    (build_dir / COMBINED_UNIT).write_text(f'#include "{first}"\n#include "{second}"\n')
    return {COMBINED_UNIT: sorted({first, second, *first_reads, *second_reads}), **dict(rest)}


def _reuse_unit_object(root: Path, obj: Path, identity: str) -> bool:
    """Copy the object an earlier build compiled from the same unit and inputs to ``obj``."""
    return lookup_object(root, "units", _object_key(identity), obj, identity.__eq__)


def _runtime_object(
    build_dir: Path,
    flags: BuildFlags,
    root: Path,
    reporter: Reporter,
    background: list[BackgroundCompile],
    use_prebuilt: bool,
) -> str | None:
    """Put the runtime object into ``build_dir`` from the cache and return None; if the cache
    has none for this toolchain, take the one ``pip install`` built when it matches
    (``use_prebuilt``, see ``prebuilt.py``), else return the runtime source for the units to
    include, and add the object's compile for later builds to ``background`` (unless another
    process runs it).

    Like the PCH, it belongs to the toolchain, not to one library: every build (cache=False
    ones too) reads and fills it. A damaged or mismatching entry is compiled again.
    """
    identity = runtime_object_identity(flags)
    key = _object_key(identity)
    if lookup_object(root, "runtime", key, build_dir / RUNTIME_OBJECT, identity.__eq__):
        return None
    if use_prebuilt and prebuilt.mismatch(flags) is None:
        record_object(root, "runtime", key, prebuilt.runtime_object(), identity)
        if lookup_object(root, "runtime", key, build_dir / RUNTIME_OBJECT, identity.__eq__):
            return None
    stats.runtime_builds += 1
    compile_later = RuntimeObjectBuild.start(flags, root, reporter, key, identity)
    if compile_later is not None:
        background.append(compile_later)
    return str(runtime_include_dir() / RUNTIME_SOURCE)


def _run_build(build_dir: Path, inputs: BuildInputs, library: str, root: Path, reporter: Reporter, share: bool) -> None:
    """Compile ``inputs`` in ``build_dir``: units (and a missing PCH and runtime object) while
    TVM builds the kernels (or the cache provides them; ``share``: the cache may be read and
    filled)."""
    for name, text in inputs.files.items():
        (build_dir / name).write_text(text)
    for name, data in inputs.blobs.items():
        (build_dir / name).write_bytes(data)
    # What the toolchain's builds share and this one lacks is compiled beside it, for the next
    # ones: waiting for a missing PCH or runtime object would cost the first compile more.
    background: list[BackgroundCompile] = []
    units: NinjaRun | None = None
    try:
        use_prebuilt = inputs.config.prebuilt
        runtime_source = _runtime_object(build_dir, inputs.flags, root, reporter, background, use_prebuilt)
        pch = PchBuild.start(inputs.flags, root, reporter, use_prebuilt)
        if pch is not None:
            background.append(pch)
        reads = unit_inputs(inputs.files, inputs.blobs, inputs.units)
        if len(inputs.units) > 1 and not pch_ready(inputs.flags):
            # Without the precompiled header every unit parses TVM's headers again (about 1 s
            # of CPU): the entry unit, which is small, is compiled inside the first one after it.
            reads = _combine_first_units(build_dir, reads)
        # Unit objects are read and kept only where the cache is shared (not combined.cc, which
        # is written here and has no identity of its own).
        identities = {
            unit: _unit_identity(inputs, unit, reads[unit], runtime_source)
            for unit in reads
            if share and unit in inputs.files
        }
        reused = [
            unit
            for unit, identity in identities.items()
            if _reuse_unit_object(root, build_dir / object_name(unit), identity)
        ]
        (build_dir / "build.ninja").write_text(
            ninja_file(inputs.flags, reads, inputs.has_kernels, library, runtime_source, reused)
        )
        stats.builds += 1
        stats.unit_hits += len(reused)
        jobs = inputs.config.jobs
        units = NinjaRun(build_dir, jobs, ["objects"], reporter)
        if inputs.has_kernels:
            _kernels(build_dir, inputs, root, share, reporter)
        units.wait(build_dir)
        units = None
        stats.unit_builds += len(reads) - len(reused)
        for unit, identity in identities.items():
            if unit not in reused:
                record_object(root, "units", _object_key(identity), build_dir / object_name(unit), identity)
        final = NinjaRun(build_dir, jobs, [], reporter)
        try:
            final.wait(build_dir)
        finally:
            final.kill()
        for leftover in build_dir.glob("*.o"):
            leftover.unlink()
        record_digest(build_dir / library)
        while background:
            background.pop().finish_in_background()
    finally:
        for unfinished in background:
            unfinished.discard()
        if units is not None:
            units.kill()


def _keep_failed(
    build_dir: Path, lock: Lock, root: Path, inputs: BuildInputs, key: str, err: CompileError
) -> CompileError:
    """Move a failed build to ``failed/<model>-<key>`` and say so in the error."""
    failed = subdir(root, "failed") / f"{inputs.model}-{key[:16]}"
    shutil.rmtree(failed, ignore_errors=True)
    try:
        move_locked(build_dir, lock, failed)
    except OSError:  # another process's failure of the same key got there first
        failed = build_dir
    message = str(err).split("\n", 1)[0]
    return CompileError(
        f"{message}; the sources and build.ninja are kept in {failed} "
        f"(rerun with `{command_line([ninja_binary(), '-C', str(failed)])}`)",
        output=err.output,
        source_dir=str(failed),
    )


def _build_in(
    root: Path, inputs: BuildInputs, key: str, library: str, reporter: Reporter, share: bool
) -> tuple[Path, Lock]:
    """Build in a fresh directory under ``tmp/``; returns it and its lock. Failures are kept."""
    sweep_tmp(root)
    build_dir, lock = new_build_dir(root, key[:16])
    try:
        _run_build(build_dir, inputs, library, root, reporter, share)
    except CompileError as err:
        raise _keep_failed(build_dir, lock, root, inputs, key, err) from None
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        lock.release()
        raise
    return build_dir, lock


def _cached(final: Path, library: str) -> bool:
    """Whether the entry ``final`` holds an intact ``library`` (a damaged one is removed)."""
    if not (final / library).exists() and not final.exists():
        return False
    if library_intact(final / library):
        return True
    shutil.rmtree(final, ignore_errors=True)  # truncated, corrupted, or its digest is missing
    return False


def build_library(inputs: BuildInputs, cache: bool = True, verbose: bool = False) -> BuildResult:
    """Build (or find in the cache) the shared library for ``inputs``."""
    if _source_hook is not None:
        inputs = dataclasses.replace(inputs, files={n: _source_hook(n, t) for n, t in inputs.files.items()})
    key = inputs.key()
    library = library_name(inputs.model, key)
    root = cache_root(inputs.config)
    final = root / "lib" / key[:2] / key
    reporter = Reporter(verbose, progress_enabled(inputs.config, verbose))
    try:
        if not cache:
            build_dir, lock = _build_in(root, inputs, key, library, reporter, share=False)
            keep_until_exit(build_dir, lock)
            return BuildResult(build_dir / library, key, False, build_dir)

        def waiting() -> None:
            reporter.message(f"waiting for another process's build of {final} (lock {key}.lock)")
            reporter.phase("waiting", f"for another process's build of {library}")

        with key_lock(root, key, inputs.config.lock_timeout, on_wait=waiting):
            if _cached(final, library):  # built before, or by another process while we waited
                stats.hits += 1
                reporter.message(f"cache hit: {final / library}")
                return BuildResult(final / library, key, True, final)
            build_dir, lock = _build_in(root, inputs, key, library, reporter, share=True)
            subdir(root, "lib", key[:2])
            try:
                move_locked(build_dir, lock, final)
            except OSError:
                # Only if the lock file was deleted under a running build: use the other build.
                shutil.rmtree(build_dir, ignore_errors=True)
                if not (final / library).exists():
                    raise
        return BuildResult(final / library, key, False, final)
    finally:
        reporter.close()


def find_indexed(key: str, config: Config) -> IndexEntry | None:
    """The intact library the module index records for ``key`` (None: not there, or damaged)."""
    if _source_hook is not None:
        return None
    found = lookup_index(cache_root(config), key)
    if found is not None:
        stats.hits += 1
    return found


def remember(key: str, result: BuildResult, files, units, config: Config) -> None:
    """Record in the module index that ``key`` compiles to ``result`` (cached libraries only)."""
    if _source_hook is None:
        record_index(cache_root(config), key, result.entry, files, units)


def discard(result: BuildResult, config: Config) -> None:
    """Remove a cache entry that turned out to be unusable."""
    evict(cache_root(config), result.entry, config.lock_timeout)

"""Stage 6: load a compiled library and call it from Python.

A library exports ``<model>`` (the program's entry, a PackedFunc taking and returning TVM
runtime values) and ``<model>__metadata`` (its signature as JSON, see ``relay_aot/ir/signature.py``).
:class:`CompiledModule` wraps the entry with argument conversion; :func:`load` opens an
exported library in any process, without compiling anything, finding the model name in the
library's ELF dynamic symbol table when it is not given (docs/deployment.md).
"""

from __future__ import annotations

import ctypes
import os
import struct
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tvm
from tvm.relay.backend.interpreter import ConstructorValue, RefValue

from .. import ir, names
from ..backends.cpp.capi import c_api, header_text
from ..builder import BuildResult
from ..builder.cache import check_replaceable, file_kind, write_atomic
from ..errors import ArgumentTypeError
from ..ir.signature import Signature
from . import fastcall, profiling
from .values import Converter

#: TVM objects the fast call path must not pass by handle: the interpreter's values, which
#: relay_aot converts in Python.
_FAST_EXCLUDED = (ConstructorValue, RefValue)

#: Arguments that have a dtype.
_ARRAYS = (np.ndarray, np.generic, tvm.nd.NDArray)
#: What the extension passes by handle, then what it leaves to Python (fastcall.entry).
_ENTRY_KINDS = (*fastcall.KINDS, _FAST_EXCLUDED)


def _raw_dtype(dtype: str | None) -> tuple[int, int, int] | None:
    """``dtype`` as the (code, bits, lanes) an NDArray's handle holds; None where TVM does not
    parse it (a custom type not registered): compared by name then."""
    if dtype is None:
        return None
    try:
        parsed = tvm.runtime.DataType(dtype)
    except Exception:  # noqa: BLE001 - TVM raises whatever its parser does
        return None
    return (parsed.type_code, parsed.bits, parsed.lanes)


def entry_address(library_path, symbol: str) -> int | None:
    """The address of ``symbol`` in an already-loaded library (None if it cannot be found)."""
    try:
        # The name TVM's loader gave dlopen (load_module resolves the path): the same library,
        # never another file a relative or symlinked path might reach by now.
        library = ctypes.CDLL(os.path.realpath(library_path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        return ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None


#: Every library this process loaded. Libraries are never unloaded: objects the generated code
#: allocated (ADTs, closures, reference cells) carry deleters that live in the library's code,
#: and such objects can outlive the CompiledModule that made them (a result kept by the caller).
_LOADED_LIBRARIES: list = []


class _DlPhdrInfo(ctypes.Structure):
    """The head of glibc's ``struct dl_phdr_info``: a loaded object's load address and name."""

    _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]


_DL_ITERATE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_DlPhdrInfo), ctypes.c_size_t, ctypes.c_void_p)


def _loaded_objects() -> list[tuple[str, int]]:
    """``(name, load address)`` of every object the dynamic loader holds (empty where
    ``dl_iterate_phdr`` is missing)."""
    found: list[tuple[str, int]] = []

    def visit(info, size, data):
        found.append((os.fsdecode(info.contents.name or b""), info.contents.addr or 0))
        return 0

    try:
        iterate = ctypes.CDLL(None).dl_iterate_phdr
    except (OSError, AttributeError):
        return []
    iterate(_DL_ITERATE_CALLBACK(visit), None)
    return found


def _mapped_file(address: int) -> tuple[int, int] | None:
    """``(device, inode)`` of the file mapped at ``address`` in this process (None: unknown)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                start, end = (int(bound, 16) for bound in fields[0].split("-"))
                if start <= address < end:
                    major, minor = (int(part, 16) for part in fields[3].split(":"))
                    return os.makedev(major, minor), int(fields[4])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _held_file(real: str) -> tuple[int, int] | None:
    """``(device, inode)`` of the file the dynamic loader holds under the name ``real`` (None:
    it holds none, or cannot be asked: no ``dl_iterate_phdr`` or ``/proc``)."""
    for name, address in _loaded_objects():
        if name == real:
            return _mapped_file(address)
    return None


def stale_load(path) -> str | None:
    """Why ``dlopen`` of ``path`` in this process would not load the file there now, or None.

    The dynamic loader finds a library it holds by the name it was opened with before it looks
    at the file: once a library is loaded from a path, opening that path again returns the same
    code, even after the file was replaced (``export_library`` replaces files atomically, so a
    new export is a new file). TVM opens the resolved path; this compares the file the loader
    holds under that name with the file there now (device and inode). Where the loader cannot
    be asked, no check is made (None).
    """
    real = os.path.realpath(path)
    try:
        now = os.stat(real)
    except OSError:
        return None
    held = _held_file(real)
    if held is None or held == (now.st_dev, now.st_ino):
        return None
    where = "this path" if real == str(path) else f"this path ({real})"
    return (
        f"this process already loaded a library from {where}, and the file has been replaced since: the "
        "dynamic loader returns the library it loaded first for a path it has opened, not the file there now. "
        "Load the new file from another path (a copy), or in a new process"
    )


def load_library(path) -> tvm.runtime.Module:
    """``tvm.runtime.load_module(path)``, kept loaded for the life of the process.

    (The libraries are also linked with ``-z nodelete``, which keeps them mapped for any
    client, C++ or plain ``tvm.runtime.load_module``; see ``build.BuildFlags``.) The format
    is given, so a library's file name need not end in ``.so``.
    """
    module = tvm.runtime.load_module(str(path), "so")
    _LOADED_LIBRARIES.append(module)
    return module


class CompiledModule(fastcall.Dispatch):
    """A compiled Relay program: call it like ``mod["main"]``.

    Its ``__call__`` is :class:`fastcall.Dispatch`'s, in C: the library's bound entry where every
    argument's check is the library's own and the result needs no conversion (``_direct``),
    else :meth:`_call`. A tensor result is a plain ``tvm.nd.NDArray`` owning its tensor (the
    object of a small result nothing holds any more may be handed out again as a later result);
    a tuple or a constructor's value a :class:`fastcall.ADTResult`, TVM's ``ADT`` whose fields
    the extension reads.

    Attributes: ``module`` (the ``tvm.runtime.Module``), ``signature`` (parameter and result
    types), ``name`` (the model name, prefix of every exported symbol), ``backend``, ``source``
    (the generated source), ``library_path`` (the shared library, for the C++ backend) and
    ``profiler`` (the start/stop control of a program built for profiling, else None; see
    :meth:`profile`).
    """

    #: Compiles the variant of this program instrumented for profiling (set by the drivers on
    #: what they compile; None for a library loaded with :func:`load`).
    profiled_variant: Callable[[], CompiledModule] | None = None
    #: How the C++ backend obtained the library: its cache ``key``, whether it was ``cached``
    #: (set by its driver; None for the Python backend and a library loaded with :func:`load`).
    build_result: BuildResult | None = None

    def __init__(
        self,
        module: tvm.runtime.Module,
        signature: Signature,
        name: str,
        backend: str = "cpp",
        source: str | None = None,
        library_path: Path | None = None,
        entry=None,
        profiler: Callable[[int, int], str] | None = None,
    ):
        self.module = module
        self.signature = signature
        self.name = name
        self.backend = backend
        self._source = source
        self.library_path = library_path
        self.entry = entry if entry is not None else module[name]
        # A library checks every value that enters it; Python-backend code gets the same checks here.
        self._converter = Converter(signature, checks=library_path is None)
        self._converts_result = self._converter.needs_from_runtime(signature.ret)
        self._dtypes = tuple(p.type.dtype if isinstance(p.type, ir.TensorType) else None for p in signature.params)
        # NDArray.dtype formats a string through TVM's FFI (0.6 us an argument): the fast path
        # compares the handle's fields instead (MLPerf Tiny's anomaly detection: 6.7 -> 6.3 us a call).
        self._raw_dtypes = tuple(_raw_dtype(d) for d in self._dtypes)
        # ... in the extension, which packs the arguments anyway (0.5 us a call less than here);
        # a dtype TVM does not parse is compared by name, here (_fast)
        self._expected = tuple(-1 if raw is None else fastcall.dtype_key(*raw) for raw in self._raw_dtypes)
        self._checks_in_extension = all(
            raw is not None or dtype is None for dtype, raw in zip(self._dtypes, self._raw_dtypes)
        )
        self._address = None
        if library_path is not None and entry is None:
            self._address = entry_address(library_path, name)
        # The library's entry bound to the extension (what a call passes besides the arguments,
        # converted once: as long as a small model's kernels took, converted at each call).
        self._bound = None if self._address is None else fastcall.entry(self._address, self._expected, _ENTRY_KINDS)
        # ... called first by __call__ when every argument's check is the library's own and the
        # result needs no conversion (a model's call)
        self._direct = self._bound if self._checks_in_extension and not self._converts_result else None
        self.profiler = profiler if profiler is not None or library_path is None else _profile_function(module, name)
        self._profiled: CompiledModule | None = None

    @property
    def source(self) -> str:
        """The generated source (C++ or Python) of the program."""
        if self._source is None:
            raise AttributeError("this module was loaded from a library; its source is not available")
        return self._source

    def convert_args(self, args) -> list:
        """Convert Python arguments to runtime values, checking them against the signature."""
        params = self.signature.params
        if len(args) != len(params):
            raise ArgumentTypeError(f"{self.name}: @main takes {len(params)} arguments, got {len(args)}")
        convert = self._converter.to_runtime
        converted = [convert(a, p.type, f"argument {i} (%{p.name})") for i, (a, p) in enumerate(zip(args, params))]
        self._converter.check_shared_extents(converted)
        return converted

    def _fast(self, args) -> bool:
        """Whether ``args`` can go straight to the library: not the interpreter's values, and
        no array of another dtype than its parameter's (those are converted here, when every
        value is kept: values.py)."""
        for arg, dtype, raw in zip(args, self._dtypes, self._raw_dtypes):
            if raw is not None and type(arg) is tvm.nd.NDArray:
                d = arg.handle.contents.dtype
                if (d.type_code, d.bits, d.lanes) != raw:
                    return False
            elif isinstance(arg, _FAST_EXCLUDED) or (
                dtype is not None and isinstance(arg, _ARRAYS) and arg.dtype != dtype
            ):
                return False
        return True

    def _call(self, args):
        """The call of a program whose calls are not all direct (``__call__`` without ``_direct``)."""
        if self._bound is not None and (self._checks_in_extension or self._fast(args)):
            # Tensors, numpy arrays, numbers and TVM objects go straight to the library, which
            # checks them against the program's types (check.h); anything else is converted here.
            result = self._bound(args)
            if result is not NotImplemented:
                if not self._converts_result:
                    return result
                return self._converter.from_runtime(result, self.signature.ret)
        return self._converted_call(args)

    def _converted_call(self, args):
        """A call with ``args`` converted (and checked) in Python (``__call__`` when ``_direct``
        returns NotImplemented)."""
        converted = self.convert_args(args)
        with fastcall.plain_errors():
            result = self.entry(*converted)
        return self._converter.from_runtime(result, self.signature.ret)

    def profile(self, *args, trace=None, max_trace_events: int = profiling.DEFAULT_TRACE_EVENTS, warmup: int = 1):
        """Run the program once on ``args`` with instrumentation; where the time went, as TVM's
        :class:`tvm.runtime.profiling.Report` (``.table()``, ``.csv()``, ``.json()``).

        Rows are kernels (calls, total and mean time, share of the call) and Relay functions
        (calls; self, exclusive and inclusive time); the device metrics give the whole call's
        time and the tensors and objects it allocated. ``trace``: also write a Chrome trace of
        the call there (one slice per function and kernel call, the first ``max_trace_events``).
        ``warmup`` calls run first, unprofiled (the first call into a library just loaded pays
        for resolving its symbols).

        The instrumented code is a separate library (or source, for the Python backend), built
        and cached the first time it is needed beside the plain one, which stays free of any
        instrumentation. A library loaded with :func:`load` can be profiled only if it was built
        for profiling (``compile(..., profile=True)``, ``relay-aot compile --profile``);
        otherwise ``ValueError``. See docs/performance.md, "Profiling your program".
        """
        _, profile = self.profile_call(args, max_events=max_trace_events if trace is not None else 0, warmup=warmup)
        if trace is not None:
            profile.write_trace(trace)
        return profile.report()

    def profile_call(self, args, max_events: int = profiling.DEFAULT_TRACE_EVENTS, warmup: int = 1):
        """The result of one profiled call on ``args`` and its :class:`~relay_aot.runtime.profiling.Profile`
        (keeping up to ``max_events`` trace events, after ``warmup`` unprofiled calls);
        :meth:`profile` reports it."""
        target = self._profiling_module()
        assert target.profiler is not None  # a module built for profiling has its control
        return profiling.run_profiled(
            target,
            target.profiler,
            args,
            f"relay_aot ({self.backend})",
            max_events,
            allocations=self.backend == "cpp",
            warmup=warmup,
        )

    def _profiling_module(self) -> CompiledModule:
        """This module if it was built for profiling, else its profiled variant (built once)."""
        if self.profiler is not None:
            return self
        if self._profiled is None:
            if self.profiled_variant is None:
                where = f"{self.library_path}" if self.library_path is not None else "this module"
                raise ValueError(
                    f"{where} was not built for profiling: compile the program with "
                    "relay_aot.compile(..., profile=True) (or `relay-aot compile --profile`) "
                    "and export that library to profile it after relay_aot.load"
                )
            self._profiled = self.profiled_variant()
        return self._profiled

    def export_library(self, path, c_header=None) -> Path:
        """Copy the self-contained shared library (control code and kernels) to ``path``.

        ``path`` must be a new file or a regular file, which is replaced atomically (a reader
        sees the old library or the new one). Anything else -- a symbolic link, a directory, a
        FIFO, a device -- is refused with ``ValueError`` rather than replaced by a file.
        Replacing a library this process has loaded warns (``RuntimeWarning``): the dynamic
        loader keeps returning the old code for that path here, and :func:`load` refuses it.

        ``c_header``: also write the C API's header there (``tvmgen_<name>.h``: structs of input
        and output buffers, ``tvmgen_<name>_run``; see docs/deployment.md), checked first:
        :class:`~relay_aot.UnsupportedError` names the parameter or result of ``@main`` that is
        not a tensor of static shape (the library and its PackedFunc entry are unaffected), and
        nothing is written.
        """
        if self.library_path is None:
            raise ValueError(f"the {self.backend} backend does not produce a shared library")
        header = None if c_header is None else self.c_header()
        path = Path(path)
        check_replaceable(path, "export_library")
        if header is not None:
            check_replaceable(Path(c_header), "export_library")
        loaded_here = _held_file(os.path.realpath(path)) is not None
        written = write_atomic(path, Path(self.library_path), mode=0o644)
        if loaded_here:
            warnings.warn(
                f"{path} replaces a library this process has loaded: loading it again from this path in "
                "this process gives the old code (relay_aot.load refuses it: load a copy, or use a new "
                "process); other processes load the new file",
                RuntimeWarning,
                stacklevel=2,
            )
        if header is not None:
            write_atomic(Path(c_header), header, mode=0o644)
        return written

    def c_header(self) -> str:
        """The text of the C API's header of this library (see :meth:`export_library`)."""
        if self.library_path is None:
            raise ValueError(f"the {self.backend} backend does not produce a shared library, so no C API")
        api = c_api(self.signature)  # raises UnsupportedError for a main without a C API
        entry = names.c_api(self.name, "run")
        if entry not in exported_symbols(self.library_path):
            raise ValueError(
                f"{self.library_path} has no C entry ({entry}): it was built by a relay_aot "
                "without the C API; compile it again"
            )
        return header_text(api)

    def __repr__(self) -> str:
        return f"<relay_aot.CompiledModule {self.name!r} backend={self.backend}>"


def _profile_function(module: tvm.runtime.Module, name: str):
    """The ``<name>__profile`` function of a library built for profiling (else None)."""
    try:
        return module.get_function(names.profile_symbol(name))
    except (AttributeError, tvm.error.TVMError):
        return None


def read_signature(module: tvm.runtime.Module, name: str) -> Signature:
    """The signature embedded in a library compiled with model name ``name``."""
    try:
        meta = module.get_function(names.metadata_symbol(name))
    except (AttributeError, tvm.error.TVMError):
        meta = None
    if meta is None:
        raise ValueError(f"the library holds no relay_aot model named {name!r}")
    return Signature.from_json(str(meta()))


# -- reading a library's exported symbols -------------------------------------------------------

_SHT_DYNSYM = 11
_SHN_UNDEF = 0
_EXPORTED_BINDINGS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE


def exported_symbols(path) -> set[str]:
    """The symbols a shared library defines and exports (its ELF dynamic symbol table).

    Read from the file, without loading it (loading runs the library's initializers), so a
    file that is not a library gives a clear error instead of a ``dlopen`` failure.
    """
    path = Path(path)
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise ValueError(f"{path} is not an ELF shared library")
    is64 = data[4] == 2
    order = "<" if data[5] == 1 else ">"
    try:
        if is64:
            (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
            section, symbol = order + "IIQQQQIIQQ", order + "IBBHQQ"
        else:
            (shoff,) = struct.unpack_from(order + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
            section, symbol = order + "IIIIIIIIII", order + "IIIBBH"
        sections = [struct.unpack_from(section, data, shoff + i * shentsize) for i in range(shnum)]
        found = set()
        for sh in sections:
            if sh[1] != _SHT_DYNSYM:
                continue
            offset, size, link, entsize = sh[4], sh[5], sh[6], sh[9]
            strtab = sections[link][4]
            for pos in range(offset + entsize, offset + size, entsize):  # entry 0 is the null symbol
                fields = struct.unpack_from(symbol, data, pos)
                name, info, shndx = (fields[0], fields[1], fields[3]) if is64 else (fields[0], fields[3], fields[5])
                if shndx != _SHN_UNDEF and info >> 4 in _EXPORTED_BINDINGS:
                    end = data.index(b"\0", strtab + name)
                    found.add(data[strtab + name : end].decode("utf-8", "replace"))
        return found
    except (struct.error, IndexError, ValueError):
        raise ValueError(f"{path} is not a valid ELF shared library (truncated or corrupt)") from None


def model_names(path) -> list[str]:
    """The relay_aot models a library holds: names ``m`` exporting both ``m`` and ``m__metadata``."""
    symbols = exported_symbols(path)
    models = (names.model_of_metadata_symbol(s) for s in symbols)
    return sorted(m for m in models if m is not None and m in symbols)


def load(path, name: str | None = None) -> CompiledModule:
    """Load a library written by ``CompiledModule.export_library`` (no compilation happens).

    ``name`` is the model name it was compiled with; by default it is read from the library's
    exported symbols (which must then hold exactly one model).

    :raises ValueError: the file is no relay_aot library, holds no model ``name``, or this
        process has loaded another library from the same path before (the file was replaced
        since: the dynamic loader would return the old code; see :func:`stale_load`).
    :raises ~relay_aot.errors.CpuFeatureError: the library's kernels need CPU features this
        machine lacks.
    """
    path = Path(path)
    if not path.is_file():
        if path.exists():
            raise ValueError(f"{path} is {file_kind(path.stat().st_mode)}, not a library file")
        raise FileNotFoundError(f"no such library: {path}")
    models = model_names(path)
    if name is None:
        if len(models) != 1:
            held = f"models {', '.join(models)}; pass name=" if models else "no relay_aot model"
            raise ValueError(f"{path}: the library holds {held}")
        name = models[0]
    names.check_model_name(name)
    if name not in models:
        held = ", ".join(models) if models else "none"
        raise ValueError(f"{path}: the library holds no relay_aot model named {name!r} (models: {held})")
    stale = stale_load(path)
    if stale is not None:
        raise ValueError(f"{path}: {stale}")
    module = load_library(path)  # runs no code compiled for the target's CPU (cpu.h)
    signature = read_signature(module, name)
    fastcall.check_cpu(signature.cpu, str(path))
    return CompiledModule(module, signature, name, backend="cpp", library_path=path)

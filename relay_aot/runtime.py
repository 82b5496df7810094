"""Stage 6: load a compiled library and call it from Python.

A library exports ``<model>`` (the program's entry, a PackedFunc taking and returning TVM
runtime values) and ``<model>__metadata`` (its signature as JSON, see ``metadata.py``).
:class:`CompiledModule` wraps the entry with argument conversion; :func:`load` opens an
exported library in any process, without compiling anything.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

import tvm

from . import names
from .metadata import Signature
from .values import Converter


#: Every library this process loaded. Libraries are never unloaded: objects the generated code
#: allocated (ADTs, closures, reference cells) carry deleters that live in the library's code,
#: and such objects can outlive the CompiledModule that made them (a result kept by the caller).
_LOADED_LIBRARIES: list = []


def load_library(path) -> tvm.runtime.Module:
    """``tvm.runtime.load_module(path)``, kept loaded for the life of the process."""
    module = tvm.runtime.load_module(str(path))
    _LOADED_LIBRARIES.append(module)
    return module


class CompiledModule:
    """A compiled Relay program: call it like ``mod["main"]``.

    Attributes: ``module`` (the ``tvm.runtime.Module``), ``signature`` (parameter and result
    types), ``name`` (the model name, prefix of every exported symbol), ``backend``, ``source``
    (the generated source) and ``library_path`` (the shared library, for the C++ backend).
    """

    def __init__(
        self,
        module: tvm.runtime.Module,
        signature: Signature,
        name: str,
        backend: str = "cpp",
        source: Optional[str] = None,
        library_path: Optional[Path] = None,
        entry=None,
    ):
        self.module = module
        self.signature = signature
        self.name = name
        self.backend = backend
        self._source = source
        self.library_path = library_path
        self.entry = entry if entry is not None else module[name]
        self._converter = Converter(signature)

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
            raise TypeError(f"{self.name}: @main takes {len(params)} arguments, got {len(args)}")
        convert = self._converter.to_runtime
        return [convert(a, p.type, f"argument {i} (%{p.name})") for i, (a, p) in enumerate(zip(args, params))]

    def __call__(self, *args):
        result = self.entry(*self.convert_args(args))
        return self._converter.from_runtime(result, self.signature.ret)

    def export_library(self, path) -> Path:
        """Copy the self-contained shared library (control code and kernels) to ``path``."""
        if self.library_path is None:
            raise ValueError(f"the {self.backend} backend does not produce a shared library")
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        shutil.copyfile(self.library_path, tmp)
        os.replace(tmp, path)
        return path

    def __repr__(self) -> str:
        return f"<relay_aot.CompiledModule {self.name!r} backend={self.backend}>"


def read_signature(module: tvm.runtime.Module, name: str) -> Signature:
    """The signature embedded in a library compiled with model name ``name``."""
    try:
        meta = module.get_function(names.metadata_symbol(name))
    except (AttributeError, tvm.error.TVMError):
        meta = None
    if meta is None:
        raise ValueError(f"the library holds no relay_aot model named {name!r}")
    return Signature.from_json(str(meta()))


def load(path, name: str = "default") -> CompiledModule:
    """Load a library written by ``CompiledModule.export_library`` (no compilation happens)."""
    names.check_model_name(name)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such library: {path}")
    module = load_library(path)
    signature = read_signature(module, name)
    return CompiledModule(module, signature, name, backend="cpp", library_path=path)

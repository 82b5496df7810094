"""Python side of the ``_fastcall`` extension: relay_aot's C++ runtime, reachable from Python.

``relay_aot/runtime/_fastcall.cc`` is compiled against the same runtime headers generated code
includes. Through it, Python calls a library's entry or any PackedFunc without TVM's ctypes FFI
(:func:`entry`, :func:`call_packed`), applies the very checks and rules of compiled code to
values converted in Python (:class:`TypeTable`, :func:`integer_op`), and makes and reads the
runtime ADTs relay_aot builds in Python (:func:`make_adt`, :func:`adt_parts`), and the Python
backend's profiled code records its calls with compiled code's profiler (:func:`profile_control`), and
checks the CPU as compiled code does (:func:`check_cpu`). This module holds
what its users share: the argument kinds the extension recognises, how results become Python
objects (TVM's own ctypes return converters, so they are exactly what the ctypes FFI returns)
and how errors are raised.
"""

from __future__ import annotations

import contextlib
import functools
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm._ffi._ctypes import ndarray as _ndarray
from tvm._ffi._ctypes import object as _object
from tvm._ffi._ctypes.types import RETURN_SWITCH, TVMValue
from tvm._ffi.runtime_ctypes import ArgTypeCode
from tvm._ffi.runtime_ctypes import TVMArrayHandle as _ARRAY_HANDLE

from .. import errors  # also registers relay_aot's error classes with TVM's FFI
from ..ir.typetable import TypeRow
from ..kernels.scalar_ops import INTEGER_HELPERS
from . import _fastcall

#: Python classes passed by handle (NDArray, PackedFunc, Object), then numpy's scalar base class.
KINDS = (tvm.nd.NDArray, tvm.runtime.PackedFunc, tvm.runtime.Object, np.generic)


_NDARRAY_CODE = ArgTypeCode.NDARRAY_HANDLE
_NDARRAY = tvm.nd.NDArray
#: A pointer's value (the int64 of a TVMValue) as the bytes of a native pointer.
_POINTER_BYTES = struct.Struct("q").pack
#: TVM's NDArray classes by type index when only NDArray itself is registered (TVM registers it).
_PLAIN_CLASSES = {index: cls for index, cls in _ndarray._TVM_ND_CLS.items() if cls is _NDARRAY}


def make_result(type_code: int, bits: int):
    """A packed return value as TVM's ctypes FFI would return it (it takes ownership)."""
    if type_code == _NDARRAY_CODE and _ndarray._TVM_ND_CLS == _PLAIN_CLASSES and _ndarray._CLASS_NDARRAY is _NDARRAY:
        # What RETURN_SWITCH makes of an NDArray (_ndarray._make_array) without asking the runtime
        # the array's type index, which only selects a registered subclass of NDArray (none
        # is): ctypes calls costing about a microsecond per result, as long as a small model's
        # kernels take.
        array = _NDARRAY.__new__(_NDARRAY)
        # the pointer's bytes copied into a ctypes pointer: ctypes.cast is a foreign call (0.4 us)
        array.handle = _ARRAY_HANDLE.from_buffer_copy(_POINTER_BYTES(bits))
        array.is_view = False
        return array
    value = TVMValue()
    value.v_int64 = bits
    return RETURN_SWITCH[type_code](value)


def raise_last_error() -> None:
    """Raise the Python exception for TVM's last error (as the ctypes FFI would, see
    :func:`plain_errors`)."""
    with plain_errors():
        tvm._ffi.base.raise_last_ffi_error()


@contextlib.contextmanager
def plain_errors():
    """Errors of compiled code without the kind TVM's FFI leaves in front of their message.

    Compiled code reports an error as ``"MatchError: no clause matched ..."``; TVM's FFI picks
    the exception class from that prefix but keeps it in the message. The Python backend raises
    the same class with the bare message; so do calls through this context.
    """
    try:
        yield
    except Exception as err:  # noqa: BLE001 - re-raised, as is or without its prefix
        text = str(err)
        # the class's own name, or the kind it is registered under (OutOfMemoryError: MemoryError)
        kinds = [type(err).__name__, *(k for k, c in tvm._ffi.base.ERROR_TYPE.items() if c is type(err))]
        prefix = next((k + ": " for k in kinds if text.startswith(k + ": ")), None)
        if prefix is None:
            raise
        raise type(err)(text[len(prefix) :]) from None


def _make_error(kind: str, message: str) -> Exception:
    """The exception TVM's FFI raises for an error of ``kind`` (``ValueError``, ``MatchError``, ...)."""
    return tvm._ffi.base.ERROR_TYPE.get(kind, tvm.error.TVMError)(message)


class ADTResult(tvm.runtime.container.ADT):
    """A runtime ADT (a tuple or a constructor's value) as compiled code and the extension return
    it: TVM's :class:`~tvm.runtime.container.ADT`, whose tag, length and fields are read by the
    extension (TVM's class reads each through three calls of its ctypes FFI: 5 us a field, 16 us
    to unpack a pair). Fields are what TVM's would be; a slice is a list, as TVM's."""

    __slots__ = ()

    @property
    def tag(self) -> int:
        return _fastcall.adt_tag(self)

    def __len__(self) -> int:
        return _fastcall.adt_size(self)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return adt_parts(self)[1][index]
        return _fastcall.adt_field(self, index.__index__(), make_result)

    def __iter__(self):
        return iter(adt_parts(self)[1])


_fastcall.set_error_maker(_make_error)
# NDArray and ADT results made in the extension, without running Python code.
_fastcall.set_ndarray_results(_NDARRAY, _ARRAY_HANDLE, vars(_ndarray), _PLAIN_CLASSES)
_fastcall.set_adt_results(tvm.runtime.container.ADT, ADTResult, _object.ObjectHandle, _object.OBJECT_TYPE)


#: The base class of :class:`relay_aot.runtime.module.CompiledModule`: its ``__call__`` in C,
#: calling ``self._direct`` (a bound :func:`entry`) and falling back to ``self._converted_call``
#: (on NotImplemented) or, without ``_direct``, ``self._call``.
Dispatch = _fastcall.Dispatch


def entry(address: int, expected: tuple[int, ...] = (), kinds: tuple = KINDS) -> Callable[[tuple], Any]:
    """A library's packed entry point as a function of the argument tuple, which returns
    NotImplemented if an argument needs Python conversion: an array whose dtype is not its entry
    of ``expected`` (:func:`dtype_key`; -1: any), a value of the classes ``kinds[4]`` names (if
    given)."""
    return _fastcall.bind_entry(address, kinds, list(expected), make_result, raise_last_error)


def dtype_key(code: int, bits: int, lanes: int) -> int:
    """A dtype as the one number :func:`entry`'s ``expected`` holds."""
    return code | bits << 8 | lanes << 16


def call_packed(func: tvm.runtime.PackedFunc, args):
    """Call a PackedFunc through TVM's C API; NotImplemented if an argument needs the ctypes FFI."""
    return _fastcall.call_packed(func.handle.value, args, KINDS, make_result, raise_last_error)


@functools.cache
def check_cpu(cpu, where: str) -> None:
    """Raise :class:`~relay_aot.errors.CpuFeatureError` if this CPU lacks a feature ``cpu`` (a
    :class:`~relay_aot.cpu.CpuRequirement`, or None: nothing recorded) needs; the message, the
    library entries' own (``cpu.h``), starts with ``where``."""
    if cpu is None:
        return
    why = _fastcall.cpu_mismatch(cpu.target, list(cpu.features))
    if why:
        raise errors.CpuFeatureError(f"{where}: {why}")


def cpu_features() -> dict[str, bool]:
    """The CPU features compiled code detects (LLVM's names), with whether this CPU has each."""
    return dict(_fastcall.cpu_features())


def _dtype_code(dtype: str) -> tuple[int, int]:
    dt = tvm.runtime.DataType(dtype)
    return dt.type_code, dt.bits


def empty(shape: tuple, dtype: str) -> tvm.nd.NDArray:
    """A new, uninitialised CPU tensor (from compiled code's allocator)."""
    code, bits = _dtype_code(dtype)
    return _fastcall.empty(shape, code, bits, make_result)


def integer_op(op: str, dtype: str):
    """Integer ``op`` (one of ``scalar_ops.INTEGER_HELPERS``: ``div``, ``mod``, ``floor_div``,
    ``floor_mod``) on two values of ``dtype``, with the semantics of compiled code (``scalar.h``:
    truncating, wrapping, ``ZeroDivisionError`` on a zero divisor), as a function of two ints."""
    index = INTEGER_HELPERS.index(op)  # the extension's order
    code, bits = _dtype_code(dtype)
    return functools.partial(_fastcall.integer, index, code, bits)


#: The profiler of compiled code (``runtime_cpp/relay_aot/profile.h``) on the calling thread,
#: which the Python backend's profiled code drives (one aggregation for both backends).
#: shape.h's check of a shape a shape function computed (kernel name, extents, static shape or None).
check_computed_shape = _fastcall.check_computed_shape

profile_enter = _fastcall.profile_enter
profile_exit = _fastcall.profile_exit
profile_clock = _fastcall.profile_clock
profile_kernel = _fastcall.profile_kernel


def profile_control(functions: list[str], kernels: list[str]):
    """``control(command, max_events)`` for a Python-backend program whose profile ids name
    ``functions`` and ``kernels``: as a profiled library's ``<model>__profile``, command 1 starts
    a profile of the calling thread, command 0 stops it and returns what was recorded (JSON)."""

    def control(command: int, max_events: int) -> str:
        if command == 1:
            _fastcall.profile_start(list(functions), list(kernels), int(max_events))
            return ""
        return _fastcall.profile_stop()

    return control


def make_adt(tag: int, fields) -> tvm.runtime.container.ADT:
    """A new ``runtime.ADT`` (a tuple when ``tag`` is 0) of TVM objects ``fields``.

    Unlike ``tvm.runtime.container.ADT``, dropping it releases its fields in a loop: a list of a
    million cells made in Python is freed without overflowing the C stack.
    """
    return _fastcall.make_adt(tag, list(fields), KINDS, make_result)


def adt_parts(adt: tvm.runtime.container.ADT) -> tuple[int, list]:
    """``(tag, fields)`` of a runtime ADT, read in one call (iterating it through TVM's ctypes
    FFI costs three FFI calls per field)."""
    return _fastcall.parts(adt, False, make_result)


def constructor_value_parts(value) -> tuple[int, list]:
    """``(tag, fields)`` of the interpreter's ``ConstructorValue``, read in one call."""
    return _fastcall.parts(value, True, make_result)


def check_shared_extents(values: list, shared_extents, names: list[str]) -> None:
    """check.h's check that the axes of entry arguments ``values`` (converted, checked against
    their types) sharing a named dimension (``ir.SharedExtent``) agree; ``ValueError`` if not."""
    rows = [(e.name, [(a.param, list(a.path), a.axis) for a in e.axes]) for e in shared_extents]
    _fastcall.check_shared_extents(values, rows, names, KINDS)


class TypeTable:
    """check.h's checks against a type table (rows from :mod:`relay_aot.ir.typetable`), run in
    Python: the same code and messages as inside every compiled library."""

    def __init__(self, rows: list[TypeRow]):
        self._table = _fastcall.TypeTable(rows)

    def check(self, value, type_index: int, what: str) -> None:
        """Raise ``TypeError``/``ValueError`` unless ``value`` (a TVM object) fits the type."""
        self._table.check(value, type_index, what, KINDS)

    def mismatch(self, type_index: int, what: str, got: str) -> None:
        """Raise the ``TypeError`` for a value that has no runtime form at all (``got``: "a str")."""
        self._table.mismatch(type_index, what, got)

    def scalar(self, number, type_index: int, what: str) -> tvm.nd.NDArray:
        """A Python number passed for a 0-d tensor type, as that tensor (or the error)."""
        return self._table.scalar(number, type_index, what, make_result)


def _check_layouts() -> None:
    """The extension reads the interpreter's ConstructorValue by its layout (its class is not in
    TVM's headers): make sure it is this TVM's."""
    from tvm.relay.backend.interpreter import ConstructorValue

    tensor = tvm.nd.array(np.arange(3, dtype="float32"))
    inner = tvm.runtime.container.ADT(2, [])
    for parts, value in (
        (adt_parts, tvm.runtime.container.ADT(7, [tensor, inner])),
        (constructor_value_parts, ConstructorValue(7, [tensor, inner], None)),
    ):
        tag, fields = parts(value)
        if tag != 7 or len(fields) != 2 or not fields[0].same_as(tensor) or not fields[1].same_as(inner):
            raise ImportError("relay_aot's _fastcall extension does not match the object layout of this TVM build")


_check_layouts()

"""Python side of the ``_fastcall`` extension: calling TVM without its ctypes FFI.

``relay_aot/_fastcall.cc`` packs Python arguments into TVM's packed calling convention itself,
and makes the runtime ADTs relay_aot builds in Python (whose fields it frees without
recursion, see :func:`make_adt`). This module holds what its users share -- the argument kinds
it recognises, how results become Python objects (TVM's own ctypes return converters, so they
are exactly what the ctypes FFI returns) and how errors are raised -- and the addresses of TVM's
C API functions it calls.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import tvm
from tvm._ffi._ctypes.types import RETURN_SWITCH, TVMValue

from . import _fastcall

#: Python classes passed by handle (NDArray, PackedFunc, Object), then numpy's scalar base class.
KINDS = (tvm.nd.NDArray, tvm.runtime.PackedFunc, tvm.runtime.Object, np.generic)


def make_result(type_code: int, bits: int):
    """A packed return value as TVM's ctypes FFI would return it (it takes ownership)."""
    value = TVMValue()
    value.v_int64 = bits
    return RETURN_SWITCH[type_code](value)


def raise_last_error() -> None:
    """Raise the Python exception for TVM's last error (as the ctypes FFI would)."""
    tvm._ffi.base.raise_last_ffi_error()


def _c_api(name: str) -> int:
    return ctypes.cast(getattr(tvm._ffi.base._LIB, name), ctypes.c_void_p).value


_FUNC_CALL = _c_api("TVMFuncCall")
_ARRAY_ALLOC = _c_api("TVMArrayAlloc")


def _type_index(key: str) -> int:
    index = ctypes.c_uint()
    if tvm._ffi.base._LIB.TVMObjectTypeKey2Index(tvm._ffi.base.c_str(key), ctypes.byref(index)) != 0:
        raise_last_error()
    return index.value


_ADT_TYPE_INDEX = _type_index("runtime.ADT")
_LEAF_TYPE_INDICES = (_type_index("runtime.NDArray"), _type_index("runtime.PackedFunc"))


def call_entry(address: int, args):
    """Call a library's packed entry point; NotImplemented if an argument needs Python conversion."""
    return _fastcall.call(address, args, KINDS, make_result, raise_last_error)


def call_packed(func: tvm.runtime.PackedFunc, args):
    """Call a PackedFunc through TVM's C API; NotImplemented if an argument needs the ctypes FFI."""
    return _fastcall.call_packed(_FUNC_CALL, func.handle.value, args, KINDS, make_result, raise_last_error)


@functools.lru_cache(maxsize=None)
def _dtype_code(dtype: str) -> tuple[int, int]:
    dt = tvm.runtime.DataType(dtype)
    return dt.type_code, dt.bits


def empty(shape: tuple, dtype: str) -> tvm.nd.NDArray:
    """A new, uninitialised CPU tensor."""
    code, bits = _dtype_code(dtype)
    return _fastcall.empty(_ARRAY_ALLOC, shape, code, bits, make_result, raise_last_error)


def make_adt(tag: int, fields) -> tvm.runtime.container.ADT:
    """A new ``runtime.ADT`` (a tuple when ``tag`` is 0) of TVM objects ``fields``.

    Unlike ``tvm.runtime.container.ADT``, dropping it releases its fields in a loop: a list of a
    million cells made in Python is freed without overflowing the C stack.
    """
    return _fastcall.make_adt(_ADT_TYPE_INDEX, tag, list(fields), KINDS, make_result)


def adt_parts(adt: tvm.runtime.container.ADT) -> tuple[int, list]:
    """``(tag, fields)`` of a runtime ADT, read in one call (iterating it through TVM's ctypes
    FFI costs three FFI calls per field)."""
    return _fastcall.parts(adt, False, _LEAF_TYPE_INDICES, make_result)


def constructor_value_parts(value) -> tuple[int, list]:
    """``(tag, fields)`` of the interpreter's ``ConstructorValue``, read in one call."""
    return _fastcall.parts(value, True, _LEAF_TYPE_INDICES, make_result)


def _check_layouts() -> None:
    """The extension reads TVM objects by their layout: make sure it is this TVM's."""
    from tvm.relay.backend.interpreter import ConstructorValue

    tensor = tvm.nd.array(np.arange(3, dtype="float32"))
    inner = tvm.runtime.container.ADT(2, [])
    for parts, value in ((adt_parts, tvm.runtime.container.ADT(7, [tensor, inner])),
                         (constructor_value_parts, ConstructorValue(7, [tensor, inner], None))):
        tag, fields = parts(value)
        if tag != 7 or len(fields) != 2 or not fields[0].same_as(tensor) or not fields[1].same_as(inner):
            raise ImportError("relay_aot._fastcall does not match the object layout of this TVM build")


_check_layouts()

"""Relay values from any executor, as plain Python data.

relay_aot's backends, TVM's interpreter and VM, and Python code all hold Relay values in
different objects (``NDArray`` or numpy, ``runtime.ADT`` or ``ConstructorValue`` or a Python
tuple, a cell, ``Ref`` or ``RefValue``, many kinds of function). :func:`plain` maps each to one
form: numpy arrays for tensors, ``("adt", tag, fields)`` for tuples (tag 0) and constructor
values, ``("ref", contents)`` for references and ``("closure",)`` for functions. The test
tooling compares executors in this form; ``relay-aot run`` prints it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm.relay.backend.interpreter import ConstructorValue, RefValue
from tvm.runtime.container import ADT

from ..backends.python.runtime import ExportedCell
from .values import Closure, Ref


def plain(value: Any) -> Any:
    """``value`` (from any executor) as plain data: see the module docstring."""
    if isinstance(value, tvm.nd.NDArray):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    if isinstance(value, (bool, int, float)):
        return np.asarray(value)
    if isinstance(value, ADT):
        return ("adt", int(value.tag), tuple(plain(f) for f in value))
    if isinstance(value, ConstructorValue):
        return ("adt", int(value.tag), tuple(plain(f) for f in value.fields))
    if isinstance(value, tuple):
        return ("adt", 0, tuple(plain(f) for f in value))
    if isinstance(value, RefValue):
        return ("ref", plain(value.value))
    if isinstance(value, Ref):
        return ("ref", plain(value.value))
    if isinstance(value, (tvm.ir.container.Array, ExportedCell)) and len(value) == 1:  # a reference cell
        return ("ref", plain(value[0]))
    if _is_closure(value):
        return ("closure",)
    raise TypeError(f"cannot inspect a value of type {type(value).__name__}")


def _is_closure(value: Any) -> bool:
    if isinstance(value, (Closure, tvm.runtime.PackedFunc)) or callable(value):
        return True
    # The interpreter's and the VM's closures reach Python as unregistered objects.
    return type(value) is tvm.runtime.Object and "Closure" in repr(value)[:40]

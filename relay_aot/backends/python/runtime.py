"""Run-time support of the Python backend: the helpers generated Python code calls.

Inside generated code values are Python-native, because TVM's containers cannot hold Python
objects and are immutable from Python:

===================  ==============================================================
Relay                inside generated Python code
===================  ==============================================================
tensor               ``tvm.nd.NDArray`` (kernels read and write them directly)
tuple                Python ``tuple``
constructor value    :class:`Adt` (a tuple of the fields with a ``tag``)
closure              a Python function (closed over its captured values)
reference            a one-element Python ``list`` written in place
===================  ==============================================================

At the boundary -- the program's entry, and calls of functions passed in from outside -- values
are converted to and from the TVM runtime values the C++ backend uses (NDArray, ``ADT`` with tag
0 for tuples, callables, one-element cells read as ``cell[0]``), so callers see the same values
from either backend. Conversions are iterative: a list of a million elements converts without
deep recursion.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tvm
from tvm.runtime.container import ADT

from ...errors import ArgumentTypeError, KernelError, MatchError, RecursionDepthError
from ...kernels.scalars import NATIVE_DTYPES
from ...runtime import fastcall


class Adt(tuple):
    """A constructor value: a tuple of its fields that also carries the constructor's ``tag``."""

    tag: int

    def __new__(cls, tag: int, fields: tuple = ()):
        self = tuple.__new__(cls, fields)
        self.tag = tag
        return self

    def __repr__(self) -> str:
        return f"Adt({self.tag}, {tuple.__repr__(self)})"


def empty(shape: tuple, dtype: str) -> tvm.nd.NDArray:
    """A new, uninitialised CPU tensor (a kernel's output)."""
    return fastcall.empty(shape, dtype)


def copy_tensor(tensor: tvm.nd.NDArray) -> tvm.nd.NDArray:
    """A new tensor with the contents of ``tensor`` (a constant handed to a caller)."""
    out = empty(tuple(tensor.shape), str(tensor.dtype))
    tensor.copyto(out)
    return out


def zero_tensor(like: tvm.nd.NDArray) -> tvm.nd.NDArray:
    """A new zero-filled tensor of the shape and dtype of ``like`` (a fresh copy of a zero constant)."""
    return tvm.nd.array(np.zeros(tuple(like.shape), str(like.dtype)))


# ----------------------------------------------------------------------------------------
# Unboxed scalars: 0-d tensors of numeric dtypes are numpy scalars inside generated code (as they
# are C++ scalars in the C++ backend), so 0-d arithmetic is numpy scalar arithmetic, not a kernel
# call through TVM's FFI. numpy scalars wrap on integer overflow (warnings are switched off while
# generated code runs, see call_guarded) and follow IEEE float32/float64, like TVM's kernels.

_CTYPE_OF: dict[str, type[ctypes._SimpleCData]] = {
    "bool": ctypes.c_uint8,
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
}
_NUMPY_OF = {dtype: np.dtype(dtype).type for dtype in NATIVE_DTYPES}


def unbox(tensor: tvm.nd.NDArray):
    """The value of a 0-d tensor of a native dtype, as a numpy scalar of that dtype."""
    dtype = str(tensor.dtype)
    contents = tensor.handle.contents
    raw = _CTYPE_OF[dtype].from_address(contents.data + contents.byte_offset).value
    return _NUMPY_OF[dtype](raw != 0 if dtype == "bool" else raw)


def box(value, dtype: str) -> tvm.nd.NDArray:
    """A new 0-d tensor of ``dtype`` holding ``value`` (for kernels and for callers outside)."""
    tensor = empty((), dtype)
    contents = tensor.handle.contents
    _CTYPE_OF[dtype].from_address(contents.data).value = value.item() if hasattr(value, "item") else value
    return tensor


@functools.cache
def _integer_function(op: str, dtype: str):
    return fastcall.integer_op(op, dtype)


def integer(op: str, a, b):
    """Relay integer ``op`` (``"div"``, ``"mod"``, ``"floor_div"``, ``"floor_mod"``; see
    ``kernels/scalar_ops.py``) on two numpy scalars of one dtype: the C++ runtime's own functions
    (``scalar.h``), so both backends divide alike and raise ``ZeroDivisionError`` alike."""
    return type(a)(_integer_function(op, a.dtype.name)(int(a), int(b)))


def truthy(cond: tvm.nd.NDArray) -> bool:
    """The value of a 0-d bool tensor, read straight from its memory (no copy)."""
    tensor = cond.handle.contents
    return ctypes.c_uint8.from_address(tensor.data + tensor.byte_offset).value != 0


def call_kernel(kernel: Callable, symbol: str, *tensors: tvm.nd.NDArray) -> None:
    """Run a compiled kernel on its inputs and preallocated outputs.

    Through TVM's C API directly (``_fastcall``: a ctypes call costs microseconds, more than a
    small kernel's work). A failure names the arguments' shapes, as the C++ runtime does
    (``kernel.h``): kernels with ``?`` dimensions fail on shapes that do not fit together.
    """
    try:
        if fastcall.call_packed(kernel, tensors) is NotImplemented:
            kernel(*tensors)
    except tvm.error.TVMError as err:
        raise _kernel_failure(symbol, tensors, err) from None


def _kernel_failure(symbol: str, tensors, err: Exception) -> KernelError:
    """The error of a kernel that failed, naming its arguments' shapes (as ``kernel.h`` does)."""
    shapes = ", ".join(str(tuple(int(d) for d in t.shape)) for t in tensors)
    lines = [line for line in str(err).splitlines() if line.strip()]
    detail = lines[-1].removeprefix("TVMError: ") if lines else type(err).__name__
    return KernelError(f"kernel {symbol} failed on arguments of shapes {shapes}: {detail}")


_ZERO_SHAPE = np.zeros((), "int64")


def shape_of(tensor: tvm.nd.NDArray) -> tvm.nd.NDArray:
    """The shape of ``tensor`` as a shape function's input: int64[ndim] (0-d int64 for 0-d)."""
    shape = tensor.shape
    return tvm.nd.array(np.array(shape, "int64") if shape else _ZERO_SHAPE)


def output_shapes(shape_func: Callable, kernel: str, inputs: list, args: list, types: tuple) -> list:
    """Run the shape function of ``kernel`` (a kernel with ``?`` dimensions) on ``args``: the
    shapes of its outputs, of the shapes ``types`` (-1 for ``?``), as ``shape.h`` does in C++.
    A failure names the shapes of the kernel's ``inputs``."""
    outs = [empty((len(shape),), "int64") for shape in types]
    try:
        if fastcall.call_packed(shape_func, (*args, *outs)) is NotImplemented:
            shape_func(*args, *outs)
    except tvm.error.TVMError as err:
        raise _kernel_failure(kernel, inputs, err) from None
    shapes = [tuple(int(d) for d in out.numpy()) for out in outs]
    for shape, expected in zip(shapes, types):
        fastcall.check_computed_shape(kernel, shape, None if -1 in expected else expected)
    return shapes


def all_empty(shapes: list) -> bool:
    """Whether every output shape has no elements: the kernel is then not called (``shape.h``)."""
    return all(0 in shape for shape in shapes)


# ----------------------------------------------------------------------------------------
# Profiling (code printed with profile=True only): the C++ runtime's profiler, through the
# extension, so that both backends report alike (runtime_cpp/relay_aot/profile.h).

profile_enter = fastcall.profile_enter
profile_exit = fastcall.profile_exit


def profiled_call_kernel(profile_id: int, kernel: Callable, symbol: str, *tensors: tvm.nd.NDArray) -> None:
    """:func:`call_kernel`, timed as kernel ``profile_id`` (``ir/profile.py``)."""
    start = fastcall.profile_clock()
    call_kernel(kernel, symbol, *tensors)
    fastcall.profile_kernel(profile_id, start)


def profiled_output_shapes(profile_id: int, *args) -> list:
    """:func:`output_shapes`, timed as the shape function's profile id."""
    start = fastcall.profile_clock()
    shapes = output_shapes(*args)
    fastcall.profile_kernel(profile_id, start)
    return shapes


def call_guarded(func: Callable, args) -> Any:
    """``func(*args)``, with Python's recursion limit reported as :class:`RecursionDepthError`.

    Generated functions recurse as deeply as the Relay program does; past Python's recursion
    limit the error may also surface wrapped by ctypes (inside a TVM call), so both forms are
    recognised here, where generated code is entered from outside.
    """
    try:
        with np.errstate(all="ignore"):  # integer scalars wrap silently, as in TVM's kernels
            return func(*args)
    except RecursionError:
        pass
    except ctypes.ArgumentError as err:
        if "RecursionError" not in str(err):
            raise
    raise RecursionDepthError(
        f"the program recursed deeper than the python backend allows (Python's recursion limit is "
        f"{sys.getrecursionlimit()} frames); the cpp backend recurses much deeper"
    ) from None


def match_failure(where: str):
    """Raise the error of a ``match`` none of whose clauses fits (``where`` names the function)."""
    raise MatchError(f"no clause matched the value in {where}")


# ----------------------------------------------------------------------------------------
# Boundary conversions


class ExportedCell:
    """A reference returned to Python: ``cell[0]`` reads the live contents as runtime values."""

    __slots__ = ("cell",)

    def __init__(self, cell: list):
        self.cell = cell

    def __getitem__(self, index: int):
        if index != 0:
            raise IndexError("a reference cell has one element, at index 0")
        return export_value(self.cell[0], top=True)

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return f"<relay_aot python reference cell {self.cell!r}>"


class ExportedClosure:
    """A generated closure as seen from outside: runtime values in, runtime values out.

    ``top`` is False when the closure travels inside a TVM container (as a PackedFunc), where
    its results must be values TVM's FFI can carry.
    """

    __slots__ = ("inner", "top")

    def __init__(self, inner: Callable, top: bool):
        self.inner = inner
        self.top = top

    def __call__(self, *args):
        return export_value(call_guarded(self.inner, [import_value(a) for a in args]), top=self.top)

    def __repr__(self) -> str:
        return f"<relay_aot python closure {self.inner.__qualname__}>"


class ImportedFunction:
    """A function value from outside (a PackedFunc or Python callable) called by generated code."""

    __slots__ = ("func",)

    def __init__(self, func: Callable):
        self.func = func

    def __call__(self, *args):
        return import_value(self.func(*[export_value(a, top=False) for a in args]))


def _export_leaf(value: Any, top: bool) -> Any:
    kind = type(value)
    if isinstance(value, np.generic):
        return box(value, str(value.dtype))
    if kind is list:
        if top:
            return ExportedCell(value)
        # TVM's containers cannot hold a Python list: a reference nested in a returned tuple or
        # ADT is returned as a one-element runtime Array holding its contents at return time.
        return tvm.runtime.convert([export_value(value[0], top=False)])
    if kind is types.FunctionType:
        exported = ExportedClosure(value, top)
        return exported if top else tvm.runtime.convert(exported)
    if kind is ImportedFunction:
        return value.func
    return value


def export_value(value: Any, top: bool = False) -> Any:
    """An internal value as a TVM runtime value (tuples and ADTs become ``ADT`` objects).

    ``top`` marks the value handed straight to Python (the program's result): references stay
    live cells and closures plain callables. Nested values must fit into TVM containers.
    Iterative (lists can be very deep), and each tuple is converted once however often it is
    shared, so sharing survives and a DAG costs its size, not its number of paths.
    """
    if not isinstance(value, tuple):
        return _export_leaf(value, top)
    return _convert_tree(
        value,
        tuple,
        id,
        lambda node: (getattr(node, "tag", 0), node),
        lambda leaf: _export_leaf(leaf, False),
        fastcall.make_adt,
    )


def _convert_tree(value, composite: type, identity: Callable, parts: Callable, leaf: Callable, build: Callable) -> Any:
    """Rebuild a tree of ``composite`` nodes bottom-up without recursion.

    ``parts(node)`` gives a node's ``(tag, children)``; leaves are converted by ``leaf`` and
    nodes by ``build(tag, converted children)``. A node whose ``identity`` was seen before is
    converted once.
    """
    done: dict = {}
    tag, children = parts(value)
    stack: list[tuple[Any, int, Iterator[Any], list[Any]]] = [(value, tag, iter(children), [])]
    while True:
        node, tag, children, fields = stack[-1]
        for child in children:
            if isinstance(child, composite):
                key = identity(child)
                if key in done:
                    fields.append(done[key])
                    continue
                child_tag, grandchildren = parts(child)
                stack.append((child, child_tag, iter(grandchildren), []))
                break
            fields.append(leaf(child))
        else:
            stack.pop()
            built = done[identity(node)] = build(tag, fields)
            if not stack:
                return built
            stack[-1][3].append(built)


def _import_leaf(value: Any) -> Any:
    if value is None:  # where the type says nothing (checked before: runtime.values.Converter)
        return None
    if isinstance(value, tvm.nd.NDArray):
        return unbox(value) if not value.shape and str(value.dtype) in _NUMPY_OF else value
    if isinstance(value, ExportedCell):
        return value.cell
    if isinstance(value, tvm.ir.container.Array):
        if len(value) != 1:
            raise ArgumentTypeError(f"expected a reference cell (a one-element Array), got an Array of {len(value)}")
        return [import_value(value[0])]
    if isinstance(value, ExportedClosure):
        return value.inner
    if callable(value):
        return ImportedFunction(value)
    raise ArgumentTypeError(f"a {type(value).__name__} is not a Relay runtime value")


def import_value(value: Any) -> Any:
    """A TVM runtime value (or a value this module exported) as an internal value."""
    if not isinstance(value, ADT):
        return _import_leaf(value)
    return _convert_tree(
        value,
        ADT,
        lambda node: node.handle.value,
        fastcall.adt_parts,
        _import_leaf,
        lambda tag, fields: Adt(tag, tuple(fields)),
    )

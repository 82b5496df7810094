"""Stage 6 (Python side): convert Python values to runtime values and back, by static type.

Arguments may be numpy arrays, ``tvm.nd.NDArray``, Python/numpy scalars (for 0-d tensors),
Python tuples (for tuples), ``tvm.runtime.container.ADT`` or the interpreter's
``ConstructorValue`` (for ADTs) and Python callables (for functions). Results are ``NDArray``,
``ADT`` (tuples have tag 0) and, for functions, callables that convert in the same way.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import tvm
from tvm.runtime.container import ADT

from .. import ir
from ..dispatch import method_for
from ..ir import format_type, instantiate
from . import fastcall
from .metadata import Signature

from tvm.relay.backend.interpreter import ConstructorValue, RefValue


def _tensor_text(array) -> str:
    """A tensor described as the library's own checks describe it (check.h)."""
    shape = tuple(int(d) for d in array.shape)
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    return f"a tensor of dtype {array.dtype} and shape {shape_text}"


def _describe(value: Any) -> str:
    if isinstance(value, tvm.nd.NDArray):
        return f"NDArray of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, np.ndarray):
        return f"numpy array of shape {value.shape} and dtype {value.dtype}"
    return type(value).__name__


class _Path:
    """Where a value sits inside an argument (``argument 0 (%xs).Cons[1]``), rendered on demand."""

    __slots__ = ("parent", "step")

    def __init__(self, parent, step: str):
        self.parent, self.step = parent, step

    def __str__(self) -> str:
        steps, node = [], self
        while isinstance(node, _Path):
            steps.append(node.step)
            node = node.parent
        return str(node) + "".join(reversed(steps))


class _Build:
    """A composite value still to be built from its converted ``children`` by ``make``;
    ``key`` remembers the result for other places the same value is met (see ``_identity``)."""

    __slots__ = ("make", "children", "key")

    def __init__(self, make, children: list):
        self.make, self.children, self.key = make, children, None


_COMPOSITES = (tuple, list, ADT, ConstructorValue, RefValue)


def _identity(value: Any):
    """What makes two occurrences of a composite value the same object (None: not composite).

    TVM objects are compared by the address of the object: their Python wrappers are made anew
    on every access (``ConstructorValue.fields[0]`` is a new wrapper each time).
    """
    if isinstance(value, tvm.runtime.Object):
        return value.handle.value if isinstance(value, _COMPOSITES) else None
    return id(value) if isinstance(value, (tuple, list)) else None


def _adt_maker(tag: int, original, fields: list):
    """How to build a converted ADT: ``original`` itself (a runtime ADT) when every field
    converted to the very object it was, else a new ADT of the converted fields."""
    if original is None:
        return functools.partial(fastcall.make_adt, tag)

    def make(converted: list):
        if all(c is f for c, f in zip(converted, fields)):
            return original
        return fastcall.make_adt(tag, converted)

    return make


class Converter:
    """Converts values of one program's types (its ADT definitions come from the signature)."""

    def __init__(self, signature: Signature):
        self.adts = signature.adts
        self._to = {
            ir.TensorType: self._tensor_in,
            ir.TupleType: self._tuple_in,
            ir.AdtType: self._adt_in,
            ir.FuncType: self._func_in,
            ir.RefType: self._ref_in,
            ir.AnyType: self._any_in,
        }
        self._from = {ir.FuncType: self._func_out, ir.RefType: self._ref_out}
        self._ctor_fields: dict = {}

    def to_runtime(self, value: Any, ty: ir.Type, where: str) -> Any:
        """``value`` as the runtime value of static type ``ty``; ``where`` names it in errors.

        Iterative, with paths built only when an error names them: a list argument of
        hundreds of thousands of cells neither exhausts Python's stack nor builds a path string
        per cell. A composite value met twice (parts shared in a DAG) is converted once, and
        stays shared in the result: a tree of depth 60 with shared children converts in 60
        steps, not 2**60.
        """
        results: list = []
        done: dict = {}  # (identity, type) -> converted value
        work: list = [(value, ty, where)]
        while work:
            item = work.pop()
            if isinstance(item, _Build):
                count = len(item.children)
                fields = results[len(results) - count:]
                del results[len(results) - count:]
                made = item.make(fields)
                if item.key is not None:
                    done[item.key] = made
                results.append(made)
                continue
            identity = _identity(item[0])
            key = (identity, item[1]) if identity is not None else None
            if key is not None and key in done:
                results.append(done[key])
                continue
            converted = method_for(self._to, item[1])(*item)
            if isinstance(converted, _Build):
                converted.key = key
                work.append(converted)
                work.extend(reversed(converted.children))
            else:
                results.append(converted)
        return results[0]

    def from_runtime(self, value: Any, ty: ir.Type) -> Any:
        """A runtime value of static type ``ty`` as returned to Python."""
        handler = method_for(self._from, ty)
        return handler(value, ty) if handler is not None else value

    def _mismatch(self, value, ty, where) -> TypeError:
        return TypeError(f"{where}: expected {format_type(ty, self.adts)}, got {_describe(value)}")

    # -- to runtime --------------------------------------------------------------------------

    def _tensor_in(self, value, ty: ir.TensorType, where):
        if isinstance(value, tvm.nd.NDArray):
            array = value
            if array.device.device_type != tvm.cpu().device_type:
                raise ValueError(f"{where}: tensor is on {array.device}, expected the CPU")
        elif isinstance(value, (np.ndarray, np.generic)):
            array = value
        elif isinstance(value, (bool, int, float)) and not ty.shape:
            kind = np.dtype(ty.dtype).kind if ty.dtype != "bool" else "b"
            ok = {"b": isinstance(value, bool), "i": isinstance(value, int) and not isinstance(value, bool),
                  "u": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                  "f": isinstance(value, (int, float)) and not isinstance(value, bool)}.get(kind, False)
            if not ok:
                raise self._mismatch(value, ty, where)
            try:
                with np.errstate(over="raise"):
                    array = np.array(value, dtype=ty.dtype)
            except (OverflowError, FloatingPointError):
                raise ValueError(f"{where}: the number {value!r} does not fit in dtype {ty.dtype}") from None
            if kind == "f" and np.isfinite(value) and not np.isfinite(array):
                raise ValueError(f"{where}: the number {value!r} does not fit in dtype {ty.dtype}")
        else:
            raise self._mismatch(value, ty, where)
        if str(array.dtype) != ty.dtype:
            raise TypeError(f"{where}: expected {format_type(ty, self.adts)}, got {_tensor_text(array)}")
        if tuple(array.shape) != ty.shape:
            raise ValueError(f"{where}: expected {format_type(ty, self.adts)}, got {_tensor_text(array)}")
        if isinstance(array, tvm.nd.NDArray):
            return array
        return tvm.nd.array(np.asarray(array, order="C"), device=tvm.cpu())

    def _tuple_in(self, value, ty: ir.TupleType, where):
        original = None
        if isinstance(value, ADT):
            tag, fields = fastcall.adt_parts(value)
            if tag != 0:
                raise TypeError(f"{where}: expected a tuple, got an ADT with tag {tag}")
            original = value
        elif isinstance(value, (tuple, list)):
            fields = list(value)
        else:
            raise self._mismatch(value, ty, where)
        if len(fields) != len(ty.fields):
            raise ValueError(f"{where}: expected a tuple of {len(ty.fields)} fields, got {len(fields)}")
        children = [(f, t, _Path(where, f"[{i}]")) for i, (f, t) in enumerate(zip(fields, ty.fields))]
        return _Build(_adt_maker(0, original, fields), children)

    def _adt_in(self, value, ty: ir.AdtType, where):
        adt = self.adts[ty.adt]
        original = None
        if isinstance(value, ConstructorValue):
            tag, fields = fastcall.constructor_value_parts(value)
        elif isinstance(value, ADT):
            tag, fields = fastcall.adt_parts(value)
            original = value
        else:
            raise self._mismatch(value, ty, where)
        ctor = next((c for c in adt.ctors if c.tag == tag), None)
        if ctor is None:
            raise ValueError(f"{where}: tag {tag} is not a constructor of {adt.name}")
        if len(fields) != len(ctor.fields):
            raise ValueError(f"{where}: {ctor.name} takes {len(ctor.fields)} fields, got {len(fields)}")
        field_types = self._field_types(ctor, ty)
        children = [(f, t, _Path(where, f".{ctor.name}[{i}]")) for i, (f, t) in enumerate(zip(fields, field_types))]
        return _Build(_adt_maker(tag, original, fields), children)

    def _field_types(self, ctor, ty: ir.AdtType) -> tuple:
        key = (ctor.name, ty)
        types = self._ctor_fields.get(key)
        if types is None:
            types = self._ctor_fields[key] = tuple(instantiate(t, ty.args) for t in ctor.fields)
        return types

    def _func_in(self, value, ty: ir.FuncType, where):
        if isinstance(value, tvm.runtime.PackedFunc):
            return value
        if isinstance(value, Closure):
            return value.packed
        if not callable(value):
            raise self._mismatch(value, ty, where)

        def call(*args):
            py_args = [self.from_runtime(a, t) for a, t in zip(args, ty.params)]
            return self.to_runtime(value(*py_args), ty.ret, f"result of {where}")

        return tvm.runtime.convert(call)

    def _ref_in(self, value, ty: ir.RefType, where):
        if isinstance(value, Ref):
            return value.cell
        if isinstance(value, RefValue):
            return _Build(tvm.runtime.convert, [(value.value, ty.value, _Path(where, ".value"))])
        raise self._mismatch(value, ty, where)

    def _any_in(self, value, ty, where):
        """A value whose static type is a type variable: made a runtime value of its own kind
        (nothing is checked: the program cannot look inside it)."""
        if isinstance(value, (np.ndarray, np.generic)):
            return tvm.nd.array(np.asarray(value, order="C"))
        if isinstance(value, ConstructorValue):
            tag, fields = fastcall.constructor_value_parts(value)
            return _Build(functools.partial(fastcall.make_adt, tag), [(f, ty, where) for f in fields])
        if isinstance(value, (tuple, list)):
            return _Build(functools.partial(fastcall.make_adt, 0), [(f, ty, where) for f in value])
        if isinstance(value, RefValue):
            return _Build(tvm.runtime.convert, [(value.value, ty, _Path(where, ".value"))])
        if isinstance(value, Ref):
            return value.cell
        if isinstance(value, Closure):
            return value.packed
        return value

    # -- from runtime ------------------------------------------------------------------------

    def _func_out(self, value, ty: ir.FuncType):
        return Closure(value, ty, self)

    def _ref_out(self, value, ty: ir.RefType):
        return Ref(value, ty, self)


class Closure:
    """A compiled Relay function value returned to Python; call it like the function.

    ``packed`` is the underlying ``tvm.runtime.PackedFunc``.
    """

    def __init__(self, packed: tvm.runtime.PackedFunc, ty: ir.FuncType, converter: Converter):
        self.packed = packed
        self.type = ty
        self._converter = converter

    def __call__(self, *args):
        if len(args) != len(self.type.params):
            raise TypeError(f"the function takes {len(self.type.params)} arguments, got {len(args)}")
        converted = [
            self._converter.to_runtime(a, t, f"argument {i}") for i, (a, t) in enumerate(zip(args, self.type.params))
        ]
        return self._converter.from_runtime(self.packed(*converted), self.type.ret)

    def __repr__(self) -> str:
        return f"<relay_aot.Closure {format_type(self.type, self._converter.adts)}>"



class Ref:
    """A Relay reference returned to Python; ``value`` reads its current contents.

    ``cell`` is the runtime cell (a one-element ``tvm.runtime`` Array the program writes in place).
    """

    def __init__(self, cell, ty: ir.RefType, converter: Converter):
        self.cell = cell
        self.type = ty
        self._converter = converter

    @property
    def value(self):
        """The current contents of the reference."""
        return self._converter.from_runtime(self.cell[0], self.type.value)

    def __repr__(self) -> str:
        return f"<relay_aot.Ref {format_type(self.type, self._converter.adts)}>"

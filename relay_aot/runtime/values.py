"""Stage 6 (Python side): convert Python values to runtime values and back, by static type.

Arguments may be numpy arrays, ``tvm.nd.NDArray``, Python/numpy numbers (for 0-d tensors),
Python tuples (for tuples), ``tvm.runtime.container.ADT`` or the interpreter's
``ConstructorValue`` (for ADTs), ``RefValue`` or a returned :class:`Ref` (for references) and
Python callables (for functions). Results are ``NDArray``, ``ADT`` (tuples have tag 0) and, for
functions and references, :class:`Closure` and :class:`Ref`, which convert in the same way.

This module only *converts*: it turns Python values into the runtime values they stand for, and
leaves deciding whether they fit the program's types to the checks compiled code runs
(``runtime_cpp/relay_aot/check.h``). The C++ backend's library runs them itself on every value
that enters it; for the Python backend, :class:`Converter` runs the same C++ code through the
``_fastcall`` extension (:class:`~relay_aot.runtime.fastcall.TypeTable`). So both backends accept
the same values and word every error the same way. What is decided here is only what has no
runtime form at all (a ``dict`` for a tuple), reported through that same code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm.relay.backend.interpreter import ConstructorValue, RefValue
from tvm.runtime.container import ADT

from .. import ir
from ..backends.python.runtime import ExportedCell
from ..dispatch import method_for
from ..errors import ArgumentTypeError
from ..ir import format_type, instantiate
from ..ir.signature import Signature
from ..ir.typetable import TypeTable
from . import fastcall


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
        self.make, self.children = make, children
        self.key: tuple[Any, Any] | None = None


_COMPOSITES = (tuple, list, ConstructorValue, RefValue)


def _identity(value: Any):
    """What makes two occurrences of a composite Python-side value the same object (None: not
    one). TVM objects are compared by address: their Python wrappers are made anew on every
    access (``ConstructorValue.fields[0]`` is a new wrapper each time)."""
    if isinstance(value, (ConstructorValue, RefValue)):
        return value.handle.value
    return id(value) if isinstance(value, (tuple, list)) else None


def _kind(value: Any) -> str:
    """A Python value described the way check.h describes values ("a str")."""
    name = type(value).__name__
    if isinstance(value, np.ndarray):
        return f"a numpy array of dtype {value.dtype}"
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


class Converter:
    """Converts the values of one program's types (its ADT definitions come from the signature).

    ``checks``: also run check.h's checks on every converted value (for the Python backend;
    a C++ library checks what enters it itself).
    """

    def __init__(self, signature: Signature, checks: bool):
        self.adts = signature.adts
        self.checks = checks
        self._shared = signature.shared_extents
        self._names = [p.name for p in signature.params]
        self._table = TypeTable(signature.adts)
        for ty in [p.type for p in signature.params] + [signature.ret]:
            self._index_all(ty)
        self._checker = fastcall.TypeTable(self._table.rows())
        self._to: dict[type, Callable[..., Any]] = {
            ir.TensorType: self._tensor_in,
            ir.TupleType: self._tuple_in,
            ir.AdtType: self._adt_in,
            ir.FuncType: self._func_in,
            ir.RefType: self._ref_in,
            ir.AnyType: self._any_in,
        }
        self._from: dict[type, Callable[..., Any]] = {
            ir.FuncType: self._func_out,
            ir.RefType: self._ref_out,
            ir.AnyType: self._any_out,
        }
        self._ctor_fields: dict = {}

    def _index_all(self, ty: ir.Type) -> None:
        """Number ``ty`` and every type a value of it may carry, through function types too
        (the arguments of a returned closure, the result of a function passed in)."""
        pending = [ty]
        seen: set = set()
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            self._table.index(current)
            pending += self._table.children(current)
            if isinstance(current, ir.FuncType):
                pending += [*current.params, current.ret]

    def to_runtime(self, value: Any, ty: ir.Type, where: str) -> Any:
        """``value`` as the runtime value of static type ``ty``; ``where`` names it in errors.

        Iterative, with paths built only when an error names them: a list argument of
        hundreds of thousands of cells neither exhausts Python's stack nor builds a path string
        per cell. A composite value met twice (parts shared in a DAG) is converted once, and
        stays shared in the result: a tree of depth 60 with shared children converts in 60
        steps, not 2**60. Runtime values (``NDArray``, ``ADT``, ...) are taken as they are.
        """
        results: list = []
        done: dict = {}  # (identity, type) -> converted value
        work: list = [(value, ty, where)]
        while work:
            item = work.pop()
            if isinstance(item, _Build):
                count = len(item.children)
                fields = results[len(results) - count :]
                del results[len(results) - count :]
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
            to = method_for(self._to, item[1])
            assert to is not None  # the one type without a handler, TypeParam, is only inside ADT definitions
            converted = to(*item)
            if isinstance(converted, _Build):
                converted.key = key
                work.append(converted)
                work.extend(reversed(converted.children))
            else:
                results.append(converted)
        if self.checks:
            self._checker.check(results[0], self._table.index(ty), str(where))
        return results[0]

    def check_shared_extents(self, values: list) -> None:
        """Where ``checks``: that the entry's converted arguments ``values`` agree on the named
        dimensions their types share (check.h's ``check_shared_extents``)."""
        if self.checks and self._shared:
            fastcall.check_shared_extents(values, self._shared, self._names)

    def from_runtime(self, value: Any, ty: ir.Type) -> Any:
        """A runtime value of static type ``ty`` as returned to Python."""
        handler = method_for(self._from, ty)
        return handler(value, ty) if handler is not None else value

    def needs_from_runtime(self, ty: ir.Type) -> bool:
        """Whether :meth:`from_runtime` changes values of type ``ty`` (tensors, tuples and ADTs
        are returned as they are)."""
        return method_for(self._from, ty) is not None

    def _any_out(self, value, ty: ir.AnyType):
        """A result whose static type is a type variable: a reference cell (the only runtime
        Array a program makes) is returned as a :class:`Ref`, as a reference of known type is;
        other values as they are."""
        if isinstance(value, (tvm.ir.container.Array, ExportedCell)):
            return Ref(value, ir.RefType(ty), self)
        return value

    def _mismatch(self, value, ty, where):
        self._checker.mismatch(self._table.index(ty), str(where), _kind(value))

    # -- to runtime --------------------------------------------------------------------------

    def _tensor_in(self, value, ty: ir.TensorType, where):
        if isinstance(value, tvm.nd.NDArray):
            if value.dtype == ty.dtype or value.device.device_type != tvm.cpu().device_type:
                return value  # check.h names what does not fit
            return self._tensor_in(value.numpy(), ty, where)
        if isinstance(value, (np.ndarray, np.generic)):
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                return self._mismatch(array, ty, where)
            if ty.dtype == "bfloat16" and array.dtype == np.uint16:
                # bfloat16's bits, as TVM hands a bfloat16 tensor to numpy (NDArray.numpy())
                # and ONNX stores it
                bits = tvm.nd.array(np.ascontiguousarray(array), device=tvm.cpu())
                return bits._create_view(tuple(array.shape), "bfloat16")
            if array.dtype != ty.dtype:
                array = _exactly(array, ty.dtype, where)
            return tvm.nd.array(np.asarray(array, order="C"), device=tvm.cpu())
        if isinstance(value, (bool, int, float)):
            # check.h's rule for numbers (scalar_of_dtype), run by the extension
            return self._checker.scalar(value, self._table.index(ty), str(where))
        return self._mismatch(value, ty, where)

    def _tuple_in(self, value, ty: ir.TupleType, where):
        if isinstance(value, ADT):
            return value
        if not isinstance(value, (tuple, list)):
            return self._mismatch(value, ty, where)
        types = ty.fields if len(value) == len(ty.fields) else [ir.AnyType()] * len(value)  # check.h says why
        children = [(f, t, _Path(where, f"[{i}]")) for i, (f, t) in enumerate(zip(value, types))]
        return _Build(functools.partial(fastcall.make_adt, 0), children)

    def _adt_in(self, value, ty: ir.AdtType, where):
        if isinstance(value, ADT):
            return value
        if not isinstance(value, ConstructorValue):
            return self._mismatch(value, ty, where)
        tag, fields = fastcall.constructor_value_parts(value)
        ctor = next((c for c in self.adts[ty.adt].ctors if c.tag == tag), None)
        known = self._field_types(ctor, ty) if ctor is not None and len(ctor.fields) == len(fields) else None
        types = known or (ir.AnyType(),) * len(fields)  # a wrong tag or arity: check.h says why
        name = ctor.name if ctor is not None else str(tag)
        children = [(f, t, _Path(where, f".{name}[{i}]")) for i, (f, t) in enumerate(zip(fields, types))]
        return _Build(functools.partial(fastcall.make_adt, tag), children)

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
            return self._mismatch(value, ty, where)

        def call(*args):
            py_args = [self.from_runtime(a, t) for a, t in zip(args, ty.params)]
            return self.to_runtime(value(*py_args), ty.ret, f"result of {where}")

        return tvm.runtime.convert(call)

    def _ref_in(self, value, ty: ir.RefType, where):
        if isinstance(value, Ref):
            return value.cell
        if isinstance(value, RefValue):
            return _Build(tvm.runtime.convert, [(value.value, ty.value, _Path(where, ".value"))])
        if isinstance(value, tvm.runtime.Object):
            return value  # a runtime cell (check.h checks it)
        return self._mismatch(value, ty, where)

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


def _exactly(array: np.ndarray, dtype: str, where) -> np.ndarray:
    """``array`` as ``dtype`` when every element keeps its value (an int64 array of small
    integers for a uint8 parameter, float16 data for float32), as TVM's executors take them;
    ``TypeError`` naming both dtypes when some element would change."""
    try:
        target = np.dtype(dtype)
    except TypeError:
        return array  # a dtype numpy does not have (bfloat16...): check.h refuses the array
    with np.errstate(all="ignore"):
        converted = array.astype(target)
        back = converted.astype(array.dtype)
    same = np.array_equal(back, array, equal_nan=array.dtype.kind == "f" and target.kind == "f")
    if same and array.size and array.dtype.kind in "iu" and target.kind in "iu":
        # the round trip alone keeps int8 -1 as uint8 255 (the same bits both ways)
        limits = np.iinfo(target)
        same = limits.min <= array.min() and array.max() <= limits.max
    if not same or (array.dtype.kind == "b") != (target.kind == "b"):
        raise ArgumentTypeError(
            f"{where}: expected a tensor of dtype {dtype}, got {_kind(array)} whose values "
            f"{dtype} does not hold exactly"
        )
    return converted


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
            raise ArgumentTypeError(f"the function takes {len(self.type.params)} arguments, got {len(args)}")
        converted = [
            self._converter.to_runtime(a, t, f"argument {i}") for i, (a, t) in enumerate(zip(args, self.type.params))
        ]
        with fastcall.plain_errors():
            result = self.packed(*converted)
        return self._converter.from_runtime(result, self.type.ret)

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

"""The table of types whose values are checked where they enter compiled code (see check.h).

Values from outside -- arguments of the entry, of a closure called from outside, results of a
function passed in -- are checked against a table of type descriptors. One table description,
made here, serves both places that check: the C++ backend prints it as C++ arrays into the
library (``backends/cpp/emit.py``), and the runtime builds the same table in memory for the
Python backend (``relay_aot.runtime.values``), where the same C++ code runs through the
``_fastcall`` extension.

Types are numbered on first use; a recursive ADT instance refers to its own index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from . import nodes as ir


@dataclasses.dataclass(frozen=True)
class CtorRow:
    """One constructor of an ADT row: its tag, its field types (table indices) and name."""

    tag: int
    fields: tuple[int, ...]
    name: str


@dataclasses.dataclass(frozen=True)
class TypeRow:
    """One descriptor (check.h's ``TypeDesc``): ``kind`` is any, tensor, tuple, adt, func or ref;
    ``text`` spells the type for messages; ``fields`` are a tuple's field types or a reference's
    contents (table indices)."""

    kind: str
    text: str
    dtype: str = ""
    shape: tuple[int, ...] = ()
    fields: tuple[int, ...] = ()
    ctors: tuple[CtorRow, ...] = ()


class TypeTable:
    """The descriptors of the types of one program (its ADT definitions are ``adts``)."""

    def __init__(self, adts: Sequence[ir.AdtDef]):
        self.adts = adts
        self.types: list[ir.Type] = []
        self._index: dict[ir.Type, int] = {}
        self._children = {
            ir.TupleType: lambda t: list(t.fields),
            ir.RefType: lambda t: [t.value],
            ir.AdtType: lambda t: [ir.instantiate(f, t.args) for c in self.adts[t.adt].ctors for f in c.fields],
        }

    def index(self, ty: ir.Type) -> int:
        """The index of ``ty``, adding it (and the types inside it) on first use."""
        if ty in self._index:
            return self._index[ty]
        index = len(self.types)
        self._index[ty] = index
        self.types.append(ty)
        for child in self.children(ty):
            self.index(child)
        return index

    def children(self, ty: ir.Type) -> list[ir.Type]:
        """The types directly inside ``ty`` that a check descends into."""
        get = self._children.get(type(ty))
        return get(ty) if get is not None else []

    def rows(self) -> list[TypeRow]:
        """The descriptor of every type numbered so far, in index order."""
        return [self._row(ty) for ty in self.types]

    def _row(self, ty: ir.Type) -> TypeRow:
        text = ir.format_type(ty, self.adts)
        if isinstance(ty, ir.TensorType):
            return TypeRow("tensor", text, dtype=ty.dtype, shape=ty.shape)
        if isinstance(ty, (ir.TupleType, ir.RefType)):
            kind = "tuple" if isinstance(ty, ir.TupleType) else "ref"
            return TypeRow(kind, text, fields=tuple(self.index(c) for c in self.children(ty)))
        if isinstance(ty, ir.AdtType):
            ctors = tuple(
                CtorRow(c.tag, tuple(self.index(ir.instantiate(f, ty.args)) for f in c.fields), c.name)
                for c in self.adts[ty.adt].ctors
            )
            return TypeRow("adt", text, ctors=ctors)
        return TypeRow("func" if isinstance(ty, ir.FuncType) else "any", text)

"""Relay types to control-IR types, and the table of ADT definitions a program uses.

Type variables are erased to :class:`ir.AnyType` (a polymorphic global is compiled once, for
every instantiation), except inside ADT definitions, where they become
:class:`ir.TypeParam` so that field types can be instantiated when values are converted.
Types inference leaves open (``IncompleteType``, e.g. the argument of a polymorphic nullary
constructor that is only stored in a reference) are erased to :class:`ir.AnyType` as well.
A dimension that is not an extent (``?``, a named variable, an expression of them) is
:data:`ir.ANY_DIM`, an extent known at run time. A tensor type with no element type
(``Tensor[(4), ]``) is erased too: no kernel can take it (:func:`untyped_tensor`).
"""

from __future__ import annotations

from collections.abc import Mapping

import tvm
from tvm import relay

from .. import ir
from ..dispatch import method_for
from ..errors import UnsupportedError


def untyped_tensor(ty: relay.Type) -> relay.TensorType | None:
    """A tensor type with no element type inside ``ty`` (through tuples), or None."""
    if isinstance(ty, relay.TensorType):
        return None if str(ty.dtype) else ty
    if isinstance(ty, relay.TupleType):
        return next((t for t in map(untyped_tensor, ty.fields) if t is not None), None)
    return None


class TypeLowering:
    """Lowers Relay types of one module; collects the ADT definitions it meets."""

    def __init__(self, mod: tvm.IRModule):
        self.mod = mod
        self.adts: list[ir.AdtDef] = []
        self._adt_index: dict[str, int] = {}
        self._handlers = {
            relay.TensorType: self._tensor,
            relay.TupleType: self._tuple,
            relay.TypeCall: self._type_call,
            relay.GlobalTypeVar: self._global_type_var,
            relay.FuncType: self._func,
            relay.RefType: self._ref,
            relay.TypeVar: self._type_var,
            relay.IncompleteType: self._incomplete,
        }

    def lower(self, ty: relay.Type, params: Mapping[str, object] | None = None) -> ir.Type:
        """Lower ``ty``; ``params`` maps type-variable names to ADT parameter indices (inside an
        ADT definition) or to the types they are instantiated with (in a specialised function)."""
        handler = method_for(self._handlers, ty)
        if handler is None:
            raise UnsupportedError(f"unsupported Relay type {ty} ({type(ty).__name__})")
        return handler(ty, params)

    def adt_index(self, gtv: relay.GlobalTypeVar) -> int:
        """Index of the ADT named by ``gtv`` in :attr:`adts`, registering it on first use."""
        name = gtv.name_hint
        if name in self._adt_index:
            return self._adt_index[name]
        index = len(self.adts)
        self._adt_index[name] = index
        self.adts.append(ir.AdtDef(name, 0, ()))  # placeholder: constructors may recurse here
        try:
            data = self.mod[self.mod.get_global_type_var(name)]
        except (tvm.error.TVMError, ValueError):
            raise UnsupportedError(f"type {name} is not defined in the module") from None
        params = {tv.name_hint: i for i, tv in enumerate(data.type_vars)}
        ctors = tuple(
            ir.CtorDef(c.name_hint, int(c.tag), tuple(self.lower(t, params) for t in c.inputs))
            for c in data.constructors
        )
        self.adts[index] = ir.AdtDef(name, len(data.type_vars), ctors)
        return index

    def constructor(self, ctor: relay.Constructor) -> tuple[int, int]:
        """(ADT index, constructor index) of a Relay constructor."""
        adt = self.adt_index(ctor.belong_to)
        for i, c in enumerate(self.adts[adt].ctors):
            if c.tag == int(ctor.tag):
                return adt, i
        raise UnsupportedError(f"constructor {ctor.name_hint} is not part of its type's definition")

    # -- one handler per Relay type node -------------------------------------------------

    def _tensor(self, ty, params):
        if not str(ty.dtype):
            # A tensor with no element type (TVM's ONNX importer makes one of an ONNX optional
            # input): no kernel can compute on it, so the program can only pass it along or
            # ignore it. It takes any value, as in TVM's VM; a kernel given one is refused
            # (lower/__init__.py).
            return ir.AnyType()
        # Anything but an extent -- ?, a variable, an expression such as ?*8 that type
        # inference makes of a layout_transform of a ? dimension -- is known only at run time.
        shape = tuple(int(dim) if isinstance(dim, tvm.tir.IntImm) else ir.ANY_DIM for dim in ty.shape)
        return ir.TensorType(shape, str(ty.dtype))

    def _tuple(self, ty, params):
        return ir.TupleType(tuple(self.lower(f, params) for f in ty.fields))

    def _type_call(self, ty, params):
        if not isinstance(ty.func, relay.GlobalTypeVar):
            raise UnsupportedError(f"type application {ty} of a non-global type")
        return ir.AdtType(self.adt_index(ty.func), tuple(self.lower(a, params) for a in ty.args))

    def _global_type_var(self, ty, params):
        return ir.AdtType(self.adt_index(ty), ())

    def _func(self, ty, params):
        return ir.FuncType(tuple(self.lower(a, params) for a in ty.arg_types), self.lower(ty.ret_type, params))

    def _ref(self, ty, params):
        return ir.RefType(self.lower(ty.value, params))

    def _incomplete(self, ty, params):
        # A type inference left open: nothing in the program inspects the value at that type
        # (e.g. the type argument of a nullary constructor that is only stored), so it is erased.
        return ir.AnyType()

    def _type_var(self, ty, params):
        if params is not None and ty.name_hint in params:
            bound = params[ty.name_hint]
            return bound if isinstance(bound, ir.Type) else ir.TypeParam(bound)
        return ir.AnyType()

"""The control IR: a small, typed, statement-based language both backends print.

Relay is lowered into this IR exactly once (``lower.py``); the C++ and Python emitters only
print it. It is deliberately close to A-normal form: every intermediate value is bound to a
:class:`Var` by a :class:`Let`, control flow (:class:`If`, :class:`Match`) is a statement
that assigns a result variable, and every function is closure-converted (a lifted
:class:`Function` with explicit captures). Tensor computation appears only as
:class:`KernelCall` nodes naming an entry of the kernel table (``kernels.py``).

Types are erased as far as the runtime needs: type variables become :class:`AnyType`, while
ADT types keep their arguments so the Python layer can convert and check values.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import tvm

from ..cpu import CpuRequirement

#: Statements, blocks and tail calls are numbered when made: analyses key facts on these
#: numbers, which stay with a node when it is copied (``dataclasses.replace``), unlike ``id()``.
_uids = itertools.count()


def _uid() -> int:
    return next(_uids)


# ----------------------------------------------------------------------------------------
# Types


class Type:
    """Base class of control-IR types."""


#: A ``?`` dimension of a :class:`TensorType` (the same value in type tables and shape checks).
ANY_DIM = -1


@dataclass(frozen=True)
class TensorType(Type):
    """A tensor of shape ``shape`` (``()`` for scalars) and dtype (``"float32"``, ``"bool"``, ...).

    A dimension is an extent, or :data:`ANY_DIM` for Relay's ``?`` (any extent, known at run time).
    """

    shape: tuple[int, ...]
    dtype: str

    @property
    def is_static(self) -> bool:
        """Whether every dimension is known at compile time."""
        return ANY_DIM not in self.shape


@dataclass(frozen=True)
class TupleType(Type):
    """A Relay tuple; at run time an ADT with tag 0."""

    fields: tuple[Type, ...]


@dataclass(frozen=True)
class AdtType(Type):
    """An instance of an algebraic data type, identified by its index in ``Program.adts``."""

    adt: int
    args: tuple[Type, ...]


@dataclass(frozen=True)
class FuncType(Type):
    """A function (closure) value."""

    params: tuple[Type, ...]
    ret: Type


@dataclass(frozen=True)
class RefType(Type):
    """A mutable reference cell."""

    value: Type


@dataclass(frozen=True)
class AnyType(Type):
    """A value whose static type is a (erased) type variable."""


@dataclass(frozen=True)
class TypeParam(Type):
    """The ``index``-th type parameter of an ADT definition (only inside :class:`AdtDef`)."""

    index: int


@dataclass(frozen=True)
class Axis:
    """One axis of a tensor inside an entry parameter: the parameter's index, the tuple fields
    leading from it to the tensor (``()`` for a tensor parameter), and the axis."""

    param: int
    path: tuple[int, ...]
    axis: int


@dataclass(frozen=True)
class SharedExtent:
    """A named symbolic dimension (a ``tir.Var`` such as ``n``) on several axes of ``@main``'s
    parameters: each is a ``?`` in the types, and the entry checks that they agree."""

    name: str
    axes: tuple[Axis, ...]


@dataclass(frozen=True)
class CtorDef:
    """One constructor of an ADT: its Relay name, runtime tag and field types."""

    name: str
    tag: int
    fields: tuple[Type, ...]


@dataclass(frozen=True)
class AdtDef:
    """An algebraic data type definition (field types may mention :class:`TypeParam`)."""

    name: str
    num_params: int
    ctors: tuple[CtorDef, ...]


# ----------------------------------------------------------------------------------------
# Variables and right-hand sides


@dataclass(eq=False)
class Var:
    """A local variable. ``id`` is unique per program; ``hint`` is the Relay name, if any."""

    id: int
    type: Type
    hint: str = ""


class Rhs:
    """Base class of the computations a :class:`Let` binds."""


class BitsArray(np.ndarray):
    """A constant of a datatype numpy has no type for -- ``bfloat16`` (which TVM gives numpy as
    ``uint16``), one registered with ``tvm.target.datatype`` (``custom[name]bits``): its storage
    bits as unsigned integers, and the TVM dtype."""

    tvm_dtype: str = ""

    def __array_finalize__(self, obj) -> None:
        self.tvm_dtype = getattr(obj, "tvm_dtype", "")


def constant_array(data) -> np.ndarray:
    """A constant's value (a ``tvm.nd.NDArray``) as ``Program.constants`` holds it: a numpy array
    of its dtype, or a :class:`BitsArray`."""
    dtype = str(data.dtype)
    if dtype.startswith("custom["):
        array = data._create_view(tuple(data.shape), f"uint{tvm.runtime.DataType(dtype).bits}").numpy()
    else:
        array = data.numpy()
        if str(array.dtype) == dtype:
            return array
    array = array.view(BitsArray)
    array.tvm_dtype = dtype
    return array


def constant_dtype(array: np.ndarray) -> str:
    """The TVM dtype of a constant of ``Program.constants``."""
    return getattr(array, "tvm_dtype", "") or str(array.dtype)


def constant_ndarray(array: np.ndarray) -> tvm.nd.NDArray:
    """A constant of ``Program.constants`` as a ``tvm.nd.NDArray`` on the CPU."""
    value = tvm.nd.array(np.asarray(array), device=tvm.cpu())
    dtype = constant_dtype(array)
    return value if dtype == str(value.dtype) else value._create_view(tuple(array.shape), dtype)


@dataclass(eq=False)
class Constant(Rhs):
    """Constant tensor number ``index`` of ``Program.constants``.

    ``fresh``: the value may reach a caller (returned, or stored where a caller finds it), so
    each evaluation is a new copy -- a caller writing into it must not change the constant
    (see ``escapes.py``). Otherwise the shared tensor is used. ``zeros``: every element is zero,
    so a fresh copy is a zero-filled tensor (nothing to read; Relay's gradients start every
    accumulator from one).
    """

    index: int
    fresh: bool = False
    zeros: bool = False


@dataclass(eq=False)
class KernelCall(Rhs):
    """Run kernel ``kernel`` of ``Program.kernels`` on ``args`` (tensors or tensor tuples).

    ``may_alias``: the result never reaches a caller (``escapes.py``), so a kernel that copies
    its input unchanged (a ``broadcast_to`` to the input's own shape) may return the input.
    """

    kernel: int
    args: list[Var]
    may_alias: bool = False


@dataclass(eq=False)
class MakeTuple(Rhs):
    """Build a tuple from ``fields``."""

    fields: list[Var]


@dataclass(eq=False)
class Proj(Rhs):
    """Field ``index`` of the tuple ``value``."""

    value: Var
    index: int


@dataclass(eq=False)
class MakeAdt(Rhs):
    """Apply constructor ``ctor`` of ADT ``adt`` to ``fields``."""

    adt: int
    ctor: int
    fields: list[Var]


@dataclass(eq=False)
class MakeClosure(Rhs):
    """Close the lifted function ``func`` over ``captures`` (values for its ``captures``)."""

    func: str
    captures: list[Var]


@dataclass(eq=False)
class CallGlobal(Rhs):
    """Call the global function ``func`` directly."""

    func: str
    args: list[Var]


@dataclass(eq=False)
class CallClosure(Rhs):
    """Apply the function value ``closure`` to ``args``."""

    closure: Var
    args: list[Var]


@dataclass(eq=False)
class CallKnown(Rhs):
    """Apply ``closure``, statically known to be a closure of lifted function ``func``.

    Emitters may call ``func`` directly with the closure as its environment (no boxing of
    arguments, no indirect call); calling ``closure`` like :class:`CallClosure` is also correct.
    """

    func: str
    closure: Var
    args: list[Var]


@dataclass(eq=False)
class RefNew(Rhs):
    """``ref(value)``"""

    value: Var


@dataclass(eq=False)
class RefRead(Rhs):
    """``!ref``"""

    ref: Var


@dataclass(eq=False)
class RefWrite(Rhs):
    """``ref := value``; evaluates to the unit tuple."""

    ref: Var
    value: Var


# ----------------------------------------------------------------------------------------
# Statements


class Stmt:
    """Base class of statements."""


@dataclass(eq=False)
class Let(Stmt):
    """Bind ``var`` to the value of ``rhs``."""

    var: Var
    rhs: Rhs
    note: str = ""  # the Relay construct this came from, for comments
    uid: int = field(default_factory=_uid, compare=False, repr=False)


@dataclass(eq=False)
class TailCall:
    """A self tail call: rebind the function's parameters to ``args`` and start over."""

    args: list[Var]
    uid: int = field(default_factory=_uid, compare=False, repr=False)


@dataclass(eq=False)
class Block:
    """Statements followed by the block's value (a variable, or a self tail call)."""

    stmts: list[Statement]
    result: Var | TailCall
    uid: int = field(default_factory=_uid, compare=False, repr=False)


@dataclass(eq=False)
class If(Stmt):
    """``result = cond ? then : else_`` where ``cond`` is a 0-d bool tensor."""

    cond: Var
    then: Block
    else_: Block
    result: Var


@dataclass(frozen=True)
class TagTest:
    """The ADT at ``path`` (field indices from the scrutinee) has constructor tag ``tag``."""

    path: tuple[int, ...]
    tag: int


@dataclass(eq=False)
class Bind:
    """Bind ``var`` to the value at ``path`` within the scrutinee."""

    var: Var
    path: tuple[int, ...]


@dataclass(eq=False)
class Clause:
    """One match clause: taken when all ``tests`` hold (checked in order, outermost first)."""

    tests: list[TagTest]
    binds: list[Bind]
    body: Block
    note: str = ""  # the pattern, for comments


@dataclass(eq=False)
class Match(Stmt):
    """Try ``clauses`` in order on ``scrutinee``; raise a match error naming ``where`` if none fits."""

    scrutinee: Var
    clauses: list[Clause]
    result: Var
    where: str


#: Every kind of statement: what a block holds (a closed set, so a type checker follows an
#: ``isinstance`` test of one kind to the others).
Statement = Let | If | Match


# ----------------------------------------------------------------------------------------
# Functions and programs


@dataclass(eq=False)
class Function:
    """A global function, or a lifted closure body.

    ``captures`` are the variables a closure's body reads from its environment (bound in order
    from the values of :class:`MakeClosure`); ``self_var`` names the closure itself inside a
    recursive let-bound function. ``has_tail_call`` tells emitters to compile the body as a
    loop.
    """

    id: str
    hint: str
    params: list[Var]
    ret: Type
    body: Block
    is_closure: bool = False
    captures: list[Var] = field(default_factory=list)
    self_var: Var | None = None
    has_tail_call: bool = False
    signature: str = ""  # Relay signature text, for comments


@dataclass(frozen=True)
class ScalarParam:
    """Parameter ``index`` of a scalar kernel."""

    index: int
    dtype: str


@dataclass(frozen=True)
class ScalarConst:
    """A constant in a scalar kernel."""

    value: bool | int | float
    dtype: str


@dataclass(frozen=True)
class ScalarOp:
    """An elementwise operator (by Relay name, e.g. ``"add"``) applied to scalar operands."""

    op: str
    args: tuple
    dtype: str


ScalarExpr = ScalarParam | ScalarConst | ScalarOp


#: CopyForm kinds: a concatenation that lays its pieces end to end; a broadcast that may copy;
#: a reshape, whose output is its input's bytes as they are.
CONCAT_FLAT = "concat_flat"
SAME_SHAPE_COPY = "same_shape_copy"
VIEW = "view"


@dataclass(frozen=True)
class CopyForm:
    """A kernel that only moves data (``kernels/copies.py``): ``kind`` and, per piece of the
    output, the index of the kernel parameter it comes from."""

    kind: str
    params: tuple[int, ...]


@dataclass(frozen=True)
class Kernel:
    """A compiled fused primitive function.

    ``params`` are its Relay parameter types (tensors, or tuples of tensors); ``inputs`` and
    ``outputs`` are the flattened tensor types of its parameters and results; ``result`` is the
    Relay result type (a tensor, or a tuple of tensors). ``scalar`` is set when every parameter
    and the result are 0-d and every operator is elementwise arithmetic, comparison, logic or
    cast: emitters may then compute it natively instead of calling the kernel.

    ``shape_func`` is set when an input or output has a ``?`` dimension: the generated code calls
    it first, allocates the outputs at the shapes it computed, then calls the kernel (as TVM's VM
    does with ``invoke_tvm_op`` after ManifestAlloc).
    """

    index: int
    symbol: str
    params: tuple[Type, ...]
    inputs: tuple[TensorType, ...]
    outputs: tuple[TensorType, ...]
    result: Type
    ops: tuple[str, ...]
    scalar: ScalarExpr | None = None  # the same computation on 0-d values, if expressible
    #: For a kernel with ``?`` dimensions: the symbol of its shape function, which computes the
    #: outputs' shapes (and checks the inputs' shapes agree) before they are allocated ...
    shape_func: str | None = None
    #: ... and, per Relay parameter, what it reads of it (bits of kernels.shape_funcs.NEED_DATA,
    #: NEED_SHAPE).
    shape_states: tuple[int, ...] = ()
    #: For a kernel that only moves data: how (C++ moves it with memcpy, or has it written in place).
    copy: CopyForm | None = None


@dataclass(frozen=True)
class Param:
    """A parameter of the program's entry function, as seen by callers."""

    name: str
    type: Type


@dataclass(eq=False)
class Program:
    """A whole lowered program: functions, kernels, constants and ADT definitions."""

    functions: list[Function]
    main: str
    params: list[Param]
    ret: Type
    kernels: list[Kernel]
    constants: list  # numpy arrays
    adts: list[AdtDef]
    cpu: CpuRequirement | None = None  #: what the kernels need of the CPU (None: nothing recorded)
    #: the named symbolic dimensions the entry's parameters share (checked at the entry)
    shared_extents: tuple[SharedExtent, ...] = ()
    #: the model's names of the result's tensors, depth first (``@main``'s ``output_tensor_names``,
    #: which TVM's importers set): the C API's output fields are named after them
    output_names: tuple[str, ...] = ()

    def function(self, func_id: str) -> Function:
        """The function with id ``func_id``."""
        for func in self.functions:
            if func.id == func_id:
                return func
        raise KeyError(func_id)


_FORMATTERS = {
    TensorType: lambda t, adts: (
        "Tensor[(" + ", ".join("?" if d == ANY_DIM else str(d) for d in t.shape) + f"), {t.dtype}]"
    ),
    TupleType: lambda t, adts: "(" + ", ".join(format_type(f, adts) for f in t.fields) + ")",
    AdtType: lambda t, adts: (
        adts[t.adt].name + (f"[{', '.join(format_type(a, adts) for a in t.args)}]" if t.args else "")
    ),
    FuncType: lambda t, adts: (
        "fn(" + ", ".join(format_type(p, adts) for p in t.params) + ") -> " + format_type(t.ret, adts)
    ),
    RefType: lambda t, adts: f"Ref[{format_type(t.value, adts)}]",
    AnyType: lambda t, adts: "?",
    TypeParam: lambda t, adts: f"'{t.index}",
}


def format_type(ty: Type, adts: Sequence[AdtDef]) -> str:
    """A Relay-like spelling of ``ty`` (for comments and error messages)."""
    return _FORMATTERS[type(ty)](ty, adts)


def walk(block: Block) -> Iterator[Statement]:
    """Every statement of ``block``, including those nested in ``If`` and ``Match`` (pre-order)."""
    pending = [block]
    while pending:
        current = pending.pop()
        for stmt in current.stmts:
            yield stmt
            if isinstance(stmt, If):
                pending += [stmt.else_, stmt.then]
            elif isinstance(stmt, Match):
                pending += [c.body for c in reversed(stmt.clauses)]


def is_concrete(ty: Type) -> bool:
    """Whether ``ty`` mentions no erased type variable (``AnyType``) anywhere."""
    return _CONCRETE[type(ty)](ty)


_CONCRETE = {
    TensorType: lambda t: True,
    TupleType: lambda t: all(is_concrete(f) for f in t.fields),
    AdtType: lambda t: all(is_concrete(a) for a in t.args),
    FuncType: lambda t: all(is_concrete(p) for p in t.params) and is_concrete(t.ret),
    RefType: lambda t: is_concrete(t.value),
    AnyType: lambda t: False,
    TypeParam: lambda t: False,
}


def instantiate(ty: Type, args: tuple) -> Type:
    """Substitute ADT type parameters in ``ty`` by ``args`` (missing ones become AnyType)."""
    return _INSTANTIATE[type(ty)](ty, args)


_INSTANTIATE = {
    TypeParam: lambda t, args: args[t.index] if t.index < len(args) else AnyType(),
    TupleType: lambda t, args: TupleType(tuple(instantiate(f, args) for f in t.fields)),
    AdtType: lambda t, args: AdtType(t.adt, tuple(instantiate(a, args) for a in t.args)),
    FuncType: lambda t, args: FuncType(tuple(instantiate(p, args) for p in t.params), instantiate(t.ret, args)),
    RefType: lambda t, args: RefType(instantiate(t.value, args)),
    TensorType: lambda t, args: t,
    AnyType: lambda t, args: t,
}


#: The method of a backend printer that prints each kind of statement, and of right-hand side.
#: Both emitters bind these names (:func:`bind_handlers`), so they cover the same nodes.
STATEMENT_HANDLERS = {Let: "_let", If: "_if", Match: "_match"}
RHS_HANDLERS = {
    Constant: "_constant",
    KernelCall: "_kernel_call",
    MakeTuple: "_make_tuple",
    Proj: "_proj",
    MakeAdt: "_make_adt",
    MakeClosure: "_make_closure",
    CallGlobal: "_call_global",
    CallClosure: "_call_closure",
    CallKnown: "_call_known",
    RefNew: "_ref_new",
    RefRead: "_ref_read",
    RefWrite: "_ref_write",
}


def bind_handlers(printer: object, table: dict) -> dict:
    """``table`` (node class -> method name) with each name bound to ``printer``'s method."""
    return {cls: getattr(printer, name) for cls, name in table.items()}

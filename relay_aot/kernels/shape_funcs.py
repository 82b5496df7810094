"""Shape functions of primitive functions with ``?`` dimensions, the way TVM's VM makes them.

A kernel whose result has a ``?`` dimension cannot be given an output buffer until its output
shape is known. TVM's VM compiler gets that shape from a *shape function*: a small TE program,
derived from the fused primitive function by composing the ``FShapeFunc`` registered for each
operator, that reads the shapes (or, for data-dependent operators such as ``arange`` or
``dyn.reshape``, the values) of the kernel's inputs and writes the shape of each output. This
module is a port of TVM's ``MakeShapeFunc`` (``src/relay/backend/te_compiler_cache.cc``), which
TVM 0.19 does not expose to Python.

Calling convention of the PrimFunc (per flattened parameter tensor, in order): for a parameter
whose data the shape function reads (:attr:`ShapeFunc.states` bit 1), the tensor itself; for one
whose shape it reads (bit 2), its shape as an ``int64[ndim]`` tensor (0-d ``int64`` for a 0-d
tensor); then one ``int64[rank]`` output per flattened result tensor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

import tvm
from tvm import relay, te
from tvm.relay.op._tensor import elemwise_shape_func
from tvm.te.hybrid import script

from .divisions import guard_divisions
from .shape_rules import CHECKS, REPLACED, constant_tensor

#: Bits of a parameter's state, as TVM's ``ShapeFuncParamState``.
NEED_DATA = 1
NEED_SHAPE = 2


_Arg = TypeVar("_Arg")


def shape_function_args(
    states: Sequence[int], per_param: Sequence[Sequence[_Arg]], shape_of: Callable[[_Arg], _Arg]
) -> list[_Arg]:
    """A shape function's input arguments, in either backend's spelling: per kernel parameter
    (its flattened tensors ``per_param[i]``), the tensors themselves where it reads their data
    and ``shape_of(tensor)`` where it reads their shapes (both, in that order, for both). The
    standalone emitter counts them over the tensors' types."""
    args: list[_Arg] = []
    for flat, state in zip(per_param, states):
        if state & NEED_DATA:
            args.extend(flat)
        if state & NEED_SHAPE:
            args.extend(shape_of(a) for a in flat)
    return args


@dataclasses.dataclass(frozen=True)
class ShapeFunc:
    """A lowered shape function: its PrimFunc and what it reads of each parameter."""

    prim_func: tvm.tir.PrimFunc
    #: Per Relay parameter: NEED_DATA | NEED_SHAPE bits (0: not read).
    states: tuple[int, ...]


def _flat_tensor_types(ty: relay.Type) -> list[relay.TensorType]:
    if isinstance(ty, relay.TupleType):
        return [t for f in ty.fields for t in _flat_tensor_types(f)]
    return [ty]


def _te_shape(shape) -> list:
    """A Relay shape for TE: constants as int32, ``?`` as a size variable (as TVM's GetShape)."""
    out = []
    for dim in shape:
        if isinstance(dim, tvm.tir.IntImm):
            out.append(tvm.tir.IntImm("int32", dim.value))
        elif isinstance(dim, tvm.tir.Any):
            out.append(tvm.tir.SizeVar("any_dim", "int32"))
        else:
            out.append(dim)
    return out


class _Builder:
    """TVM's MakeShapeFunc: composes per-operator shape functions over a primitive function."""

    def __init__(self, func: relay.Function):
        self.func = func
        self.states: dict[relay.Var, int] = {}
        self.data: dict[relay.Var, list[te.Tensor]] = {}
        self.shapes: dict[relay.Var, list[te.Tensor]] = {}
        self.bound: dict[relay.Var, relay.Expr] = {}  # parameters of nested functions -> arguments
        self.memo: dict = {}
        self.dependent: list[bool] = []
        self.scalars: list[te.Tensor] = []
        #: every operator's shapes, as computed (and checked): see build
        self.computed: list[te.Tensor] = []
        for param in func.params:
            self.states[param] = 0
            data, shapes = [], []
            for t in _flat_tensor_types(param.checked_type):
                shape = _te_shape(t.shape)
                data.append(te.placeholder(shape, t.dtype, "data_" + param.name_hint))
                shapes.append(te.placeholder([len(shape)] if shape else [], "int64", "shape_" + param.name_hint))
            self.data[param], self.shapes[param] = data, shapes

    def visit(self, expr: relay.Expr) -> list[te.Tensor]:
        if isinstance(expr, relay.Var):  # not memoized: a parameter's data or shape, as asked
            return self._var(expr)
        key = expr
        if key in self.memo:
            return self.memo[key]
        if isinstance(expr, relay.Constant):
            result = self._constant(expr)
        elif isinstance(expr, relay.Call):
            result = self._call(expr)
        elif isinstance(expr, relay.Let):
            self.memo[expr.var] = self.visit(expr.value)
            result = self.visit(expr.body)
        elif isinstance(expr, relay.Tuple):
            result = [self.visit(f)[0] for f in expr.fields]
        elif isinstance(expr, relay.TupleGetItem):
            result = [self.visit(expr.tuple_value)[expr.index]]
        else:
            raise ValueError(f"a shape function cannot be derived through a {type(expr).__name__}")
        self.memo[key] = result
        return result

    def _var(self, var: relay.Var) -> list[te.Tensor]:
        if var in self.bound:
            return self.visit(self.bound[var])
        if var in self.memo:  # a let-bound variable
            return self.memo[var]
        if self.dependent and self.dependent[-1]:
            self.states[var] |= NEED_DATA
            return self.data[var]
        self.states[var] |= NEED_SHAPE
        return self.shapes[var]

    def _constant(self, const: relay.Constant) -> list[te.Tensor]:
        dependent = bool(self.dependent and self.dependent[-1])
        value = const.data.numpy()
        if value.ndim > 0:
            if dependent:
                # TVM reads only scalar constants' data; a data-dependent operator reading a
                # constant tensor (e.g. dyn.reshape to a constant shape) gets its values.
                tensor = constant_tensor(value.flat, str(value.dtype), "data_const", value.shape)
            else:
                dims = value.shape
                tensor = constant_tensor(dims, "int64", "shape_const")
        elif dependent:
            tensor = te.compute((), lambda: tvm.tir.const(value.item(), str(value.dtype)), "data_const")
        else:
            tensor = te.compute((), lambda: tvm.tir.const(0, "int64"), "shape_const")
        self.scalars.append(tensor)
        return [tensor]

    def _call(self, call: relay.Call) -> list[te.Tensor]:
        if isinstance(call.op, relay.Function):
            for param, arg in zip(call.op.params, call.args):
                self.bound[param] = arg
            return self.visit(call.op.body)
        op = call.op
        if not isinstance(op, tvm.ir.Op):
            raise ValueError(f"a primitive function calls {type(op).__name__}, not an operator")
        if self.dependent and self.dependent[-1]:
            raise ValueError(
                f"{op.name}'s shape is needed as data by a data-dependent operator; "
                "TVM's fusion should not have put them in one kernel"
            )
        shape_func = REPLACED.get(op.name) or op.get_attr("FShapeFunc")
        spec = op.get_attr("TShapeDataDependent")
        if shape_func is None and _is_unary_elementwise(op, call):
            # TVM registers no shape function for some elementwise operators (abs, sin, erf,
            # isnan, ...): their output has their input's shape.
            shape_func, spec = elemwise_shape_func, [False]
        if shape_func is None or spec is None:
            raise ValueError(f"operator {op.name} has no shape function in TVM")
        spec = [bool(x) for x in spec]
        if len(spec) == 1:
            spec = spec * len(call.args)
        inputs: list[te.Tensor] = []
        for arg, dependent in zip(call.args, spec):
            self.dependent.append(dependent)
            inputs.extend(self.visit(arg))
            self.dependent.pop()
        out_ndims = [tvm.tir.IntImm("int32", len(t.shape)) for t in _flat_tensor_types(call.checked_type)]
        outputs = list(shape_func(call.attrs, inputs, out_ndims))
        check = CHECKS.get(op.name)
        outputs = check(call.attrs, inputs, outputs) if check is not None else outputs
        self.computed.extend(outputs)
        return outputs

    def build(self, name: str) -> ShapeFunc:
        outputs = self.visit(self.func.body)
        # TE computes only the stages the outputs read: an operator's shape function (and its
        # checks) whose result no later shape needs -- an add's broadcast under a full sum,
        # a squeeze to a scalar, whose shape has no element -- would never run, and the kernel
        # would read past a mismatched input (sum(add(x, y)) of 3 and 4 elements returned 7).
        # So the first output is copied through a stage that takes all of them as inputs.
        kept = {t.op for t in outputs}
        for computed in self.computed if len(outputs[0].shape) == 1 else ():
            # (a 0-d shape is a constant some of TVM's shape functions make: nothing to check)
            if computed.op not in kept and len(computed.shape) == 1:
                outputs[0] = _after(outputs[0], computed)
                kept.add(computed.op)
        inputs: list[te.Tensor] = []
        states = []
        for param in self.func.params:
            state = self.states[param]
            states.append(state)
            if state & NEED_DATA:
                inputs.extend(self.data[param])
            if state & NEED_SHAPE:
                inputs.extend(self.shapes[param])
        schedule = te.create_schedule([t.op for t in outputs])
        te.schedule.AutoInlineInjective(schedule)
        for scalar in self.scalars:
            try:  # TVM inlines the constants it made, where the schedule has them
                schedule[scalar.op].compute_inline()
            except (tvm.TVMError, ValueError):
                pass
        with tvm.transform.PassContext():
            lowered = tvm.lower(schedule, inputs + outputs, name=name)
        prim = lowered["main"] if "main" in [g.name_hint for g in lowered.get_global_vars()] else lowered[name]
        return ShapeFunc(guard_divisions(prim, everywhere=True), tuple(states))


@script
def _after(shape, computed):
    out = output_tensor((shape.shape[0],), "int64")
    for i in const_range(shape.shape[0]):
        out[i] = shape[i]
    # read, so that hybrid script makes it an input of this stage (an unread argument is none);
    # a shape without elements (a scalar's) cannot be read, so the read is behind a test that
    # is false when it runs but not known to be when compiling
    touched = allocate((1,), "int64")
    touched[0] = int64(0)
    if touched[0] < int64(0):
        touched[0] = computed[0]
    return out


def _is_unary_elementwise(op: tvm.ir.Op, call: relay.Call) -> bool:
    return (
        op.get_attr("TOpPattern") == 0
        and len(call.args) == 1
        and isinstance(call.checked_type, relay.TensorType)
        and len(call.checked_type.shape) == len(call.args[0].checked_type.shape)
    )


def make_shape_func(func: relay.Function, name: str) -> ShapeFunc:
    """The shape function of primitive function ``func`` (type-checked), lowered to a PrimFunc
    called ``name``. Raises ValueError when TVM has no shape function for one of its operators."""
    return _Builder(func).build(name)

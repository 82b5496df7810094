"""Stage 2b: recognise kernels that are plain scalar arithmetic.

Control-heavy programs spend most of their kernel calls on 0-d tensors: loop counters,
comparisons, accumulators (``fib`` makes 54,726 kernel calls for fib(20), each on 0-d int32).
A primitive function whose parameters and result are all 0-d, and whose body uses only the
operators of ``scalar_ops.py`` (on the dtypes each accepts), is translated to an
:data:`ir.ScalarExpr`; both backends print it as native arithmetic on unboxed values, with
TVM's semantics, from the spellings in that table. Everything else stays a TVM kernel. The differential tests run programs with and
without this fast path (``RELAY_AOT_SCALAR_FAST_PATH=0``) against TVM's interpreter.
"""

from __future__ import annotations

from typing import TypeGuard

import numpy as np
import tvm
from tvm import relay

from .. import ir
from ..dispatch import method_for
from .scalar_ops import SCALAR_OPS, accepts

#: Dtypes held unboxed in generated code (and the C++ types that hold them).
NATIVE_DTYPES = {
    "bool": "bool",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "float32": "float",
    "float64": "double",
}


def is_native_scalar(ty: ir.Type) -> TypeGuard[ir.TensorType]:
    """Whether values of ``ty`` are held unboxed (0-d tensors of a native dtype)."""
    return isinstance(ty, ir.TensorType) and ty.shape == () and ty.dtype in NATIVE_DTYPES


class _Unsupported(Exception):
    pass


class _Translator:
    """Relay body of a primitive function -> ScalarExpr (raises _Unsupported otherwise)."""

    def __init__(self, params: list[relay.Var]):
        self.params = {p: i for i, p in enumerate(params)}
        self._handlers = {relay.Var: self._var, relay.Constant: self._constant, relay.Call: self._call}

    def expr(self, node: relay.Expr) -> ir.ScalarExpr:
        handler = method_for(self._handlers, node)
        if handler is None:
            raise _Unsupported(type(node).__name__)
        return handler(node)

    @staticmethod
    def _dtype(node: relay.Expr) -> str:
        ty = node.checked_type
        if not isinstance(ty, relay.TensorType) or len(ty.shape) != 0 or str(ty.dtype) not in NATIVE_DTYPES:
            raise _Unsupported(str(ty))
        return str(ty.dtype)

    def _var(self, node):
        if node not in self.params:
            raise _Unsupported("free variable")
        return ir.ScalarParam(self.params[node], self._dtype(node))

    def _constant(self, node):
        dtype = self._dtype(node)
        value = node.data.numpy().item()
        return ir.ScalarConst(value, dtype)

    def _call(self, node):
        if not isinstance(node.op, tvm.ir.Op):
            raise _Unsupported("call of a function")
        name = node.op.name
        spec = SCALAR_OPS.get(name)
        if spec is None or spec.arity != len(node.args):
            raise _Unsupported(name)
        args = tuple(self.expr(a) for a in node.args)
        dtype = self._dtype(node)
        if not accepts(spec, [a.dtype for a in args], dtype):
            raise _Unsupported(f"{name} on {', '.join(a.dtype for a in args)}")
        return ir.ScalarOp(name, args, dtype)


def scalar_operand_dtype(expr: ir.ScalarOp) -> str:
    """The dtype of the operands of ``expr`` (for ``where``, of the values it selects)."""
    return expr.args[-1].dtype if expr.op == "where" else expr.args[0].dtype


def scalar_kernel(func: relay.Function) -> ir.ScalarExpr | None:
    """The scalar translation of primitive function ``func``, or None if it has none.

    (``Config.scalar_fast_path``, ``RELAY_AOT_SCALAR_FAST_PATH=0``, turns the fast path off.)
    """
    try:
        for p in func.params:
            _Translator._dtype(p)
        return _Translator(list(func.params)).expr(func.body)
    except _Unsupported:
        return None


def hex_literal(value, dtype: str) -> str:
    """An exact C++ literal for a float constant of ``dtype`` (hexadecimal floating point)."""
    number = float(np.asarray(value, dtype=dtype))
    if np.isnan(number):
        return f"std::numeric_limits<{NATIVE_DTYPES[dtype]}>::quiet_NaN()"
    if np.isinf(number):
        sign = "-" if number < 0 else ""
        return f"{sign}std::numeric_limits<{NATIVE_DTYPES[dtype]}>::infinity()"
    return f"{NATIVE_DTYPES[dtype]}({number.hex()})"

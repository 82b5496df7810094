"""Storage planned at compile time, for the programs that are one straight line of kernel calls.

A program whose ``@main`` is the only function and binds only constants and kernel calls of
static shape (an MLP, a convolutional network: no ``if``, ``match``, tuples, closures or calls)
allocates the same buffers in the same order on every run. Its tensors then get offsets in one
static buffer, chosen here: a tensor's bytes are reused once its last reader has run (first fit,
in the order the tensors are made), and the tensor ``@main`` returns is written by its kernel
straight into the caller's output buffer. That is what TVM's AOT executor does for a dataflow
graph, and it needs no arena (only kernels' scratch memory, sized from their TIR).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from ... import ir
from ...kernels.scalars import is_native_scalar


@dataclasses.dataclass
class StoragePlan:
    """Offsets of the planned tensors in ``storage``, ``size`` bytes in all."""

    offsets: dict[int, int]  #: variable id -> byte offset
    size: int
    direct_output: bool  #: @main's result is written by its kernel into the caller's buffer
    result_id: Optional[int]
    storage: str = "planned_storage"
    output_pointer: str = "output_buffer"

    def expr(self, v: ir.Var, name: str) -> str:
        """Where kernel output ``name`` (the value of ``v``) lives."""
        if self.direct_output and v.id == self.result_id:
            return self.output_pointer
        return f"static_cast<Value>({self.storage} + {self.offsets[v.id]})"


def _aligned(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def plan_storage(program: ir.Program, api, alignment: int, nbytes: Callable[[ir.TensorType], int]) -> Optional[StoragePlan]:
    """The plan of ``program``, or None when it is not one straight line of tensor kernels."""
    if len(program.functions) != 1:
        return None
    main = program.function(program.main)
    stmts = main.body.stmts
    if not isinstance(main.body.result, ir.Var):
        return None
    for stmt in stmts:
        if not isinstance(stmt, ir.Let):
            return None
        rhs = stmt.rhs
        if isinstance(rhs, ir.Constant):
            continue
        if not isinstance(rhs, ir.KernelCall):
            return None
        kernel = program.kernels[rhs.kernel]
        scalar = kernel.scalar is not None and is_native_scalar(stmt.var.type)
        if not scalar and not isinstance(kernel.result, ir.TensorType):
            return None  # a tuple of results would need a cell
    result = main.body.result
    last_use: dict[int, int] = {}
    for index, stmt in enumerate(stmts):
        if isinstance(stmt.rhs, ir.KernelCall):
            for a in stmt.rhs.args:
                last_use[a.id] = index
    last_use[result.id] = len(stmts)
    direct = (isinstance(result.type, ir.TensorType) and not is_native_scalar(result.type)
              and any(isinstance(s.rhs, ir.KernelCall) and s.var is result for s in stmts)
              and len(api.outputs) == 1)
    offsets: dict[int, int] = {}
    live: list[tuple[int, int, int]] = []  # (offset, size, last use)
    size = 0
    for index, stmt in enumerate(stmts):
        v = stmt.var
        if not isinstance(stmt.rhs, ir.KernelCall) or is_native_scalar(v.type) or (direct and v is result):
            continue
        live = [slot for slot in live if slot[2] >= index]  # readers of a buffer run before it is reused
        need = _aligned(nbytes(v.type), alignment)
        offset = 0
        for start, length, _ in sorted(live):
            if offset + need <= start:
                break
            offset = max(offset, start + length)
        offsets[v.id] = offset
        live.append((offset, need, last_use.get(v.id, index)))
        size = max(size, offset + need)
    return StoragePlan(offsets, size, direct, result.id)

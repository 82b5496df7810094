"""Storage planned at compile time, for the programs that are one straight line of kernel calls.

A program whose ``@main`` is the only function and binds only constants and kernel calls of
static shape (an MLP, a convolutional network: no ``if``, ``match``, tuples, closures or calls)
allocates the same buffers in the same order on every run. Its tensors then get offsets in one
static buffer, chosen here: a tensor's bytes are reused once its last reader has run (first fit,
in the order the tensors are made), and the tensor ``@main`` returns is written by its kernel
straight into the caller's output buffer. That is what TVM's AOT executor does for a dataflow
graph. The kernels' scratch buffers (``kernels/scratch.py``) are planned the same way, live only
while their kernel runs, so the program needs no arena at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from ... import ir
from ...kernels.scalars import is_native_scalar


@dataclasses.dataclass
class StoragePlan:
    """Offsets of the planned tensors in ``storage``, ``size`` bytes in all."""

    offsets: dict[int, int]  #: variable id -> byte offset
    size: int
    scratch: dict[int, list[int]]  #: variable id -> offsets of its kernel's scratch buffers
    direct_output: bool  #: @main's result is written by its kernel into the caller's buffer
    result_id: int | None
    storage: str = "planned_storage"
    output_pointer: str = "output_buffer"

    def expr(self, v: ir.Var, name: str) -> str:
        """Where kernel output ``name`` (the value of ``v``) lives."""
        if self.direct_output and v.id == self.result_id:
            return self.output_pointer
        return self.at(self.offsets[v.id])

    def at(self, offset: int) -> str:
        """The planned storage at ``offset``."""
        return f"static_cast<Value>({self.storage} + {offset})"


def _aligned(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def straight_line(program: ir.Program) -> bool:
    """Whether ``program`` is one straight line of tensor kernels (its storage can be planned)."""
    return _straight_line(program) is not None


def _straight_line(program: ir.Program) -> tuple[list[ir.Let], ir.Var] | None:
    """The statements and result of ``program``'s main if it is one straight line of tensor
    kernels, else None."""
    if len(program.functions) != 1:
        return None
    main = program.function(program.main)
    result = main.body.result
    if not isinstance(result, ir.Var):
        return None
    lets = []
    for stmt in main.body.stmts:
        if not isinstance(stmt, ir.Let):
            return None
        lets.append(stmt)
        rhs = stmt.rhs
        if isinstance(rhs, ir.Constant):
            continue
        if not isinstance(rhs, ir.KernelCall):
            return None
        kernel = program.kernels[rhs.kernel]
        if not all(t.is_static for t in kernel.inputs + kernel.outputs):
            return None  # sizes known only at run time: from the arena
        scalar = kernel.scalar is not None and is_native_scalar(stmt.var.type)
        if not scalar and not isinstance(kernel.result, ir.TensorType):
            return None  # a tuple of results would need a cell
    return lets, result


def plan_storage(
    program: ir.Program,
    api,
    alignment: int,
    nbytes: Callable[[ir.TensorType], int],
    scratch: Mapping[str, Sequence[int]] = {},
) -> StoragePlan | None:
    """The plan of ``program``, or None when it is not one straight line of tensor kernels;
    ``scratch``: per kernel symbol, the bytes of its scratch parameters."""
    line = _straight_line(program)
    if line is None:
        return None
    stmts, result = line
    last_use: dict[int, int] = {}
    for index, stmt in enumerate(stmts):
        if isinstance(stmt.rhs, ir.KernelCall):
            for a in stmt.rhs.args:
                last_use[a.id] = index
    last_use[result.id] = len(stmts)
    direct = (
        isinstance(result.type, ir.TensorType)
        and not is_native_scalar(result.type)
        and any(isinstance(s.rhs, ir.KernelCall) and s.var is result for s in stmts)
        and len(api.outputs) == 1
    )
    offsets: dict[int, int] = {}
    scratch_offsets: dict[int, list[int]] = {}
    live: list[tuple[int, int, int]] = []  # (offset, size, last use)
    size = 0

    def place(nbytes_: int, last: int) -> int:
        nonlocal size
        need = _aligned(nbytes_, alignment)
        offset = 0
        for start, length, _ in sorted(live):
            if offset + need <= start:
                break
            offset = max(offset, start + length)
        live.append((offset, need, last))
        size = max(size, offset + need)
        return offset

    for index, stmt in enumerate(stmts):
        v = stmt.var
        if not isinstance(stmt.rhs, ir.KernelCall):
            continue
        live = [slot for slot in live if slot[2] >= index]  # readers of a buffer run before it is reused
        if not is_native_scalar(v.type) and not (direct and v is result):
            assert isinstance(v.type, ir.TensorType)  # _straight_line: a kernel call makes one tensor
            offsets[v.id] = place(nbytes(v.type), last_use.get(v.id, index))
        # the kernel's scratch: live while it runs, beside its inputs and output
        sizes = scratch.get(program.kernels[stmt.rhs.kernel].symbol, ())
        if sizes:
            scratch_offsets[v.id] = [place(n, index) for n in sizes]
    return StoragePlan(offsets, size, scratch_offsets, direct, result.id)

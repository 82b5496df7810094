"""Storage planned at compile time, for the programs that are one straight line of kernel calls.

A program whose ``@main`` is the only function and binds only constants and kernel calls of
static shape (an MLP, a convolutional network: no ``if``, ``match``, tuples, closures or calls)
allocates the same buffers in the same order on every run. Its tensors then get offsets in one
static buffer, chosen here. Each buffer is live from the kernel that writes it to the last one
that reads it; buffers live at the same time get disjoint bytes, placed first fit, and of two
orders of placement the one with the smaller whole is kept: the order the tensors are made in,
and decreasing size (TFLite Micro's greedy planner, which fits the small buffers into the gaps
the large ones leave). The tensor ``@main`` returns is written by its kernel straight into the
caller's output buffer, and a reshape (``kernels/copies.py``'s ``VIEW``) is not run: its result
is its input's bytes, which stay live until the last reader of either. That is what TVM's AOT
executor does for a dataflow graph. The kernels' scratch buffers (``kernels/scratch.py``) are
planned the same way, live only while their kernel runs, so the program needs no arena at all.
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
    #: variable id -> the variable whose bytes it is (a reshape's result: its input's storage)
    views: dict[int, ir.Var] = dataclasses.field(default_factory=dict)
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


@dataclasses.dataclass(frozen=True)
class Interval:
    """A buffer to place: ``size`` bytes, live from statement ``start`` to statement ``end``
    (both included: a kernel's inputs are still read while it writes its output)."""

    key: tuple[int, int]  #: (variable id, -1) for a tensor, (variable id, i) for scratch buffer i
    size: int
    start: int
    end: int


def place(intervals: Sequence[Interval], order: Sequence[int]) -> tuple[dict[tuple[int, int], int], int]:
    """Offsets of ``intervals`` placed one at a time in ``order`` (indices into it), each at the
    lowest offset where it overlaps no buffer placed before it that is live at the same time
    (first fit); and the bytes of the whole."""
    offsets: dict[tuple[int, int], int] = {}
    placed: list[Interval] = []
    size = 0
    for index in order:
        item = intervals[index]
        busy = sorted(
            (offsets[other.key], other.size) for other in placed if other.start <= item.end and item.start <= other.end
        )
        offset = 0
        for start, length in busy:
            if offset + item.size <= start:
                break
            offset = max(offset, start + length)
        offsets[item.key] = offset
        placed.append(item)
        size = max(size, offset + item.size)
    return offsets, size


def pack(intervals: Sequence[Interval]) -> tuple[dict[tuple[int, int], int], int]:
    """The smaller of two first-fit placements of ``intervals``: in the order the buffers are
    made (what a stack of live buffers gives), and by decreasing size (TFLite Micro's greedy
    planner: the large buffers first, the small ones in the gaps they leave)."""
    made = sorted(range(len(intervals)), key=lambda i: (intervals[i].start, i))
    by_size = sorted(range(len(intervals)), key=lambda i: (-intervals[i].size, intervals[i].start, i))
    return min((place(intervals, order) for order in (made, by_size)), key=lambda plan: plan[1])


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
    direct = (
        isinstance(result.type, ir.TensorType)
        and not is_native_scalar(result.type)
        and any(isinstance(s.rhs, ir.KernelCall) and s.var is result for s in stmts)
        and len(api.outputs) == 1
    )
    # a reshape's result is its input's bytes: the same storage, live until the last reader of either
    views: dict[int, ir.Var] = {}
    root: dict[int, int] = {}  # variable id -> id of the variable whose storage it is
    last_use: dict[int, int] = {}
    for index, stmt in enumerate(stmts):
        rhs = stmt.rhs
        if not isinstance(rhs, ir.KernelCall):
            continue
        for a in rhs.args:
            owner = root.get(a.id, a.id)
            last_use[owner] = max(last_use.get(owner, index), index)
        copy = program.kernels[rhs.kernel].copy
        if copy is not None and copy.kind == ir.VIEW and not (direct and stmt.var is result):
            source = rhs.args[copy.params[0]]
            views[stmt.var.id] = source
            root[stmt.var.id] = root.get(source.id, source.id)
    owner = root.get(result.id, result.id)
    last_use[owner] = len(stmts)
    intervals: list[Interval] = []
    for index, stmt in enumerate(stmts):
        v = stmt.var
        if not isinstance(stmt.rhs, ir.KernelCall) or v.id in views:
            continue
        if not is_native_scalar(v.type) and not (direct and v is result):
            assert isinstance(v.type, ir.TensorType)  # _straight_line: a kernel call makes one tensor
            need = _aligned(nbytes(v.type), alignment)
            intervals.append(Interval((v.id, -1), need, index, last_use.get(v.id, index)))
        # the kernel's scratch: live while it runs, beside its inputs and output
        for i, n in enumerate(scratch.get(program.kernels[stmt.rhs.kernel].symbol, ())):
            intervals.append(Interval((v.id, i), _aligned(n, alignment), index, index))
    placed, size = pack(intervals)
    offsets = {key[0]: offset for key, offset in placed.items() if key[1] < 0}
    scratch_offsets: dict[int, list[int]] = {}
    for (vid, i), offset in sorted(placed.items()):
        if i >= 0:
            scratch_offsets.setdefault(vid, []).append(offset)
    return StoragePlan(offsets, size, scratch_offsets, direct, result.id, views)

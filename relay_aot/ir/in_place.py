"""Concatenations whose pieces their kernels write in place.

A conv net concatenates the outputs of parallel layers (SqueezeNet's fire modules, Inception's
branches, DenseNet's blocks): in a packed layout with batch 1, along channels, the result is
its pieces' bytes one after another (``kernels/copies.py``'s ``CONCAT_FLAT`` form), so the
concatenation only copies. SqueezeNet 1.1 copies 3.4 MB that way per call, about 0.35 ms of its
5.7 (one thread, Xeon "emeraldrapids"); onnxruntime copies as well.

Where every piece is a tensor that a kernel of the same block has just made, that nothing else
reads, the result can be allocated before the first of those kernels runs and each kernel given
its slice of it as its output: the copy disappears. :func:`concat_in_place` finds those
concatenations; the C++ emitter allocates and slices (``view_tensor`` in ``tensor.h``). Each
slice starts at a multiple of 64 bytes, as TVM's kernels expect of their buffers.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np

from . import nodes as ir
from .escapes import nested_blocks
from .liveness import rhs_uses

#: Bytes a slice's start must be a multiple of (tensor data alignment, runtime memory.h).
ALIGNMENT = 64


@dataclasses.dataclass(frozen=True)
class Slice:
    """A piece of concatenation ``concat`` at byte ``offset`` of it; ``first``: the piece whose
    kernel runs first, where the result is allocated."""

    concat: ir.Var
    offset: int
    first: bool


@dataclasses.dataclass
class InPlace:
    """The concatenations of a function written in place: slices by piece variable id, and the
    ``uid`` of each concatenation's ``Let`` (it then does nothing)."""

    slices: dict[int, Slice] = dataclasses.field(default_factory=dict)
    concats: set[int] = dataclasses.field(default_factory=set)


def _nbytes(t: ir.TensorType) -> int | None:
    try:
        return math.prod(t.shape) * np.dtype(t.dtype).itemsize
    except TypeError:
        return None


def _use_counts(func: ir.Function) -> Counter:
    counts: Counter = Counter()
    for block in nested_blocks(func.body):
        for stmt in block.stmts:
            if isinstance(stmt, ir.Let):
                counts.update(v.id for v in rhs_uses(stmt.rhs))
            elif isinstance(stmt, ir.If):
                counts[stmt.cond.id] += 1
            elif isinstance(stmt, ir.Match):
                counts[stmt.scrutinee.id] += 1
        if isinstance(block.result, ir.TailCall):
            counts.update(a.id for a in block.result.args)
        else:
            counts[block.result.id] += 1
    return counts


def _single_static_output(kernel: ir.Kernel) -> ir.TensorType | None:
    """The output of a kernel that makes one static tensor with a kernel call, else None."""
    out = kernel.result
    if not isinstance(out, ir.TensorType) or not out.is_static or kernel.scalar is not None:
        return None
    if kernel.shape_func is not None or kernel.copy is not None:
        return None
    return out


def concat_in_place(func: ir.Function, program: ir.Program) -> InPlace:
    """The concatenations of ``func`` whose pieces their kernels can write in place (module
    docstring): each piece made by a kernel call earlier in the concatenation's block, read by
    it alone, and starting at a multiple of :data:`ALIGNMENT` bytes."""
    found = InPlace()
    counts = _use_counts(func)
    for block in nested_blocks(func.body):
        made_at: dict[int, tuple[int, ir.TensorType]] = {}  # piece candidates: var id -> (position, type)
        for position, stmt in enumerate(block.stmts):
            if not (isinstance(stmt, ir.Let) and isinstance(stmt.rhs, ir.KernelCall)):
                continue
            kernel = program.kernels[stmt.rhs.kernel]
            out = _single_static_output(kernel)
            if out is not None:
                made_at[stmt.var.id] = (position, out)
            copy, result = kernel.copy, kernel.result
            if (
                copy is None
                or copy.kind != ir.CONCAT_FLAT
                or not isinstance(result, ir.TensorType)
                or not result.is_static
            ):
                continue
            pieces = [stmt.rhs.args[i] for i in copy.params]
            if len(pieces) != len(stmt.rhs.args) or len({p.id for p in pieces}) != len(pieces):
                continue  # another argument, or a piece twice
            if any(p.id not in made_at or counts[p.id] != 1 or p.id in found.slices for p in pieces):
                continue
            sizes = [n for p in pieces if (n := _nbytes(made_at[p.id][1])) is not None]
            if len(sizes) != len(pieces) or sum(sizes) != _nbytes(result):
                continue
            offsets = [sum(sizes[:i]) for i in range(len(sizes))]
            if any(o % ALIGNMENT for o in offsets):
                continue
            first = min(pieces, key=lambda p: made_at[p.id][0])
            for piece, offset in zip(pieces, offsets):
                found.slices[piece.id] = Slice(stmt.var, offset, piece is first)
            found.concats.add(stmt.uid)
    return found

"""Walking a TE schedule's stages from a fused kernel's output: the kernels relay_aot writes
(Winograd, grouped pointwise, the Cortex-M4's DSP ones) find their own computation by its tag
and compute FuseOps' elementwise operators after it inside the last one's loop."""

from __future__ import annotations

from collections.abc import Collection

from tvm import te
from tvm.topi.utils import get_const_tuple


def find_tagged(op: te.Operation, tags: Collection[str]) -> te.Tensor | None:
    """The first stage (depth first from ``op``, ``op`` included) whose tag is one of ``tags``."""
    if op.tag in tags:
        return op.output(0)
    for t in op.input_tensors:
        if isinstance(t.op, te.ComputeOp):
            found = find_tagged(t.op, tags)
            if found is not None:
                return found
    return None


def inline_between(s: te.Schedule, anchor: te.Operation, last: te.Operation) -> None:
    """Inline every compute stage between ``anchor`` and ``last`` (both excluded): the elementwise
    operators FuseOps put after the anchor, computed in the last one's loop."""

    def inline(op):
        if op.same_as(anchor) or not isinstance(op, te.ComputeOp):
            return
        if not op.same_as(last):
            s[op].compute_inline()
        for t in op.input_tensors:
            inline(t.op)

    inline(last)


def anchored_schedule(outs, tag: str, what: str) -> tuple[te.Schedule, te.Tensor, te.Tensor]:
    """The schedule of a fused kernel's ``outs``, its stage tagged ``tag`` (``what`` names the
    strategy in the assertion) and the stage whose loop stores the result: the last one when
    FuseOps put elementwise operators after the anchor (those between them inlined), else the
    anchor itself (the other stages keep TVM's default)."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    anchor = find_tagged(outs[0].op, (tag,))
    assert anchor is not None, f"relay_aot's {what} strategy without its stage"
    last = outs[0]
    if len(outs) != 1 or get_const_tuple(last.shape) != get_const_tuple(anchor.shape):
        last = anchor  # not FuseOps' out-elementwise pattern
    elif not last.op.same_as(anchor.op):
        inline_between(s, anchor.op, last.op)  # everything between them is elementwise
    return s, anchor, last

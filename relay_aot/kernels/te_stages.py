"""Walking a TE schedule's stages from a fused kernel's output: the kernels relay_aot writes
(Winograd, grouped pointwise, the Cortex-M4's DSP ones) find their own computation by its tag
and compute FuseOps' elementwise operators after it inside the last one's loop."""

from __future__ import annotations

from collections.abc import Collection

from tvm import te


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

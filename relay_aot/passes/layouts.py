"""Which layout operators only relabel their input: the output holds the input's elements in
the same order, so nothing needs to move them (``kernels/copies.py`` makes such a kernel a view
of its input; ``alter_layout`` counts no cost for such a transform)."""

from __future__ import annotations

import tvm
from tvm import relay

#: Operators whose output always holds the input's elements in the same order.
ORDER_PRESERVING = {"copy", "reshape", "expand_dims", "squeeze"}


def _layout_axes(layout: str, shape) -> list[tuple[str, int]] | None:
    """The axes of ``shape`` in ``layout`` (``NCHW16c``) that have more than one element, in
    memory order, as (primal axis, extent); an axis split into blocks that lie next to each
    other (``C`` then ``c``) counted as one. None where an extent is not static."""
    names = [ch for ch in layout if ch.isalpha()]
    if len(names) != len(shape) or not all(isinstance(d, tvm.tir.IntImm) for d in shape):
        return None
    axes: list[tuple[str, int]] = []
    previous = ""
    for name, extent in zip(names, (int(d) for d in shape)):
        if extent == 1:
            continue
        if axes and name.islower() and previous == name.upper():
            axes[-1] = (previous, axes[-1][1] * extent)
        else:
            axes.append((name.upper(), extent))
        previous = name
    return axes


def preserves_order(call: relay.Call) -> bool:
    """Whether ``call`` (of an operator) outputs its input's elements in the same order: one of
    :data:`ORDER_PRESERVING`, or a ``layout_transform`` that moves only axes of extent 1 or
    splits an axis into blocks that stay next to each other (``NCHW`` -> ``NCHW1c``)."""
    name = call.op.name
    if name in ORDER_PRESERVING:
        return True
    if name != "layout_transform":
        return False
    before = _layout_axes(str(call.attrs.src_layout), call.args[0].checked_type.shape)
    return before is not None and before == _layout_axes(str(call.attrs.dst_layout), call.checked_type.shape)

"""TVM's x86 uint8 x int8 ``dense`` (``dense_int8``, VNNI) with independent accumulators.

TVM 0.19's schedule (``topi.x86.dense.dense_int8_schedule``) computes sixteen outputs at a time:
for each block of sixteen it runs down the whole reduction, one ``vpdpbusd`` per four inputs,
each adding into the register the previous one wrote. The instruction's latency then bounds
the kernel, not its throughput: a 640-by-128 layer of a batch of one (MLPerf Tiny's anomaly
detection model) took 0.78 us where the weights' loads allow under half of it.

:func:`schedule` keeps up to eight blocks of sixteen outputs in flight: for each group of four
inputs, one broadcast and up to eight ``vpdpbusd`` into eight registers, which LLVM keeps in
registers for the whole reduction; the fused epilogue (bias, requantization) then runs once
per group, on the registers. Same products, same order of sums per output (int32, exact):
0.44 us on that layer, and 2.5x faster than TVM's on batches of 16 to 128 as well.

Installed while relay_aot lowers its kernels (:data:`building`); TVM's executors and AutoTVM in
the same process keep TVM's schedule.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import te
from tvm.topi.x86 import dense

from ..gate import Gate
from . import vnni

#: Blocks of sixteen outputs whose sums are in flight together (eight zmm registers of 32).
BLOCKS = (8, 4, 2, 1)


def schedule(cfg, s: te.Schedule, sums: te.Tensor, out: te.Tensor, do_parallel: bool = True, intrin=None):
    """``dense_int8_schedule``'s interface: ``sums`` the int32 sums (``dense_int8_compute``),
    ``out`` the output of the fused kernel; returns the schedule and the outer loop (parallel when
    ``do_parallel``). ``intrin``: the tensor intrinsic of a block of outputs (its lanes, and the
    inputs each sums: its reduction's extent), ``vnni.dot_uint8_int8_int32`` by default (16 and
    4, as ``dense_int8_compute`` packs the weights); ``int16_pairs``' kernel passes its own."""
    intrin = intrin if intrin is not None else vnni.dot_uint8_int8_int32()
    lanes_n = int(intrin.op.output(0).shape[0])
    group_n = int(intrin.op.reduce_axis[0].dom.extent)
    (reduction,) = sums.op.reduce_axis
    rows, columns = sums.op.axis
    blocks = int(columns.dom.extent) // lanes_n
    together = next(b for b in BLOCKS if blocks % b == 0)
    block, lanes = s[sums].split(columns, factor=lanes_n)
    group, member = s[sums].split(block, factor=together)
    quad, within = s[sums].split(reduction, factor=group_n)
    s[sums].reorder(group, rows, quad, member, lanes, within)
    s[sums].unroll(member)
    s[sums].tensorize(lanes, intrin)
    outer = group
    if sums != out:
        out_rows, out_columns = out.op.axis
        outer, inner = s[out].split(out_columns, factor=lanes_n * together)
        vectors, vector = s[out].split(inner, factor=lanes_n)
        s[out].reorder(outer, out_rows, vectors, vector)
        s[out].vectorize(vector)
        s[sums].compute_at(s[out], outer)
    if do_parallel:
        s[out].parallel(outer)
    return s, outer


def _dispatch(cfg, s, sums, out, do_parallel=True):
    if _GATE.active():
        return schedule(cfg, s, sums, out, do_parallel)
    assert _original is not None
    return _original(cfg, s, sums, out, do_parallel)


_original: Callable | None = None


def _install() -> None:
    global _original
    _original = dense.dense_int8_schedule
    dense.dense_int8_schedule = _dispatch


_GATE = Gate(_install)
#: Within the block (on this thread), TVM's x86 int8 dense kernels are scheduled by
#: :func:`schedule`.
building = _GATE.building

"""Grouped 1x1 convolutions (ShuffleNet's) as register-blocked matrix products, in ``NCHW``.

A grouped pointwise convolution with ``G`` groups is ``G`` matrix products: the ``M = O/G``
filters of a group times its ``K = C/G`` input channels, each channel a contiguous row of
``H*W`` values in ``NCHW``. x86 keeps grouped convolutions in ``NCHW`` (``AlterOpLayout`` packs
only ungrouped and depthwise ones) and schedules them with ``group_conv2d_nchw.x86``, whose
untuned fallback vectorises over a few output columns and spills: ShuffleNet's 1x1 layers (4
groups of 34, 68 and 136 channels) ran at 5-30 GFLOP/s, 13.5 of the model's 16.5 ms on Zen 5
(onnxruntime's whole model: 6.8 ms).

Here each output value is ``sum_k x[g*K + k, h, w] * w[o, k]`` (``g = o // M``), computed a
register block at a time: ``rows`` filters of one group by a run of one row of the map, the
widest that divides the row and fits one vector (14 of AVX-512's 16 lanes on ShuffleNet's 28-
and 14-wide maps, 7 on its 7-wide ones): for each input channel of the group, one load of the
run and one broadcast weight per filter feed ``rows`` multiply-adds. Runs are never wider than
a vector: LLVM splits a vector of 28, 49 or 196 lanes into pieces and shuffles, and such blocks
ran at 4-15 GFLOP/s. The block is chosen by :func:`blocking` for the target's vector width and
register count (ShuffleNet's: 17 or 28 filters by one run, 88-178 GFLOP/s on Zen 5 for the
kernel alone); the fused operators after the convolution (batch norm's scale and shift, a
residual ``add``, ``relu``) are applied to the accumulators before their only store. The
accumulators live in a ``local`` block: a ``global`` one larger than 1 KiB would be a workspace
allocation per block.

A small map whose rows fill vectors badly (7 x 7: seven runs of 7 lanes) is computed instead as
the few whole vectors of the flattened map, the last overlapping the one before so that every
vector lies inside the map (:func:`map_blocks`); the output loop, unrolled, reads each position
from its vector: 2.3 times faster on ShuffleNet's 7 x 7 layers.

The parallel loop is the one over images and groups, outside every loop over blocks: a parallel
loop over the blocks themselves (TVM's thread pool calls its body once per chunk) made LLVM's
code for each block slower, even on one thread (ShuffleNet's 14 x 14 layer 37 -> 43 us, 42 ->
70 us with its weights and output out of cache).

TVM's ``conv2d`` strategy for ``cpu`` targets is wrapped once, at the first :func:`building`:
while relay_aot lowers its kernels, a float32 grouped (not depthwise) 1x1 convolution of stride
1 without padding or dilation, in ``NCHW``/``OIHW`` with static shapes, whose rows have a run of
:data:`MIN_RUN` values, gets this kernel; everything else, and every call outside
:func:`building` (``relay.build``, TVM's executors and AutoTVM in the same process), TVM's
strategy as before. ``AlterOpLayout`` leaves these convolutions in ``NCHW`` either way. The same
wrapper gives the depthwise convolutions kept in ``NCHW`` between them their kernel
(:mod:`.depthwise_nchw`).
"""

from __future__ import annotations

import tvm
from tvm import te
from tvm.relay.op import op as _op
from tvm.relay.op.strategy import generic as _generic
from tvm.relay.op.strategy import x86 as _x86
from tvm.topi.utils import get_const_tuple

from ..gate import Gate
from . import depthwise_nchw, int8_by_eight
from .te_stages import anchored_schedule

#: The kernel's tag: the schedule finds the convolution's stage by it.
TAG = "relay_aot_grouped_pointwise"

#: Vector registers the schedule leaves to the input run, the broadcast weight and addresses.
SPARE_REGISTERS = 4

#: Rows whose widest run that fits a vector is narrower than this (a prime width above the
#: vector's lanes) keep TVM's kernel: this one would be scalar.
MIN_RUN = 4


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def run_width(width: int, lanes: int) -> int:
    """The widest run of a row of ``width`` values that one vector of ``lanes`` holds and that
    divides the row."""
    return max(d for d in _divisors(width) if d <= lanes)


def blocking(filters: int, height: int, width: int, lanes: int, registers: int) -> tuple[int, int, int]:
    """The register block ``(rows, block_height, block_width)`` of a group of ``filters`` output
    channels over an ``height x width`` map, for vectors of ``lanes`` float32 and ``registers``
    vector registers: ``rows`` filters (a divisor of ``filters``) by ``block_height`` rows of the
    map (a divisor of ``height``) by a run of ``block_width`` values of each, the largest
    divisor of ``width`` that fits one vector. Every block is full, each of its runs one vector,
    and the ``rows x block_height`` accumulators leave :data:`SPARE_REGISTERS` free.

    Per input channel a block issues ``rows x block_height`` multiply-adds (two per cycle),
    ``rows`` broadcast weights (about four per cycle: they are operands of the multiply-adds)
    and ``block_height`` input runs, a plain load where the run is a whole vector but about
    three cycles of split loads and shuffles where it is not (14 or 7 of AVX-512's 16 lanes):
    so many filters and few rows of the map. Measured on Zen 5, one thread, ShuffleNet's
    shapes: 17 filters by one 14-wide run 41 us (178 GFLOP/s) against 105 us for 4 filters by
    7 runs, which fill as many accumulators. The block with the most useful multiply-adds per
    cycle wins, then the one with more filters (each input run is read once per block of
    filters), then fewer rows of the map.
    """
    budget = max(registers - SPARE_REGISTERS, 1)
    block_width = run_width(width, lanes)
    run_cost = 0.5 if block_width % lanes == 0 else 3.0
    best: tuple | None = None
    for rows in _divisors(filters):
        for block_height in _divisors(height):
            if rows * block_height > budget:
                continue
            cycles = max(rows * block_height / 2, rows / 4 + block_height * run_cost)
            rate = rows * block_height * block_width / cycles
            key = (round(rate, 6), rows, -block_height)
            if best is None or key > best[0]:
                best = (key, (rows, block_height, block_width))
    assert best is not None  # one filter by one run always fits
    return best[1]


#: Small maps are computed as at most this many whole vectors (:func:`map_blocks`).
MAX_MAP_BLOCKS = 4


def map_blocks(height: int, width: int, lanes: int) -> int:
    """How many whole vectors cover a small ``height x width`` map, the last one overlapping
    the one before it (a 7 x 7 map: 4 vectors of 16 at 0, 16, 32 and 33), or 0 where the map
    takes runs of its rows (:func:`blocking`): maps smaller than a vector, larger than
    :data:`MAX_MAP_BLOCKS` vectors, or whose rows fill vectors in as few runs.

    A 7-wide row fills 7 of AVX-512's 16 lanes, and its run is a split load: a block of
    ShuffleNet's 7 x 7 layer (544 channels) took 81 us that way, 35 us (208 GFLOP/s) as
    4 filters by the map's 4 vectors (Zen 5, one thread, the kernel alone). On a 14 x 14 map
    (13 vectors, 2 filters a block) rows were faster: 43 against 59 us."""
    size = height * width
    blocks = -(-size // lanes)
    if size < lanes or blocks > MAX_MAP_BLOCKS:
        return 0
    runs = height * (width // run_width(width, lanes))
    return blocks if blocks < runs else 0


def block_rows(filters: int, blocks: int, registers: int) -> int:
    """Filters per register block of a map of ``blocks`` vectors (:func:`map_blocks`): the most
    (a divisor of ``filters``) whose accumulators fill at most half of the vector registers
    (4 x 4 of AVX-512's 32 ran at 35 us, 8 x 4 at 45 us, 2 x 4 at 44 us)."""
    return max(d for d in _divisors(filters) if d * blocks <= max(registers // 2, blocks))


def compute(data: te.Tensor, weight: te.Tensor, groups: int, out_dtype: str, lanes: int = 0) -> te.Tensor:
    """``conv2d(data, weight, groups=groups)`` for a 1x1 window, stride 1, no padding:
    ``NCHW`` data, ``OIHW`` weights. With ``lanes``, a small map (:func:`map_blocks`) is
    computed as whole vectors of the flattened map, ``blocks[n, o, j, l]`` at position
    ``min(j * lanes, H*W - lanes) + l`` (the last vector overlaps the one before it: all of
    them read and compute inside the map), and the result reads each position from its
    vector."""
    batch, channels, height, width = get_const_tuple(data.shape)
    filters, group_channels = get_const_tuple(weight.shape)[:2]
    per_group = filters // groups
    blocks = map_blocks(height, width, lanes) if lanes else 0
    attrs = {"groups": groups, "blocks": blocks}
    k = te.reduce_axis((0, group_channels), name="k")

    def term(n, o, h, w):
        return data[n, (o // per_group) * group_channels + k, h, w].astype(out_dtype) * weight[o, k, 0, 0].astype(
            out_dtype
        )

    if not blocks:
        return te.compute(
            (batch, filters, height, width),
            lambda n, o, h, w: te.sum(term(n, o, h, w), axis=k),
            name="grouped_pointwise",
            tag=TAG,
            attrs=attrs,
        )
    size = height * width

    def start(j):
        return te.min(j * lanes, size - lanes)

    def at(n, o, j, lane):
        position = start(j) + lane
        return te.sum(term(n, o, position // width, position % width), axis=k)

    vectors = te.compute((batch, filters, blocks, lanes), at, name="grouped_pointwise_blocks")

    def result(n, o, h, w):
        position = h * width + w
        j = te.min(position // lanes, blocks - 1)
        return vectors[n, o, j, position - start(j)]

    return te.compute((batch, filters, height, width), result, name="grouped_pointwise", tag=TAG, attrs=attrs)


def _vector_registers(target: tvm.target.Target) -> tuple[int, int]:
    from .schedule_rules import _vector_registers as registers

    return registers(target)


def schedule(outs) -> te.Schedule:
    """The schedule of :func:`compute` and the elementwise operators fused after it (module
    docstring): per register block of :func:`blocking`, the loop over the group's input
    channels outside, the block's filters unrolled and its columns vectorised inside, then the
    fused operators on the accumulators and one store."""
    s, conv, last = anchored_schedule(outs, TAG, "grouped pointwise")
    lanes, registers = _vector_registers(tvm.target.Target.current())
    _, filters, height, width = get_const_tuple(conv.shape)
    per_group = filters // int(conv.op.attrs["groups"])
    if int(conv.op.attrs["blocks"]):
        _schedule_blocks(s, conv, last, per_group, registers)
    else:
        _schedule_runs(s, conv, last, per_group, blocking(per_group, height, width, lanes, registers))
    return s


def _schedule_runs(
    s: te.Schedule, conv: te.Tensor, last: te.Tensor, per_group: int, block: tuple[int, int, int]
) -> None:
    """Register blocks of filters by runs of rows (:func:`blocking`), the blocks of a group's
    filters innermost: ShuffleNet's 14 x 14 layer (272 channels) 43 -> 37 us, 72 -> 42 us with
    its weights and output out of cache (the network's case), its 28 x 28 one 49 -> 39 and
    61 -> 45 us, against all runs of one block of filters before the next block."""
    rows, block_height, block_width = block
    if last.op.same_as(conv.op):
        # unfused: the block accumulates in a local copy, then the output stage stores it
        accumulators = s.cache_write(conv, "local")
    else:
        # "local": a stack block LLVM keeps in registers (module docstring)
        accumulators = conv
        s[conv].set_scope("local")

    # per group, per run of rows, every block of the group's filters: the run's inputs (one
    # vector per input channel) and the group's weights stay in L1 between the blocks
    n, o, h, w = s[last].op.axis
    group, o = s[last].split(o, per_group)
    oo, oi = s[last].split(o, rows)
    ho, hi = s[last].split(h, block_height)
    wo, wi = s[last].split(w, block_width)
    s[last].reorder(n, group, ho, wo, oo, oi, hi, wi)
    s[last].parallel(s[last].fuse(n, group))  # (module docstring)
    outer = s[last].fuse(ho, wo, oo)
    s[last].unroll(oi)
    s[last].unroll(hi)
    s[last].vectorize(wi)

    s[accumulators].compute_at(s[last], outer)
    n, o, h, w = s[accumulators].op.axis
    (k,) = s[accumulators].op.reduce_axis
    s[accumulators].reorder(n, k, o, h, w)
    s[accumulators].unroll(o)
    s[accumulators].unroll(h)
    s[accumulators].vectorize(w)


def _schedule_blocks(s: te.Schedule, conv: te.Tensor, last: te.Tensor, per_group: int, registers: int) -> None:
    """Register blocks of filters by a small map's whole vectors (:func:`map_blocks`): the
    vectors accumulate in registers, then the output loop, unrolled over the block's filters
    and positions (LLVM vectorises its contiguous stretches), applies the fused operators and
    stores each position once."""
    (vectors,) = conv.op.input_tensors
    rows = block_rows(per_group, int(conv.op.attrs["blocks"]), registers)
    if not last.op.same_as(conv.op):
        s[conv].compute_inline()
    s[vectors].set_scope("local")
    n, o, h, w = s[last].op.axis
    group, o = s[last].split(o, per_group)
    outer, oi = s[last].split(o, rows)
    s[last].reorder(n, group, outer, oi, h, w)
    s[last].parallel(s[last].fuse(n, group))  # (module docstring)
    s[last].unroll(oi)
    s[last].unroll(h)
    s[last].unroll(w)

    s[vectors].compute_at(s[last], outer)
    n, o, j, lane = s[vectors].op.axis
    (k,) = s[vectors].op.reduce_axis
    s[vectors].reorder(n, k, o, j, lane)
    s[vectors].unroll(o)
    s[vectors].unroll(j)
    s[vectors].vectorize(lane)


def applies(attrs, data_type, weight_type, target: tvm.target.Target) -> bool:
    """Whether :func:`compute` computes this ``nn.conv2d`` call for ``target`` (module
    docstring; rows with no run of :data:`MIN_RUN` values keep TVM's kernel, and so do maps of
    fewer positions than a vector's lanes squared on a target of 16 vector registers)."""
    shapes = (data_type.shape, weight_type.shape)
    if not all(isinstance(d, (int, tvm.tir.IntImm)) for shape in shapes for d in shape):
        return False
    groups = int(attrs.groups)
    if groups == 1 or attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW":
        return False
    out_dtype = str(attrs.out_dtype) or data_type.dtype
    if data_type.dtype != "float32" or weight_type.dtype != "float32" or out_dtype != "float32":
        return False
    channels = int(data_type.shape[1])
    filters, group_channels, kh, kw = (int(d) for d in weight_type.shape)
    if groups == channels and group_channels == 1:  # depthwise: TVM's kernels
        return False
    lanes, registers = _vector_registers(target)
    height, width = int(data_type.shape[2]), int(data_type.shape[3])
    if run_width(width, lanes) < MIN_RUN:
        return False
    if registers < 32 and height * width < lanes * lanes:
        # AVX2, ShuffleNet's 7 x 7 layer: 8 filters by a 7-wide run took 106 us, TVM's packed
        # kernel 86 (its 28 x 28 and 14 x 14 layers: 343 and 119 us against 765 and 223)
        return False
    return (
        (kh, kw) == (1, 1)
        and get_const_tuple(attrs.strides) == (1, 1)
        and get_const_tuple(attrs.dilation) == (1, 1)
        and all(p == 0 for p in get_const_tuple(attrs.padding))
        and channels == groups * group_channels
        and filters % groups == 0
    )


def _compute_for(target: tvm.target.Target):
    lanes = _vector_registers(target)[0]

    def _compute(attrs, inputs, out_type):
        return [compute(inputs[0], inputs[1], int(attrs.groups), out_type.dtype, lanes)]

    return _compute


def _schedule(attrs, outs, target):
    with target:
        return schedule(outs)


_TVM_CPU_STRATEGY = _x86.conv2d_strategy_cpu


def _cpu_strategy(attrs, inputs, out_type, target):
    if not _GATE.active():
        return _TVM_CPU_STRATEGY(attrs, inputs, out_type, target)
    if applies(attrs, inputs[0], inputs[1], target):
        ours = (_compute_for(target), _schedule, "grouped_pointwise_nchw.relay_aot")
    elif depthwise_nchw.applies(attrs, inputs[0], inputs[1], target):
        ours = (depthwise_nchw.compute_for, depthwise_nchw.schedule_for, "depthwise_nchw.relay_aot")
    elif int8_by_eight.nchw_applies(attrs, inputs[0], inputs[1], target):
        return int8_by_eight.strategy(attrs, inputs, target, packed=False)
    else:
        return _TVM_CPU_STRATEGY(attrs, inputs, out_type, target)
    strategy = _op.OpStrategy()
    strategy.add_implementation(ours[0], ours[1], name=ours[2], plevel=20)
    return strategy


def _install() -> None:
    _generic.conv2d_strategy.register("cpu", _cpu_strategy, override=True)


_GATE = Gate(_install)
#: Within the block (on this thread), grouped pointwise convolutions get this kernel.
building = _GATE.building

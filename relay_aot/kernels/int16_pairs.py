"""The kernel of int16 convolutions on x86 without VNNI (``passes/int16_pairs.py``): ``vpmaddwd``.

``packed_int``'s convolution (TVM's ``conv2d_NCHWc_int8`` compute with groups of two input
channels, its int8 schedule, the accumulators of a fused convolution as ``conv_epilogue`` writes
them) tensorized with :func:`dot_int16_int16_int32`: for each run of output columns, L output
channels of the run in int32 accumulators, one ``vpmaddwd`` per column and two input channels,
the input's two int16 channels broadcast as one int32. The run is the widest that divides the
output row and leaves two registers (the input and a product: ``vpmaddwd`` does not
accumulate) beside the accumulators.

``conv2d_NCHWc`` strategy gives it an ``NCHWc`` convolution of int16 data and 7-d int16 weights
whose last axis is two (only the layout choice of ``passes/int16_pairs.py`` makes one), through
``int8_by_eight``'s dispatcher while relay_aot lowers its kernels.

Matrix products (``nn.dense``) alike: the layout choice packs int16 weights ``NC{L}n2c``, and
``dense_pack`` strategy (:data:`building`) computes them as ``dense_int8``'s kernel does its
VNNI ones (eight blocks of L outputs in flight), one ``vpmaddwd`` per block and two inputs.
"""

from __future__ import annotations

import tvm
from tvm import te, tir
from tvm.relay.op import op as _op
from tvm.relay.op.strategy import generic as _generic
from tvm.relay.op.strategy import x86 as _x86
from tvm.topi.utils import get_const_tuple, traverse_inline

from ..gate import Gate
from ..passes import int16_pairs as _pass
from . import dense_int8, packed_int
from .lane_sums import lane_sums


def dot_int16_int16_int32(lanes: int, weights: str = "int16") -> te.TensorIntrin:
    """``lanes`` int32 sums of two int16 x int16 products each (``data[2]`` broadcast,
    ``kernel[lanes][2]``) added to the lanes: one ``vpmaddwd`` and one addition. ``weights``
    int8: the weights are int8 in memory, sign-extended as they are loaded (``vpmovsxbw``), as
    the matrix products keep them (half the bytes to stream through the caches)."""
    pmaddwd = _pass.PMADDWD[lanes]
    int32s, int16s = f"int32x{lanes}", f"int16x{lanes * 2}"

    def instruction(data, kernel, lanes_now):
        # the two int16 data channels as one int32 broadcast to every lane, seen as int16 again
        pair = tir.call_intrin("int32", "tir.reinterpret", data.vload([0], "int16x2"))
        broadcast = tir.call_intrin(int16s, "tir.reinterpret", pair.astype(int32s))
        loaded = kernel.vload([0, 0], f"{weights}x{lanes * 2}")
        sums = tir.call_llvm_pure_intrin(int32s, pmaddwd, tir.const(2, "uint32"), loaded.astype(int16s), broadcast)
        return sums if lanes_now is None else lanes_now + sums  # vpmaddwd does not accumulate

    return lane_sums(lanes, 2, "int16", weights, instruction)


def packed_applies(data: te.Tensor, kernel: te.Tensor, target: tvm.target.Target) -> bool:
    """Whether an ``NCHWc`` convolution of ``data`` and ``kernel`` is one this kernel computes:
    int16 x int16, 7-d weights in pairs of input channels, blocks of filters of a ``vpmaddwd``'s
    lanes, on a target with :func:`~relay_aot.passes.int16_pairs.pair_lanes`."""
    return (
        data.dtype == "int16"
        and kernel.dtype == "int16"
        and len(data.shape) == 5
        and len(kernel.shape) == 7
        and int(kernel.shape[6]) == 2
        and int(kernel.shape[5]) in _pass.PMADDWD
        and int(kernel.shape[5]) <= _pass.pair_lanes(target)
    )


def _config(width: int, channels: int, filters: int, target: tvm.target.Target, lanes: int) -> dict:
    ic_bn = _pass.block(channels, _pass.pair_lanes(target))
    return packed_int.config(width, ic_bn, channels, filters, lanes, packed_int.run(width, target, spare=2))


def strategy(attrs, inputs, target) -> _op.OpStrategy:
    """The strategy of this kernel for a packed convolution :func:`packed_applies` to."""
    lanes = get_const_tuple(inputs[1].shape)[5]

    def schedule(attrs, outs, target):
        return packed_int.schedule(
            outs,
            target,
            lanes,
            lambda: dot_int16_int16_int32(lanes),
            lambda width, channels, filters, target: _config(width, channels, filters, target, lanes),
        )

    ours = _op.OpStrategy()
    ours.add_implementation(packed_int.compute_packed, schedule, name="conv2d_NCHWc_int16_pairs.relay_aot", plevel=20)
    return ours


def dense_packed_applies(data: te.Tensor, weight: te.Tensor, target: tvm.target.Target) -> bool:
    """Whether a ``contrib_dense_pack`` of ``data`` and ``weight`` is one this kernel computes:
    int16 data, int8 (or int16) weights packed ``NC{L}n2c`` (only the layout choice of
    ``passes/int16_pairs.py`` packs them so), on a target with ``vpmaddwd`` of L lanes."""
    return (
        data.dtype == "int16"
        and weight.dtype in ("int8", "int16")
        and len(data.shape) == 2
        and len(weight.shape) == 4
        and int(weight.shape[3]) == 2
        and int(weight.shape[2]) in _pass.PMADDWD
        and int(weight.shape[2]) <= _pass.pair_lanes(target)
    )


def _dense_compute(attrs, inputs, out_type):
    """int32 sums of int16 data by weights packed ``NC{L}n2c``: ``dense_int8_compute``'s with
    pairs where it has quadruples."""
    data, weight = inputs[:2]
    rows, depth = get_const_tuple(data.shape)
    chunks, _, lanes, _ = get_const_tuple(weight.shape)
    k = te.reduce_axis((0, depth), name="k")
    return [
        te.compute(
            (rows, chunks * lanes),
            lambda i, j: te.sum(
                data[i, k].astype("int32") * weight[j // lanes, k // 2, j % lanes, k % 2].astype("int32"), axis=k
            ),
            tag="dense_int16_pairs",
            name="dense_int16_pairs",
        )
    ]


def _dense_schedule(attrs, outs, target):
    s = te.create_schedule([x.op for x in outs])

    def callback(op):
        if op.tag == "dense_int16_pairs":
            sums = op.output(0)
            with target:
                weight = sums.op.input_tensors[1]
                intrin = dot_int16_int16_int32(int(weight.shape[2]), weight.dtype)
            dense_int8.schedule(None, s, sums, outs[0], intrin=intrin)

    traverse_inline(s, outs[0].op, callback)
    return s


def _dense_pack_strategy(attrs, inputs, out_type, target):
    if _GATE.active() and dense_packed_applies(inputs[0], inputs[1], target):
        ours = _op.OpStrategy()
        ours.add_implementation(_dense_compute, _dense_schedule, name="dense_int16_pairs.relay_aot", plevel=20)
        return ours
    return _TVM_DENSE_PACK_STRATEGY(attrs, inputs, out_type, target)


_TVM_DENSE_PACK_STRATEGY = _x86.dense_pack_strategy_cpu


def _install() -> None:
    _generic.dense_pack_strategy.register("cpu", _dense_pack_strategy, override=True)


_GATE = Gate(_install)
#: Within the block (on this thread), the int16 matrix products the layout choice packed in
#: pairs get this kernel (its convolutions are served by ``int8_by_eight``'s dispatcher).
building = _GATE.building

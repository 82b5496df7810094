"""x86 packed convolutions whose fused bias and activation are applied in registers.

TVM's x86 schedules of ``conv2d_NCHWc`` (``topi/x86/conv2d_avx_common.py``, ``conv2d_avx_1x1.py``)
accumulate a block of output columns in registers and store it; where the operators after the
convolution are fused into the kernel (``add``, ``nn.relu``, as in nearly every conv net), the
convolution's output row is stored to a scratch row first, and a second loop reads it back, adds
the bias, applies the activation and stores the result: every output value is written twice and
read once more. onnxruntime's kernels apply bias and activation to the accumulators before their
only store. Kernels alone, one thread, Xeon "emeraldrapids" (AVX-512), convolution + bias + relu:
SqueezeNet 1.1's first layer (3 -> 64 channels, 3x3, stride 2, 111 wide) 565 -> 297 us (the
convolution alone: 283); its 55-wide 3x3 layer (16 -> 64) 360 -> 340 us; the 1024-filter
classifier over one row of 169, 1.14-1.49 -> 1.08 ms.

So, while relay_aot lowers its kernels (:func:`building`), the fused case of both schedules is
written here: the convolution's own stage is inlined into the fused output stage, and its
accumulators are computed at that stage's block of columns, so the output loop adds, activates
and stores each accumulator once. The blocking (channels, columns, rows, unrolling) is TVM's,
read from the same AutoTVM configuration, so tuning records and ``schedule_rules`` apply as
they did. The uint8 x int8 kernels (``conv2d_NCHWc_int8``, ``vpdpbusd`` with VNNI) get the same:
TVM's fused int8 3x3 schedule computes the convolution at the output's innermost column loop,
one int32 accumulator whose every ``vpdpbusd`` waits for the one before (ResNet-8 int8, one
thread: 0.093 -> 0.054 ms); its 1x1 one keeps a row of accumulators in memory. Unfused convolutions, 4-D outputs and TVM's test-only unpacked path keep TVM's
schedule, as do depthwise convolutions: the same change to theirs measured no faster on
MobileNet (their accumulators are few, the scratch row short). TVM's schedule functions are replaced once, by a dispatcher that calls TVM's own
outside :func:`building`: ``relay.build``, TVM's executors and AutoTVM's measurements in the
same process schedule as TVM does (they also lower with TE compilers of their own, never the
process-wide one relay_aot lowers with).
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import te
from tvm.topi.x86 import conv2d_avx_1x1, conv2d_avx_common

from ..gate import Gate
from .schedule_rules import _vector_registers


def _fused_output(
    s: te.Schedule, data_vec: te.Tensor, kernel_vec: te.Tensor, conv_out: te.Tensor, last: te.Tensor
) -> tuple[int, te.Stage] | None:
    """For a convolution fused with later operators into a packed (5-D) output: the input channel
    block and the accumulator stage, with the pad stage scheduled as TVM does and the
    convolution's own stage inlined into ``last``. None where TVM's schedule applies."""
    if not _GATE.active() or conv_out == last or len(s[last].op.axis) != 5:
        return None
    if isinstance(kernel_vec.op, te.ComputeOp) and kernel_vec.name == "kernel_vec":
        return None  # TVM's unpacked conv2d_nchw (tests only) packs in the kernel
    ic_bn = int(data_vec.shape[-1])
    if isinstance(s[data_vec].op, te.ComputeOp) and "pad" in data_vec.op.tag:
        batch, ic_chunk, ih, _, ic_block = s[data_vec].op.axis
        s[data_vec].vectorize(ic_block)
        s[data_vec].parallel(s[data_vec].fuse(batch, ic_chunk, ih))
    accumulators = s.cache_write(conv_out, "global")
    s[conv_out].compute_inline()
    return ic_bn, s[accumulators]


def _blocked_output(s: te.Schedule, last: te.Tensor, rows: int | None, columns: int, pairs: bool = False):
    """``last``'s loops as TVM orders the convolution's: a parallel loop over channel blocks and
    (blocks of ``rows``) rows, then blocks of ``columns``, the channel block in a vector. The
    loop over column blocks, where the accumulators are computed. ``pairs`` (no ``rows``): the
    parallel loop over pairs of channel blocks, the pair inside the block of columns
    (:func:`_channel_pairs`)."""
    stage = s[last]
    batch, oc_chunk, oh, ow, oc_block = stage.op.axis
    pair = []
    if pairs:
        oc_chunk, oc_inner = stage.split(oc_chunk, factor=2)
        pair = [oc_inner]
    ow_outer, ow_inner = stage.split(ow, factor=columns)
    if rows is None:
        stage.reorder(oc_chunk, oh, ow_outer, *pair, ow_inner, oc_block)
        parallel_axis = stage.fuse(batch, oc_chunk, oh)
    else:
        oh_outer, oh_inner = stage.split(oh, factor=rows)
        stage.reorder(oc_chunk, oh_outer, ow_outer, oh_inner, ow_inner, oc_block)
        parallel_axis = stage.fuse(batch, oc_chunk, oh_outer)
    stage.vectorize(oc_block)
    stage.parallel(parallel_axis)
    return ow_outer


def _fused_variant(module, accumulators: Callable) -> Callable:
    """``module``'s ``_schedule_conv_NCHWc``, where the convolution is fused into a packed output
    with ``accumulators(s, cfg, last, ic_bn, stage)`` scheduling the accumulator stage; TVM's
    own elsewhere."""
    original = module._schedule_conv_NCHWc

    def schedule(s, cfg, data_vec, kernel_vec, conv_out, last):
        fused = _fused_output(s, data_vec, kernel_vec, conv_out, last)
        if fused is None:
            return original(s, cfg, data_vec, kernel_vec, conv_out, last)
        accumulators(s, cfg, last, *fused)
        return s

    return schedule


def _common_accumulators(s, cfg, last, ic_bn: int, cc: te.Stage) -> None:
    """The accumulators of ``conv2d_avx_common``'s schedule, at the output's block of columns."""
    reg_n, unroll_kw = cfg["tile_ow"].size[-1], cfg["unroll_kw"].val
    cc.compute_at(s[last], _blocked_output(s, last, None, reg_n))
    # The accumulators' loops exactly as TVM's schedule orders them.
    _, oc_chunk, oh, ow, oc_block = cc.op.axis
    ic, kh, kw = cc.op.reduce_axis
    ow_chunk, ow_block = cc.split(ow, factor=reg_n)
    ic_chunk, ic_block = cc.split(ic, factor=ic_bn)
    if unroll_kw:
        cc.reorder(oc_chunk, oh, ow_chunk, ic_chunk, kh, ic_block, kw, ow_block, oc_block)
        cc.unroll(kw)
    else:
        cc.reorder(oc_chunk, oh, ow_chunk, ic_chunk, kh, kw, ic_block, ow_block, oc_block)
    cc.vectorize(oc_block)
    cc.unroll(ow_block)


def _1x1_accumulators(s, cfg, last, ic_bn: int, cc: te.Stage) -> None:
    """The accumulators of ``conv2d_avx_1x1``'s schedule. TVM computes those of a block of rows,
    all its columns, then copies them out; here those of one register block (rows x columns),
    at the output's loop over columns."""
    oh_factor, ow_factor = cfg["tile_oh"].val, cfg["tile_ow"].size[-1]
    cc.compute_at(s[last], _blocked_output(s, last, oh_factor, ow_factor))
    _, oc_chunk, oh, ow, oc_block = cc.op.axis
    ic, _, _ = cc.op.reduce_axis
    ic_chunk, ic_block = cc.split(ic, factor=ic_bn)
    oh_outer, oh_inner = cc.split(oh, factor=oh_factor)
    ow_outer, ow_inner = cc.split(ow, factor=ow_factor)
    cc.reorder(oc_chunk, oh_outer, ow_outer, ic_chunk, ic_block, oh_inner, ow_inner, oc_block)
    cc.fuse(oc_chunk, oh_outer)
    cc.vectorize(oc_block)
    cc.unroll(ow_inner)
    cc.unroll(oh_inner)


def _fused_int8_variant(module, accumulators: Callable) -> Callable:
    """``module``'s ``_schedule_conv_NCHWc_int8`` (uint8 x int8, ``conv2d_NCHWc_int8``), where the
    convolution is fused into a packed output: ``accumulators(s, cfg, last, ic_bn, stage,
    intrin)`` schedules the accumulator stage. TVM's own elsewhere."""
    original = module._schedule_conv_NCHWc_int8

    def schedule(s, cfg, data_vec, kernel_vec, conv_out, last):
        fused = _fused_output(s, data_vec, kernel_vec, conv_out, last)
        if fused is None:
            return original(s, cfg, data_vec, kernel_vec, conv_out, last)
        # the intrinsic the module's schedule tensorizes with (kernels/vnni.py's, while building)
        accumulators(s, cfg, last, *fused, module.dot_16x1x16_uint8_int8_int32())
        return s

    return schedule


def _int8_lanes(cc: te.Stage, oc_block, intrin: te.TensorIntrin):
    """``oc_block`` split into blocks of the intrinsic's int32 lanes: (outer, inner)."""
    lanes = int(intrin.op.output(0).shape[0])
    return cc.split(oc_block, factor=lanes)


#: ``vpdpbusd``s in flight for the full rate: two a cycle, each four cycles before its sum can
#: take the next (Zen 5; Intel's since Ice Lake alike). A register block of fewer accumulators
#: waits on them: 8 run at 1.81 a cycle, 11 and more at 2.0.
_ACCUMULATORS_IN_FLIGHT = 11


def _channel_pairs(last: te.Tensor, reg_n: int, intrin: te.TensorIntrin, unroll_kw: bool) -> bool:
    """Whether ``last``'s register block takes two channel blocks: where a block of ``reg_n``
    columns of one gives fewer accumulators than :data:`_ACCUMULATORS_IN_FLIGHT` (rows 8 wide:
    ResNet-8's last stage), there are channel blocks to pair, and twice the accumulators, the
    weights of both blocks and a broadcast input fit in the vector registers. Each input then
    feeds two ``vpdpbusd``s: MLPerf Tiny's ResNet-8, its two 8x8 layers 3.10 -> 2.77 and 5.58 ->
    5.24 us. TVM's configurations have no such knob; unrolled ``kw`` keeps TVM's blocking."""
    lanes = int(intrin.op.output(0).shape[0])
    chunks, oc_bn = (int(extent) for extent in (last.shape[1], last.shape[4]))
    accumulators = reg_n * (oc_bn // lanes)
    _, registers = _vector_registers(tvm.target.Target.current())
    return (
        not unroll_kw
        and accumulators < _ACCUMULATORS_IN_FLIGHT
        and chunks % 2 == 0
        and 2 * accumulators + 2 * (oc_bn // lanes) + 1 <= registers
    )


def _register_block(last: te.Tensor, reg_n: int, intrin: te.TensorIntrin, unroll_kw: bool) -> tuple[int, bool]:
    """The columns of ``last``'s register block and whether it takes two channel blocks: TVM's
    ``reg_n`` columns, paired where :func:`_channel_pairs` says so; else, where half the columns
    of two channel blocks fit, those. A block of one channel block issues one broadcast load of
    the input per ``vpdpbusd`` (with the weights' loads, more loads than the load ports take at
    two ``vpdpbusd`` a cycle); of two, one per two: MLPerf Tiny's ResNet-8, whose two 16 x 16
    layers of 32 channels had 16 columns of one block, 39.1 -> 38.6 us (A/B in one process,
    repeated: 0.3 to 0.6 us less)."""
    if _channel_pairs(last, reg_n, intrin, unroll_kw):
        return reg_n, True
    if reg_n % 2 == 0 and _channel_pairs(last, reg_n // 2, intrin, unroll_kw):
        return reg_n // 2, True
    return reg_n, False


def _common_int8_accumulators(s, cfg, last, ic_bn: int, cc: te.Stage, intrin: te.TensorIntrin) -> None:
    """The accumulators of TVM's int8 schedule (``schedule_conv_NCHWc_cpu_common_int8``), at the
    output's block of columns: TVM computes the fused case one column at a time (the
    convolution at the output's innermost column loop), one accumulator whose every
    ``vpdpbusd`` waits for the one before; here the block's ``reg_n`` columns have one each
    (of two channel blocks where one gives too few or loads bind: :func:`_register_block`)."""
    unroll_kw = cfg["unroll_kw"].val
    reg_n, pairs = _register_block(last, cfg["tile_ow"].size[-1], intrin, unroll_kw)
    cc.compute_at(s[last], _blocked_output(s, last, None, reg_n, pairs))
    _, oc_chunk, oh, ow, oc_block = cc.op.axis
    kh, kw, ic_outer, ic_f_inner, ic_s_inner = cc.op.reduce_axis
    ow_chunk, ow_block = cc.split(ow, factor=reg_n)
    oc_f_inner, oc_s_inner = _int8_lanes(cc, oc_block, intrin)
    if pairs:
        # each column's input broadcast once for both blocks' weights
        cc.reorder(oh, ow_chunk, ic_outer, kh, kw, ic_f_inner, ow_block, oc_chunk, oc_f_inner, oc_s_inner, ic_s_inner)
        cc.unroll(oc_chunk)
    elif unroll_kw:
        cc.reorder(oc_chunk, oh, ow_chunk, ic_outer, kh, ic_f_inner, kw, ow_block, oc_f_inner, oc_s_inner, ic_s_inner)
        cc.unroll(kw)
    else:
        cc.reorder(oc_chunk, oh, ow_chunk, ic_outer, kh, kw, ic_f_inner, ow_block, oc_f_inner, oc_s_inner, ic_s_inner)
    cc.tensorize(oc_s_inner, intrin)
    cc.unroll(ow_block)
    cc.unroll(oc_f_inner)


def fused_int8(s, cfg, data_vec, kernel_vec, conv_out, last, intrin: te.TensorIntrin) -> bool:
    """:func:`_common_int8_accumulators` for a uint8 x int8 kernel of relay_aot's own
    (``int8_by_eight``: ``intrin`` of eight lanes) where the convolution is fused into a packed
    output; False (nothing scheduled) elsewhere."""
    fused = _fused_output(s, data_vec, kernel_vec, conv_out, last)
    if fused is None:
        return False
    _common_int8_accumulators(s, cfg, last, *fused, intrin)
    return True


def _1x1_int8_accumulators(s, cfg, last, ic_bn: int, cc: te.Stage, intrin: te.TensorIntrin) -> None:
    """The accumulators of TVM's 1x1 int8 schedule (``schedule_conv_NCHWc_cpu_1x1_int8``) of one
    register block (rows x columns), at the output's loop over columns (TVM: those of a block of
    rows, all its columns, then copied out)."""
    oh_factor, ow_factor = cfg["tile_oh"].val, cfg["tile_ow"].size[-1]
    cc.compute_at(s[last], _blocked_output(s, last, oh_factor, ow_factor))
    _, oc_chunk, oh, ow, oc_block = cc.op.axis
    kh, kw, ic_outer, ic_f_inner, ic_s_inner = cc.op.reduce_axis
    oc_f_inner, oc_s_inner = _int8_lanes(cc, oc_block, intrin)
    oh_outer, oh_inner = cc.split(oh, factor=oh_factor)
    ow_outer, ow_inner = cc.split(ow, factor=ow_factor)
    cc.reorder(
        oc_chunk,
        oh_outer,
        ow_outer,
        kh,
        kw,
        ic_outer,
        ic_f_inner,
        oh_inner,
        ow_inner,
        oc_f_inner,
        oc_s_inner,
        ic_s_inner,
    )
    cc.fuse(oc_chunk, oh_outer)
    cc.tensorize(oc_s_inner, intrin)
    cc.unroll(ow_inner)
    cc.unroll(oh_inner)


def _install() -> None:
    # topi.x86.conv2d and conv2d_int8 look them up on their modules at every call.
    for module, accumulators in ((conv2d_avx_common, _common_accumulators), (conv2d_avx_1x1, _1x1_accumulators)):
        module._schedule_conv_NCHWc = _fused_variant(module, accumulators)
    for module, int8_accumulators in (
        (conv2d_avx_common, _common_int8_accumulators),
        (conv2d_avx_1x1, _1x1_int8_accumulators),
    ):
        module._schedule_conv_NCHWc_int8 = _fused_int8_variant(module, int8_accumulators)


_GATE = Gate(_install)
#: Within the block (on this thread), x86 packed convolutions fused with later operators apply
#: them to their accumulators before storing (module docstring).
building = _GATE.building

"""Schedules relay_aot picks by shape where TVM's untuned fallback is weak.

Without tuning records TVM schedules a kernel with its template's fallback configuration. For
x86's packed matrix product (``dense_pack.x86``, what ``nn.dense`` with constant weights
becomes) that fallback is one fixed rule: 16 or 32 columns and 8 rows per register block, the
whole reduction in one loop. On AVX2, with 16 vector registers, 8 rows by 2 vectors is 16
accumulators: every register, so the block spills and the product runs at a third of the
machine's speed (an ONNX MLP 784-512-512-10 at batch 64: 3.3 ms where onnxruntime takes 1.1).
x86's ``NCHWc`` convolution (``conv2d_NCHWc.x86``) falls back to up to 31 output columns at
once, one accumulator each: the same spill (ResNet-50: 200 ms, 120 ms with the rule); its
depthwise twin (``depthwise_conv2d_NCHWc.x86``) too. On AVX2 the rule also blocks channels by
two vectors where they divide (``NCHW16c``), which AutoTVM's records for SqueezeNet chose for
most layers; TVM's fallback blocks one. With AVX-512's 32 registers TVM's blocks fit, and only
two cases are ruled (:func:`_avx512_convolution`): rows whose width has no wide divisor, and a
classifier's pointwise convolution over one row. On both, an input of fewer channels than a
vector (an image's) is blocked one channel per block, which is its own layout
(:func:`_conv2d_nchwc_config`).

:class:`ShapeRules` is an AutoTVM dispatch context that answers, for the templates it has a
rule for, with a configuration chosen by the shapes and the target's vector registers; every
other query, and any workload the enclosing contexts have a tuning record for, goes where it
went before. Tuned records always win: the rule's configurations cost infinity in TVM's
comparison. ``kernels.tuning.watch`` enters it wherever relay_aot asks AutoTVM, so layout
passes (which choose the packed weight layout from the same configuration) and kernel lowering
agree. The rule is part of relay_aot's sources, which every cache key covers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
import tvm.topi.x86.conv2d  # noqa: F401 (its fallback configuration, the base of the rule)
from tvm import autotvm, te
from tvm.autotvm.task.space import ConfigEntity, FallbackConfigEntity, OtherOptionEntity, SplitEntity


def _const_ints(shape) -> list[int] | None:
    if not all(isinstance(d, (int, tvm.tir.IntImm)) for d in shape):
        return None
    return [int(d) for d in shape]


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _computed(width: int, columns: int) -> int:
    """Columns a row ``width`` wide computes in blocks of ``columns`` (its last block partial
    where they do not divide it)."""
    return -(-width // columns) * columns


def _vector_registers(target: tvm.target.Target) -> tuple[int, int]:
    """float32 lanes of the target's vectors (TVM's choice), and how many vector registers it
    has: 32 with AVX-512, else 16."""
    with target:
        lanes = tvm.target.x86.get_simd_32bit_lanes()
    return lanes, 32 if lanes == 16 else 16


def _ruled(entities: dict) -> ConfigEntity:
    """A configuration of the rule's: it costs infinity, so any tuning record wins over it."""
    config = ConfigEntity(-1, None, entities, [])
    config.cost = float("inf")
    return config


def dense_pack_blocking(m: int, n: int, lanes: int, registers: int, columns: int | None = None) -> tuple[int, int]:
    """Rows and columns of the register block of an ``m`` x ``n`` packed product.

    The accumulators (rows x vectors per row) fill at most half of the vector registers: the
    rest hold the weight vectors loaded and the broadcast inputs. Among the blocks that use the
    most accumulators within that budget, the one two vectors wide (measured on AVX2: 4 x 16
    beats 2 x 32 by 0-10% and 8 x 8 by 2x), then the one loading the fewest values per
    multiply-add. ``columns``: the packing is fixed already (the weight was packed to it).
    """
    budget = registers // 2
    candidates = []
    # Up to a budget of vectors in one row: a matrix-vector product (one row) wants them all
    # (1 x 1000 on AVX2: 40 columns, 5 accumulators, 230 us; TVM's 10 columns, 365 us).
    column_options = (
        [columns]
        if columns
        else [c for c in _divisors(n, budget * lanes) if c % lanes == 0] or [max(_divisors(n, 2 * lanes))]
    )
    for cols in column_options:
        vectors = -(-cols // lanes)
        for rows in _divisors(m, 8):
            accumulators = rows * vectors
            if accumulators > budget and rows > 1:
                continue
            loads_per_fma = (rows + vectors) / accumulators
            candidates.append((-accumulators, abs(vectors - 2), loads_per_fma, cols, rows))
    *_, cols, rows = min(candidates)
    return rows, cols


def _tensor(arg, shape) -> tuple:
    return ("TENSOR", tuple(shape), arg[2])


def _tensor_shape(arg) -> list[int] | None:
    """The constant shape of a workload's tensor argument (None if it is not one)."""
    if not (isinstance(arg, tuple) and len(arg) == 3 and arg[0] == "TENSOR"):
        return None
    return _const_ints(arg[1])


def _unpacked_conv(workload, depthwise: bool) -> tuple[tuple, dict] | None:
    """A packed convolution's workload as the convolution before packing, and its blocks as the
    splits whose innermost factors they are (None if ``workload`` is not packed)."""
    # ("conv2d_NCHWc.x86", data, kernel, strides, padding, dilation, "NCHW8c", "NCHW16c", out_dtype)
    # depthwise: kernel (oc_chunks, 1, kh, kw, 1, oc_bn); else (oc_chunks, ic_chunks, kh, kw, ic_bn, oc_bn)
    if len(workload) != 9:
        return None
    name, data, kernel, strides, padding, dilation, _, _, out_dtype = workload
    data_shape, kernel_shape = _tensor_shape(data), _tensor_shape(kernel)
    if data_shape is None or kernel_shape is None or len(data_shape) != 5 or len(kernel_shape) != 6:
        return None
    n, ic_chunks, height, width, ic_bn = data_shape
    oc_chunks, kernel_ic, kh, kw, _, oc_bn = kernel_shape
    channels = ic_chunks * ic_bn
    unpacked = (
        name,
        _tensor(data, (n, channels, height, width)),
        _tensor(kernel, (oc_chunks * oc_bn, 1 if depthwise else kernel_ic * ic_bn, kh, kw)),
        strides,
        padding,
        dilation,
        "NCHW",
        "NCHW",
        out_dtype,
    )
    return unpacked, {"tile_ic": ic_bn, "tile_oc": oc_bn}


def _unpacked_dense(workload) -> tuple[tuple, dict] | None:
    """A packed dense product's workload with its weight unpacked, and its columns as the split
    whose innermost factor they are (None if the weight is not packed)."""
    # ("dense_pack.x86", data, weight (n / columns, k, columns), [bias, out_dtype])
    if len(workload) < 3:
        return None
    name, data, weight, *rest = workload
    shape = _tensor_shape(weight)
    if shape is None or len(shape) != 3:
        return None
    chunks, k, columns = shape
    return (name, data, _tensor(weight, (chunks * columns, k)), *rest), {"tile_x": columns}


def _dense_pack_config(workload, target: tvm.target.Target) -> ConfigEntity | None:
    # workload: ("dense_pack.x86", data, weight, bias, out_dtype), tensors as ("TENSOR", shape, dtype)
    columns = None
    packed = _unpacked_dense(workload)
    if packed is not None:  # packed already: the columns are fixed
        workload, blocks = packed
        columns = blocks["tile_x"]
    data, weight = workload[1], workload[2]
    data_shape, weight_shape = _const_ints(data[1]), _const_ints(weight[1])
    if data_shape is None or weight_shape is None or data[2] != "float32":
        return None
    m, k = data_shape
    n = weight_shape[0]
    lanes, registers = _vector_registers(target)
    rows, cols = dense_pack_blocking(m, n, lanes, registers, columns)
    return _ruled(
        {
            "tile_y": SplitEntity([m // rows, 1, rows]),
            "tile_x": SplitEntity([n // cols, 1, cols]),
            "tile_k": SplitEntity([k, 1]),
            "tile_inner": SplitEntity([m // rows, rows]),
        }
    )


def conv_register_block(width: int, fallback: int) -> int:
    """Output columns a direct convolution computes at once on a 16-register target (AVX2):
    at most 12 accumulators (TVM's ``fallback`` takes up to 31 and spills: 27 columns of a
    27-wide SqueezeNet layer run at half the speed of 9), but not fewer than 6 where a divisor
    of up to 16 allows (13 columns of a 13-wide layer beat 1).

    A width with no divisor from 6 to 16 (17, 71, 111: TVM takes 17 columns, 1 and 3) gets a
    block that does not divide it, its last one partial (the schedule's split guards it): of 6
    to 10 columns, the one wasting the fewest, then the one nearest 8 (Inception-v3's 71-wide
    3x3 layer, 192 filters: 100 ms with 1 column, 17 ms with 8; its 17-wide ones 2.4x faster
    with 9 than with 17).
    """
    divisors = _divisors(width, 16)
    fitting = max(d for d in divisors if d <= 12)
    if fitting >= 6:
        return fitting
    wider = [d for d in divisors if d >= 6]
    if wider:
        return min(wider)
    if width <= 16:
        return fallback
    return min(range(6, 11), key=lambda columns: (_computed(width, columns), abs(columns - 8)))


#: Output columns per register block when a block holds two vectors of output channels: 8 or
#: 10 accumulators of AVX2's 16 registers (see :func:`pair_columns`).
PAIR_COLUMNS = (4, 5)


def pair_columns(width: int) -> int:
    """Output columns per register block of a convolution whose channel block is two vectors:
    of :data:`PAIR_COLUMNS`, the one computing the fewest columns in all (the last block of a
    row is partial where the count does not divide ``width``), 4 when they tie.

    4 columns is what AutoTVM chose for most of SqueezeNet's layers; 6 measured no faster there
    and slower on ResNet-18. A 13-wide row is three blocks of 5 (15 columns computed) or four
    of 4 (16): SqueezeNet's 13-wide 3x3 layers take 0.59 and 0.33 ms with 5, 0.66 and 0.37 with
    4; its 55-wide one 0.59 with 5 (55 = 11 x 5), 0.63 with 4; ResNet's 56-wide one 2.41 ms
    with 4 (exact), 2.54 with 5; 7-wide, 4.25 with 4 and 4.47 with 5 (kernels alone, one
    thread, Zen 3).
    """
    if width <= min(PAIR_COLUMNS):
        return width
    return min(PAIR_COLUMNS, key=lambda columns: (_computed(width, columns), columns))


def conv_channel_block(channels: int, lanes: int, fallback: int) -> int:
    """Channels per block of a packed (``NCHW{c}c``) convolution on a 16-register target: two
    vectors where they divide ``channels`` (16 on AVX2), else TVM's ``fallback`` (one vector at
    most).

    Two vectors of output channels make each broadcast input value feed two multiply-adds, not
    one. Input channels take the same block, so that a network's layers agree on one layout and
    no layout transform comes between them. Untuned, one thread, Zen 3 (AVX2), with
    4 output columns (before :func:`pair_columns`): light-zoo SqueezeNet 12.0 -> 9.9 ms, ResNet-50 115 -> 106 ms,
    relay.testing ResNet-18 50 -> 45 ms, Inception-v3 156 -> 144 ms; ShuffleNet unchanged.
    """
    block = 2 * lanes
    return block if channels % block == 0 else fallback


def _output_width(width: int, kernel_width: int, strides, padding, dilation) -> int:
    """A convolution's output width (``padding`` as a workload holds it: 2 or 4 values)."""
    left, right = (padding[1], padding[3]) if len(padding) == 4 else (padding[1], padding[1])
    dilated = (kernel_width - 1) * dilation[1] + 1
    return (width + left + right - dilated) // strides[1] + 1


def _ruled_convolution(workload, target: tvm.target.Target, depthwise: bool):
    """What the convolution rules read of ``workload``: the workload before packing, the channel
    blocks a packed one has fixed (else None), its data and kernel shapes; None where no rule
    applies (not float32, shapes not constant)."""
    # workload: (name, data, kernel, strides, padding, dilation, layout, out_layout, out_dtype)
    blocks = None
    packed = _unpacked_conv(workload, depthwise=depthwise)
    if packed is not None:  # packed already: the channel blocks are fixed
        workload, split = packed
        blocks = (split["tile_ic"], split["tile_oc"])
    data, kernel, layout = workload[1], workload[2], workload[6]
    data_shape, kernel_shape = _const_ints(data[1]), _const_ints(kernel[1])
    if data_shape is None or kernel_shape is None or data[2] != "float32" or kernel[2] != "float32":
        return None
    if len(data_shape) != 4 or str(layout) != "NCHW":
        return None
    return workload, blocks, data_shape, kernel_shape


#: On AVX-512, TVM's direct convolution computes as many output columns at once as the largest
#: divisor of the row's width up to 31: with fewer than this many, the multiply-adds wait on
#: each other. A width with no larger divisor instead gets one of :data:`AVX512_COLUMNS`, the
#: one computing the fewest columns in all (a partial last block), then the fewest. Kernels
#: alone, one thread, Xeon "emeraldrapids": SqueezeNet 1.1's first layer (3x3, stride 2, 111
#: wide) 422 us with TVM's 3 columns, 276 with 14 (onnxruntime: 353); 64 -> 96 channels 3x3 over
#: 71 columns (Inception-v3) 19.8 ms with 1, 3.3 with 12; 29 columns 2.17 ms with 1, 0.37 with 15.
AVX512_FEWEST_COLUMNS = 8
AVX512_COLUMNS = range(12, 17)


def row_columns(width: int, most: int) -> int:
    """Output columns per register block of a row ``width`` wide, at most ``most``: the largest
    divisor from ``most / 2`` up, else the count wasting the fewest columns of a partial last
    block (then the larger). SqueezeNet's classifier as one row of 169 pixels takes 13; ResNet-50's
    49, 7 (AVX-512, two vectors of channels: 13 or 14 columns of 49, 1.3-1.7x slower)."""
    if width <= most:
        return width
    divisor = max(d for d in _divisors(width, most))
    if 2 * divisor >= most:
        return divisor
    return min(range(-(-most // 2), most + 1), key=lambda columns: (_computed(width, columns), -columns))


def _avx512_row_config(
    entities: dict, channels: int, filters: int, width: int, lanes: int, registers: int, blocks
) -> dict | None:
    """A pointwise convolution over one row (what ``passes/pooled_pointwise`` makes of a
    classifier) on a 32-register target: output channels by two vectors where they divide, its
    columns up to 7/8 of the registers as accumulators, its input channels as TVM's fallback
    blocks them (one vector: the layout of the layers before). TVM blocks one vector, its
    broadcast input feeding one multiply-add: SqueezeNet's 1024-filter classifier, one row of
    169, 1.26 ms; 1.06 with two (onnxruntime: 1.07 ms); ResNet-50's, 512 -> 2048 over 49 pixels,
    0.88 -> 0.69 ms (kernels alone, one thread, Xeon "emeraldrapids"). Other convolutions keep
    TVM's blocks there: two-vector blocks throughout measured no faster on SqueezeNet, and
    layers blocked apart would need layout transforms between them."""
    oc_block = blocks[1] if blocks is not None else 2 * lanes
    if "tile_oh" not in entities or oc_block != 2 * lanes or filters % oc_block:
        return None  # not the 1x1 template, or packed to other blocks
    ic_block = blocks[0] if blocks is not None else entities["tile_ic"].size[-1]
    columns = row_columns(width, (registers * 7 // 8) // 2)
    return {
        **entities,
        "tile_ic": SplitEntity([channels // ic_block, ic_block]),
        "tile_oc": SplitEntity([filters // oc_block, oc_block]),
        "tile_ow": SplitEntity([-(-width // columns), columns]),
        "tile_oh": OtherOptionEntity(1),
    }


def _avx512_convolution(
    entities: dict, blocks, channels: int, filters: int, height: int, kernel_size: int, lanes: int, registers: int
) -> dict | None:
    """On AVX-512 TVM's blocks (``entities``, its fallback) fit the 32 registers; two cases are
    ruled: a pointwise convolution over one row (:func:`_avx512_row_config`), and a row whose
    width has no divisor of :data:`AVX512_FEWEST_COLUMNS` or more (:data:`AVX512_COLUMNS`)."""
    out_width = int(np.prod(entities["tile_ow"].size))
    if kernel_size == 1:
        if height != 1:
            return None
        return _avx512_row_config(entities, channels, filters, out_width, lanes, registers, blocks)
    if blocks is not None and (entities["tile_ic"].size[-1], entities["tile_oc"].size[-1]) != blocks:
        return None  # packed to other blocks than TVM's
    columns = entities["tile_ow"].size[-1]
    if columns >= AVX512_FEWEST_COLUMNS or columns == out_width:
        return None
    columns = min(AVX512_COLUMNS, key=lambda columns: (_computed(out_width, columns), columns))
    return {**entities, "tile_ow": SplitEntity([-(-out_width // columns), columns])}


def _conv2d_nchwc_config(workload, target: tvm.target.Target) -> ConfigEntity | None:
    """relay_aot's configuration of an untuned x86 ``conv2d_NCHWc`` (None: TVM's fallback).

    An input of fewer channels than a vector (an image's 3) is blocked one channel per block,
    as ``NCHW1c``, which holds ``NCHW``'s bytes: the network's input then needs no layout
    transform (``kernels/copies.py``'s VIEW), where TVM's block of all 3 channels transposes it
    (76 us of light-zoo SqueezeNet's 5.6 ms). The convolution measured as fast: 3x3 over 224,
    stride 2, 64 filters 399 against 408 us; 7x7, 64 filters 1.69 against 1.70 ms (kernels
    alone, one thread, Xeon "emeraldrapids"). The packed kernel's lowering asks again, its blocks
    fixed, and gets the same answer (SqueezeNet's first layer in the network: 313 us with the
    rule's 14 columns, 593 with TVM's 3)."""
    ruled = _ruled_convolution(workload, target, depthwise=False)
    if ruled is None:
        return None
    workload, blocks, data_shape, kernel_shape = ruled
    strides, padding, dilation, out_dtype = workload[3], workload[4], workload[5], workload[8]
    n, channels, height, width = data_shape
    filters, kernel_channels, kh, kw = kernel_shape
    if kernel_channels != channels:
        return None  # grouped: another template
    fallback = FallbackConfigEntity()
    with target:
        tvm.topi.x86.conv2d._get_default_config(
            fallback,
            te.placeholder((n, channels, height, width)),
            te.placeholder((filters, channels, kh, kw)),
            strides,
            padding,
            dilation,
            out_dtype,
        )
    entities = dict(fallback._entity_map)
    lanes, registers = _vector_registers(target)
    # The packed kernel of an image's convolution is asked for again when it is lowered, its
    # input blocks (1) fixed: it must get the configuration the layout pass packed it to.
    image = channels < lanes and (blocks is None or blocks[0] == 1)
    if image:
        entities["tile_ic"] = SplitEntity([channels, 1])
    if registers > 16:
        ruled = _avx512_convolution(entities, blocks, channels, filters, height, kh * kw, lanes, registers)
        return _ruled(ruled or entities) if ruled or image else None
    if blocks is None:
        blocks = (
            1 if image else conv_channel_block(channels, lanes, entities["tile_ic"].size[-1]),
            conv_channel_block(filters, lanes, entities["tile_oc"].size[-1]),
        )
    entities["tile_ic"] = SplitEntity([channels // blocks[0], blocks[0]])
    entities["tile_oc"] = SplitEntity([filters // blocks[1], blocks[1]])
    out_width = int(np.prod(entities["tile_ow"].size))
    if blocks[1] == 2 * lanes:
        columns = pair_columns(out_width)
    else:
        columns = conv_register_block(out_width, entities["tile_ow"].size[-1])
    entities["tile_ow"] = SplitEntity([-(-out_width // columns), columns])
    if "tile_oh" in entities:  # 1x1 kernels: one output row per block
        entities["tile_oh"] = OtherOptionEntity(1)
    return _ruled(entities)


def _depthwise_nchwc_config(workload, target: tvm.target.Target) -> ConfigEntity | None:
    ruled = _ruled_convolution(workload, target, depthwise=True)
    lanes, registers = _vector_registers(target)
    if ruled is None or registers > 16:  # AVX-512: TVM's blocks fit
        return None
    workload, blocks, data_shape, kernel_shape = ruled
    strides, padding, dilation = workload[3], workload[4], workload[5]
    _, channels, _, width = data_shape
    filters, multiplier, _, kernel_width = kernel_shape
    if multiplier != 1 or filters != channels:
        return None
    if blocks is None:
        # TVM's fallback (topi/x86/depthwise_conv2d.py): the largest divisor up to one vector.
        block = conv_channel_block(channels, lanes, max(_divisors(channels, lanes)))
        blocks = (block, block)
    out_width = _output_width(width, kernel_width, strides, padding, dilation)
    # TVM takes the largest divisor up to 31 columns (28 of MobileNet's 112-wide layers), one
    # or two vectors of accumulators each: they spill. Up to 6 (MobileNet 17.7 -> 16.1 ms).
    columns = max(_divisors(out_width, 6))
    return _ruled(
        {
            "tile_ic": SplitEntity([channels // blocks[0], blocks[0]]),
            "tile_oc": SplitEntity([filters // blocks[1], blocks[1]]),
            "tile_ow": SplitEntity([out_width // columns, columns]),
            "unroll_kw": OtherOptionEntity(False),
        }
    )


#: The templates with a rule here, by AutoTVM task name.
RULES = {
    "dense_pack.x86": _dense_pack_config,
    "conv2d_NCHWc.x86": _conv2d_nchwc_config,
    "depthwise_conv2d_NCHWc.x86": _depthwise_nchwc_config,
}


#: How TVM's x86 ``AlterOpLayout`` renames a tuned workload when it packs the operator's layout
#: (topi/x86/conv2d_alter_op.py, dense_alter_op.py), inverted: packed workload -> the workload
#: tuned (the operator before packing), and the split whose innermost factor is the packing.
_UNPACKED = {
    "conv2d_NCHWc.x86": lambda w: _unpacked_conv(w, depthwise=False),
    "depthwise_conv2d_NCHWc.x86": lambda w: _unpacked_conv(w, depthwise=True),
    "dense_pack.x86": _unpacked_dense,
}


def tuned_before_packing(query: Callable, workload: tuple):
    """The tuning record for packed ``workload`` of the operator before ``AlterOpLayout`` packed it.

    TVM's layout pass packs a tuned convolution (or dense) to the blocking of its record, and
    hands the record on to the packed kernel by *updating* the dispatch context under the packed
    workload; lowering in that same context then finds it. relay_aot lowers kernels later, in a
    context of its own (and a cached prepared module skips the layout pass altogether), so the
    record is looked up here instead, by the packed workload alone: its shapes, unpacked, are the
    workload tuned. ``query(workload)`` asks the enclosing contexts; None where they have no
    record, or where the record's blocking is not this packing (then it is not what was packed).
    """
    unpack = _UNPACKED.get(workload[0]) if workload else None
    found = unpack(workload) if unpack is not None else None
    if found is None:
        return None
    unpacked, blocks = found
    answer = query(unpacked)
    if answer is None or getattr(answer, "is_fallback", False):
        return None
    try:
        if any(answer[knob].size[-1] != size for knob, size in blocks.items()):
            return None
    except (KeyError, AttributeError, IndexError):
        return None
    return answer


class ShapeRules(autotvm.task.DispatchContext):
    """AutoTVM's answers, with relay_aot's rule where they would be a fallback configuration."""

    def __init__(self, untuned: Callable[[tuple], None] | None = None) -> None:
        """``untuned(workload)`` is called whenever a rule answers: the kernel still has no
        tuning record (and tuning may beat the rule)."""
        super().__init__()
        self.memory: dict = {}
        self.ruled: set = set()
        self.untuned = untuned

    def _query_inside(self, target, workload):
        key = (str(target), workload)
        if key not in self.memory:
            # A tuning record (or an explicit configuration) in an enclosing context comes first:
            # the workload's own, else that of the operator it packs; else whatever they answer.
            answer = self._recorded(target, workload)
            if answer is None:
                answer = tuned_before_packing(lambda unpacked: self._recorded(target, unpacked), workload)
            if answer is None:
                answer = self._old_ctx.query(target, workload)
            if getattr(answer, "is_fallback", False) and workload and workload[0] in RULES:
                ruled = RULES[workload[0]](workload, tvm.target.Target(target))
                if ruled is not None:
                    answer = ruled
                    self.ruled.add(key)
            self.memory[key] = answer
        if key in self.ruled and self.untuned is not None:
            self.untuned(workload)
        return self.memory[key]

    def _recorded(self, target, workload):
        """The tuning record the enclosing contexts have for ``workload``, or None. Unlike
        ``query``, never TVM's fallback, which logs the workload as untuned; and it stops at a
        context of another kind (an explicit configuration, the graph tuner's sequential
        records, which a look-up consumes): ``query`` asks those."""
        context = self._old_ctx
        while isinstance(context, (ShapeRules, autotvm.task.ApplyHistoryBest)):
            if isinstance(context, autotvm.task.ApplyHistoryBest):
                answer = context._query_inside(target, workload)
                if answer is not None:
                    return answer
            context = getattr(context, "_old_ctx", None)
        return None

    def update(self, target, workload, cfg):
        self.memory[(str(target), workload)] = cfg

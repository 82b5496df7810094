"""Winograd convolutions in x86's packed layout: 3x3, stride 1, on AVX-512.

A direct 3x3 convolution spends 9 multiply-adds per input channel on each output value, and on
AVX-512 TVM's (and onnxruntime's) direct kernels already run SqueezeNet's 3x3 layers at this
core's peak. Winograd's F(m x m, 3 x 3) computes an m x m tile of outputs from an
(m+2) x (m+2) tile of inputs with (m+2)^2 products per channel pair instead of 9 m^2: 2.25 times
fewer for m = 2, 4 times fewer for m = 4, at the price of two linear transforms per tile and
rounding of a few float32 ulps (relative error 1e-6 of the largest output on SqueezeNet's
shapes). TVM 0.19 schedules Winograd on x86 only through its auto-scheduler, so the kernel is
relay_aot's own, in the layout the convolutions around it already use (``NCHW{c}c``):

1. ``V[e, p, c]``: each input tile transformed, ``B^T d B``, one row pass and one column pass,
   vectorised over the input block (unrolled: the transform's coefficients are constants, and
   its zeros and ones cost nothing);
2. ``M[e, k/kb, p, kb] = sum_c V[e, p, c] U[e, k/kb, c, kb]``: (m+2)^2 matrix products, tiles by
   output channels, a register block of tiles by one vector of channels, the weights ``U``
   transformed once when compiling (``passes.winograd.transformed_weights``);
3. each output tile ``A^T M A``, then the fused operators (bias, activation) and one store.

The three stages run per row of tiles, so a row's transformed tiles stay in cache between them.
Kernels alone, one thread, Xeon "emeraldrapids": SqueezeNet 1.1's 3x3 layers (55 wide, 16 -> 64
channels) 170 us against the direct kernel's 330-340; (27, 32 -> 128) 139 against 325;
(13, 48 -> 192) 111 against 177; (13, 64 -> 256, m = 2) 203 against 315.

The transforms spread every input over a whole tile, and multiply magnitudes by up to 49 (B)
and 124 (A) for m = 4: one inf input would make NaN of whole tiles of outputs (a fused relu
then makes wrong zeros of them), an input near 1e37 would overflow where a direct convolution
stays finite. So each row of tiles first checks its m + 2 input rows against a bound the pass
computed from the weights (``passes.winograd.input_bound``: below it, no step of either
computation can overflow); a row with an input above it, inf or NaN, is computed directly
instead, with the original weights, which the weight constant carries after the transformed
ones: its non-finite outputs are a direct convolution's, at the same positions. TE runs every
stage, but a reduction's loop may run 0 times: the row's products loop over the channels 0
times (zeros, whatever its transformed inputs hold) and the direct convolution's 1 time, added
to those zeros; in the other rows, the other way round. The check reads the row's inputs (one
integer maximum per vector, on the bits of ``|x|``, which order finite magnitudes and put inf
and NaN above them), and the kernels' times stayed within 2% either way (Zen 5, one thread,
interleaved: 55 wide 103.0 -> 103.7 us, 27 wide 87.6 -> 86.1, 13 wide 78.7 -> 80.3 and
136.4 -> 136.6); a row computed directly costs about 3 times its Winograd time (every row:
55 wide 278 us against 103 us, TVM's direct kernel 237 us; 13 wide, 64 -> 256, 455 against 134
and 206).

The pass that chooses these convolutions, and their tile size, is ``passes.winograd``. TVM's
strategy for the operator on ``cpu`` targets is wrapped once (at import): calls whose data
layout is packed (``NCHW{c}c``, which only that pass makes) get this kernel, every other call
TVM's strategy as before.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tir, topi
from tvm.relay.op import op as _op
from tvm.relay.op.strategy import generic as _generic
from tvm.relay.op.strategy import x86 as _x86
from tvm.topi.utils import get_const_tuple

from ..passes.winograd import packed_block, transform_matrices
from .te_stages import find_tagged, inline_between

#: Tiles per register block of the matrix products (times one vector of output channels).
TILES_PER_BLOCK = 8

#: The kernel's tag: the schedule finds its output stage by it.
TAG = "relay_aot_winograd_nchwc"

#: Weight slices after the ``(m+2)^2`` transformed ones: the 9 original taps, then the bound.
EXTRA_SLICES = 10


def _linear(coefficients: np.ndarray, row: tir.PrimExpr, term) -> tir.PrimExpr:
    """``sum_j coefficients[row, j] * term(j)`` for a loop variable ``row``, written as one
    expression per row (selected by ``row``; the loop is unrolled, so the selection folds and
    zero coefficients cost nothing)."""
    result = None
    for i in reversed(range(coefficients.shape[0])):
        expr = None
        for j, c in enumerate(coefficients[i]):
            if c == 0:
                continue
            value = term(j)
            value = value if c == 1 else -value if c == -1 else value * tir.const(float(c), value.dtype)
            expr = value if expr is None else expr + value
        if expr is None:
            expr = tir.const(0.0, term(0).dtype)
        result = expr if result is None else tir.Select(row == i, expr, result)
    return result


def compute(data: te.Tensor, weight: te.Tensor, out_dtype: str) -> te.Tensor:
    """The convolution of ``data`` (``N x C/cb x H x W x cb``, padded by 1) with ``weight`` as
    :func:`.passes.winograd.transformed_weights` packs it (slices of ``K/kb x C x kb``: the
    ``(m+2)^2`` transformed ones, the 9 original taps, the input bound):
    ``N x K/kb x H x W x kb``. A row of tiles whose inputs are not all within the bound is
    computed directly (the module docstring)."""
    n, c_blocks, height, width, cb = get_const_tuple(data.shape)
    slices, k_blocks, channels, kb = get_const_tuple(weight.shape)
    alpha2 = slices - EXTRA_SLICES
    alpha = int(round(alpha2**0.5))
    m = alpha - 2
    a_mat, b_mat, _ = transform_matrices(m)
    rows, cols = -(-height // m), -(-width // m)
    tile_rows = n * rows
    tiles = tile_rows * cols
    padded = topi.nn.pad(
        data, (0, 0, 1, 1, 0), (0, 0, rows * m + 1 - height, cols * m + 1 - width, 0), name="winograd_pad"
    )
    bound = weight[alpha2 + 9, 0, 0, 0]

    def tile(p):
        return p // (rows * cols), (p // cols) % rows * m, p % cols * m

    def largest_bits(t, ci):
        # the m + 2 input rows of row of tiles t (the padding's zero rows clamped to the edge). As
        # integers, the bits of |x| order finite magnitudes, and put inf and NaN above them all:
        # one integer maximum per vector checks both
        dh, co, w = (
            te.reduce_axis((0, alpha), "dh"),
            te.reduce_axis((0, c_blocks), "co"),
            te.reduce_axis((0, width), "w"),
        )
        value = data[t // rows, co, tir.max(tir.min(t % rows * m - 1 + dh, height - 1), 0), w, ci]
        return te.max(tir.reinterpret("int32", value) & 0x7FFFFFFF, axis=[dh, co, w])

    magnitudes = te.compute((tile_rows, cb), largest_bits, name="winograd_magnitudes")
    lane = te.reduce_axis((0, cb), "lane")
    bound_bits = tir.reinterpret("int32", bound)
    direct_row = te.compute(
        (tile_rows,),
        lambda t: te.max(tir.Select(magnitudes[t, lane] > bound_bits, 1, 0), axis=lane),
        name="winograd_direct_row",
    )

    def input_row(p, co, eps, rb, ci):
        b, h0, w0 = tile(p)
        return _linear(b_mat.T, eps, lambda ra: padded[b, co, h0 + ra, w0 + rb, ci])

    rows_done = te.compute((tiles, c_blocks, alpha, alpha, cb), input_row, name="winograd_input_rows")
    transformed = te.compute(
        (alpha2, tiles, channels),
        lambda e, p, c: _linear(b_mat.T, e % alpha, lambda rb: rows_done[p, c // cb, e // alpha, rb, c % cb]),
        name="winograd_input",
    )

    def product(e, ko, t, col, ki):
        # TE cannot skip a stage, but a loop may run 0 times: a row computed directly gets zero
        # products (its transformed inputs may hold inf or NaN), at no cost to the others
        winograd = te.reduce_axis((0, 1 - direct_row[t]), "winograd")
        rc = te.reduce_axis((0, channels), "rc")
        return te.sum(
            transformed[e, t * cols + col, rc].astype(out_dtype) * weight[e, ko, rc, ki].astype(out_dtype),
            axis=[winograd, rc],
        )

    products = te.compute((alpha2, k_blocks, tile_rows, cols, kb), product, name="winograd_products")
    out_rows = te.compute(
        (k_blocks, tiles, m, alpha, kb),
        lambda ko, p, vh, nu, ki: _linear(
            a_mat.T, vh, lambda eps: products[eps * alpha + nu, ko, p // cols, p % cols, ki]
        ),
        name="winograd_output_rows",
    )
    out_tiles = te.compute(
        (k_blocks, tiles, m, m, kb),
        lambda ko, p, vh, vw, ki: _linear(a_mat.T, vw, lambda nu: out_rows[ko, p, vh, nu, ki]),
        name="winograd_output",
    )

    def direct(ko, p, vh, vw, ki):
        # the tile's Winograd outputs (zeros in a row computed directly), plus, in such a row
        # only (a loop run once or never), the direct convolution with the original weights
        b, h0, w0 = tile(p)
        once = te.reduce_axis((0, direct_row[p // cols]), "once")
        rc, ry, rx = te.reduce_axis((0, channels), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
        value = padded[b, rc // cb, h0 + vh + ry, w0 + vw + rx, rc % cb].astype(out_dtype)
        return te.sum(
            value * weight[alpha2 + ry * 3 + rx, ko, rc, ki].astype(out_dtype),
            axis=[once, rc, ry, rx],
            init=out_tiles[ko, p, vh, vw, ki],
        )

    outputs = te.compute((k_blocks, tiles, m, m, kb), direct, name="winograd_or_direct")
    return te.compute(
        (n, k_blocks, height, width, kb),
        lambda b, ko, h, w, ki: outputs[ko, b * rows * cols + (h // m) * cols + w // m, h % m, w % m, ki],
        name="winograd_conv",
        tag=TAG,
    )


def _stages(conv: te.Tensor) -> dict:
    """The kernel's stages by name, from its output."""
    found, todo = {}, [conv]
    while todo:
        t = todo.pop()
        if isinstance(t.op, te.ComputeOp) and t.op.name.startswith("winograd_") and t.op.name not in found:
            found[t.op.name] = t
            todo.extend(t.op.input_tensors)
    return found


def schedule(outs) -> te.Schedule:
    """The schedule of :func:`compute` and the injective operators fused after it: per row of
    tiles, the check of its inputs, its input transform, its products, then per tile the output
    transform, the direct convolution (in a row that takes it), and the fused operators,
    vectorised over the output block."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    conv = find_tagged(outs[0].op, (TAG,))
    assert conv is not None, "relay_aot's Winograd strategy without its convolution"
    stages = _stages(conv)
    last = outs[0]
    fused = not last.op.same_as(conv.op) and get_const_tuple(last.shape) == get_const_tuple(conv.shape)
    if fused:
        # everything between the convolution and the last operator is elementwise (FuseOps'
        # out-elementwise pattern): computed in the last one's loop
        inline_between(s, conv.op, last.op)
        s[conv].compute_inline()
    else:
        last = conv
    m = get_const_tuple(stages["winograd_output"].shape)[2]
    alpha = m + 2
    s[stages["winograd_pad"]].compute_inline()

    b, ko, h, w, ki = s[last].op.axis
    ht, hi = s[last].split(h, m)
    wt, wi = s[last].split(w, m)
    s[last].reorder(b, ht, ko, wt, hi, wi, ki)
    s[last].parallel(ht)
    s[last].unroll(wi)
    s[last].vectorize(ki)

    transformed, rows_done = stages["winograd_input"], stages["winograd_input_rows"]
    e, p, c = s[transformed].op.axis
    cb = get_const_tuple(rows_done.shape)[-1]
    co, ci = s[transformed].split(c, cb)
    eps, nu = s[transformed].split(e, alpha)
    s[transformed].reorder(p, co, eps, nu, ci)
    s[transformed].unroll(eps)
    s[transformed].unroll(nu)
    s[transformed].vectorize(ci)
    s[rows_done].compute_at(s[transformed], co)
    _, _, eps2, rb2, ci2 = s[rows_done].op.axis
    s[rows_done].unroll(eps2)
    s[rows_done].unroll(rb2)
    s[rows_done].vectorize(ci2)
    s[transformed].compute_at(s[last], ht)

    # the bound's check reads the row's inputs just before its input transform does
    magnitudes = stages["winograd_magnitudes"]
    t4, ci4 = s[magnitudes].op.axis
    s[magnitudes].reorder(t4, *s[magnitudes].op.reduce_axis, ci4)
    s[magnitudes].vectorize(ci4)
    s[magnitudes].compute_at(s[last], ht)
    s[stages["winograd_direct_row"]].compute_at(s[last], ht)

    products = stages["winograd_products"]
    e, ko3, t3, col3, ki3 = s[products].op.axis
    winograd, rc = s[products].op.reduce_axis
    po, pi = s[products].split(col3, TILES_PER_BLOCK)
    s[products].reorder(e, ko3, t3, po, winograd, rc, pi, ki3)
    s[products].unroll(pi)
    s[products].vectorize(ki3)
    s[products].compute_at(s[last], ht)

    # per tile: the loop over the direct convolution's terms outside, the tile's outputs in
    # registers inside (its first value, the Winograd output, shares their memory: no copy)
    outputs = stages["winograd_or_direct"]
    ko5, p5, vh5, vw5, ki5 = s[outputs].op.axis
    s[outputs].reorder(ko5, p5, *s[outputs].op.reduce_axis, vh5, vw5, ki5)
    s[outputs].unroll(vh5)
    s[outputs].unroll(vw5)
    s[outputs].vectorize(ki5)
    s[outputs].compute_at(s[last], wt)

    for name in ("winograd_output_rows", "winograd_output"):
        stage = stages[name]
        s[stage].compute_at(s[last], wt)
        axes = s[stage].op.axis
        s[stage].unroll(axes[2])
        s[stage].unroll(axes[3])
        s[stage].vectorize(axes[4])
    return s


def _compute(attrs, inputs, out_type):
    return [compute(inputs[0], inputs[1], out_type.dtype)]


def _schedule(attrs, outs, target):
    with target:
        return schedule(outs)


_TVM_CPU_STRATEGY = _x86.conv2d_winograd_without_weight_transform_strategy_cpu


def _cpu_strategy(attrs, inputs, out_type, target):
    if packed_block(str(attrs.data_layout)) is None:
        return _TVM_CPU_STRATEGY(attrs, inputs, out_type, target)
    strategy = _op.OpStrategy()
    strategy.add_implementation(_compute, _schedule, name="winograd_nchwc.relay_aot", plevel=20)
    return strategy


_generic.conv2d_winograd_without_weight_transform_strategy.register("cpu", _cpu_strategy, override=True)

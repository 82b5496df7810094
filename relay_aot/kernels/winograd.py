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

The pass that chooses these convolutions, and their tile size, is ``passes.winograd``. TVM's strategy for the operator on ``cpu`` targets is wrapped once (at
import): calls whose data layout is packed (``NCHW{c}c``, which only that pass makes) get this
kernel, every other call TVM's strategy as before.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tir, topi
from tvm.relay.op import op as _op
from tvm.relay.op.strategy import generic as _generic, x86 as _x86
from tvm.topi.nn import winograd_util
from tvm.topi.utils import get_const_tuple

from ..passes.winograd import packed_block

#: Tiles per register block of the matrix products (times one vector of output channels).
TILES_PER_BLOCK = 8

#: The kernel's tag: the schedule finds its output stage by it.
TAG = "relay_aot_winograd_nchwc"


def _matrices(m: int):
    """TVM's transform matrices A (m+2 x m), B (m+2 x m+2) as numpy (the weights' G, which
    ``passes.winograd`` applies, comes from the same points)."""
    points = winograd_util._interpolation_points(m + 2)
    a, b, _ = winograd_util._cook_toom_convolution(points, m, 3)
    return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)


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
    """The convolution of ``data`` (``N x C/cb x H x W x cb``, padded by 1) with the transformed
    ``weight`` (``(m+2)^2 x K/kb x C x kb``): ``N x K/kb x H x W x kb``."""
    n, c_blocks, height, width, cb = get_const_tuple(data.shape)
    alpha2, k_blocks, channels, kb = get_const_tuple(weight.shape)
    alpha = int(round(alpha2 ** 0.5))
    m = alpha - 2
    a_mat, b_mat = _matrices(m)
    rows, cols = -(-height // m), -(-width // m)
    tiles = n * rows * cols
    padded = topi.nn.pad(data, (0, 0, 1, 1, 0), (0, 0, rows * m + 1 - height, cols * m + 1 - width, 0),
                         name="winograd_pad")

    def tile(p):
        return p // (rows * cols), (p // cols) % rows * m, p % cols * m

    def input_row(p, co, eps, rb, ci):
        b, h0, w0 = tile(p)
        return _linear(b_mat.T, eps, lambda ra: padded[b, co, h0 + ra, w0 + rb, ci])

    rows_done = te.compute((tiles, c_blocks, alpha, alpha, cb), input_row, name="winograd_input_rows")
    transformed = te.compute(
        (alpha2, tiles, channels),
        lambda e, p, c: _linear(b_mat.T, e % alpha, lambda rb: rows_done[p, c // cb, e // alpha, rb, c % cb]),
        name="winograd_input")
    rc = te.reduce_axis((0, channels), "rc")
    products = te.compute(
        (alpha2, k_blocks, tiles, kb),
        lambda e, ko, p, ki: te.sum(transformed[e, p, rc].astype(out_dtype) * weight[e, ko, rc, ki].astype(out_dtype),
                                    axis=rc),
        name="winograd_products")
    out_rows = te.compute(
        (k_blocks, tiles, m, alpha, kb),
        lambda ko, p, vh, nu, ki: _linear(a_mat.T, vh, lambda eps: products[eps * alpha + nu, ko, p, ki]),
        name="winograd_output_rows")
    out_tiles = te.compute(
        (k_blocks, tiles, m, m, kb),
        lambda ko, p, vh, vw, ki: _linear(a_mat.T, vw, lambda nu: out_rows[ko, p, vh, nu, ki]),
        name="winograd_output")
    return te.compute(
        (n, k_blocks, height, width, kb),
        lambda b, ko, h, w, ki: out_tiles[ko, b * rows * cols + (h // m) * cols + w // m, h % m, w % m, ki],
        name="winograd_conv", tag=TAG)


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
    tiles, its input transform, its products, then per tile the output transform and the fused
    operators, vectorised over the output block."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    convs = []

    def find(op):
        if op.tag == TAG:
            convs.append(op.output(0))
            return
        for t in op.input_tensors:
            if isinstance(t.op, te.ComputeOp):
                find(t.op)

    find(outs[0].op)
    conv = convs[0]
    stages = _stages(conv)
    last = outs[0]
    fused = not last.op.same_as(conv.op) and get_const_tuple(last.shape) == get_const_tuple(conv.shape)
    if fused:
        # everything between the convolution and the last operator is elementwise (FuseOps'
        # out-elementwise pattern): computed in the last one's loop
        def inline(op):
            if op.same_as(conv.op) or not isinstance(op, te.ComputeOp):
                return
            if not op.same_as(last.op):
                s[op].compute_inline()
            for t in op.input_tensors:
                inline(t.op)

        inline(last.op)
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

    products = stages["winograd_products"]
    e, ko3, p3, ki3 = s[products].op.axis
    (rc,) = s[products].op.reduce_axis
    po, pi = s[products].split(p3, TILES_PER_BLOCK)
    s[products].reorder(e, ko3, po, rc, pi, ki3)
    s[products].unroll(pi)
    s[products].vectorize(ki3)
    s[products].compute_at(s[last], ht)

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

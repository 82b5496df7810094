"""The input's layout kernel and the padding kernels of int8 convolutional models, rewritten
for x86.

An int8 model's first convolution takes its input (``NHWC``, one to three channels: an image, a
spectrogram) padded with the input's zero point, shifted into uint8 for ``vpdpbusd`` and laid
out ``NCHW4c``, the channels filled up to four with zeros: one kernel, which TVM lowers to a
loop over every output byte, each a select of a select around a one-byte load (MLPerf Tiny's
visual wake words model: 6.8 us of its 58, a tenth; ResNet-8 0.8 of 39). Each output pixel is
one 32-bit word, though: its input's bytes read as one unaligned 32-bit load, shifted to the low
bytes, their signs flipped (``x + 128`` in uint8 is ``x ^ 0x80``), the padding bytes zero; a
padded pixel the zero point's word. :func:`apply` rewrites such kernels to that loop (rows of
padding, then per row the left padding, the pixels, the right padding).

A kernel is rewritten only when its signature is the layout's (``(1, H, W, C)`` int8 with C < 4,
the 0-d int8 zero point, ``(1, 1, H', W', 4)`` uint8) and its store computes, at every output
position of the image's frame and a few inside, exactly what the rewritten loop does there
(checked by simplifying TVM's expression at each of those points), its input read at an index
linear in the loop variables (the pads come from its offset). Anything else is left to TVM.

The later convolutions' inputs are padded the same way, packed (``NCHWc``): TVM's kernel stores
one vector of a pixel's channel block at a time, each a select between a load and the zero
point (shifted into uint8 where a ``vpdpbusd`` convolution reads it; int8 before a depthwise
one): rows of plain byte loops instead, which LLVM vectorizes 64 bytes at a time (ResNet-8's
six paddings and the input's layout 38.9 -> 37.7 us; visual wake words' ten and its input's
58.9 -> 55.0). Checked as the layout is, at the edges of every block of channels and along
every eighth row and column of the first and last, for each possible (top, left).

Both forms are matched as relay_aot lowers (TIR's common subexpression elimination off).
"""

from __future__ import annotations

import itertools

import tvm
from tvm import tir

from .scratch import rewrite_each

#: The byte flipped in each channel: int8 ``x + 128`` as uint8.
_SIGN = 0x80808080


def _loop_nest(body: tir.Stmt) -> tuple[list[tir.For], tir.BufferStore] | None:
    """The perfectly nested loops around the only store of ``body``, and that store."""
    loops = []
    while True:
        if isinstance(body, tir.For):
            loops.append(body)
            body = body.body
        elif isinstance(body, tir.DeclBuffer):
            body = body.body
        elif isinstance(body, tir.BufferStore):
            return loops, body
        else:
            return None


def _signature(func: tir.PrimFunc, outputs: tuple[str, ...]):
    """(source, zero point, destination) buffers of a kernel taking an int8 tensor and the 0-d
    int8 zero point to a tensor of one of ``outputs``' dtypes, and the source's and the
    destination's shapes; None for any other signature (or a ? extent)."""
    if len(func.params) != 3 or any(p not in func.buffer_map for p in func.params):
        return None
    src, zp, dst = (func.buffer_map[p] for p in func.params)
    try:
        src_shape, zp_shape, dst_shape = ([int(d) for d in b.shape] for b in (src, zp, dst))
    except TypeError:
        return None  # a ? extent
    if (
        (str(src.dtype), str(zp.dtype)) != ("int8", "int8")
        or str(dst.dtype) not in outputs
        or zp_shape not in ([], [1])
    ):
        return None
    return (src, zp, dst), src_shape, dst_shape


def _shapes(func: tir.PrimFunc):
    """(source, zero point, destination) buffers and (H, W, C, H', W') of a layout kernel's
    signature, or None."""
    signature = _signature(func, ("uint8",))
    if signature is None:
        return None
    buffers, src_shape, dst_shape = signature
    if len(src_shape) != 4 or len(dst_shape) != 5 or src_shape[0] != 1 or dst_shape[:2] != [1, 1] or dst_shape[4] != 4:
        return None
    _, h, w, c = src_shape
    hp, wp = dst_shape[2:4]
    if not 1 <= c <= 3 or hp < h or wp < w or h * w * c < 4:
        return None
    return buffers, (h, w, c, hp, wp)


def _store_nest(func: tir.PrimFunc, dst: tir.Buffer, extents: list[int]):
    """The loops (of these extents) around ``func``'s only store, into ``dst`` at one index,
    and that store; None if ``func`` is not such a nest."""
    nest = _loop_nest(func.body)
    if nest is None:
        return None
    loops, store = nest
    if [int(loop.extent) if isinstance(loop.extent, tir.IntImm) else -1 for loop in loops] != extents:
        return None
    if not store.buffer.data.same_as(dst.data) or len(store.indices) != 1:
        return None
    return loops, store


def _loads(value: tir.PrimExpr, data: tir.Var) -> list[tir.BufferLoad]:
    """The loads of ``value`` from the buffer on ``data``."""
    loads = []

    def visit(node):
        if isinstance(node, tir.BufferLoad) and node.buffer.data.same_as(data):
            loads.append(node)

    tir.stmt_functor.post_order_visit(tir.Evaluate(value), visit)
    return loads


def _zero_point(value: tir.PrimExpr, data: tir.Var) -> tir.BufferLoad | None:
    """The zero point as ``value`` reads it (from the buffer on ``data``), or None."""
    loads = _loads(value, data)
    if not loads:
        return None
    buffer = loads[0].buffer
    return tir.BufferLoad(buffer, [tir.IntImm("int32", 0)] * len(buffer.shape))


def _source_load(value: tir.PrimExpr, data: tir.Var) -> tir.BufferLoad | None:
    """The only load of ``value`` from the buffer on ``data``."""
    loads = _loads(value, data)
    return loads[0] if len(loads) == 1 and len(loads[0].indices) == 1 else None


def _pads(load: tir.BufferLoad, loop_vars, w: int, c: int) -> tuple[int, int] | None:
    """(top, left) from the source index ``h*W*C + w*C + c - (top*W*C + left*C)``."""
    coefficients = tvm.arith.detect_linear_equation(load.indices[0], loop_vars)
    if len(coefficients) != 4:
        return None
    try:
        row, column, channel, offset = (int(k) for k in coefficients)
    except TypeError:
        return None
    if (row, column, channel) != (w * c, c, 1) or offset > 0 or -offset % c:
        return None
    top, rest = divmod(-offset, w * c)
    return top, rest // c


def _frame(hp: int, wp: int, top: int, left: int, h: int, w: int):
    """The output positions checked: those within two rows or columns of an edge of the output
    or of the image, along every eighth row and column (the store's index is checked linear),
    and a few inside."""
    rows = {r for edge in (0, top, top + h, hp) for r in range(edge - 2, edge + 2) if 0 <= r < hp}
    columns = {k for edge in (0, left, left + w, wp) for k in range(edge - 2, edge + 2) if 0 <= k < wp}
    every_row, every_column = rows | set(range(0, hp, 8)), columns | set(range(0, wp, 8))
    inside = {(top + h // 2, left + w // 2), (top + h // 3, left + 2 * w // 3)}
    points = {(r, k) for r in rows for k in every_column} | {(r, k) for r in every_row for k in columns} | inside
    return sorted(p for p in points if 0 <= p[0] < hp and 0 <= p[1] < wp)


def _computes_the_layout(loops, store, load, zp_data, dims, top: int, left: int) -> bool:
    """Whether ``store`` writes, at each position of :func:`_frame` and each channel, the
    layout's value there: TVM's expression simplified at that point, compared with it."""
    h, w, c, hp, wp = dims
    analyzer = tvm.arith.Analyzer()
    loop_vars = [loop.loop_var for loop in loops]
    zp_value = _zero_point(store.value, zp_data)
    if zp_value is None:
        return False

    def shifted(byte):
        return tir.Cast("uint8", tir.Cast("int32", byte) + tir.IntImm("int32", 128))

    for (r, k), ch in itertools.product(_frame(hp, wp, top, left, h, w), range(4)):
        point = {var: tir.IntImm(var.dtype, n) for var, n in zip(loop_vars, (r, k, ch))}
        index = analyzer.simplify(tir.stmt_functor.substitute(store.indices[0], point))
        if not isinstance(index, tir.IntImm) or index.value != (r * wp + k) * 4 + ch:
            return False
        got = analyzer.simplify(tir.stmt_functor.substitute(store.value, point))
        if ch >= c:
            want = tir.IntImm("uint8", 0)
        elif top <= r < top + h and left <= k < left + w:
            want = shifted(tir.BufferLoad(load.buffer, [tir.IntImm("int32", ((r - top) * w + k - left) * c + ch)]))
        else:
            want = shifted(zp_value)
        if not tvm.ir.structural_equal(got, analyzer.simplify(want)):
            return False
    return True


def _layout_body(buffers, dims, top: int, left: int, parallel: bool) -> tir.Stmt:
    """The layout's loop: a 32-bit word per output pixel (module docstring)."""
    src, zp, dst = buffers
    h, w, c, hp, wp = dims
    low = (1 << (8 * c)) - 1
    flat_src = tir.decl_buffer((h * w * c,), "int8", name="input_bytes", data=src.data)
    flat_zp = tir.decl_buffer((1,), "int8", name="zero_point", data=zp.data)
    flat_dst = tir.decl_buffer((hp * wp * 4,), "uint8", name="output_bytes", data=dst.data)

    def u32(value: int) -> tir.PrimExpr:
        return tir.const(value, "uint32")

    def word_at(start) -> tir.PrimExpr:
        return tir.reinterpret("uint32", tir.BufferLoad(flat_src, [tir.Ramp(start, 1, 4)]))

    def store(pixel, word) -> tir.Stmt:
        return tir.BufferStore(flat_dst, tir.reinterpret("uint8x4", word), [tir.Ramp(pixel * 4, 1, 4)])

    ib = tir.ir_builder.create()
    pad_byte = tir.Cast("uint32", tir.Cast("uint8", tir.BufferLoad(flat_zp, [0]))) ^ u32(0x80)
    pad_word = ib.let("pad_word", pad_byte * u32(0x01010101 & low))

    def padding(row, first, count):
        if count > 0:
            with ib.for_range(0, count, "pad") as k:
                ib.emit(store(row * wp + first + k, pad_word))

    # The 4 bytes ending at a pixel's last, shifted down; for the image's first pixels, whose
    # 4 bytes would start before the input, the 4 from their first, masked.
    starting = min(w, -(-(4 - c) // c))  # pixels p of the first row with p * c < 4 - c

    def pixels(row, first_column, count, masked):
        with ib.for_range(0, count, "column") as k:
            first = ((row - top) * w + first_column + k) * c
            if masked:
                word = word_at(first) & u32(low)
            else:
                word = tir.shift_right(word_at(first + (c - 4)), u32(8 * (4 - c)))
            ib.emit(store(row * wp + left + first_column + k, word ^ u32(_SIGN & low)))

    with ib.for_range(0, hp, "row", kind="parallel" if parallel else "serial") as row:
        with ib.if_scope(tvm.tir.all(row >= top, row < top + h)):
            padding(row, 0, left)
            with ib.if_scope(row == top):
                pixels(row, 0, starting, masked=True)
                pixels(row, starting, w - starting, masked=False)
            with ib.else_scope():
                pixels(row, 0, w, masked=False)
            padding(row, left + w, wp - left - w)
        with ib.else_scope():
            padding(row, 0, wp)
    return ib.get()


def _rewrite(func: tir.PrimFunc) -> tir.PrimFunc:
    shaped = _shapes(func)
    if shaped is None:
        return func
    buffers, dims = shaped
    h, w, c, hp, wp = dims
    nest = _store_nest(func, buffers[2], [hp, wp, 4])
    if nest is None:
        return func
    loops, store = nest
    linear = tvm.arith.detect_linear_equation(store.indices[0], [loop.loop_var for loop in loops])
    if [int(k) if isinstance(k, tir.IntImm) else None for k in linear] != [wp * 4, 4, 1, 0]:
        return func
    load = _source_load(store.value, buffers[0].data)
    pads = None if load is None else _pads(load, [loop.loop_var for loop in loops], w, c)
    if pads is None:
        return func
    top, left = pads
    if top + h > hp or left + w > wp:
        return func
    if not _computes_the_layout(loops, store, load, buffers[1].data, dims, top, left):
        return func
    parallel = loops[0].kind == tir.ForKind.PARALLEL
    return func.with_body(_layout_body(buffers, dims, top, left, parallel))


# --- the padding of a packed (NCHWc) int8 tensor, shifted into uint8 or not --------------------


def _padding_shapes(func: tir.PrimFunc):
    """(source, zero point, destination) buffers and (C1, H, W, B, H', W') of a padding kernel's
    signature: ``(1, C1, H, W, B)`` int8, the 0-d int8 zero point, ``(1, C1, H', W', B)`` int8 or
    uint8 (shifted)."""
    signature = _signature(func, ("int8", "uint8"))
    if signature is None:
        return None
    buffers, src_shape, dst_shape = signature
    if len(src_shape) != 5 or len(dst_shape) != 5 or src_shape[0] != 1 or dst_shape[0] != 1:
        return None
    _, c1, h, w, b = src_shape
    if dst_shape[1] != c1 or dst_shape[4] != b or dst_shape[2] < h or dst_shape[3] < w or b < 4:
        return None
    return buffers, (c1, h, w, b, dst_shape[2], dst_shape[3])


def _padding_points(c1: int, hp: int, wp: int):
    """Output positions (fused row, column) checked: in the first and last block of channels,
    the rows within three of an edge along every eighth column and the columns within three of
    an edge along every eighth row; in the others, the four corners' 2 x 2."""
    edges_h = sorted({r for r in (*range(3), *range(hp - 3, hp)) if 0 <= r < hp})
    edges_w = sorted({k for k in (*range(3), *range(wp - 3, wp)) if 0 <= k < wp})
    rows, columns = sorted(set(edges_h) | set(range(0, hp, 8))), sorted(set(edges_w) | set(range(0, wp, 8)))
    points = set()
    for block in range(c1):
        if block in (0, c1 - 1):
            points |= {(block * hp + r, k) for r in edges_h for k in columns}
            points |= {(block * hp + r, k) for r in rows for k in edges_w}
        else:
            corners = [(r, k) for r in (0, 1, hp - 2, hp - 1) for k in (0, 1, wp - 2, wp - 1)]
            points |= {(block * hp + r, k) for r, k in corners if 0 <= r < hp and 0 <= k < wp}
    return sorted(points)


def _pads_of_padding(dims) -> list[tuple[int, int]]:
    """The (top, left) a padding kernel of these dimensions may have."""
    _, h, w, _, hp, wp = dims
    return [(top, left) for top in range(hp - h + 1) for left in range(wp - w + 1)]


def _computes_the_padding(loops, store, src_data, zp_data, dims, top: int, left: int, points=None) -> bool:
    """Whether ``store`` writes, at each of :func:`_padding_points`, the padding's bytes (the
    source's inside, the zero point's outside; shifted into uint8 for a uint8 destination):
    TVM's expression simplified at each point, compared with those."""
    c1, h, w, b, hp, wp = dims
    shifted = str(store.buffer.dtype) == "uint8"
    analyzer = tvm.arith.Analyzer()
    sources, zero_point = _loads(store.value, src_data), _zero_point(store.value, zp_data)
    if not sources or zero_point is None:
        return False
    loop_vars = [loop.loop_var for loop in loops]
    for fused, k in _padding_points(c1, hp, wp) if points is None else points:
        point = {var: tir.IntImm(var.dtype, n) for var, n in zip(loop_vars, (fused, k))}
        index = analyzer.simplify(tir.stmt_functor.substitute(store.indices[0], point))
        if not tvm.ir.structural_equal(index, tir.Ramp(tir.IntImm("int32", (fused * wp + k) * b), 1, b)):
            return False
        block, r = divmod(fused, hp)
        if top <= r < top + h and left <= k < left + w:
            first = ((block * h + r - top) * w + k - left) * b
            byte = tir.BufferLoad(sources[-1].buffer, [tir.Ramp(tir.IntImm("int32", first), 1, b)])
        else:
            byte = tir.Broadcast(zero_point, b)
        if shifted:
            want = tir.Cast(f"uint8x{b}", tir.Cast(f"int32x{b}", byte) + tir.Broadcast(tir.IntImm("int32", 128), b))
        else:
            want = byte
        got = analyzer.simplify(tir.stmt_functor.substitute(store.value, point))
        if not tvm.ir.structural_equal(got, analyzer.simplify(want)):
            return False
    return True


def _padding_body(buffers, dims, top: int, left: int) -> tir.Stmt:
    """Per row of a block of channels: the left padding, the row's bytes (shifted into uint8 for
    a uint8 destination), the right padding, each a plain loop over bytes (LLVM vectorizes
    them); rows of padding alike."""
    src, zp, dst = buffers
    c1, h, w, b, hp, wp = dims
    flat_src = tir.decl_buffer((c1 * h * w * b,), "int8", name="input_bytes", data=src.data)
    flat_zp = tir.decl_buffer((1,), "int8", name="zero_point", data=zp.data)
    dtype = str(dst.dtype)
    flat_dst = tir.decl_buffer((c1 * hp * wp * b,), dtype, name="output_bytes", data=dst.data)

    def byte(value):  # into uint8, x + 128 is x ^ 0x80
        return tir.Cast("uint8", value) ^ tir.const(0x80, "uint8") if dtype == "uint8" else value

    ib = tir.ir_builder.create()
    pad_byte = ib.let("pad_byte", byte(tir.BufferLoad(flat_zp, [0])))

    def fill(start, count):
        if count > 0:
            with ib.for_range(0, count, "pad") as k:
                ib.emit(tir.BufferStore(flat_dst, pad_byte, [start + k]))

    with ib.for_range(0, c1 * hp, "row") as fused:
        block, r = tir.floordiv(fused, hp), tir.floormod(fused, hp)
        out = fused * (wp * b)
        with ib.if_scope(tvm.tir.all(r >= top, r < top + h)):
            fill(out, left * b)
            first = (block * h + r - top) * (w * b)
            with ib.for_range(0, w * b, "byte") as k:
                value = byte(tir.BufferLoad(flat_src, [first + k]))
                ib.emit(tir.BufferStore(flat_dst, value, [out + left * b + k]))
            fill(out + (left + w) * b, (wp - left - w) * b)
        with ib.else_scope():
            fill(out, wp * b)
    return ib.get()


def _rewrite_padding(func: tir.PrimFunc) -> tir.PrimFunc:
    shaped = _padding_shapes(func)
    if shaped is None:
        return func
    buffers, dims = shaped
    c1, h, w, b, hp, wp = dims
    nest = _store_nest(func, buffers[2], [c1 * hp, wp])
    if nest is None:
        return func
    loops, store = nest
    for top, left in _pads_of_padding(dims):
        # first the image's corners and the positions just outside them: most pads fail there
        corners = [
            (r, k) for r in (top - 1, top, top + h - 1, top + h) for k in (left - 1, left, left + w - 1, left + w)
        ]
        corners = [(r, k) for r, k in corners if 0 <= r < hp and 0 <= k < wp]
        src, zp = buffers[0].data, buffers[1].data
        if _computes_the_padding(loops, store, src, zp, dims, top, left, corners) and _computes_the_padding(
            loops, store, src, zp, dims, top, left
        ):
            return func.with_body(_padding_body(buffers, dims, top, left))
    return func


def apply(merged: tvm.IRModule) -> tvm.IRModule:
    """``merged`` (lowered kernels for an x86 LLVM target) with its input layout and padding
    kernels rewritten (module docstring)."""
    return rewrite_each(merged, lambda func: _rewrite_padding(_rewrite(func)))

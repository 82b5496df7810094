"""int8 kernels of relay_aot's own for Arm's M-profile DSP extension (Cortex-M4, M7, M33...).

relay_aot's TFLite importer (``frontends/tflite_exact.py``) writes an int8 fully-connected layer
as ``nn.dense`` of the raw int8 values with int32 out (the input's zero point folded into the
bias), followed by the requantization in integer Relay. On a Cortex-M4 TVM's strategy picks its
``dense_dsp`` schedule, whose untuned fallback tiles are 1 x 1 x 1: one ``ldrsb; ldrsb; smlabb``
and a store of the accumulator per multiply-add (5.1 to 6.2 instructions per MAC on MLPerf
Tiny's anomaly-detection model, where CMSIS-NN's ``arm_nn_vec_mat_mult_t_s8`` takes 2.2).

Here, while relay_aot lowers its kernels (:func:`building`), such a dense (int8 x int8 -> int32,
static shapes, on a target with the DSP extension) gets relay_aot's compute and schedule instead:
the output's units in blocks of up to four rows of weights, each block's four dot products
computed by a C micro-kernel over the whole depth (TVM's ``tensorize``, its C imported into the
kernel with ``pragma_import_c``, as TVM's own M-profile micro-kernels are), and the fused
operators after the dense (the bias, the requantization: TVM's code of the Relay operators, as
before) applied to those four sums right after. The micro-kernel reads four int8 of the input
and of each weight row as one word, sign-extends bytes 0, 2 and 1, 3 to pairs of int16
(``SXTB16``, ``SXTB16 ... ROR #8``) and multiplies-accumulates two pairs per ``SMLAD``: the input
word's two halves serve the four rows. Its four accumulators stay in registers. Odd depths end
with a scalar loop. The sums are the same int32 sums, so the kernel is exact by construction;
without ``__ARM_FEATURE_DSP`` (a package compiled for a core without it) the micro-kernel is
the plain C loop.

Each micro-kernel is specialised to its rows and depth (``relay_aot_dot_s8_r4_k640``); its C is
guarded by a macro named like it, so kernels of the same shape share one definition in
``kernels.c``. The C is part of this module, so it is in relay_aot's code digest (the build
cache's keys). A constant ``nn.pad`` on these targets is relay_aot's as well (:func:`pad_compute`): its bound
tests marked ``likely`` and the kernel lowered with TVM's loop partitioning
(:func:`partitioning`), so the interior is copied without a test per element. A pad whose kernel
only pads the input of one of these convolutions is merged into the convolution's kernel
(``passes/arm_dsp.py``'s ``pads_into_convolutions``), which then reads the unpadded image: an
output pixel whose window is inside it calls the micro-kernel on the image itself, one whose
window leaves it calls the micro-kernel's ``_border`` variant, which reads the pad value there
(:class:`Padding`): no padded copy of the activation is stored, as CMSIS-NN stores none.

TVM's strategy applies elsewhere, and everywhere outside :func:`building`
(``relay.build``, TVM's executors and AutoTVM in the same process are unchanged).
"""

from __future__ import annotations

import contextlib
import dataclasses

import tvm
from tvm import te
from tvm.relay.op import op as _op
from tvm.relay.op.strategy import arm_cpu as _arm_cpu
from tvm.relay.op.strategy import generic as _generic
from tvm.target import override_native_generic_func
from tvm.topi.utils import get_const_tuple

from ..gate import Gate
from ..passes.arm_dsp import REQUANTIZE
from .te_stages import find_tagged, inline_between

#: The tags of relay_aot's dense and convolution: the schedule finds the stage by them.
DENSE_TAG = "relay_aot_dense_s8_dsp"
CONV_TAG = "relay_aot_conv2d_s8_dsp"
DEPTHWISE_TAG = "relay_aot_depthwise_s8_dsp"

#: How the micro-kernels' C functions are named (dense, convolution, depthwise).
MICRO_KERNEL_PREFIXES = ("relay_aot_dot_s8_", "relay_aot_conv_s8_", "relay_aot_dw_s8_")


def uses_micro_kernels(c_source: str) -> bool:
    """Whether kernels printed as C (``c_source``) call any of relay_aot's micro-kernels."""
    return any(prefix in c_source for prefix in MICRO_KERNEL_PREFIXES)


#: Most rows of weights one micro-kernel call computes (its accumulators stay in registers).
MAX_ROWS = 4

#: Helpers every micro-kernel uses, defined once per ``kernels.c``.
_COMMON = """
#ifndef RELAY_AOT_DSP_COMMON
#define RELAY_AOT_DSP_COMMON
#include <stdint.h>
#include <string.h>
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
#define RELAY_AOT_DSP 1
/* four int8 at any address as one word (an unaligned LDR: ARMv7-M allows it) */
static inline __attribute__((always_inline)) uint32_t relay_aot_s8x4(const int8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
/* bytes 1 and 3 of v sign-extended to two int16: one SXTB16 with ROR #8 (GCC does not combine
   __sxtb16 with a rotation) */
static inline __attribute__((always_inline)) int32_t relay_aot_sxtb16_ror8(uint32_t v) {
  int32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
  return r;
}
#endif
/* TFLite's MultiplyByQuantizedMultiplier of x (gemmlowp's arithmetic): the rounding doubling
   high product of x * 2^left by m (0 <= m < 2^31: one SMULL), then the division by 2^right
   rounding half away from zero (mask = 2^right - 1) */
static inline __attribute__((always_inline)) int32_t relay_aot_requantize(int32_t x, int32_t m, int32_t left,
                                                                          int32_t right, int32_t mask) {
  int32_t shifted = (int32_t)((uint32_t)x << left);
  int32_t high = (int32_t)(((int64_t)shifted * m + ((int64_t)1 << 30)) >> 31);
  int32_t threshold = (mask >> 1) + (high < 0);
  return (high >> right) + ((high & mask) > threshold);
}
#endif
"""


#: Copies the window of an output pixel whose window leaves the image (a convolution whose
#: padding its kernel does: :func:`conv_pixel_c`), defined once per ``kernels.c``.
_WINDOW = """
#ifndef RELAY_AOT_WINDOW_S8
#define RELAY_AOT_WINDOW_S8
/* window = the kh x kw pixels (channels int8 each) from row y0, column x0 of the height x width
   image x, row after row; the pixels outside the image are `pad` (relay_aot) */
static void relay_aot_window_s8(int8_t* window, const int8_t* x, int32_t height, int32_t width, int32_t channels,
                                int32_t kh, int32_t kw, int32_t y0, int32_t x0, int32_t pad) {
  int32_t lo = x0 < 0 ? -x0 : 0, hi = width - x0 < kw ? width - x0 : kw; /* the columns inside */
  int32_t row = kw * channels;
  if (hi < lo) hi = lo;
  for (int32_t i = 0; i < kh; ++i, window += row) {
    int32_t y = y0 + i;
    if (y < 0 || y >= height || hi == lo) {
      memset(window, pad, row);
      continue;
    }
    memset(window, pad, lo * channels);
    memcpy(window + lo * channels, x + (y * width + x0 + lo) * channels, (hi - lo) * channels);
    memset(window + hi * channels, pad, (kw - hi) * channels);
  }
}
#endif
"""


def micro_kernel_name(rows: int, depth: int, segments: int | None = None, dilation: int = 1) -> str:
    """The C function computing ``rows`` dot products of int8 vectors of ``segments * depth``:
    a dense's (``segments`` None: one vector) or a convolution's (``segments`` rows of the
    window, each ``depth`` contiguous int8, ``dilation`` input rows apart)."""
    if segments is None:
        return f"relay_aot_dot_s8_r{rows}_k{depth}"
    return f"relay_aot_conv_s8_r{rows}_s{segments}x{depth}" + (f"_d{dilation}" if dilation != 1 else "")


def micro_kernel_c(rows: int, depth: int, segments: int | None = None, dilation: int = 1) -> str:
    """C of :func:`micro_kernel_name`: ``out[r] = sum_k x[k] * w[r * depth + k]`` for
    ``r < rows`` (int32 sums of int8 products), SMLAD on pairs where the DSP extension is. With
    ``segments`` the function also takes the input's row stride: segment ``s`` of the input
    starts ``s * dilation`` rows on, segment ``s`` of a weight row ``s * depth`` int8 on."""
    name = micro_kernel_name(rows, depth, segments, dilation)
    guard = name.upper()
    size = (segments or 1) * depth  # of a weight row
    rs = range(rows)
    accs = ", ".join(f"acc{r} = 0" for r in rs)
    dsp_rows = "\n".join(
        f"    wv = relay_aot_s8x4(w + {r * size} + k);\n"
        f"    acc{r} = __smlad(__sxtb16(wv), x02, acc{r});\n"
        f"    acc{r} = __smlad(relay_aot_sxtb16_ror8(wv), x13, acc{r});"
        for r in rs
    )
    tail_rows = "\n".join(f"    acc{r} += xk * (int32_t)w[{r * size} + k];" for r in rs)
    stores = "\n".join(f"  out[{r}] = acc{r};" for r in rs)
    dsp_loop = ""
    if depth >= 4:
        dsp_loop = f"""#ifdef RELAY_AOT_DSP
  for (; k < {depth - depth % 4}; k += 4) {{
    uint32_t xv = relay_aot_s8x4(x + k), wv;
    int32_t x02 = __sxtb16(xv), x13 = relay_aot_sxtb16_ror8(xv);
{dsp_rows}
  }}
#endif
"""
    one_segment = f"""  int32_t k = 0;
{dsp_loop}  for (; k < {depth}; ++k) {{
    int32_t xk = x[k];
{tail_rows}
  }}
"""
    if segments is None:
        signature = f"{name}(const int8_t* x, const int8_t* w, int32_t* out)"
        what = f"x[k] * w[r * {depth} + k] over k < {depth}"
        body = one_segment
    else:
        signature = f"{name}(const int8_t* x, int32_t x_row, const int8_t* w, int32_t* out)"
        what = f"x[s * {dilation} * x_row + k] * w[r * {size} + s * {depth} + k] over s < {segments}, k < {depth}"
        inner = "\n".join(
            "  " + line if line and not line.startswith("#") else line for line in one_segment.splitlines()
        )
        body = f"""  for (int32_t s = 0; s < {segments}; ++s, x += {dilation} * x_row, w += {depth}) {{
{inner}
  }}
"""
    return f"""{_COMMON}
#ifndef {guard}
#define {guard}
/* out[r] = sum of {what}, for r < {rows} (relay_aot) */
static int32_t {signature} {{
  int32_t {accs};
{body}{stores}
  return 0;
}}
#endif
"""


def conv_pixel_name(filters: int, rows: int, kh: int, kw: int, channels: int) -> str:
    """The C function computing all ``filters`` sums of one output pixel of a convolution whose
    kernel does its padding (:func:`conv_pixel_c`)."""
    return f"relay_aot_conv_s8_o{filters}_r{rows}_k{kh}x{kw}x{channels}"


def conv_pixel_c(filters: int, rows: int, kh: int, kw: int, channels: int) -> str:
    """C of :func:`conv_pixel_name` and of its ``_border`` variant. The first gives the sums
    ``out[f]``, ``f < filters``, of a window inside the image (``kh`` rows of ``kw * channels``
    int8, ``x_row`` apart) by :func:`micro_kernel_c`'s function, ``rows`` filters a call; the
    second those of the pixel whose window starts at row ``y0``, column ``x0`` of the
    ``height x width`` image ``x`` and leaves it: its window copied first (on the stack,
    ``kh * kw * channels`` bytes), the pixels outside it the pad value (the input's zero point,
    as the pad kernel it replaces wrote)."""
    name = conv_pixel_name(filters, rows, kh, kw, channels)
    depth = kw * channels
    inner = micro_kernel_name(rows, depth, kh)
    return f"""{micro_kernel_c(rows, depth, kh)}{_WINDOW}
#ifndef {name.upper()}
#define {name.upper()}
/* out[f], f < {filters}: the filters' sums over the window at x ({kh} rows of {depth} int8, x_row apart) (relay_aot) */
static int32_t {name}(const int8_t* x, int32_t x_row, const int8_t* w, int32_t* out) {{
  for (int32_t f = 0; f < {filters}; f += {rows}) {{
    {inner}(x, x_row, w + f * {kh * depth}, out + f);
  }}
  return 0;
}}
/* the same at the pixel whose window starts at row y0, column x0 of the height x width image x and
   leaves it: the window copied, `pad` outside the image (relay_aot) */
static int32_t {name}_border(const int8_t* x, int32_t height, int32_t width, int32_t y0, int32_t x0, int32_t pad,
                             const int8_t* w, int32_t* out) {{
  int8_t window[{kh * depth}];
  relay_aot_window_s8(window, x, height, width, {channels}, {kh}, {kw}, y0, x0, pad);
  return {name}(window, {depth}, w, out);
}}
#endif
"""


def depthwise_kernel_name(channels: int, kh: int, kw: int) -> str:
    """The C function computing one output pixel of a depthwise convolution (all channels)."""
    return f"relay_aot_dw_s8_c{channels}_k{kh}x{kw}"


def depthwise_kernel_c(channels: int, kh: int, kw: int, border: bool = False) -> str:
    """C of :func:`depthwise_kernel_name`: ``out[c] = sum x[i * x_row + j * channels + c] *
    w[(i * kw + j) * channels + c]`` over the window (``i < kh``, ``j < kw``). Four channels at
    a time: four int8 of the input and of the weights as one word each, widened by ``SXTB16``,
    each channel's product by ``SMLABB``/``SMLATT`` (its own accumulator, in a register).

    ``border``: also its ``_border`` variant, for a depthwise convolution whose kernel does its
    padding: the sums at the pixel whose window starts at row ``y0``, column ``x0`` of the
    ``height x width`` image ``x`` and leaves it, each tap read through a pointer to its pixel
    or, outside the image, to a row of the pad value (the input's zero point, as the pad kernel
    it replaces wrote): ``channels`` bytes and ``kh * kw`` pointers of stack."""
    name = depthwise_kernel_name(channels, kh, kw)
    inside = _depthwise_function(
        name,
        channels,
        kh,
        kw,
        "const int8_t* x, int32_t x_row, const int8_t* w, int32_t* out",
        "",
        lambda i, j: f"x + {i} * x_row + {j * channels}",
        f"""/* out[c] = sum over the {kh}x{kw} window of x[i * x_row + j * {channels} + c] * w[(i * {kw} + j) * {channels} + c],
   for c < {channels} (relay_aot) */""",
    )
    if not border:
        return f"{_COMMON}{inside}"
    taps = kh * kw
    prelude = f"""  int8_t fill[{channels}];
  const int8_t* tap[{taps}];
  memset(fill, pad, {channels});
  for (int32_t t = 0; t < {taps}; ++t) {{
    int32_t y = y0 + t / {kw}, column = x0 + t % {kw};
    tap[t] = y >= 0 && y < height && column >= 0 && column < width ? x + (y * width + column) * {channels} : fill;
  }}
"""
    outside = _depthwise_function(
        name + "_border",
        channels,
        kh,
        kw,
        "const int8_t* x, int32_t height, int32_t width, int32_t y0, int32_t x0, int32_t pad, const int8_t* w, "
        "int32_t* out",
        prelude,
        lambda i, j: f"tap[{i * kw + j}]",
        f"""/* the sums of {name} at the pixel whose window starts at row y0, column x0 of the height x width
   image x and leaves it, the taps outside the image `pad` (relay_aot) */""",
    )
    return f"{_COMMON}{inside}{outside}"


def _depthwise_function(name: str, channels: int, kh: int, kw: int, params: str, prelude: str, tap, doc: str) -> str:
    """One depthwise micro-kernel: ``prelude``, then the sums over the taps, tap ``(i, j)``'s
    ``channels`` int8 at the address ``tap(i, j)``."""
    taps = "\n".join(
        f"      xv = relay_aot_s8x4({tap(i, j)} + c);\n"
        f"      wv = relay_aot_s8x4(w + {(i * kw + j) * channels} + c);\n"
        "      xe = __sxtb16(xv); xo = relay_aot_sxtb16_ror8(xv);\n"
        "      we = __sxtb16(wv); wo = relay_aot_sxtb16_ror8(wv);\n"
        "      a0 = __smlabb(xe, we, a0); a2 = __smlatt(xe, we, a2);\n"
        "      a1 = __smlabb(xo, wo, a1); a3 = __smlatt(xo, wo, a3);"
        for i in range(kh)
        for j in range(kw)
    )
    scalar = " + ".join(
        f"(int32_t)({tap(i, j)})[c] * w[{(i * kw + j) * channels} + c]" for i in range(kh) for j in range(kw)
    )
    dsp = ""
    if channels >= 4:
        dsp = f"""#ifdef RELAY_AOT_DSP
  for (; c < {channels - channels % 4}; c += 4) {{
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, xe, xo, we, wo;
    uint32_t xv, wv;
{taps}
    out[c] = a0;
    out[c + 1] = a1;
    out[c + 2] = a2;
    out[c + 3] = a3;
  }}
#endif
"""
    return f"""
#ifndef {name.upper()}
#define {name.upper()}
{doc}
static int32_t {name}({params}) {{
{prelude}  int32_t c = 0;
{dsp}  for (; c < {channels}; ++c) {{
    out[c] = {scalar};
  }}
  return 0;
}}
#endif
"""


def _intrinsic(rows: int, depth: int) -> te.TensorIntrin:
    """``rows`` sums of products of one row of the data and ``rows`` rows of the weights, over
    the whole depth: one call of the micro-kernel."""
    a = te.placeholder((1, depth), name="a", dtype="int8")
    b = te.placeholder((rows, depth), name="b", dtype="int8")
    k = te.reduce_axis((0, depth), name="k")
    c = te.compute((1, rows), lambda i, j: te.sum(a[i, k].astype("int32") * b[j, k].astype("int32"), axis=k))
    a_buf = tvm.tir.decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[te.var("a_s"), 1])
    b_buf = tvm.tir.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1, strides=[depth, 1])
    c_buf = tvm.tir.decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[te.var("c_s"), 1])

    def body(ins, outs):
        aa, bb = ins
        ib = tvm.tir.ir_builder.create()
        ib.emit(
            tvm.tir.call_extern(
                "int32", micro_kernel_name(rows, depth), aa.access_ptr("r"), bb.access_ptr("r"), outs[0].access_ptr("w")
            )
        )
        return ib.get()

    return te.decl_tensor_intrin(c.op, body, binds={a: a_buf, b: b_buf, c: c_buf})


def rows_per_call(units: int) -> int:
    """Rows of weights per micro-kernel call: the most, up to :data:`MAX_ROWS`, dividing ``units``."""
    return next(r for r in range(MAX_ROWS, 0, -1) if units % r == 0)


def dense_compute(data: te.Tensor, weight: te.Tensor) -> te.Tensor:
    """``data (M x K) . weight (N x K)^T`` in int32 (what TVM's ``nn.dense`` computes)."""
    m, depth = get_const_tuple(data.shape)
    n, _ = get_const_tuple(weight.shape)
    k = te.reduce_axis((0, depth), name="k")
    return te.compute(
        (m, n),
        lambda i, j: te.sum(data[i, k].astype("int32") * weight[j, k].astype("int32"), axis=k),
        name="dense",
        tag=DENSE_TAG,
    )


@dataclasses.dataclass(frozen=True)
class Padding:
    """The padding a convolution's kernel does itself (a pad kernel's, merged into it by
    ``passes/arm_dsp.py``): rows above and below the image, columns left and right of it, all
    ``value``."""

    top: int
    left: int
    bottom: int
    right: int
    value: int

    def attrs(self) -> dict:
        return {"pad": [self.top, self.left, self.bottom, self.right, self.value]}

    @staticmethod
    def of(op: te.ComputeOp) -> Padding | None:
        """The padding a convolution stage does (:meth:`attrs`), None if it does none."""
        return Padding(*(int(v) for v in op.attrs["pad"])) if "pad" in op.attrs else None


def padded_input(t: te.Tensor) -> tuple[te.Tensor, Padding] | None:
    """``(image, padding)`` where ``t`` is relay_aot's pad (:func:`pad_compute`) of a batch of
    one ``NHWC`` image, on its rows and columns only, with a constant value; else None."""
    if not isinstance(t.op, te.ComputeOp) or t.op.tag != PAD_TAG:
        return None
    data, value = t.op.input_tensors
    before, after = ([int(v) for v in t.op.attrs[key]] for key in ("pad_before", "pad_after"))
    constant = value.op.body[0] if isinstance(value.op, te.ComputeOp) and not value.op.input_tensors else None
    if (
        len(data.shape) != 4
        or int(data.shape[0]) != 1
        or before[0] != 0
        or after[0] != 0
        or before[3] != 0
        or after[3] != 0
        or not isinstance(constant, tvm.tir.IntImm)
    ):
        return None
    return data, Padding(before[1], before[2], after[1], after[2], int(constant))


def conv_compute(data: te.Tensor, weight: te.Tensor, strides, dilation, padding: Padding | None = None) -> te.Tensor:
    """The ``NHWC`` convolution of ``data`` with ``OHWI`` ``weight`` in int32 (what TVM's
    ``nn.conv2d`` computes; the input's width dilation is 1). With ``padding`` the window of a
    pixel near the edges reaches outside ``data``: only :func:`dense_schedule`'s kernel, which
    reads the pad value there instead, computes it."""
    n, height, width, channels = get_const_tuple(data.shape)
    filters, kh, kw, _ = get_const_tuple(weight.shape)
    (sh, sw), dh = strides, dilation
    pad = padding or Padding(0, 0, 0, 0, 0)
    height, width = height + pad.top + pad.bottom, width + pad.left + pad.right
    oh, ow = (height - (kh - 1) * dh - 1) // sh + 1, (width - kw) // sw + 1
    rh, rw, rc = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, channels), "rc")
    return te.compute(
        (n, oh, ow, filters),
        lambda b, y, x, f: te.sum(
            data[b, y * sh + rh * dh - pad.top, x * sw + rw - pad.left, rc].astype("int32")
            * weight[f, rh, rw, rc].astype("int32"),
            axis=[rh, rw, rc],
        ),
        name="conv",
        tag=CONV_TAG,
        attrs={"dilation": dh, "strides": [sh, sw], **(padding.attrs() if padding else {})},
    )


@dataclasses.dataclass(frozen=True)
class _Border:
    """Where the window of the output pixel ``(y, x)`` (the anchor's loop variables) starts in
    the ``height x width`` image, for a convolution that does its ``padding``."""

    y: tvm.tir.Var
    x: tvm.tir.Var
    strides: tuple[int, int]
    padding: Padding
    height: int
    width: int
    kh: int
    kw: int

    @staticmethod
    def of(s: te.Schedule, anchor: te.Tensor, kh: int, kw: int) -> _Border | None:
        padding = Padding.of(anchor.op)
        if padding is None:
            return None
        _, height, width, _ = get_const_tuple(anchor.op.input_tensors[0].shape)
        _, y, x, _ = s[anchor].op.axis
        sh, sw = (int(v) for v in anchor.op.attrs["strides"])
        return _Border(y.var, x.var, (sh, sw), padding, height, width, kh, kw)

    def call(self, name: str, image: tvm.tir.Var, w: tvm.tir.PrimExpr, out: tvm.tir.PrimExpr) -> tvm.tir.PrimExpr:
        """The call of ``name``'s ``_border`` variant for this pixel (``image``: the image's
        address)."""
        y0, x0 = self.y * self.strides[0] - self.padding.top, self.x * self.strides[1] - self.padding.left
        args = [image, self.height, self.width, y0, x0, self.padding.value, w, out]
        return tvm.tir.call_extern("int32", name + "_border", *args)

    def inside(self) -> tvm.tir.PrimExpr:
        """Whether the pixel's window is inside the image."""
        y0, x0 = self.y * self.strides[0] - self.padding.top, self.x * self.strides[1] - self.padding.left
        return tvm.tir.all(y0 >= 0, x0 >= 0, y0 <= self.height - self.kh, x0 <= self.width - self.kw)


def _pixel_call(name: str, border: _Border | None = None):
    """The body of a convolution intrinsic: one call of micro-kernel ``name`` with the input's
    address and row stride, the weights' and the output's addresses; with ``border``, that call
    where the pixel's window is inside the image, else its ``_border`` variant's."""

    def body(ins, outs):
        aa, bb = ins
        w, out = bb.access_ptr("r"), outs[0].access_ptr("w")
        inside = tvm.tir.Evaluate(tvm.tir.call_extern("int32", name, aa.access_ptr("r"), aa.strides[1], w, out))
        if border is None:
            return inside
        return tvm.tir.IfThenElse(border.inside(), inside, tvm.tir.Evaluate(border.call(name, aa.data, w, out)))

    return body


def _conv_intrinsic(
    rows: int, kh: int, kw: int, channels: int, dilation: int, name: str | None = None, border: _Border | None = None
) -> te.TensorIntrin:
    """``rows`` output channels of one output pixel: one call of the convolution micro-kernel
    (the window's ``kh`` rows of ``kw * channels`` contiguous int8 each, the input's row stride
    passed), or of C function ``name`` (:func:`conv_pixel_c`, ``border`` as for
    :func:`_pixel_call`)."""
    a = te.placeholder((1, (kh - 1) * dilation + 1, kw, channels), name="a", dtype="int8")
    b = te.placeholder((rows, kh, kw, channels), name="b", dtype="int8")
    rh, rw, rc = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, channels), "rc")
    c = te.compute(
        (1, 1, 1, rows),
        lambda i, y, x, j: te.sum(
            a[i, y + rh * dilation, x + rw, rc].astype("int32") * b[j, rh, rw, rc].astype("int32"), axis=[rh, rw, rc]
        ),
    )
    a_buf = tvm.tir.decl_buffer(
        a.shape, a.dtype, name="A", offset_factor=1, strides=[te.var("a_n"), te.var("a_h"), channels, 1]
    )
    b_buf = tvm.tir.decl_buffer(
        b.shape, b.dtype, name="B", offset_factor=1, strides=[kh * kw * channels, kw * channels, channels, 1]
    )
    c_buf = tvm.tir.decl_buffer(
        c.shape, c.dtype, name="C", offset_factor=1, strides=[te.var("c_n"), te.var("c_h"), te.var("c_w"), 1]
    )
    name = name or micro_kernel_name(rows, kw * channels, kh, dilation)
    return te.decl_tensor_intrin(c.op, _pixel_call(name, border), binds={a: a_buf, b: b_buf, c: c_buf})


def depthwise_compute(data: te.Tensor, weight: te.Tensor, strides, padding: Padding | None = None) -> te.Tensor:
    """The undilated ``NHWC`` depthwise convolution (multiplier 1) of ``data`` with ``HWOI``
    ``weight`` (``kh x kw x C x 1``) in int32; ``padding`` as for :func:`conv_compute`."""
    n, height, width, channels = get_const_tuple(data.shape)
    kh, kw, _, _ = get_const_tuple(weight.shape)
    sh, sw = strides
    pad = padding or Padding(0, 0, 0, 0, 0)
    height, width = height + pad.top + pad.bottom, width + pad.left + pad.right
    oh, ow = (height - kh) // sh + 1, (width - kw) // sw + 1
    rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
    return te.compute(
        (n, oh, ow, channels),
        lambda b, y, x, c: te.sum(
            data[b, y * sh + rh - pad.top, x * sw + rw - pad.left, c].astype("int32")
            * weight[rh, rw, c, 0].astype("int32"),
            axis=[rh, rw],
        ),
        name="depthwise",
        tag=DEPTHWISE_TAG,
        attrs={"strides": [sh, sw], **(padding.attrs() if padding else {})},
    )


def _depthwise_intrinsic(channels: int, kh: int, kw: int, border: _Border | None = None) -> te.TensorIntrin:
    """All channels of one output pixel: one call of the depthwise micro-kernel (``border`` as
    for :func:`_pixel_call`)."""
    a = te.placeholder((1, kh, kw, channels), name="a", dtype="int8")
    b = te.placeholder((kh, kw, channels, 1), name="b", dtype="int8")
    rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
    c = te.compute(
        (1, 1, 1, channels),
        lambda i, y, x, k: te.sum(
            a[i, y + rh, x + rw, k].astype("int32") * b[rh, rw, k, 0].astype("int32"), axis=[rh, rw]
        ),
    )
    a_buf = tvm.tir.decl_buffer(
        a.shape, a.dtype, name="A", offset_factor=1, strides=[te.var("a_n"), te.var("a_h"), channels, 1]
    )
    b_buf = tvm.tir.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1)
    c_buf = tvm.tir.decl_buffer(
        c.shape, c.dtype, name="C", offset_factor=1, strides=[te.var("c_n"), te.var("c_h"), te.var("c_w"), 1]
    )
    name = depthwise_kernel_name(channels, kh, kw)
    return te.decl_tensor_intrin(c.op, _pixel_call(name, border), binds={a: a_buf, b: b_buf, c: c_buf})


def dense_schedule(outs) -> te.Schedule:
    """The dense's units (the convolution's output channels) in blocks of :func:`rows_per_call`
    rows, each block one micro-kernel call, the operators fused after it (elementwise: FuseOps'
    out-elementwise pattern) applied to the block's sums right after the call."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    last = outs[0]
    anchor = find_tagged(last.op, (DENSE_TAG, CONV_TAG, DEPTHWISE_TAG))
    assert anchor is not None, "relay_aot's DSP strategy without its dense or convolution"
    data, weight = anchor.op.input_tensors
    rows = rows_per_call(get_const_tuple(weight.shape)[0])
    inline_between(s, anchor.op, last.op)
    if anchor.op.tag == DEPTHWISE_TAG:
        # one call per output pixel, all its channels; the fused operators after it per pixel
        kh, kw, channels, _ = get_const_tuple(weight.shape)
        border = _Border.of(s, anchor, kh, kw)
        *_, k = s[anchor].op.axis
        s[anchor].tensorize(k, _depthwise_intrinsic(channels, kh, kw, border))
        s[anchor].pragma(s[anchor].op.axis[2], "import_c", depthwise_kernel_c(channels, kh, kw, border is not None))
        if not last.op.same_as(anchor.op):
            s[anchor].compute_at(s[last], s[last].op.axis[2])
        return s
    if anchor.op.tag == CONV_TAG and Padding.of(anchor.op) is not None:
        # a convolution that does its padding: one call per output pixel, all its filters
        # (:func:`conv_pixel_c`: a window leaving the image is copied once for all of them)
        filters, kh, kw, channels = get_const_tuple(weight.shape)
        border = _Border.of(s, anchor, kh, kw)
        *_, j = s[anchor].op.axis
        name = conv_pixel_name(filters, rows, kh, kw, channels)
        s[anchor].tensorize(j, _conv_intrinsic(filters, kh, kw, channels, 1, name, border))
        s[anchor].pragma(s[anchor].op.axis[2], "import_c", conv_pixel_c(filters, rows, kh, kw, channels))
        if not last.op.same_as(anchor.op):
            s[anchor].compute_at(s[last], s[last].op.axis[2])
        return s
    *outer, j = s[anchor].op.axis
    jo, ji = s[anchor].split(j, factor=rows)
    s[anchor].reorder(*outer, jo, ji, *s[anchor].op.reduce_axis)
    if anchor.op.tag == DENSE_TAG:
        depth = get_const_tuple(data.shape)[1]
        s[anchor].tensorize(ji, _intrinsic(rows, depth))
        s[anchor].pragma(jo, "import_c", micro_kernel_c(rows, depth))
    else:
        _, kh, kw, channels = get_const_tuple(weight.shape)
        dilation = int(anchor.op.attrs["dilation"]) if "dilation" in anchor.op.attrs else 1
        s[anchor].tensorize(ji, _conv_intrinsic(rows, kh, kw, channels, dilation))
        s[anchor].pragma(jo, "import_c", micro_kernel_c(rows, kw * channels, kh, dilation))
    if not last.op.same_as(anchor.op):
        *_, lj = s[last].op.axis
        ljo, _ = s[last].split(lj, factor=rows)
        s[anchor].compute_at(s[last], ljo)
    return s


def _static(*shapes) -> bool:
    return all(isinstance(d, (int, tvm.tir.IntImm)) for shape in shapes for d in shape)


def _int8_on_dsp(inputs, out_type, target) -> bool:
    data, weight = inputs
    return (
        _GATE.active()
        and bool(target.features.has_dsp)
        and data.dtype == "int8"
        and weight.dtype == "int8"
        and out_type.dtype == "int32"
        and _static(data.shape, weight.shape)
    )


def _applies(inputs, out_type, target) -> bool:
    """Whether relay_aot's dense computes this call (module docstring)."""
    return _int8_on_dsp(inputs, out_type, target) and len(inputs[0].shape) == 2


def conv_applies(attrs, inputs, out_type, target) -> bool:
    """Whether relay_aot's convolution computes this call: ``NHWC`` data, ``OHWI`` weights (which
    only ``passes/arm_dsp.py`` makes of a TFLite model's convolutions), no padding, one group,
    no width dilation."""
    return (
        _int8_on_dsp(inputs, out_type, target)
        and attrs.data_layout == "NHWC"
        and attrs.kernel_layout == "OHWI"
        and str(attrs.out_layout) in ("", "NHWC")
        and int(attrs.groups) == 1
        and all(int(p) == 0 for p in attrs.padding)
        and int(attrs.dilation[1]) == 1
    )


_TVM_DENSE_STRATEGY = _arm_cpu.schedule_dense_arm_cpu
_TVM_CONV2D_STRATEGY = _arm_cpu.conv2d_strategy_arm_cpu


def _schedule(attrs, outs, target):
    return dense_schedule(outs)


def _dense_strategy(attrs, inputs, out_type, target):
    if not _applies(inputs, out_type, target):
        return _TVM_DENSE_STRATEGY(attrs, inputs, out_type, target)
    strategy = _op.OpStrategy()
    strategy.add_implementation(
        lambda attrs, ins, out_type: [dense_compute(ins[0], ins[1])],
        _schedule,
        name="dense_s8_dsp.relay_aot",
        plevel=20,
    )
    return strategy


def _conv2d_compute(attrs, inputs, out_type):
    strides = tuple(int(v) for v in attrs.strides)
    data, padding = padded_input(inputs[0]) or (inputs[0], None)
    if int(attrs.dilation[0]) != 1:
        data, padding = inputs[0], None  # the window copy of conv_pixel_c is undilated
    return [conv_compute(data, inputs[1], strides, int(attrs.dilation[0]), padding)]


def depthwise_applies(attrs, inputs, out_type, target) -> bool:
    """Whether relay_aot's depthwise convolution computes this call: ``NHWC`` data, ``HWOI``
    weights of multiplier 1 (relay_aot's TFLite importer writes those), no padding, no
    dilation."""
    if not _int8_on_dsp(inputs, out_type, target):
        return False
    data, weight = inputs
    channels = int(data.shape[3]) if len(data.shape) == 4 else 0
    return (
        attrs.data_layout == "NHWC"
        and attrs.kernel_layout == "HWOI"
        and str(attrs.out_layout) in ("", "NHWC")
        and channels > 1
        and int(attrs.groups) == channels
        and len(weight.shape) == 4
        and int(weight.shape[2]) == channels
        and int(weight.shape[3]) == 1
        and all(int(p) == 0 for p in attrs.padding)
        and all(int(d) == 1 for d in attrs.dilation)
    )


def _depthwise_compute(attrs, inputs, out_type):
    data, padding = padded_input(inputs[0]) or (inputs[0], None)
    return [depthwise_compute(data, inputs[1], tuple(int(v) for v in attrs.strides), padding)]


def _conv2d_strategy(attrs, inputs, out_type, target):
    strategy = _op.OpStrategy()
    if conv_applies(attrs, inputs, out_type, target):
        strategy.add_implementation(_conv2d_compute, _schedule, name="conv2d_s8_dsp.relay_aot", plevel=20)
    elif depthwise_applies(attrs, inputs, out_type, target):
        strategy.add_implementation(_depthwise_compute, _schedule, name="depthwise_s8_dsp.relay_aot", plevel=20)
    else:
        return _TVM_CONV2D_STRATEGY(attrs, inputs, out_type, target)
    return strategy


def _requantize_compute(attrs, inputs, out_type):
    data, params = inputs

    def value(*index):
        c = index[-1]
        return tvm.tir.call_pure_extern(
            "int32", "relay_aot_requantize", data(*index), params[c, 0], params[c, 1], params[c, 2], params[c, 3]
        )

    return [te.compute(data.shape, value, name="requantize", tag="broadcast")]


def _requantize_schedule(attrs, outs, target):
    """A requantization alone in its kernel (not after relay_aot's micro-kernels, whose C
    defines its function): TVM's elementwise schedule, the function's C imported."""
    with target:
        s = tvm.topi.generic.schedule_injective(outs)
    out = outs[0]
    s[out].pragma(s[out].op.axis[0], "import_c", _COMMON)
    return s


def _requantize_strategy(attrs, inputs, out_type, target):
    strategy = _op.OpStrategy()
    strategy.add_implementation(_requantize_compute, _requantize_schedule, name="requantize.relay_aot")
    return strategy


_op.register_strategy(REQUANTIZE, override_native_generic_func("relay_aot_requantize_strategy")(_requantize_strategy))


PAD_TAG = "relay_aot_pad"


def pad_applies(attrs, inputs, out_type, target) -> bool:
    """Whether relay_aot's pad computes this call: a constant pad of a static tensor on a target
    with the DSP extension (the M-profile cores relay_aot's C kernels are for)."""
    return (
        _GATE.active()
        and target is not None
        and bool(target.features.has_dsp)
        and attrs.pad_mode == "constant"
        and _static(inputs[0].shape, out_type.shape)
    )


def pad_compute(data: te.Tensor, value: te.Tensor, pad_width) -> te.Tensor:
    """TOPI's constant pad, each bound test ``likely``: the loop partitioning of
    :func:`partitioning` then splits every padded axis's loop into its border and interior parts,
    and the interior copies without a test (TVM's pad tests both bounds of every padded axis per
    element: 16 instructions per element on a Cortex-M4)."""
    widths = [(int(b), int(a)) for b, a in pad_width]
    shape = [int(n) + b + a for n, (b, a) in zip(data.shape, widths)]

    def element(*index):
        conditions = []
        for i, (n, (before, after)) in enumerate(zip(data.shape, widths)):
            if before:
                conditions.append(tvm.tir.likely(index[i] >= before))
            if after:
                conditions.append(tvm.tir.likely(index[i] < int(n) + before))
        source = data(*[i - b for i, (b, _) in zip(index, widths)])
        if not conditions:
            return source
        return tvm.tir.if_then_else(tvm.tir.all(*conditions), source, value().astype(data.dtype))

    return te.compute(
        shape,
        element,
        name="T_pad",
        tag=PAD_TAG,
        attrs={"pad_before": [b for b, _ in widths], "pad_after": [a for _, a in widths]},
    )


def _pad_compute(attrs, inputs, out_type):
    return [pad_compute(inputs[0], inputs[1], attrs.pad_width)]


def _pad_schedule(attrs, outs, target):
    """The pad's loops as they are (no fusion, no split: the partitioning needs each axis's own
    loop), the operators before it inlined."""
    s = te.create_schedule([x.op for x in outs])
    te.schedule.AutoInlineInjective(s)
    return s


def _pad_strategy(attrs, inputs, out_type, target):
    if not pad_applies(attrs, inputs, out_type, target):
        return _TVM_PAD_STRATEGY(attrs, inputs, out_type, target)
    strategy = _op.OpStrategy()
    strategy.add_implementation(_pad_compute, _pad_schedule, name="pad.relay_aot", plevel=20)
    return strategy


_TVM_PAD_STRATEGY = tvm.ir.Op.get("nn.pad").get_attr("FTVMStrategy")


def partitioning(ops, target: tvm.target.Target) -> contextlib.AbstractContextManager:
    """Around the lowering of a kernel of ``ops`` (relay_aot's C kernels) for ``target``: for a
    pad on a target with the DSP extension (:func:`pad_applies`), the current
    PassContext with TVM's loop partitioning of ``likely`` conditions (what :func:`pad_compute`
    writes); otherwise nothing. Only the pad's kernel: elsewhere ``likely`` marks split tails,
    whose partitioning would change kernels this does not mean to."""
    if "nn.pad" not in ops or "nn.conv2d" in ops or not target.features.has_dsp:
        return contextlib.nullcontext()  # a convolution that does its padding reads no pad's loops
    current = tvm.transform.PassContext.current()
    config = dict(current.config)
    config["tir.LoopPartition"] = {"partition_const_loop": True}
    return tvm.transform.PassContext(
        opt_level=current.opt_level,
        required_pass=list(current.required_pass),
        disabled_pass=list(current.disabled_pass),
        instruments=list(current.instruments),
        config=config,
    )


def _install() -> None:
    _generic.dense_strategy.register("arm_cpu", _dense_strategy, override=True)
    _generic.conv2d_strategy.register("arm_cpu", _conv2d_strategy, override=True)
    _op.register_strategy("nn.pad", override_native_generic_func("relay_aot_pad_strategy")(_pad_strategy), level=11)


_GATE = Gate(_install)
#: Within the block (on this thread), int8 dense and OHWI convolutions and constant pads on
#: M-profile DSP targets are relay_aot's.
building = _GATE.building

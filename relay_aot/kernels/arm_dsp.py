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
cache's keys). TVM's strategy applies elsewhere, and everywhere outside :func:`building`
(``relay.build``, TVM's executors and AutoTVM in the same process are unchanged).
"""

from __future__ import annotations

import tvm
from tvm import te
from tvm.relay.op import op as _op
from tvm.relay.op.strategy import arm_cpu as _arm_cpu
from tvm.relay.op.strategy import generic as _generic
from tvm.topi.utils import get_const_tuple

from .gate import Gate

#: The tag of relay_aot's dense: its schedule finds the stage by it.
DENSE_TAG = "relay_aot_dense_s8_dsp"

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
#endif
"""


def micro_kernel_name(rows: int, depth: int) -> str:
    """The C function computing ``rows`` dot products of int8 vectors of ``depth``."""
    return f"relay_aot_dot_s8_r{rows}_k{depth}"


def micro_kernel_c(rows: int, depth: int) -> str:
    """C of :func:`micro_kernel_name`: ``out[r] = sum_k x[k] * w[r * depth + k]`` for
    ``r < rows`` (int32 sums of int8 products), SMLAD on pairs where the DSP extension is."""
    name = micro_kernel_name(rows, depth)
    guard = name.upper()
    rs = range(rows)
    accs = ", ".join(f"acc{r} = 0" for r in rs)
    dsp_rows = "\n".join(
        f"    wv = relay_aot_s8x4(w + {r * depth} + k);\n"
        f"    acc{r} = __smlad(__sxtb16(wv), x02, acc{r});\n"
        f"    acc{r} = __smlad(relay_aot_sxtb16_ror8(wv), x13, acc{r});"
        for r in rs
    )
    tail_rows = "\n".join(f"    acc{r} += xk * (int32_t)w[{r * depth} + k];" for r in rs)
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
    return f"""{_COMMON}
#ifndef {guard}
#define {guard}
/* out[r] = sum of x[k] * w[r * {depth} + k] over k < {depth}, for r < {rows} (relay_aot) */
static int32_t {name}(const int8_t* x, const int8_t* w, int32_t* out) {{
  int32_t {accs};
  int32_t k = 0;
{dsp_loop}  for (; k < {depth}; ++k) {{
    int32_t xk = x[k];
{tail_rows}
  }}
{stores}
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


def dense_schedule(outs) -> te.Schedule:
    """The dense's units in blocks of :func:`rows_per_call` rows, each block one micro-kernel call,
    the operators fused after it (elementwise: FuseOps' out-elementwise pattern) applied to the
    block's sums right after the call."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    last = outs[0]
    dense = _find_dense(last.op)
    assert dense is not None, "relay_aot's dense strategy without its dense"
    data, weight = dense.op.input_tensors
    _, depth = get_const_tuple(data.shape)
    units = get_const_tuple(weight.shape)[0]
    rows = rows_per_call(units)

    def inline(op):
        if op.same_as(dense.op) or not isinstance(op, te.ComputeOp):
            return
        if not op.same_as(last.op):
            s[op].compute_inline()
        for t in op.input_tensors:
            inline(t.op)

    inline(last.op)
    i, j = s[dense].op.axis
    jo, ji = s[dense].split(j, factor=rows)
    s[dense].reorder(i, jo, ji, *s[dense].op.reduce_axis)
    s[dense].tensorize(ji, _intrinsic(rows, depth))
    s[dense].pragma(jo, "import_c", micro_kernel_c(rows, depth))
    if not last.op.same_as(dense.op):
        li, lj = s[last].op.axis
        ljo, _ = s[last].split(lj, factor=rows)
        s[dense].compute_at(s[last], ljo)
    return s


def _find_dense(op) -> te.Tensor | None:
    if op.tag == DENSE_TAG:
        return op.output(0)
    for t in op.input_tensors:
        if isinstance(t.op, te.ComputeOp):
            found = _find_dense(t.op)
            if found is not None:
                return found
    return None


def _applies(inputs, out_type, target) -> bool:
    """Whether relay_aot's dense computes this call (module docstring)."""
    if not _GATE.active() or not target.features.has_dsp:
        return False
    data, weight = inputs
    if data.dtype != "int8" or weight.dtype != "int8" or out_type.dtype != "int32":
        return False
    shapes = (*data.shape, *weight.shape)
    return len(data.shape) == 2 and all(isinstance(d, (int, tvm.tir.IntImm)) for d in shapes)


_TVM_DENSE_STRATEGY = _arm_cpu.schedule_dense_arm_cpu


def _dense_strategy(attrs, inputs, out_type, target):
    if not _applies(inputs, out_type, target):
        return _TVM_DENSE_STRATEGY(attrs, inputs, out_type, target)
    strategy = _op.OpStrategy()
    strategy.add_implementation(
        lambda attrs, ins, out_type: [dense_compute(ins[0], ins[1])],
        lambda attrs, outs, target: dense_schedule(outs),
        name="dense_s8_dsp.relay_aot",
        plevel=20,
    )
    return strategy


def _install() -> None:
    _generic.dense_strategy.register("arm_cpu", _dense_strategy, override=True)


_GATE = Gate(_install)
#: Within the block (on this thread), int8 dense on M-profile DSP targets is relay_aot's.
building = _GATE.building

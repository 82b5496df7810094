"""Choose Winograd for packed 3x3 convolutions on AVX-512 (the kernel: ``kernels.winograd``).

After the layout choice, a convolution ``nn.contrib_conv2d_NCHWc`` with constant weights, a 3x3
window, stride 1, padding 1, no dilation or groups, float32, one image, and input and output
blocks of whole AVX-512 vectors (16 or 32 channels) becomes
``nn.contrib_conv2d_winograd_without_weight_transform`` in the same data layouts, whose weights
are the packed weights transformed here, once (:func:`transformed_weights`), and laid out as
the kernel reads them, followed by the original weights and a bound on the inputs below which
Winograd's algorithm cannot overflow (:func:`input_bound`): the kernel computes a row of tiles
whose inputs exceed it, or are inf or NaN, directly. (The operator's type relation does not
check the weights' shape.) Weights that are not all finite keep the direct convolution. Its
output blocks, and so every layout around it, stay as they were.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay
from tvm.topi.nn import winograd_util

from .walk import calls_any, rewrite_functions

_NCHWC = tvm.ir.Op.get("nn.contrib_conv2d_NCHWc")

#: float32 lanes of an AVX-512 vector.
LANES = 16

#: Rows and columns below this keep the direct convolution (a tile pads a small map by much).
MIN_EXTENT = 8


def tile_size(height: int, width: int) -> int:
    """Outputs per tile side: 4 on rows of 20 and more, else 2 (on 13-wide rows a tile of 4
    computes 16 columns for 13, and measured slower than 2 on SqueezeNet's 13 x 13 layers)."""
    return 4 if min(height, width) >= 20 else 2


def transform_matrices(m: int):
    """TVM's Winograd matrices A (m+2 x m), B (m+2 x m+2), G (m+2 x 3) of F(m x m, 3 x 3), in
    float64: G transforms the weights here, A and B the outputs and inputs in the kernel."""
    points = winograd_util._interpolation_points(m + 2)
    return tuple(np.asarray(x, dtype=np.float64) for x in winograd_util._cook_toom_convolution(points, m, 3))


def input_bound(transformed: np.ndarray, plain: np.ndarray, m: int) -> float:
    """The largest input magnitude for which no step of the kernel can overflow float32, for
    (finite) transformed weights ``transformed`` (``(m+2)^2 x K/kb x C x kb``, float32 as the
    kernel reads them) and the original ones ``plain`` (``K x C x 3 x 3``).

    Each linear step multiplies the largest magnitude by at most its coefficients' largest row
    sum of absolute values, and bounds its partial sums by the same: the input transform by
    ``b^2`` (b = 2 for m = 2, 7 for m = 4), the products by ``s``, the largest sum over input
    channels of ``|U|`` for one transformed position and filter, the output transform by
    ``a^2`` (a = 3, 11.125). A direct convolution's partial sums are at most the input's
    magnitude times the largest sum of one filter's ``|w|``. Inputs of magnitude at most
    ``FLT_MAX / (2 max(b^2, b^2 s a^2, sum |w|))`` (the 2 covers rounding) leave every value
    of both computations finite and below ``FLT_MAX / 2``; the kernel computes the outputs of
    a larger input (or an inf or NaN) directly. Capped at ``FLT_MAX``, which an infinite input
    exceeds. (SqueezeNet's layers, random weights: about 1e34 for m = 4, 2e36 for m = 2.)"""
    a, b, _ = transform_matrices(m)
    b_growth = np.abs(b).sum(axis=0).max() ** 2  # rows of B^T, twice
    a_growth = np.abs(a).sum(axis=0).max() ** 2  # rows of A^T, twice
    per_position = np.abs(transformed.astype(np.float64)).sum(axis=2).max()
    per_filter = np.abs(plain.astype(np.float64)).reshape(plain.shape[0], -1).sum(axis=1).max()
    growth = max(b_growth, b_growth * per_position * a_growth, per_filter)
    flt_max = float(np.finfo(np.float32).max)
    return float(np.float32(min(flt_max / (2 * growth), flt_max)))


def transformed_weights(packed: np.ndarray, m: int) -> np.ndarray:
    """The kernel's weights for packed weights ``packed`` (``K/kb x C/cb x 3 x 3 x cb x kb``,
    x86's ``OIHW{cb}i{kb}o``): ``(m+2)^2 + 10`` slices of ``K/kb x C x kb``, as the kernel reads
    them: first Winograd's ``G g G^T``, one slice per transformed position; then the 9 original
    taps (row by row), for the outputs the kernel computes directly; then one slice filled with
    :func:`input_bound` (the kernel reads one element). Computed here in float64 (Relay's
    ``contrib_conv2d_winograd_weight_transform`` folded by ``FoldConstant`` took 5 s of
    SqueezeNet's compile); G is TVM's, as the kernel's A and B."""
    k_blocks, c_blocks, _, _, cb, kb = packed.shape
    plain = packed.astype(np.float64).transpose(0, 5, 1, 4, 2, 3).reshape(k_blocks * kb, c_blocks * cb, 3, 3)
    _, _, g = transform_matrices(m)
    u = np.einsum("ei,kcij,nj->enkc", g, plain, g)  # (a, a, K, C)
    alpha = m + 2
    u = u.reshape(alpha * alpha, k_blocks, kb, c_blocks * cb).transpose(0, 1, 3, 2).astype(np.float32)
    taps = plain.reshape(k_blocks, kb, c_blocks * cb, 9).transpose(3, 0, 2, 1).astype(np.float32)
    bound = np.full((1, *u.shape[1:]), input_bound(u, plain, m), dtype=np.float32)
    return np.ascontiguousarray(np.concatenate([u, taps, bound]))


def packed_block(layout: str) -> int | None:
    """The channel block of a packed data layout ``NCHW{c}c``, else None."""
    if layout.startswith("NCHW") and layout.endswith("c") and layout[4:-1].isdigit():
        return int(layout[4:-1])
    return None


def _replacement(call: relay.Call) -> relay.Expr | None:
    attrs = call.attrs
    data, weight = call.args
    if not isinstance(weight, relay.Constant):
        return None
    if (
        tuple(attrs.kernel_size) != (3, 3)
        or tuple(attrs.strides) != (1, 1)
        or tuple(attrs.dilation) != (1, 1)
        or tuple(attrs.padding) != (1, 1, 1, 1)
        or int(attrs.groups) != 1
    ):
        return None
    cb = packed_block(str(attrs.data_layout))
    kb = packed_block(str(attrs.out_layout or attrs.data_layout))
    if cb is None or kb is None or cb % LANES or kb % LANES:
        return None
    if str(attrs.kernel_layout) != f"OIHW{cb}i{kb}o":
        return None
    ty = data.checked_type
    if not isinstance(ty, relay.TensorType) or ty.dtype != "float32" or weight.data.dtype != "float32":
        return None
    if str(attrs.out_dtype) not in ("", "float32"):
        return None
    shape = [d for d in ty.shape]
    if not all(isinstance(d, tvm.tir.IntImm) for d in shape):
        return None
    n, _, height, width, _ = (int(d) for d in shape)
    if n != 1 or min(height, width) < MIN_EXTENT:
        return None
    packed = weight.data.numpy()
    if not np.isfinite(packed).all():
        return None  # no finite bound, and the transforms would spread an inf or NaN over every tile
    m = tile_size(height, width)
    filters = int(weight.data.shape[0]) * kb
    transformed = relay.const(transformed_weights(packed, m), "float32")
    return relay.nn.contrib_conv2d_winograd_without_weight_transform(
        data,
        transformed,
        tile_size=m,
        kernel_size=(3, 3),
        padding=(1, 1),
        channels=filters,
        data_layout=f"NCHW{cb}c",
        kernel_layout="OIHW",
        out_layout=f"NCHW{kb}c",
        out_dtype="float32",
    )


class _Rewrite(relay.ExprMutator):
    def __init__(self):
        super().__init__()
        self.changed = False

    def visit_call(self, call):
        new = super().visit_call(call)
        if isinstance(new, relay.Call) and new.op == _NCHWC:
            replacement = _replacement(call)  # the original call: it has the types
            if replacement is not None:
                self.changed = True
                return relay.Call(replacement.op, [new.args[0], replacement.args[1]], replacement.attrs)
        return new


def _avx512(target: tvm.target.Target | None) -> bool:
    """Whether ``target`` is x86 with AVX-512 (the kernel was measured there only)."""
    if target is None or target.kind.name != "llvm":
        return False
    with target:
        return tvm.target.x86.get_simd_32bit_lanes() == LANES


def rewrite(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """``mod`` with its qualifying convolutions Winograd's (the module docstring), or ``mod``."""
    if not _avx512(target):
        return mod
    return rewrite_functions(mod, lambda func: _Rewrite() if calls_any(func, {_NCHWC.name}) else None)

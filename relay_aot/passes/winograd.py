"""Choose Winograd for packed 3x3 convolutions on AVX-512 (the kernel: ``kernels.winograd``).

After the layout choice, a convolution ``nn.contrib_conv2d_NCHWc`` with constant weights, a 3x3
window, stride 1, padding 1, no dilation or groups, float32, one image, and input and output
blocks of whole AVX-512 vectors (16 or 32 channels) becomes
``nn.contrib_conv2d_winograd_without_weight_transform`` in the same data layouts, whose weights
are the packed weights transformed here, once (:func:`transformed_weights`), and laid out as
the kernel reads them. Its output blocks, and so every layout around it, stay as they were.
"""

from __future__ import annotations

from typing import Optional

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


def transformed_weights(packed: np.ndarray, m: int) -> np.ndarray:
    """Winograd's ``G g G^T`` of packed weights (``K/kb x C/cb x 3 x 3 x cb x kb``, x86's
    ``OIHW{cb}i{kb}o``), laid out as the kernel reads them: ``(m+2)^2 x K/kb x C x kb``.
    Computed here in float64 (Relay's ``contrib_conv2d_winograd_weight_transform`` folded by
    ``FoldConstant`` took 5 s of SqueezeNet's compile); G is TVM's, as the kernel's A and B."""
    k_blocks, c_blocks, _, _, cb, kb = packed.shape
    plain = packed.astype(np.float64).transpose(0, 5, 1, 4, 2, 3).reshape(k_blocks * kb, c_blocks * cb, 3, 3)
    _, _, g = winograd_util._cook_toom_convolution(winograd_util._interpolation_points(m + 2), m, 3)
    g = np.asarray(g, dtype=np.float64)
    u = np.einsum("ei,kcij,nj->enkc", g, plain, g)  # (a, a, K, C)
    alpha = m + 2
    u = u.reshape(alpha * alpha, k_blocks, kb, c_blocks * cb).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(u, dtype=np.float32)


def packed_block(layout: str) -> Optional[int]:
    """The channel block of a packed data layout ``NCHW{c}c``, else None."""
    if layout.startswith("NCHW") and layout.endswith("c") and layout[4:-1].isdigit():
        return int(layout[4:-1])
    return None


def _replacement(call: relay.Call) -> Optional[relay.Expr]:
    attrs = call.attrs
    data, weight = call.args
    if not isinstance(weight, relay.Constant):
        return None
    if (tuple(attrs.kernel_size) != (3, 3) or tuple(attrs.strides) != (1, 1) or tuple(attrs.dilation) != (1, 1)
            or tuple(attrs.padding) != (1, 1, 1, 1) or int(attrs.groups) != 1):
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
    m = tile_size(height, width)
    filters = int(weight.data.shape[0]) * kb
    transformed = relay.const(transformed_weights(weight.data.numpy(), m), "float32")
    return relay.nn.contrib_conv2d_winograd_without_weight_transform(
        data, transformed, tile_size=m, kernel_size=(3, 3), padding=(1, 1), channels=filters,
        data_layout=f"NCHW{cb}c", kernel_layout="OIHW", out_layout=f"NCHW{kb}c", out_dtype="float32")


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


def _avx512(target: Optional[tvm.target.Target]) -> bool:
    """Whether ``target`` is x86 with AVX-512 (the kernel was measured there only)."""
    if target is None or target.kind.name != "llvm":
        return False
    with target:
        return tvm.target.x86.get_simd_32bit_lanes() == LANES


def rewrite(mod: tvm.IRModule, target: Optional[tvm.target.Target]) -> tvm.IRModule:
    """``mod`` with its qualifying convolutions Winograd's (the module docstring), or ``mod``."""
    if not _avx512(target):
        return mod
    return rewrite_functions(mod, lambda func: _Rewrite() if calls_any(func, {_NCHWC.name}) else None)

"""Shared by the int8 kernel tests: extreme int8/uint8 values and an int64 convolution reference."""

from __future__ import annotations

import numpy as np


def extremes(rng: np.random.Generator, shape, dtype: str = "int8") -> np.ndarray:
    """Mostly the dtype's extremes (where sums of products are largest), some values between."""
    info = np.iinfo(dtype)
    values = np.where(rng.random(shape) < 0.5, info.min, info.max)
    between = rng.integers(info.min, info.max, shape, endpoint=True)
    return np.where(rng.random(shape) < 0.8, values, between).astype(dtype)


def conv2d_reference(x, w, strides, padding, dilation=(1, 1), groups: int = 1) -> np.ndarray:
    """NCHW x OIHW in int64, zero padding: ``padding`` (rows, columns) on both sides, or (top,
    left, bottom, right)."""
    (pt, pl), (pb, pr) = (padding, padding) if len(padding) == 2 else (padding[:2], padding[2:])
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    w = w.astype(np.int64)
    n, _, h, width = x.shape
    k, cg, r, s = w.shape
    oh = (h - dilation[0] * (r - 1) - 1) // strides[0] + 1
    ow = (width - dilation[1] * (s - 1) - 1) // strides[1] + 1
    out = np.zeros((n, k, oh, ow), np.int64)
    per_group = k // groups
    for g in range(groups):
        xs = x[:, g * cg : (g + 1) * cg]
        ws = w[g * per_group : (g + 1) * per_group]
        for i in range(r):
            for j in range(s):
                hi, wj = i * dilation[0], j * dilation[1]
                patch = xs[
                    :,
                    :,
                    hi : hi + strides[0] * (oh - 1) + 1 : strides[0],
                    wj : wj + strides[1] * (ow - 1) + 1 : strides[1],
                ]
                out[:, g * per_group : (g + 1) * per_group] += np.einsum("nchw,kc->nkhw", patch, ws[:, :, i, j])
    return out

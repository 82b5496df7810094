"""Data movement (and integer casts) of constants folded with numpy, before TVM's ``FoldConstant``.

``FoldConstant`` evaluates each constant subexpression by building it with LLVM and running it,
about 16 ms each. After the layout choice a conv net has two per convolution: its weights'
``layout_transform`` to the packed layout and its bias's ``expand_dims`` (SqueezeNet: 108
builds, 1.7 s of a compile whose kernels were all in the cache). These operators only move
bytes, which numpy does exactly and at once: :func:`fold` computes them, and ``FoldConstant``
is left the arithmetic -- but for casts of integers, which numpy converts as LLVM does (an int8
model's weights and per-channel multipliers: VWW had 43 of them).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import tvm
from tvm import relay

from .gradient_cleanup import static_shape
from .walk import CallRewriter, op_name, rewrite_functions

_AXIS = re.compile(r"(\d*)([A-Za-z])")


def _parse(layout: str) -> list[tuple[int, str]] | None:
    """``layout``'s axes in order, as (factor, letter): factor 0 for a primal (uppercase) axis;
    None if it is not a layout of single letters."""
    axes = [(int(factor or 0), letter) for factor, letter in _AXIS.findall(layout)]
    if "".join(f"{factor or ''}{letter}" for factor, letter in axes) != layout:
        return None
    return axes


def layout_transform(data: np.ndarray, src: str, dst: str) -> np.ndarray | None:
    """TVM's ``layout_transform`` of ``data`` from ``src`` to ``dst``: from a primal layout such
    as ``OIHW`` to one whose axes may be split, once or more (``OIHW8i16o``, the int8 kernels'
    ``OIHW2i16o4i``: a later sub-axis varies faster); None for any other pair, or where the
    splits do not divide their axis (TVM pads there)."""
    source, target = _parse(src), _parse(dst)
    if source is None or target is None or any(factor for factor, _ in source) or len(source) != data.ndim:
        return None
    extents = {letter: extent for (_, letter), extent in zip(source, data.shape)}
    splits: dict[str, list[int]] = {}
    for factor, letter in target:
        if letter.islower():
            splits.setdefault(letter.upper(), []).append(factor)
    primal = [letter for _, letter in target if letter.isupper()]
    if sorted(primal) != sorted(extents) or not set(splits) <= set(extents):
        return None
    # each source axis becomes (outer, first split, second split, ...), then dst orders them
    shape: list[int] = []
    positions: dict[str, list[int]] = {}
    for _, letter in source:
        factors = splits.get(letter, [])
        inner = int(np.prod(factors)) if factors else 1
        if not all(factors) or extents[letter] % inner:
            return None
        positions[letter] = [len(shape)]
        positions[letter.lower()] = list(range(len(shape) + 1, len(shape) + 1 + len(factors)))
        shape += [extents[letter] // inner, *factors]
    taken = {letter: iter(found) for letter, found in positions.items()}
    order = [next(taken[letter]) for _, letter in target]
    return np.ascontiguousarray(data.reshape(shape).transpose(order))


def _reshaped(data: np.ndarray, call: relay.Call) -> np.ndarray | None:
    """``data`` in the shape of ``call``'s result (an operator that only reshapes), if static."""
    shape = static_shape(call)
    return None if shape is None else data.reshape(shape)


def _transposed(data: np.ndarray, call: relay.Call) -> np.ndarray | None:
    axes = call.attrs.axes
    return np.ascontiguousarray(data.transpose(None if axes is None else [int(a) for a in axes]))


def _cast(data: np.ndarray, call: relay.Call) -> np.ndarray | None:
    """An integer (or boolean) constant cast to an integer, boolean, float32 or float64 type:
    numpy's conversions are LLVM's there (narrowing wraps, a float rounds to nearest, a boolean
    is "not zero"). Casts from floats are left to ``FoldConstant``: LLVM's of NaN and of values
    out of range are not numpy's."""
    dtype = str(call.attrs.dtype)
    if data.dtype.kind not in "iub" or not (
        dtype in ("bool", "float32", "float64") or dtype.startswith(("int", "uint"))
    ):
        return None
    return data.astype(dtype)


#: The operators folded here: (data, original call) -> the constant's value, or None to leave it.
FOLDS: dict[str, Callable[[np.ndarray, relay.Call], np.ndarray | None]] = {
    "layout_transform": lambda data, call: layout_transform(data, call.attrs.src_layout, call.attrs.dst_layout),
    "expand_dims": _reshaped,
    "squeeze": _reshaped,
    "reshape": _reshaped,
    "transpose": _transposed,
    "cast": _cast,
}


class _Folder(CallRewriter):
    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        fold = FOLDS.get(op_name(new) or "")
        if fold is None or len(new.args) != 1 or not isinstance(new.args[0], relay.Constant):
            return None
        value = fold(new.args[0].data.numpy(), call)
        if value is None or list(value.shape) != static_shape(call):
            return None  # the type checker's shape is the operator's: anything else is not it
        return relay.const(value, dtype=str(value.dtype))


def fold(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with the calls of :data:`FOLDS` operators on constants replaced by their values
    (``mod`` itself if there are none)."""
    mod = relay.transform.InferType()(mod)
    return rewrite_functions(mod, lambda func: _Folder())

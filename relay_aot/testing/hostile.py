"""Hostile dynamic shapes: generated programs over ``?`` dimensions, fed the arguments that break
shape functions, judged against numpy.

The differential campaign (``fuzz.py``) compares relay_aot with TVM's executors on values that
fit their types. That never finds the defects of issue 28: TVM's shape functions trust their
arguments, and on a zero step, a slice bound out of range, a ``k`` beyond the axis or a product
of extents near 2^63, TVM's VM and interpreter read outside tensors, divide by zero or crash
themselves -- the same wrong thing relay_aot did. So here the oracle is numpy:

* :data:`OPERATORS` is a catalogue of program makers. Each draws (from a :class:`Choices`) a
  small Relay program around one dynamic-shape operator -- its tensor parameters have ``?``
  dimensions, its data-dependent attributes are run-time arguments where Relay allows it --
  optionally followed by a fused elementwise, reduction or reshaping step, and a numpy
  *reference* with the operator's semantics: numpy's where numpy has the operator, Relay's
  documented one otherwise (``reshape``'s ``0``, ``topk``'s ``k < 1``, ``one_hot``), TVM's
  identities for a reduction over an empty axis (``max`` is the lowest value, ``argmax`` -1),
  which every executor gives. The reference raises :class:`Refused` where the semantics
  refuse the arguments (numpy's own errors count too).
* Each program comes with several argument sets drawn from hostile pools (:data:`KINDS`): zero
  extents, extents that do not fit together, zero and negative steps, slice bounds and indices
  out of range, ``k`` beyond the axis, NaN and infinite bounds, negative extents, and shapes
  whose element count or byte size is near or beyond 2^63.
* Three families exercise the kernels relay_aot writes itself rather than shapes: 3x3
  convolutions (Winograd's on AVX-512), packed dense products (the schedule rules' widths) and
  int8 products, on static shapes with constant weights, their data ordinary, with infinities
  and NaNs, or near the dtype's limits. Their reference computes in float64 (int64), with IEEE
  semantics, so infinities and NaNs land where the direct computation puts them; their float
  results are compared within RTOL of the largest finite one. One more family checks TFLite's
  requantization as relay_aot rewrites it (``passes/requantization.py``, ``kernels/paired_lanes.py``)
  against gemmlowp's steps, exactly, on int32 extremes.
* :func:`check` runs every argument set on relay_aot's backends and on TVM's references, each
  in an isolated child process (an :class:`~relay_aot.testing.oracle.IsolatedOracle` with a
  memory limit), and judges relay_aot's outcomes by :func:`judge`:

  - relay_aot never crashes or hangs, and compiles the program or refuses it with
    ``UnsupportedError`` (tallied: TVM's kernels cannot lower some attributes either, such as a
    stride of -2^31);
  - where it raises, the exception is one of the documented clear errors
    (:data:`CLEAR_ERRORS`: ``KernelError``, ``ValueError``, ``TypeError``, ``MemoryError``),
    and the reference refuses too;
  - where it returns, the reference returns the same value (dtype, shape and values;
    floats within :data:`RTOL`/:data:`ATOL`).

  TVM's references are not judged (they read out of bounds on several of these): their
  outcomes are tallied against the reference, and a finding says what they did, so that a
  finding where relay_aot and both references agree against numpy points at the reference
  model rather than at relay_aot.

No executor is asked to allocate a real large tensor: an argument set whose result would take
between :data:`MAX_BYTES` and :data:`HUGE_BYTES` is never drawn, and results beyond
:data:`HUGE_BYTES` are refused by the reference (no machine this runs on can allocate them;
the child processes' address space is capped at :data:`MEMORY_LIMIT` besides).

``python -m relay_aot.testing.fuzz --hostile`` runs a campaign; see docs/testing.md.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tvm
from tvm import relay

from .compare import Mismatch, assert_same, normalize, summary
from .oracle import IsolatedOracle, Outcome

#: The kinds of hostile argument an argument set is tagged with (every kind is drawn; the
#: strategy test checks it).
KINDS = (
    "zero_extent",  # an input or result extent of 0
    "mismatch",  # extents that do not fit together (add, dense, concatenate, squeeze, ...)
    "zero_step",  # a step or stride of 0
    "negative_step",  # a step or stride below 0
    "out_of_range",  # a slice bound, split point or index outside the axis
    "k_beyond",  # topk's k larger than the axis
    "nan",  # a NaN or infinite bound
    "negative_extent",  # a negative value where an extent or count is given
    "huge",  # a result whose element count or byte size is near or beyond 2^63
    "non_finite",  # an infinity or NaN in a kernel's input data
    "huge_value",  # finite input data near the dtype's limits (float32 ~1e36, int8's -128 and 127)
)

#: Exceptions relay_aot may raise on arguments the reference refuses (docs/guarantees.md),
#: by the class names ``oracle.error_text`` reports.
CLEAR_ERRORS = (
    "KernelError",
    "ValueError",
    "TypeError",
    "MemoryError",
    # relay_aot's subclasses of those (relay_aot/errors.py)
    "ShapeError",
    "ArgumentValueError",
    "ArgumentTypeError",
    "OutOfMemoryError",
)

#: Results up to this size are computed; larger ones below HUGE_BYTES are never drawn.
MAX_BYTES = 1 << 24
#: Results of at least this many bytes cannot be allocated here: the reference refuses them.
HUGE_BYTES = 1 << 36
#: The address space of the child processes that run relay_aot and the references.
MEMORY_LIMIT = 8 << 30

#: Tolerances: kernels sum and multiply in another order than numpy.
RTOL = 1e-4
ATOL = 1e-5

_ANY = relay.Any()


class Refused(Exception):
    """The reference semantics refuse these arguments (the message says why)."""


class Unrepresentable(Refused):
    """An empty tensor whose other extents multiply past what numpy can represent: numpy cannot
    compute on it, but it has no element, so an executor that makes it (and an empty result
    from it) is right too. :func:`judge` accepts a clear error or an empty value."""


class Unsafe(Exception):
    """A result too large to compute here, and too small to be sure that no executor can
    allocate it (:func:`fits`): the generator drops such argument sets."""


class Choices:
    """Where a program maker's decisions come from: ``integers(lo, hi)`` (inclusive) draws an
    integer. ``strategies.hostile_programs`` draws them from Hypothesis, so that programs shrink
    toward the first option of every choice."""

    def __init__(self, integers: Callable[[int, int], int]):
        self.integers = integers

    def choose(self, options: Sequence):
        """One of ``options`` (shrinks toward the first)."""
        return options[self.integers(0, len(options) - 1)] if len(options) > 1 else options[0]

    def flip(self, p_true: int = 1, out_of: int = 2) -> bool:
        return self.integers(0, out_of - 1) < p_true


class _Args:
    """Draws one argument set, noting the hostile kinds it contains."""

    def __init__(self, choices: Choices):
        self.c = choices
        self.kinds: set = set()

    def tag(self, kind: str, when: bool | np.bool_ = True) -> None:
        if when:
            self.kinds.add(kind)

    def extent(self) -> int:
        n = self.c.choose(_EXTENTS)
        self.tag("zero_extent", n == 0)
        return n

    def shape(self, tensor: _Tensor) -> tuple:
        dims = [self.extent() for _ in range(tensor.rank)]
        if tensor.static_last is not None:
            dims[-1] = tensor.static_last
        return tuple(dims)

    def other_than(self, n: int) -> int:
        """An extent other than ``n`` and 1 (a mismatch, even where 1 would broadcast)."""
        self.tag("mismatch")
        return self.c.choose([m for m in (n + 1, 0, n + 2, 3) if m not in (n, 1)])

    def scalar(self, pool: Sequence, dtype: str) -> np.number:
        value = self.c.choose(list(pool))
        number = np.array(value).astype(dtype)[()]
        assert isinstance(number, np.number)  # 0-d: a numpy scalar, which numpy's stubs call an array
        return number

    def bound(self, n: int) -> int:
        value = self.c.choose(_BOUNDS)
        self.tag("out_of_range", not -n <= value <= n)
        return value

    def stride(self, zero: bool = True) -> int:
        value = self.c.choose(_STRIDES if zero else [s for s in _STRIDES if s != 0])
        self.tag("zero_step", value == 0)
        self.tag("negative_step", value < 0)
        return value

    def extents_vector(self, length: int, tokens: Sequence = ()) -> np.ndarray:
        """An int64 vector of ``length`` extents for a shape computed at run time: small, zero,
        negative, ``tokens`` (reshape's -1 and 0), or (now and then, all together) huge."""
        if self.c.flip(4, 5):
            values = [self.c.choose(list(_EXTENTS) + [-1, -2] + list(tokens)) for _ in range(length)]
        else:
            values = [self.c.choose(_HUGE) for _ in range(length)]
            if length > 1 and self.c.flip(1, 4):
                values[self.c.integers(0, length - 1)] = 0  # huge, but empty
        self.tag("negative_extent", any(v < 0 and v not in tokens for v in values))
        self.tag("zero_extent", 0 in values)
        return np.array(values, dtype="int64")


_EXTENTS = (2, 3, 1, 4, 0, 5)
_BOUNDS = (0, 1, -1, 2, 3, -2, 100, -100, 2**62, -(2**63), 2**63 - 1)
_STRIDES = (1, 2, -1, 3, -2, 0, -(2**63), 2**62, 5)
_HUGE = (2**62, 2**32 + 1, 2**40, 2**63 - 1, 3 * 2**61, 2**31, 2**32, 2**21, 3)
_TOPK = (1, 2, 0, 3, -1, 5, 9, 2**31 - 1)


@dataclasses.dataclass(frozen=True)
class _Tensor:
    """A tensor parameter: ``?`` dimensions, except a static last one if ``static_last``."""

    name: str
    rank: int
    dtype: str = "float32"
    static_last: int | None = None

    def var(self) -> relay.Var:
        shape = [_ANY] * self.rank
        if self.static_last is not None:
            shape[-1] = self.static_last
        return relay.var(self.name, shape=shape, dtype=self.dtype)


def _scalar_var(name: str, dtype: str) -> relay.Var:
    return relay.var(name, shape=(), dtype=dtype)


def _vector_var(name: str, length: int, dtype: str = "int64") -> relay.Var:
    return relay.var(name, shape=(length,), dtype=dtype)


def values(shape: Sequence[int], dtype: str, distinct: bool = False) -> np.ndarray:
    """Small exact values of ``shape`` (halves for floats); ``distinct``: a permutation of
    0..n-1, so that sorting has no ties."""
    n = math.prod(shape)
    index = np.arange(n, dtype="int64")
    if distinct:
        data = (index * 7919) % max(n, 1)
    elif dtype == "bool":
        return (index % 3 == 0).reshape(shape)
    else:
        data = index % 7 - 3
    if dtype.startswith("float"):
        return (data * 0.5).astype(dtype).reshape(shape)
    return data.astype(dtype).reshape(shape)


def _fitting(value: np.ndarray) -> np.ndarray:
    """``value`` (an operator's result, maybe a broadcast view taking no memory) once :func:`fits`
    accepts its shape: a fused step after it computes it in full. An empty one whose other
    extents are large is :class:`Unsafe` too: a reduction over its empty axis makes them real."""
    fits(value.shape, str(value.dtype))
    if math.prod(d for d in value.shape if d) * 8 > MAX_BYTES:
        raise Unsafe(value.shape)
    return value


def fits(shape: Sequence[int], dtype: str) -> None:
    """Check a result shape before a reference allocates it: :class:`Refused` if it has a
    negative extent or could not be allocated anywhere (:data:`HUGE_BYTES`, 2^63 elements; an
    empty shape always fits), :class:`Unsafe` if larger than :data:`MAX_BYTES`."""
    if any(d < 0 for d in shape):
        raise Refused(f"a negative extent in {tuple(shape)}")
    count = math.prod(shape)
    size = count * np.dtype(dtype).itemsize
    if count >= 2**63 or size >= HUGE_BYTES:
        raise Refused(f"a result of shape {tuple(shape)} and dtype {dtype} cannot be allocated")
    if math.prod(d for d in shape if d) * np.dtype(dtype).itemsize >= 2**63:
        # numpy's own rule, even for an empty array (relay_aot may make one; it cannot be read)
        raise Unrepresentable(f"numpy cannot represent an array of shape {tuple(shape)} and dtype {dtype}")
    if size > MAX_BYTES:
        raise Unsafe(shape)


@dataclasses.dataclass
class Built:
    """What a program maker returns: the program, its numpy reference and how to draw arguments."""

    name: str
    params: list
    body: relay.Expr
    reference: Callable[..., Any]
    draw_args: Callable[[_Args], tuple]
    #: dtype of the result when it is one tensor (None for a tuple): a follow-on step may apply.
    dtype: str | None = None
    #: float results are compared within RTOL of the largest finite one (not of each value)
    relative: bool = False


# -- program makers -------------------------------------------------------------------------------


def _arange(c: Choices) -> Built:
    dtype = c.choose(["int64", "float32", "int32"])
    start, stop, step = (_scalar_var(n, dtype) for n in ("start", "stop", "step"))
    bounds: tuple[float, ...]
    steps: tuple[float, ...]
    if dtype == "float32":
        bounds = (0.0, 1.0, 0.5, 2.5, -3.0, 10.0, 0.25, -0.75, 100.0, np.nan, np.inf, -np.inf, 1e30)
        steps = (1.0, 0.5, -1.0, 2.5, 0.25, -0.5, 0.0, np.nan, 1e-30, np.inf)
    else:
        info = np.iinfo(dtype)
        bounds = (0, 1, 5, -3, 10, -7, 2**40, 2**62, -(2**62), info.max, info.min)
        steps = (1, 2, -1, 3, -2, 0, 7, 2**62, info.min, info.max)
        bounds = tuple(b for b in bounds if info.min <= b <= info.max)
        steps = tuple(s for s in steps if info.min <= s <= info.max)

    def reference(a, b, s):
        a, b, s = a.item(), b.item(), s.item()
        if dtype == "float32":
            if any(math.isnan(v) for v in (a, b, s)):
                raise Refused("arange: a NaN bound or step")
            if s == 0:
                raise Refused("arange: the step is zero")
            count = (b - a) / s
            if count == -math.inf:  # an infinite bound behind the start: no element
                return np.zeros(0, dtype)
            if not math.isfinite(count) or count >= 2**62:
                raise Refused("arange: the number of elements is not finite or too large")
            length = max(math.ceil(count), 0)
            fits((length,), dtype)
            return (np.arange(length, dtype="float32") * np.float32(s) + np.float32(a)).astype(dtype)
        if s == 0:
            raise Refused("arange: the step is zero")
        length = max(-((a - b) // s), 0)  # ceil((b - a) / s), exactly
        fits((length,), dtype)
        with np.errstate(over="ignore"):  # wraps to the right value: each element fits
            return np.arange(length, dtype=dtype) * np.array(s, dtype) + np.array(a, dtype)

    def draw(args: _Args):
        a, b, s = args.scalar(bounds, dtype), args.scalar(bounds, dtype), args.scalar(steps, dtype)
        args.tag("zero_step", s == 0)
        args.tag("negative_step", s < 0)
        args.tag("nan", not all(np.isfinite([a, b, s])))
        return a, b, s

    return Built("arange", [start, stop, step], relay.arange(start, stop, step, dtype=dtype), reference, draw, dtype)


def relay_newshape(
    shape: Sequence[int], newshape: Sequence[int], allowzero: bool = False, dynamic: bool = False
) -> tuple:
    """The shape Relay's ``reshape`` makes of ``shape`` (``0`` copies a dimension unless
    ``allowzero``, ``-1`` is inferred, ``-2`` copies the rest, ``-3`` merges two), refusing
    what numpy and ONNX refuse: a ``-1`` among dimensions that multiply to 0, another element
    count. ``dynamic``: ``dyn.reshape``, which has no ``-2``."""
    out: list = []
    src, inferred, rest = 0, None, False
    for token in newshape:
        if token > 0:
            out.append(token)
            src += 1
        elif token == 0:
            if allowzero:
                out.append(0)
            elif src >= len(shape):
                raise Refused("reshape: a 0 copies a dimension the input does not have")
            else:
                out.append(shape[src])
            src += 1
        elif token == -1:
            if inferred is not None:
                raise Refused("reshape: more than one -1")
            inferred = len(out)
            out.append(1)
            src += 1
        elif token == -2 and not dynamic:
            rest = True
        elif token == -3:
            if len(shape) - src < 2:
                raise Refused("reshape: not enough input dimensions for -3")
            out.append(shape[src] * shape[src + 1])
            src += 2
        else:
            raise Refused(f"reshape: {token} in the new shape")
    if rest:
        out.extend(shape[src:])
    size = math.prod(shape)
    if inferred is not None:
        others = math.prod(out)
        if others == 0 or size % others:
            raise Refused("reshape: -1 cannot be inferred")
        out[inferred] = size // others
    if math.prod(out) != size:
        raise Refused("reshape: another number of elements")
    return tuple(out)


def _reshape(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 3))
    tokens = [c.choose([-1, 2, 0, 1, 3, 4, 6, -3]) for _ in range(c.integers(1, 3))]
    if tokens.count(-1) > 1:
        tokens = [t for i, t in enumerate(tokens) if t != -1 or i == tokens.index(-1)]
    if c.flip(1, 6):
        tokens.append(-2)
    allowzero = c.flip(1, 6)

    def reference(data):
        return data.reshape(relay_newshape(data.shape, tokens, allowzero))

    def draw(args: _Args):
        return (values(args.shape(x), x.dtype),)

    v = x.var()
    return Built("reshape", [v], relay.reshape(v, tokens, allowzero=allowzero), reference, draw, x.dtype)


def _dyn_reshape(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 2))
    length = c.integers(1, 3)
    newshape = _vector_var("newshape", length)

    def reference(data, shape):
        out = relay_newshape(data.shape, [int(v) for v in shape], dynamic=True)
        fits(out, x.dtype)
        return data.reshape(out)

    def draw(args: _Args):
        data = values(args.shape(x), x.dtype)
        if args.c.flip(1, 2):  # a shape that fits the data, as a program would compute
            target = list(data.shape) if length == data.ndim else [data.size] + [1] * (length - 1)
            target[args.c.integers(0, length - 1)] = args.c.choose([-1, 0, target[0]])
            shape = np.array(target[:length], dtype="int64")
        else:
            shape = args.extents_vector(length, tokens=(-1, 0, -3))
        args.tag("huge", any(abs(int(v)) >= 2**31 for v in shape))
        return data, shape

    v = x.var()
    return Built("dyn.reshape", [v, newshape], relay.reshape(v, newshape), reference, draw, x.dtype)


def numpy_slice(n: int, begin: int, end: int, stride: int, size_mode: bool = False) -> slice:
    """The slice ``strided_slice`` takes of an axis of ``n``: numpy's, or, in ``size`` mode,
    ``end`` elements from ``begin`` (all when negative), step 1."""
    if not size_mode:
        if stride == 0:
            raise Refused("strided_slice: a stride is zero")
        return slice(begin, end, stride)
    start = slice(begin, None).indices(n)[0]
    return slice(start, n if end < 0 else min(start + end, n), 1)


def _strided_slice(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 3))
    dynamic = c.flip()
    size_mode = c.flip(1, 6)
    count = x.rank if c.flip(3, 4) else c.integers(1, x.rank)
    if dynamic:
        names = ("begin", "end", "strides")
        begin, end, strides = (_vector_var(n, count) for n in names)
        v = x.var()
        body = relay.strided_slice(v, begin, end, strides, slice_mode="size" if size_mode else "end")
        params = [v, begin, end, strides]
    else:
        # (attributes are int32 in Relay's strided_slice)
        int32 = np.iinfo("int32")
        attrs = [[int(np.clip(c.choose(_BOUNDS), int32.min, int32.max)) for _ in range(count)] for _ in range(2)]
        attrs.append(
            [int(np.clip(c.choose([s for s in _STRIDES if s != 0]), int32.min, int32.max)) for _ in range(count)]
        )
        axes = None
        if count < x.rank and c.flip():
            axes = sorted(set(c.integers(-x.rank, x.rank - 1) % x.rank for _ in range(count)))
            attrs = [a[: len(axes)] for a in attrs]
        v = x.var()
        body = relay.strided_slice(v, *attrs, axes=axes, slice_mode="size" if size_mode else "end")
        params = [v]

    def slices(shape, begin, end, strides, axes=None):
        axes = list(range(len(begin))) if axes is None else axes
        index = [slice(None)] * len(shape)
        for axis, b, e, s in zip(axes, begin, end, strides):
            index[axis] = numpy_slice(shape[axis], int(b), int(e), int(s), size_mode)
        return tuple(index)

    def reference(data, *bounds):
        if dynamic:
            return data[slices(data.shape, *bounds)]
        return data[slices(data.shape, *attrs, axes)]

    def draw(args: _Args):
        shape = args.shape(x)
        data = values(shape, x.dtype)
        if not dynamic:
            chosen = axes if axes is not None else range(count)
            for axis, b, e, s in zip(chosen, *attrs):
                args.tag("out_of_range", not (-shape[axis] <= b <= shape[axis] and -shape[axis] <= e <= shape[axis]))
                args.tag("negative_step", s < 0)
            return (data,)
        begin = [args.bound(shape[i]) for i in range(count)]
        end = [args.bound(shape[i]) for i in range(count)]
        strides = [args.stride() for _ in range(count)]
        return (data, *(np.array(v, dtype="int64") for v in (begin, end, strides)))

    name = "dyn.strided_slice" if dynamic else "strided_slice"
    return Built(name, params, body, reference, draw, x.dtype)


def _broadcast_to(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 2))
    length = x.rank + c.integers(0, 1)
    if c.flip():
        target = _vector_var("shape", length)
        v = x.var()
        params, body, name = [v, target], relay.broadcast_to(v, target), "dyn.broadcast_to"
    else:
        static = tuple(c.choose([2, 1, 3, 0, 4]) for _ in range(length))
        v = x.var()
        params, body, name = [v], relay.broadcast_to(v, static), "broadcast_to"

    def reference(data, shape=None):
        shape = static if shape is None else tuple(int(s) for s in shape)
        fits(shape, x.dtype)
        return np.array(np.broadcast_to(data, shape))

    def draw(args: _Args):
        if name == "broadcast_to":
            shape = [s if args.c.flip(1, 2) else args.extent() for s in static[-x.rank :]]
            shape = [1 if args.c.flip(1, 3) else s for s in shape]
            args.tag("mismatch", any(d not in (1, t) for d, t in zip(shape, static[-x.rank :])))
            return (values(tuple(shape), x.dtype),)
        data = values(args.shape(x), x.dtype)
        if args.c.flip():
            target = args.extents_vector(length)
        else:  # a target the data broadcasts to
            target = np.array([1] * (length - x.rank) + [d if d != 1 else args.extent() for d in data.shape], "int64")
        args.tag("huge", math.prod(abs(int(t)) for t in target) >= 2**40)
        args.tag("mismatch", any(d not in (1, int(t)) for d, t in zip(data.shape[::-1], target[::-1])))
        return data, target

    return Built(name, params, body, reference, draw, x.dtype)


def _full(c: Choices) -> Built:
    length = c.integers(1, 3)
    shape = _vector_var("shape", length)
    kind = c.choose(["zeros", "full", "ones"])
    dtype = c.choose(["float32", "int32"])
    fill = _scalar_var("fill", dtype)
    if kind == "zeros":
        params, body = [shape], relay.zeros(shape, dtype)
    elif kind == "ones":
        params, body = [shape], relay.ones(shape, dtype)
    else:
        params, body = [fill, shape], relay.full(fill, shape, dtype)

    def reference(*args):
        value = {"zeros": 0, "ones": 1}.get(kind, args[0])
        dims = tuple(int(s) for s in args[-1])
        fits(dims, dtype)
        return np.full(dims, value, dtype=dtype)

    def draw(args: _Args):
        target = args.extents_vector(length)
        args.tag("huge", math.prod(abs(int(t)) for t in target) >= 2**40)
        return (np.array(7).astype(dtype)[()], target) if kind == "full" else (target,)

    return Built(f"dyn.{kind}" if kind != "zeros" else "dyn.zeros", params, body, reference, draw, dtype)


def _dense(c: Choices) -> Built:
    kind = c.choose(["nn.dense", "nn.batch_matmul", "nn.matmul"])
    if kind == "nn.dense":
        x, w = _Tensor("x", c.integers(2, 3)), _Tensor("w", 2)
        vx, vw = x.var(), w.var()

        def dense_reference(a, b):
            if a.shape[-1] != b.shape[1]:
                raise Refused("dense: the inner dimensions differ")
            return (a.astype("float64") @ b.T.astype("float64")).astype("float32")

        def dense_draw(args: _Args):
            a = args.shape(x)
            b = (args.extent(), a[-1] if args.c.flip(3, 4) else args.other_than(a[-1]))
            return values(a, "float32"), values(b, "float32")

        return Built(kind, [vx, vw], relay.nn.dense(vx, vw), dense_reference, dense_draw, "float32")
    rank = 3 if kind == "nn.batch_matmul" else 2
    ta, tb = c.flip(1, 4), c.flip(3, 4) if kind == "nn.batch_matmul" else c.flip(1, 3)
    x, y = _Tensor("x", rank), _Tensor("y", rank)
    vx, vy = x.var(), y.var()
    if kind == "nn.batch_matmul":
        body = relay.nn.batch_matmul(vx, vy, transpose_a=ta, transpose_b=tb)
    else:
        body = relay.nn.matmul(vx, vy, transpose_a=ta, transpose_b=tb)

    def reference(a, b):
        a = np.swapaxes(a, -1, -2) if ta else a
        b = np.swapaxes(b, -1, -2) if tb else b
        if a.shape[-1] != b.shape[-2]:
            raise Refused(f"{kind}: the inner dimensions differ")
        if rank == 3 and a.shape[0] != b.shape[0] and 1 not in (a.shape[0], b.shape[0]):
            raise Refused("batch_matmul: the batch dimensions differ")
        return np.matmul(a.astype("float64"), b.astype("float64")).astype("float32")

    def draw(args: _Args):
        m, k, n = args.extent(), args.extent(), args.extent()
        k2 = k if args.c.flip(3, 4) else args.other_than(k)
        a: tuple[int, ...] = (m, k)
        b: tuple[int, ...] = (k2, n)
        a, b = (a[::-1] if ta else a), (b[::-1] if tb else b)
        if rank == 3:
            batch = args.extent()
            other = args.c.choose([batch, 1, None])
            other = args.other_than(batch) if other is None else other
            a, b = (batch, *a), (other, *b)
            if args.c.flip():
                a, b = (other, *a[1:]), (batch, *b[1:])
        return values(a, "float32"), values(b, "float32")

    return Built(kind, [vx, vy], body, reference, draw, "float32")


def _concatenate(c: Choices) -> Built:
    stack = c.flip(1, 3)
    rank = c.integers(1, 2 if stack else 3)
    count = c.integers(2, 3)
    tensors = [_Tensor(f"x{i}", rank) for i in range(count)]
    axis = c.integers(-(rank + 1), rank) if stack else c.integers(-rank, rank - 1)
    vs = [t.var() for t in tensors]
    body = relay.stack(vs, axis) if stack else relay.concatenate(vs, axis)

    def reference(*parts):
        return (np.stack if stack else np.concatenate)(parts, axis)

    def draw(args: _Args):
        base = [args.extent() for _ in range(rank)]
        shapes = []
        for _ in range(count):
            shape = list(base)
            if not stack:
                shape[axis] = args.extent()
            shapes.append(shape)
        if args.c.flip(1, 3):
            which, dim = args.c.integers(0, count - 1), args.c.integers(0, rank - 1)
            if stack or dim != axis % rank:
                shapes[which][dim] = args.other_than(shapes[which][dim])
        return tuple(values(s, "float32") for s in shapes)

    return Built("stack" if stack else "concatenate", vs, body, reference, draw, "float32")


def _topk(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 2))
    axis = c.integers(-x.rank, x.rank - 1)
    ascend = c.flip(1, 3)
    mode = c.choose(["topk", "dyn.topk", "argsort"])
    ret = c.choose(["both", "values", "indices"])
    v = x.var()
    k_attr = c.choose(_TOPK)
    if mode == "argsort":
        params, body = [v], relay.argsort(v, axis=axis, is_ascend=ascend, dtype="int32")
    elif mode == "topk":
        params, body = [v], relay.topk(v, k_attr, axis=axis, ret_type=ret, is_ascend=ascend, dtype="int32")
    else:
        k = _scalar_var("k", "int32")
        params, body = [v, k], relay.topk(v, k, axis=axis, ret_type=ret, is_ascend=ascend, dtype="int32")
    if mode != "argsort" and ret == "both":
        body = body.astuple()

    def reference(data, k=None):
        n = data.shape[axis]
        order = np.argsort(data if ascend else -data, axis=axis, kind="stable").astype("int32")
        if mode == "argsort":
            return order
        k = int(k_attr if k is None else k)
        k = n if k < 1 else k
        if k > n:
            raise Refused("topk: k is larger than the axis")
        index = [slice(None)] * data.ndim
        index[axis] = slice(0, k)
        order = order[tuple(index)]
        found = np.take_along_axis(data, order.astype("int64"), axis)
        return {"both": (found, order), "values": found, "indices": order}[ret]

    def draw(args: _Args):
        data = values(args.shape(x), "float32", distinct=True)
        n = data.shape[axis]
        if mode == "dyn.topk":
            k = args.scalar(_TOPK, "int32")
            args.tag("k_beyond", k > n)
            return data, k
        args.tag("k_beyond", mode == "topk" and k_attr > n)
        return (data,)

    dtype = (
        None
        if mode != "argsort" and ret == "both"
        else ("int32" if mode == "argsort" or ret == "indices" else "float32")
    )
    return Built(mode, params, body, reference, draw, dtype)


def _split(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 2))
    axis = c.integers(-x.rank, x.rank - 1)
    if c.flip():
        sections = c.choose([2, 3, 1])
    else:
        sections = c.choose([[1], [1, 2], [0], [5], [1, 10], [0, 0], [2, 3]])
    v = x.var()
    body = relay.split(v, sections, axis).astuple()

    def reference(data):
        if isinstance(sections, int) and data.shape[axis] % sections:
            raise Refused("split: the axis does not divide into equal sections")
        if not isinstance(sections, int) and max(sections) > data.shape[axis]:
            # numpy clamps, but Relay's type gives the parts between split points static
            # extents (type inference refuses decreasing points): those cannot be clamped
            raise Refused("split: a split point beyond the axis")
        return tuple(np.split(data, sections, axis))

    def draw(args: _Args):
        shape = args.shape(x)
        if not isinstance(sections, int):
            n = shape[axis]
            args.tag("out_of_range", any(i > n for i in sections) or list(sections) != sorted(sections))
        else:
            args.tag("mismatch", shape[axis] % sections != 0)
        return (values(shape, x.dtype),)

    return Built("split", [v], body, reference, draw, None)


def _take(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 2))
    idx = _Tensor("indices", c.integers(0, 2), c.choose(["int32", "int64"]))
    axis = None if c.flip(1, 4) else c.integers(-x.rank, x.rank - 1)
    mode = c.choose(["clip", "fast", "wrap"])
    vx, vi = x.var(), relay.var("indices", shape=[_ANY] * idx.rank, dtype=idx.dtype)
    body = relay.take(vx, vi, axis=axis, mode=mode)

    def reference(data, indices):
        n = data.size if axis is None else data.shape[axis]
        indices = indices.astype("int64")
        if indices.size and n == 0:
            raise Refused("take: indices into an empty axis")
        if n:  # (numpy's own "wrap" loops |index| / n times: done here instead)
            # relay_aot makes "fast" clip (docs/guarantees.md)
            indices = indices % n if mode == "wrap" else np.clip(indices, 0, n - 1)
        return np.take(data, indices, axis=axis)

    def draw(args: _Args):
        data = values(args.shape(x), x.dtype)
        n = data.size if axis is None else data.shape[axis]
        shape = tuple(args.extent() for _ in range(idx.rank))
        pool = [0, 1, 2, -1, 5, -7, 100, int(np.iinfo(idx.dtype).max), int(np.iinfo(idx.dtype).min)]
        flat = [args.c.choose(pool) for _ in range(math.prod(shape))]
        args.tag("out_of_range", any(not 0 <= i < n for i in flat))
        return data, np.array(flat, dtype=idx.dtype).reshape(shape)

    return Built("take", [vx, vi], body, reference, draw, x.dtype)


def _tile(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 2))
    length = c.integers(1, 3)
    v = x.var()
    if c.flip():
        reps_var = _vector_var("reps", length)
        params, body, name, static = [v, reps_var], relay.tile(v, reps_var), "dyn.tile", None
    else:
        static = tuple(c.choose([2, 1, 0, 3]) for _ in range(length))
        params, body, name = [v], relay.tile(v, static), "tile"

    def reference(data, reps=None):
        reps = static if reps is None else tuple(int(r) for r in reps)
        if any(r < 0 for r in reps):
            raise Refused("tile: a negative repetition")
        rank = max(data.ndim, len(reps))
        dims = (1,) * (rank - data.ndim) + data.shape
        reps_full = (1,) * (rank - len(reps)) + tuple(reps)
        shape = tuple(d * r for d, r in zip(dims, reps_full))
        fits(shape, x.dtype)
        if 0 in shape:  # numpy tiles axis by axis: a huge repetition before the empty axis would be allocated
            return np.zeros(shape, x.dtype)
        return np.tile(data, reps)

    def draw(args: _Args):
        data = values(args.shape(x), x.dtype)
        if static is not None:
            return (data,)
        reps = args.extents_vector(length)
        args.tag("huge", any(int(r) >= 2**31 for r in reps))
        return data, reps

    return Built(name, params, body, reference, draw, x.dtype)


def _one_hot(c: Choices) -> Built:
    idx = _Tensor("indices", c.integers(1, 2), "int32")
    axis = c.integers(-1, idx.rank)
    vi = idx.var()
    on, off = relay.const(np.float32(2.5)), relay.const(np.float32(-1.0))
    if c.flip():
        depth = _scalar_var("depth", "int32")
        params, body, name, static = (
            [vi, depth],
            relay.one_hot(vi, on, off, depth, axis, "float32"),
            "dyn.one_hot",
            None,
        )
    else:
        static = c.choose([3, 1, 0, 5])
        params, body, name = [vi], relay.one_hot(vi, on, off, static, axis, "float32"), "one_hot"

    def reference(indices, depth=None):
        depth = static if depth is None else int(depth)
        if depth < 0:
            raise Refused("one_hot: a negative depth")
        where = axis % (indices.ndim + 1)
        shape = indices.shape[:where] + (depth,) + indices.shape[where:]
        fits(shape, "float32")
        if 0 in shape:  # (without an arange of a huge depth)
            return np.zeros(shape, "float32")
        hot = np.expand_dims(indices, where) == np.arange(depth).reshape((-1,) + (1,) * (indices.ndim - where))
        return np.where(hot, np.float32(2.5), np.float32(-1.0)).astype("float32")

    def draw(args: _Args):
        shape = args.shape(idx)
        indices = np.array([args.c.choose([0, 1, 2, -1, 3, 7, 100]) for _ in range(math.prod(shape))], "int32")
        args.tag("out_of_range", any(i < 0 or i >= (static or 3) for i in indices))
        indices = indices.reshape(shape)
        if static is not None:
            return (indices,)
        depth = args.scalar([3, 0, 1, -1, 5, 2**31 - 1], "int32")
        args.tag("negative_extent", depth < 0)
        args.tag("huge", depth > 2**30)
        return indices, depth

    return Built(name, params, body, reference, draw, "float32")


#: TVM's value of a reduction over an empty axis, where numpy has none (every executor gives it).
def _identity(name: str, dtype: str):
    if name in ("argmax", "argmin"):
        return -1
    info = np.finfo(dtype) if dtype.startswith("float") else np.iinfo(dtype)
    return info.min if name == "max" else info.max


def _reduce(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 3), c.choose(["float32", "int32"]))
    names = ["sum", "max", "min", "mean", "prod", "argmax", "argmin"]
    name = c.choose(names if x.dtype == "float32" else ["sum", "max", "min", "argmax"])
    axis: int | list[int] | None
    if c.flip(1, 4):
        axis = None
    elif name.startswith("arg") or c.flip():
        axis = c.integers(-x.rank, x.rank - 1)
    else:
        axis = sorted(set(c.integers(0, x.rank - 1) for _ in range(2)))
    keepdims = c.flip(1, 3)
    v = x.var()
    body = getattr(relay, name)(v, axis=axis, keepdims=keepdims)

    def reference(data):
        axes = tuple(range(data.ndim)) if axis is None else (tuple(axis) if isinstance(axis, list) else (axis,))
        empty = any(data.shape[a] == 0 for a in axes)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if name.startswith("arg"):
                fn = np.argmax if name == "argmax" else np.argmin
                if empty:
                    shape = tuple(1 if i in [a % data.ndim for a in axes] else d for i, d in enumerate(data.shape))
                    out = np.full(shape, -1)
                    out = (
                        out
                        if keepdims
                        else out.reshape([d for i, d in enumerate(shape) if i not in [a % data.ndim for a in axes]])
                    )
                elif axis is None:
                    out = np.array(fn(data)).reshape((1,) * data.ndim if keepdims else ())
                else:
                    out = fn(data, axis=axis, keepdims=keepdims)
                return np.asarray(out).astype("int32")
            if name in ("max", "min"):
                fn = np.max if name == "max" else np.min
                out = fn(
                    data,
                    axis=None if axis is None else tuple(axes),
                    keepdims=keepdims,
                    initial=_identity(name, x.dtype),
                )
                return np.asarray(out).astype(x.dtype)
            fn = getattr(np, name)
            out = fn(data, axis=None if axis is None else tuple(axes), keepdims=keepdims)
            return np.asarray(out).astype(x.dtype)

    def draw(args: _Args):
        return (values(args.shape(x), x.dtype),)

    return Built(name, [v], body, reference, draw, x.dtype if not name.startswith("arg") else "int32")


def _broadcast_shapes(args: _Args, ranks: Sequence[int]) -> list:
    """Shapes of operands of ``ranks`` that broadcast together (now and then, ones that do not)."""
    base = [args.extent() for _ in range(max(ranks))]
    shapes = []
    for rank in ranks:
        shape = base[len(base) - rank :]
        shapes.append([1 if args.c.flip(1, 4) else d for d in shape])
    if args.c.flip(1, 4):
        which = args.c.integers(0, len(ranks) - 1)
        dim = args.c.integers(0, len(shapes[which]) - 1)
        shapes[which][dim] = args.c.choose([shapes[which][dim] + 1, 0, 3])  # the caller tags a mismatch
    return [tuple(s) for s in shapes]


def _elementwise(c: Choices) -> Built:
    dtype = c.choose(["float32", "int32"])
    where = c.flip(1, 5)
    ranks = [c.integers(1, 3) for _ in range(3 if where else 2)]
    static_last = c.choose([None, None, 4, 1])
    tensors = [
        _Tensor(f"x{i}", r, "bool" if where and i == 0 else dtype, static_last if i == 0 else None)
        for i, r in enumerate(ranks)
    ]
    vs = [t.var() for t in tensors]
    fn: Callable[..., Any]
    if where:
        name = "where"
        body = relay.where(*vs)
        fn = np.where
    else:
        names = ["add", "subtract", "multiply", "maximum", "minimum", "less", "equal"]
        name = c.choose(names + (["divide"] if dtype == "float32" else []))
        body = getattr(relay, name)(*vs)
        fn = {
            "add": np.add,
            "subtract": np.subtract,
            "multiply": np.multiply,
            "maximum": np.maximum,
            "minimum": np.minimum,
            "less": np.less,
            "equal": np.equal,
            "divide": np.divide,
        }[name]

    def reference(*operands):
        np.broadcast_shapes(*(o.shape for o in operands))  # ValueError: refused
        with np.errstate(all="ignore"):
            return np.asarray(fn(*operands))

    def draw(args: _Args):
        shapes = _broadcast_shapes(args, ranks)
        if static_last is not None:
            shapes[0] = shapes[0][:-1] + (static_last,)
        out = []
        for t, s in zip(tensors, shapes):
            data = values(s, t.dtype)
            if t.dtype == "float32" and name == "divide":
                data = np.where(data == 0, np.float32(0.5), data)
            out.append(data)
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            args.tag("mismatch")
        return tuple(out)

    result = "bool" if name in ("less", "equal") else dtype
    return Built(name, vs, body, reference, draw, result)


def _squeeze(c: Choices) -> Built:
    x = _Tensor("x", c.integers(2, 3))
    axes = sorted(set(c.integers(0, x.rank - 1) for _ in range(c.integers(1, 2))))
    v = x.var()

    def reference(data):
        if any(data.shape[a] != 1 for a in axes):
            raise Refused("squeeze: an axis to squeeze is not 1")
        return np.squeeze(data, tuple(axes))

    def draw(args: _Args):
        shape = list(args.shape(x))
        for a in axes:
            shape[a] = 1 if args.c.flip(3, 4) else args.other_than(1)
        return (values(tuple(shape), x.dtype),)

    return Built("squeeze", [v], relay.squeeze(v, axes), reference, draw, x.dtype)


def _argwhere(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 3), c.choose(["int32", "float32", "bool"]))
    v = x.var()

    def reference(data):
        return np.argwhere(data).astype("int32")

    def draw(args: _Args):
        return (values(args.shape(x), x.dtype),)

    return Built("argwhere", [v], relay.argwhere(v), reference, draw, "int32")


def _repeat(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 2))
    repeats, axis = c.choose([2, 1, 0, 3]), c.integers(-x.rank, x.rank - 1)
    v = x.var()

    def reference(data):
        return np.repeat(data, repeats, axis)

    def draw(args: _Args):
        return (values(args.shape(x), x.dtype),)

    return Built("repeat", [v], relay.repeat(v, repeats, axis), reference, draw, x.dtype)


def _pad(c: Choices) -> Built:
    x = _Tensor("x", c.integers(1, 2))
    v = x.var()
    if c.flip():
        widths = relay.var("pad_width", shape=(x.rank, 2), dtype="int64")
        params, body, name, static = [v, widths], relay.nn.pad(v, widths, 1.5), "dyn.nn.pad", None
    else:
        static = [[c.choose([1, 0, 2]) for _ in range(2)] for _ in range(x.rank)]
        params, body, name = [v], relay.nn.pad(v, static, 1.5), "nn.pad"

    def reference(data, widths=None):
        # numpy refuses negative widths; Relay's pad, like ONNX's, removes elements there
        widths = static if widths is None else [[int(w) for w in pair] for pair in widths]
        shape = tuple(d + a + b for d, (a, b) in zip(data.shape, widths))
        if any(m < 0 for m in shape):
            raise Refused("pad: negative widths remove more than the axis")
        fits(shape, x.dtype)
        out = np.full(shape, 1.5, "float32")
        source, target = [], []
        for n, (before, _), m in zip(data.shape, widths, shape):
            low, high = max(0, -before), min(n, m - before)
            if high <= low:
                return out
            source.append(slice(low, high))
            target.append(slice(low + before, high + before))
        out[tuple(target)] = data[tuple(source)]
        return out

    def draw(args: _Args):
        data = values(args.shape(x), x.dtype)
        if static is not None:
            return (data,)
        widths = args.extents_vector(2 * x.rank).reshape(x.rank, 2)
        args.tag("huge", any(int(w) >= 2**31 for w in widths.flat))
        return data, widths

    return Built(name, params, body, reference, draw, x.dtype)


# -- the kernels relay_aot writes itself, on hostile values -------------------------------------------
#
# Static shapes and constant weights, so that relay_aot's own kernels are chosen: Winograd's 3x3
# convolutions (on AVX-512), the schedule rules' packed convolutions and dense products, the
# exact int8 products. Their data is drawn ordinary, with infinities and NaNs, or near the
# dtype's limits (the weights are scaled so that the direct computation stays finite there).
# Float results are compared relative to the largest finite one (Built.relative): Winograd's
# rounding is a few ulps of the largest output, not of each.


def _float_data(args: _Args, shape: tuple, scale: float) -> np.ndarray:
    """Float32 data of ``shape``: small values, or (tagged) some infinities and NaNs, or every
    value near ``scale`` (huge values whose products with the weights stay finite)."""
    rng = np.random.default_rng(args.c.integers(0, 2**31 - 1))
    data = rng.uniform(-1, 1, shape).astype("float32")
    kind = args.c.choose(["plain", "non_finite", "huge_value", "both"])
    if kind in ("huge_value", "both"):
        data *= np.float32(scale)
        args.tag("huge_value")
    if kind in ("non_finite", "both"):
        flat = data.reshape(-1)
        for _ in range(args.c.integers(1, 3)):
            flat[args.c.integers(0, flat.size - 1)] = args.c.choose([np.inf, -np.inf, np.nan])
        args.tag("non_finite")
    return data


def _relu_as_tvm(value: np.ndarray) -> np.ndarray:
    """``nn.relu`` as TVM computes it, ``x > 0 ? x : 0``: NaN becomes 0."""
    return np.where(value > 0, value, np.float32(0)).astype(value.dtype)


def _conv3x3(c: Choices) -> Built:
    """A 3x3 convolution, stride 1, padding 1, on one image with constant weights, maybe with
    bias and ReLU fused: Winograd's on AVX-512 (channels of 16 or 32, maps of 8 and more), the
    packed direct kernel elsewhere."""
    cin, cout = c.choose([16, 32]), c.choose([16, 32])
    size = c.choose([8, 13, 20])
    rng = np.random.default_rng(c.integers(0, 2**31 - 1))
    weight = (rng.uniform(-1, 1, (cout, cin, 3, 3)) / (9 * cin)).astype("float32")
    bias = rng.uniform(-1, 1, cout).astype("float32")
    fused = c.choose(["none", "bias", "bias_relu"])
    x = relay.var("x", shape=(1, cin, size, size), dtype="float32")
    body = relay.nn.conv2d(x, relay.const(weight), padding=(1, 1), kernel_size=(3, 3), channels=cout)
    if fused != "none":
        body = relay.nn.bias_add(body, relay.const(bias))
    if fused == "bias_relu":
        body = relay.nn.relu(body)

    def reference(data):
        padded = np.pad(data[0].astype("float64"), ((0, 0), (1, 1), (1, 1)))
        out = np.zeros((cout, size, size), "float64")
        with np.errstate(all="ignore"):
            for ky in range(3):
                for kx in range(3):
                    window = padded[:, ky : ky + size, kx : kx + size]
                    out += np.einsum("oc,chw->ohw", weight[:, :, ky, kx].astype("float64"), window)
            if fused != "none":
                out += bias[:, None, None]
        out = out[None].astype("float32")
        return _relu_as_tvm(out) if fused == "bias_relu" else out

    def draw(args: _Args):
        # |w| sums to at most 1 per output: inputs of 1e37 keep the direct sum finite
        return (_float_data(args, (1, cin, size, size), 1e37),)

    return Built("nn.conv2d", [x], body, reference, draw, "float32", relative=True)


def _packed_dense(c: Choices) -> Built:
    """A dense product with constant weights, of widths the schedule rules block (17, 71) and
    ordinary ones: relay_aot's packed dense kernel."""
    rows, inner, units = c.choose([1, 4, 16]), c.choose([16, 64, 7]), c.choose([17, 71, 32, 64])
    rng = np.random.default_rng(c.integers(0, 2**31 - 1))
    weight = (rng.uniform(-1, 1, (units, inner)) / inner).astype("float32")
    x = relay.var("x", shape=(rows, inner), dtype="float32")
    relu = c.flip()
    body = relay.nn.dense(x, relay.const(weight))
    body = relay.nn.relu(body) if relu else body

    def reference(data):
        with np.errstate(all="ignore"):
            out = (data.astype("float64") @ weight.T.astype("float64")).astype("float32")
        return _relu_as_tvm(out) if relu else out

    def draw(args: _Args):
        return (_float_data(args, (rows, inner), 1e37),)

    return Built("nn.dense (packed)", [x], body, reference, draw, "float32", relative=True)


def _gemmlowp_requantize(v: np.ndarray, multipliers: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """TFLite's ``MultiplyByQuantizedMultiplier`` of int32 values, per channel on the last axis,
    with gemmlowp's steps on Python integers (the importer's own, ``tflite_exact``)."""
    from ..frontends.tflite_exact import _rdbpot, _srdhm, _wrap32

    out = np.empty(v.shape, np.int64)
    for index, value in np.ndenumerate(v):
        m, shift = int(multipliers[index[-1]]), int(shifts[index[-1]])
        out[index] = _rdbpot(_srdhm(_wrap32(int(value) << max(shift, 0)), m), max(-shift, 0))
    return out


def _requantize(c: Choices) -> Built:
    """The end of every requantized operator as relay_aot's TFLite importer writes it: int32
    values (a convolution's sums, or an int8 less its zero point shifted left by 20, as ADD
    rescales an operand) through ``MultiplyByQuantizedMultiplier`` per channel, plus the output
    zero point, clamped by the activation into int8. What relay_aot computes instead (one
    rounding, the zero point in the rounding term, no sign correction under a clamp at the zero
    point, int32 or paired int64 lanes) against gemmlowp's steps."""
    from ..frontends.tflite_exact import _multiply_by_quantized_multiplier, quantize_multiplier

    rows, channels = c.choose([4, 1, 9]), c.choose([16, 3, 32, 1])
    rng = np.random.default_rng(c.integers(0, 2**31 - 1))
    low, high = c.choose([(-12, -3), (-20, 1), (-31, -25), (-1, 4)])  # log2 of the scales
    scales = 2.0 ** rng.uniform(low, high, channels)
    if c.flip():
        scales[:] = scales[0]  # one scale for the tensor
    multipliers, shifts = (np.array(v, np.int64) for v in zip(*(quantize_multiplier(float(s)) for s in scales)))
    zero_point = int(c.choose([-128, 0, -5, 17, 127]))
    floor = c.choose([-128, zero_point, min(zero_point + 3, 127)])  # none, ReLU, above the zero point
    narrow = c.flip()
    x = relay.var("x", shape=(rows, channels), dtype="int8" if narrow else "int32")
    input_zero_point = int(c.choose([0, -128, 7])) if narrow else 0
    value = x
    if narrow:
        value = (relay.cast(x, "int32") - relay.const(input_zero_point, "int32")) * relay.const(1 << 20, "int32")
    y = _multiply_by_quantized_multiplier(value, multipliers, shifts) + relay.const(zero_point, "int32")
    body = relay.cast(relay.clip(y, float(floor), 127.0), "int8")

    def reference(data):
        v = data.astype(np.int64)
        if narrow:
            v = (v - input_zero_point) << 20
        out = _gemmlowp_requantize(v, multipliers, shifts) + zero_point
        out = (out + 2**31) % 2**32 - 2**31  # the int32 addition wraps
        return np.clip(out, floor, 127).astype("int8")

    def draw(args: _Args):
        r = np.random.default_rng(args.c.integers(0, 2**31 - 1))
        if narrow:
            return (r.integers(-128, 128, (rows, channels)).astype("int8"),)
        if args.c.flip():
            args.tag("huge_value")
            data = r.choice(np.array([-(2**31), 2**31 - 1, -1, 0, 1, -(2**30), 2**30], np.int64), (rows, channels))
        else:
            bound = 2 ** args.c.choose([31, 16, 24])
            data = r.integers(-bound, bound, (rows, channels))
        return (data.astype("int32"),)

    return Built("TFLite requantization (int8)", [x], body, reference, draw, "int8")


def _grouped_pointwise(c: Choices) -> Built:
    """A grouped 1x1 convolution with constant weights (ShuffleNet's), maybe with a scale and
    shift, a residual and ReLU fused: relay_aot's grouped pointwise kernel (whole-vector runs of
    rows, or the flattened small map's overlapping vectors), TVM's where it does not apply."""
    groups, per_group, filters = c.choose([2, 3, 4]), c.choose([4, 17, 34]), c.choose([4, 16, 17])
    size = c.choose([7, 14, 8, 5])
    cin, cout = groups * per_group, groups * filters
    rng = np.random.default_rng(c.integers(0, 2**31 - 1))
    weight = (rng.uniform(-1, 1, (cout, per_group, 1, 1)) / per_group).astype("float32")
    scale = rng.uniform(0.5, 1, cout).astype("float32")
    shift = rng.uniform(-1, 1, cout).astype("float32")
    fused = c.choose(["none", "scale_shift", "scale_shift_relu", "residual"])
    x = relay.var("x", shape=(1, cin, size, size), dtype="float32")
    r = relay.var("r", shape=(1, cout, size, size), dtype="float32")
    body = relay.nn.conv2d(x, relay.const(weight), kernel_size=(1, 1), channels=cout, groups=groups)
    if fused != "none":
        body = body * relay.const(scale.reshape(cout, 1, 1)) + relay.const(shift.reshape(cout, 1, 1))
    if fused == "scale_shift_relu":
        body = relay.nn.relu(body)
    if fused == "residual":
        body = relay.nn.relu(body + r)
    params = [x, r] if fused == "residual" else [x]

    def reference(data, residual=None):
        out = np.zeros((cout, size, size), "float64")
        with np.errstate(all="ignore"):
            for o in range(cout):
                g = o // filters
                group = data[0, g * per_group : (g + 1) * per_group].astype("float64")
                out[o] = np.einsum("k,khw->hw", weight[o, :, 0, 0].astype("float64"), group)
            out32 = out[None].astype("float32")
            if fused != "none":
                out32 = out32 * scale.reshape(cout, 1, 1) + shift.reshape(cout, 1, 1)
            if fused == "residual":
                out32 = out32 + residual
        return _relu_as_tvm(out32) if fused in ("scale_shift_relu", "residual") else out32

    def draw(args: _Args):
        data = _float_data(args, (1, cin, size, size), 1e37)
        if fused == "residual":
            return (
                data,
                np.random.default_rng(args.c.integers(0, 2**31 - 1))
                .uniform(-1, 1, (1, cout, size, size))
                .astype("float32"),
            )
        return (data,)

    return Built("nn.conv2d (grouped 1x1)", params, body, reference, draw, "float32", relative=True)


def _shuffle_unit(c: Choices) -> Built:
    """ShuffleNet's unit: a grouped 1x1 convolution with relu, the channel shuffle, a 3x3
    depthwise convolution with a shift, a grouped 1x1 convolution, constant weights: relay_aot's
    NCHW depthwise kernel between its grouped pointwise ones (on AVX-512; rows of 7 and strides of
    2 stay packed). Every weight row sums to at most 1 in magnitude, so no stage overflows
    where the reference does not."""
    groups, per_group = c.choose([2, 4]), c.choose([4, 9, 16])
    size, stride = c.choose([8, 14, 10, 7]), c.choose([1, 1, 2])
    channels = groups * per_group
    rng = np.random.default_rng(c.integers(0, 2**31 - 1))
    first = (rng.uniform(-1, 1, (channels, per_group)) / per_group).astype("float32")
    depthwise = (rng.uniform(-1, 1, (channels, 3, 3)) / 9).astype("float32")
    shift = rng.uniform(-1, 1, channels).astype("float32")
    last = (rng.uniform(-1, 1, (channels, per_group)) / per_group).astype("float32")
    out_size = (size - 1) // stride + 1
    x = relay.var("x", shape=(1, channels, size, size), dtype="float32")

    def pointwise(y, weight):
        return relay.nn.conv2d(y, relay.const(weight[:, :, None, None]), groups=groups, channels=channels)

    y = relay.nn.relu(pointwise(x, first))
    y = relay.reshape(y, (1, groups, per_group, size, size))
    y = relay.reshape(relay.transpose(y, (0, 2, 1, 3, 4)), (1, channels, size, size))
    y = relay.nn.conv2d(y, relay.const(depthwise[:, None]), strides=stride, padding=1, groups=channels)
    body = pointwise(y + relay.const(shift.reshape(channels, 1, 1)), last)

    def grouped(data, weight):
        out = np.zeros_like(data, dtype="float64")
        for o in range(channels):
            g = o // per_group
            out[o] = np.einsum("k,khw->hw", weight[o].astype("float64"), data[g * per_group : (g + 1) * per_group])
        return out.astype("float32")

    def reference(data):
        with np.errstate(all="ignore"):
            y = _relu_as_tvm(grouped(data[0].astype("float64"), first))
            y = y.reshape(groups, per_group, size, size).transpose(1, 0, 2, 3).reshape(channels, size, size)
            padded = np.pad(y.astype("float64"), ((0, 0), (1, 1), (1, 1)))
            z = np.zeros((channels, out_size, out_size), "float64")
            for r in range(3):
                for s in range(3):
                    window = padded[:, r : r + stride * out_size : stride, s : s + stride * out_size : stride]
                    z += window * depthwise[:, r, s, None, None].astype("float64")
            z = z.astype("float32") + shift.reshape(channels, 1, 1)
            return grouped(z.astype("float64"), last)[None]

    def draw(args: _Args):
        return (_float_data(args, (1, channels, size, size), 1e37),)

    return Built("ShuffleNet unit (NCHW depthwise)", [x], body, reference, draw, "float32", relative=True)


def _int8_product(c: Choices) -> Built:
    """An int8 or uint8 by int8 product into int32 (dense or 1x1/3x3 convolution) with constant
    weights: the exact int8 kernels (uint8 x int8 on x86 without VNNI's saturation; eight
    filters blocked by eight where the CPU has eight-lane VNNI; int16 pairs on ``vpmaddwd``
    without VNNI, which a campaign reaches with ``RELAY_AOT_TARGET="llvm -mcpu=haswell"``)."""
    kind = c.choose(["nn.dense", "nn.conv2d"])
    dtype = c.choose(["uint8", "int8"])
    rng = np.random.default_rng(c.integers(0, 2**31 - 1))
    info = np.iinfo(dtype)
    if kind == "nn.dense":
        rows, inner, units = c.choose([1, 4]), c.choose([16, 64, 128]), c.choose([16, 17, 64])
        weight = rng.integers(-128, 128, (units, inner), dtype="int8")
        x = relay.var("x", shape=(rows, inner), dtype=dtype)
        body = relay.nn.dense(x, relay.const(weight), out_dtype="int32")
        shape: tuple[int, ...] = (rows, inner)

        def reference(data):
            return (data.astype("int64") @ weight.T.astype("int64")).astype("int32")
    else:
        # eight filters: blocks of eight on CPUs with eight-lane VNNI (int8_by_eight); 3 or 12
        # channels: padded to fours by the legalization
        cin, cout = c.choose([16, 32, 8, 3, 12]), c.choose([16, 32, 8])
        k, size = c.choose([1, 3]), c.choose([4, 7])
        weight = rng.integers(-128, 128, (cout, cin, k, k), dtype="int8")
        x = relay.var("x", shape=(1, cin, size, size), dtype=dtype)
        body = relay.nn.conv2d(
            x, relay.const(weight), padding=(k // 2, k // 2), kernel_size=(k, k), channels=cout, out_dtype="int32"
        )
        shape = (1, cin, size, size)

        def reference(data):
            pad = k // 2
            padded = np.pad(data[0].astype("int64"), ((0, 0), (pad, pad), (pad, pad)))
            out = np.zeros((cout, size, size), "int64")
            for ky in range(k):
                for kx in range(k):
                    out += np.einsum(
                        "oc,chw->ohw", weight[:, :, ky, kx].astype("int64"), padded[:, ky : ky + size, kx : kx + size]
                    )
            return out[None].astype("int32")

    def draw(args: _Args):
        r = np.random.default_rng(args.c.integers(0, 2**31 - 1))
        if args.c.flip():
            # the extremes: products of -128 or 255 with -128 overflow int16 pairs (VNNI's vpdpbusd)
            data = r.choice(np.array([info.min, info.max], dtype), shape)
            args.tag("huge_value")
        else:
            data = r.integers(info.min, info.max + 1, shape, dtype=dtype)
        return (data,)

    return Built(f"{kind} ({dtype} x int8)", [x], body, reference, draw, "int32")


def _pool(c: Choices) -> Built:
    x = _Tensor("x", 4)
    kind = c.choose(["nn.max_pool2d", "nn.avg_pool2d"])
    size = (c.choose([2, 3, 1]), c.choose([2, 3, 1]))
    strides = (c.choose([1, 2, 3]), c.choose([1, 2, 3]))
    v = x.var()
    make = relay.nn.max_pool2d if kind == "nn.max_pool2d" else relay.nn.avg_pool2d
    body = make(v, pool_size=size, strides=strides)

    def reference(data):
        n, ch, h, w = data.shape
        oh, ow = (h - size[0]) // strides[0] + 1, (w - size[1]) // strides[1] + 1
        if oh < 0 or ow < 0:
            raise Refused("pool: the window is larger than the input")
        out = np.zeros((n, ch, oh, ow), "float32")
        for i in range(oh):
            for j in range(ow):
                window = data[
                    :, :, i * strides[0] : i * strides[0] + size[0], j * strides[1] : j * strides[1] + size[1]
                ]
                out[:, :, i, j] = window.max(axis=(2, 3)) if kind == "nn.max_pool2d" else window.mean(axis=(2, 3))
        return out

    def draw(args: _Args):
        shape = (
            args.c.choose([1, 2, 0]),
            args.c.choose([1, 2, 0]),
            args.c.choose([3, 4, 1, 2, 0, 5]),
            args.c.choose([3, 4, 1, 2, 0, 5]),
        )
        args.tag("zero_extent", 0 in shape)
        args.tag("mismatch", shape[2] < size[0] or shape[3] < size[1])
        return (values(shape, "float32"),)

    return Built(kind, [v], body, reference, draw, "float32")


#: Program makers by the operator family they exercise.
OPERATORS: dict[str, Callable[[Choices], Built]] = {
    "arange": _arange,
    "reshape": _reshape,
    "dyn.reshape": _dyn_reshape,
    "strided_slice": _strided_slice,
    "broadcast_to": _broadcast_to,
    "full": _full,
    "matmul": _dense,
    "concatenate": _concatenate,
    "topk": _topk,
    "split": _split,
    "take": _take,
    "tile": _tile,
    "one_hot": _one_hot,
    "reduce": _reduce,
    "elementwise": _elementwise,
    "squeeze": _squeeze,
    "argwhere": _argwhere,
    "repeat": _repeat,
    "pad": _pad,
    "pool": _pool,
    "conv2d_3x3": _conv3x3,
    "dense_pack": _packed_dense,
    "int8_product": _int8_product,
    "requantize": _requantize,
    "grouped_pointwise": _grouped_pointwise,
    "shuffle_unit": _shuffle_unit,
}


# -- follow-on steps: the operator's result through one more (fused) operator ---------------------


def _follow_ons(dtype: str) -> list:
    steps = [
        ("reshape(-1)", lambda e: relay.reshape(e, [-1]), lambda v: v.reshape(-1)),
        ("expand_dims", lambda e: relay.expand_dims(e, 0), lambda v: v[None]),
        # (np.ascontiguousarray makes a 0-d array 1-d: a copy keeps the rank; seed 9307)
        ("transpose", lambda e: relay.transpose(e), lambda v: np.array(v.T, copy=True)),
    ]
    if dtype == "float32":
        steps += [
            ("negative", relay.negative, np.negative),
            ("add to itself", lambda e: relay.add(e, e), lambda v: v + v),
            ("sum of the last axis", lambda e: relay.sum(e, axis=-1), lambda v: v.sum(axis=-1, dtype="float32")),
            # a scalar result: its shape reads none of the operator's (seed 8108's defect)
            ("sum of everything", lambda e: relay.sum(e), lambda v: np.asarray(v.sum(dtype="float32"))),
            (
                "cumsum of the last axis",
                lambda e: relay.cumsum(e, axis=-1),
                lambda v: np.cumsum(v, axis=-1, dtype="float32"),
            ),
        ]
    return steps


@dataclasses.dataclass
class ArgSet:
    """One argument set of a :class:`HostileProgram`, with the hostile kinds it contains."""

    args: tuple
    kinds: frozenset


@dataclasses.dataclass
class HostileProgram:
    """A program over ``?`` dimensions, argument sets for it and the numpy reference."""

    operator: str  # the Relay operator exercised
    module: tvm.IRModule
    reference: Callable[..., Any]
    arg_sets: list
    follow_on: str | None = None
    #: see Built.relative
    relative: bool = False

    def text(self) -> str:
        """The module as Relay text (with a metadata section only if it needs one)."""
        text = self.module.astext(show_meta_data=False)
        return self.module.astext(show_meta_data=True) if "meta[" in text else text

    def expected(self, args: Sequence[Any]) -> Outcome:
        """The reference's outcome: ``value`` (normalized) or ``raised`` with why it refuses."""
        return expect(self.reference, args)


def expect(reference: Callable[..., Any], args: Sequence[Any]) -> Outcome:
    """``reference(*args)`` as an :class:`Outcome`: ``raised`` ("Refused: ...") when it refuses
    (:class:`Refused`, or numpy's own ``ValueError``/``IndexError``)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return Outcome("value", normalize(reference(*args)))
    except Unrepresentable as err:
        return Outcome("raised", detail=f"{UNREPRESENTABLE}: {err}")
    except (Refused, ValueError, IndexError) as err:
        return Outcome("raised", detail=f"Refused: {err}")


def draw_program(c: Choices, arg_sets: int = 8, operators: Sequence[str] | None = None) -> HostileProgram:
    """A :class:`HostileProgram` of one of ``operators`` (default: all of :data:`OPERATORS`),
    with ``arg_sets`` argument sets (fewer if some were too large to compute)."""
    families = list(operators) if operators else list(OPERATORS)
    for _ in range(10):
        built = OPERATORS[c.choose(families)](c)
        body, reference, follow_on = built.body, built.reference, None
        if built.dtype is not None and c.flip(1, 3):
            follow_on, make, step = c.choose(_follow_ons(built.dtype))
            body, reference = make(body), (lambda ref, then: lambda *a: then(_fitting(ref(*a))))(built.reference, step)
        mod = tvm.IRModule()
        mod["main"] = relay.Function(built.params, body)
        try:
            mod = relay.transform.InferType()(mod)
        except tvm.error.TVMError:
            continue  # attributes Relay's type relation rejects (not run-time arguments): draw again
        break
    else:
        raise RuntimeError("no well-typed hostile program in 10 draws")
    sets = []
    for _ in range(arg_sets * 3):  # argument sets too large to compute are drawn again
        draw = _Args(c)
        args = built.draw_args(draw)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                reference(*args)
        except Unsafe:
            continue
        except (Refused, ValueError, IndexError):
            pass
        sets.append(ArgSet(args, frozenset(draw.kinds)))
        if len(sets) == arg_sets:
            break
    return HostileProgram(built.name, mod, reference, sets, follow_on, built.relative)


def numbered_program(seed: Any, index: int, arg_sets: int = 8, families: Sequence[str] | None = None) -> HostileProgram:
    """Program ``index`` of the campaign with ``seed``: of operator family ``index`` modulo the
    ``families`` (default all of :data:`OPERATORS`), its choices drawn from
    ``random.Random(f"{seed}:{index}")`` -- each program is reproducible on its own."""
    import random

    families = list(families or OPERATORS)
    rng = random.Random(f"{seed}:{index}")
    return draw_program(Choices(rng.randint), arg_sets, [families[index % len(families)]])


# -- judging ----------------------------------------------------------------------------------------


#: How :func:`expect` marks a refusal for :class:`Unrepresentable`.
UNREPRESENTABLE = "Unrepresentable"


def _empty(value) -> bool:
    """Whether a normalized value is a tensor without elements."""
    return isinstance(value, np.ndarray) and value.size == 0


def _tolerance(expected: Outcome, relative: bool) -> tuple[float, float]:
    """``(rtol, atol)``: :data:`RTOL`/:data:`ATOL`, or for ``relative`` programs an absolute
    tolerance of RTOL times the largest finite value expected."""
    value = expected.value
    if not relative or not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        return RTOL, ATOL
    finite = np.abs(value[np.isfinite(value)])
    return RTOL, max(ATOL, RTOL * float(finite.max())) if finite.size else ATOL


def judge(outcome: Outcome, expected: Outcome, relative: bool = False) -> tuple[str, str] | None:
    """``(kind, why)`` if relay_aot's ``outcome`` breaks the rule (see the module docstring)
    against the reference's ``expected``; None if it keeps it. ``relative``: see
    :attr:`Built.relative`."""
    if outcome.kind == "unavailable":
        if outcome.cause != "rejected":
            return "crash", outcome.detail
        if "UnsupportedError:" in outcome.detail:
            return None  # a clear refusal at compile time (TVM cannot lower the operator either)
        return "compile error", outcome.detail
    if outcome.kind == "raised":
        name = outcome.detail.split(":", 1)[0]
        if name not in CLEAR_ERRORS:
            return "unclear error", f"raised {outcome.detail}; the clear errors are {', '.join(CLEAR_ERRORS)}"
        if expected.kind == "value":
            return "spurious error", f"raised {outcome.detail}, but the reference returns {summary(expected.value)}"
        return None
    if expected.kind == "raised":
        if expected.detail.startswith(UNREPRESENTABLE) and _empty(outcome.value):
            return None  # no element: numpy's limit, not a wrong result (Unrepresentable)
        return "accepted", f"returned {summary(outcome.value)}, but the reference refuses ({expected.detail})"
    try:
        assert_same(outcome.value, expected.value, *_tolerance(expected, relative), names=("relay_aot", "reference"))
    except Mismatch as err:
        return "wrong result", str(err)
    return None


def _describe(outcome: Outcome) -> str:
    if outcome.kind == "value":
        return f"returned {summary(outcome.value)}"
    if outcome.kind == "raised":
        return f"raised {outcome.detail}"
    return outcome.detail


@dataclasses.dataclass
class Finding:
    """relay_aot broke the rule on one argument set: a reproducer."""

    kind: str
    executor: str
    operator: str
    why: str
    program: str
    args: tuple
    outcomes: dict
    follow_on: str | None = None

    def signature(self) -> tuple:
        """What tells findings of one defect from another's: the operator and the kind."""
        return (self.operator, self.kind)

    def __str__(self) -> str:
        after = f", then {self.follow_on}" if self.follow_on else ""
        lines = [
            f"{self.kind} on {self.executor} ({self.operator}{after}): {self.why}",
            "program:",
            self.program,
            f"arguments: {self.args!r}",
            "outcomes:",
        ]
        lines += [f"  {name}: {text}" for name, text in self.outcomes.items()]
        return "\n".join(lines)


@dataclasses.dataclass
class Tally:
    """What a hostile campaign ran and saw."""

    programs: int = 0
    arg_sets: int = 0
    operators: Counter = dataclasses.field(default_factory=Counter)
    kinds: Counter = dataclasses.field(default_factory=Counter)
    #: per executor: "value", "raised", "crashed", ...; per reference also how it compared
    outcomes: Counter = dataclasses.field(default_factory=Counter)
    findings: list = dataclasses.field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.programs += other.programs
        self.arg_sets += other.arg_sets
        self.operators.update(other.operators)
        self.kinds.update(other.kinds)
        self.outcomes.update(other.outcomes)
        self.findings += other.findings

    def __str__(self) -> str:
        parts = [f"{self.programs} programs, {self.arg_sets} argument sets, {len(self.findings)} findings"]
        executors = sorted({e for e, _ in self.outcomes})
        for executor in executors:
            counts = {k: n for (e, k), n in self.outcomes.items() if e == executor}
            parts.append(f"{executor}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        return "; ".join(parts)


def _reference_verdict(outcome: Outcome, expected: Outcome, relative: bool = False) -> str:
    """How a TVM reference's outcome compares with the numpy reference (for the tally)."""
    if outcome.kind == "unavailable":
        return outcome.cause or "unavailable"
    if outcome.kind == "raised":
        return "refused too" if expected.kind == "raised" else "raised where numpy returns"
    if expected.kind == "raised":
        return "returned where numpy refuses"
    try:
        assert_same(outcome.value, expected.value, *_tolerance(expected, relative))
    except Mismatch:
        return "another value"
    return "same value"


def check(
    program: HostileProgram,
    backends_oracle: IsolatedOracle,
    references_oracle: IsolatedOracle | None,
    backends: Sequence[str] = ("cpp", "python"),
    references: Sequence[str] = ("interpreter", "vm"),
) -> Tally:
    """Run every argument set of ``program`` on ``backends`` (in ``backends_oracle``'s child) and
    ``references`` (in ``references_oracle``'s); judge the backends (:func:`judge`)."""
    tally = Tally(programs=1, arg_sets=len(program.arg_sets))
    tally.operators[program.operator] += 1
    text = None
    for arg_set in program.arg_sets:
        tally.kinds.update(arg_set.kinds)
        expected = program.expected(arg_set.args)
        tally.outcomes[("numpy reference", expected.kind)] += 1
        seen = {"numpy reference": _describe(expected)}
        if references_oracle is not None:
            for reference in references:
                outcome = references_oracle.run(program.module, arg_set.args, reference)
                seen[reference] = _describe(outcome)
                tally.outcomes[(reference, _reference_verdict(outcome, expected, program.relative))] += 1
        for backend in backends:
            outcome = backends_oracle.run(program.module, arg_set.args, backend)
            name = f"relay_aot {backend}"
            seen[name] = _describe(outcome)
            tally.outcomes[(name, outcome.kind if outcome.kind != "unavailable" else outcome.cause)] += 1
            verdict = judge(outcome, expected, program.relative)
            if verdict is not None:
                text = text or program.text()
                tally.findings.append(
                    Finding(verdict[0], name, program.operator, verdict[1], text, arg_set.args, seen, program.follow_on)
                )  # (every outcome, filled in below)
    return tally


def oracles() -> tuple[IsolatedOracle, IsolatedOracle]:
    """The child processes :func:`check` needs: one for relay_aot, one for TVM's references (a
    reference's crash restarts its child, which must not discard relay_aot's compiled
    programs), both with :data:`MEMORY_LIMIT`."""
    return IsolatedOracle(memory_limit=MEMORY_LIMIT), IsolatedOracle(memory_limit=MEMORY_LIMIT)

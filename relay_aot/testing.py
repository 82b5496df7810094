"""Differential testing: run a Relay program on TVM's executors and on relay_aot, and compare.

``normalize`` turns the values of every executor into one comparable form (numpy arrays,
``("adt", tag, fields)``, ``("ref", value)``, ``("closure",)``); ``assert_same`` compares two
normalized values (integers and booleans exactly, floats with tolerances) and names the path
of the first difference; ``check_equivalence`` does both for a module and its arguments.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np
import tvm
from tvm import relay
from tvm.relay.backend.interpreter import ConstructorValue, RefValue
from tvm.runtime.container import ADT

from .passes import prune
from .values import Closure, Ref

REFERENCES = ("interpreter", "vm")


class Mismatch(AssertionError):
    """Two executors disagreed; the message names them, the path and both values."""


def run_reference(mod: tvm.IRModule, args: Sequence[Any], executor: str = "interpreter") -> Any:
    """Run ``mod["main"]`` on TVM's Relay ``interpreter`` or ``vm``."""
    kind = {"interpreter": "debug", "vm": "vm"}[executor]
    # Only what main reaches: a module holding the Prelude has 240 globals to type-check.
    mod = relay.transform.InferType()(prune(mod))
    types = [p.checked_type for p in mod["main"].params]
    with tvm.transform.PassContext(opt_level=3):
        func = relay.create_executor(kind, mod=mod, device=tvm.cpu(), target="llvm").evaluate()
        return func(*[_reference_arg(a, t) for a, t in zip(args, types)])


def _reference_arg(value: Any, ty: relay.Type) -> Any:
    """Arguments as TVM's executors take them: scalars become tensors of the parameter's dtype."""
    if isinstance(value, (tuple, list)):
        fields = ty.fields if isinstance(ty, relay.TupleType) else [None] * len(value)
        return tuple(_reference_arg(v, t) for v, t in zip(value, fields))
    if isinstance(value, (np.ndarray, np.generic, bool, int, float)):
        dtype = ty.dtype if isinstance(ty, relay.TensorType) else None
        return tvm.nd.array(np.asarray(value, dtype=dtype))
    return value


def normalize(value: Any) -> Any:
    """A comparable form of a value from any executor."""
    if isinstance(value, tvm.nd.NDArray):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    if isinstance(value, (bool, int, float)):
        return np.asarray(value)
    if isinstance(value, ADT):
        return ("adt", int(value.tag), tuple(normalize(f) for f in value))
    if isinstance(value, ConstructorValue):
        return ("adt", int(value.tag), tuple(normalize(f) for f in value.fields))
    if isinstance(value, tuple):
        return ("adt", 0, tuple(normalize(f) for f in value))
    if isinstance(value, RefValue):
        return ("ref", normalize(value.value))
    if isinstance(value, Ref):
        return ("ref", normalize(value.value))
    if isinstance(value, tvm.ir.container.Array) and len(value) == 1:  # a C++ reference cell
        return ("ref", normalize(value[0]))
    if _is_closure(value):
        return ("closure",)
    raise TypeError(f"cannot normalize a value of type {type(value).__name__}")


def _is_closure(value: Any) -> bool:
    if isinstance(value, (Closure, tvm.runtime.PackedFunc)) or callable(value):
        return True
    # The interpreter's and the VM's closures reach Python as unregistered objects.
    return type(value) is tvm.runtime.Object and "Closure" in repr(value)[:40]


def assert_same(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6, path: str = "result",
                names: tuple[str, str] = ("actual", "expected")) -> None:
    """Raise :class:`Mismatch` unless two normalized values agree."""
    if isinstance(expected, np.ndarray):
        if not isinstance(actual, np.ndarray):
            raise Mismatch(f"{path}: {names[0]} is {actual!r}, {names[1]} is a tensor {expected!r}")
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            raise Mismatch(
                f"{path}: {names[0]} is {actual.dtype}{list(actual.shape)}, "
                f"{names[1]} is {expected.dtype}{list(expected.shape)}"
            )
        if expected.dtype.kind == "f":
            same = np.allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        else:
            same = np.array_equal(actual, expected)
        if not same:
            raise Mismatch(f"{path}: {names[0]} = {actual!r}\n{' ' * len(path)}  {names[1]} = {expected!r}")
        return
    if not isinstance(actual, tuple) or not actual or actual[0] != expected[0]:
        raise Mismatch(f"{path}: {names[0]} is {_short(actual)}, {names[1]} is {_short(expected)}")
    kind = expected[0]
    if kind == "adt":
        if actual[1] != expected[1] or len(actual[2]) != len(expected[2]):
            raise Mismatch(f"{path}: {names[0]} is {_short(actual)}, {names[1]} is {_short(expected)}")
        for i, (a, e) in enumerate(zip(actual[2], expected[2])):
            assert_same(a, e, rtol, atol, f"{path}[{i}]", names)
    elif kind == "ref":
        assert_same(actual[1], expected[1], rtol, atol, f"{path}.value", names)


def _short(value: Any) -> str:
    if isinstance(value, tuple) and value and value[0] == "adt":
        return f"ADT(tag={value[1]}, {len(value[2])} fields)"
    text = repr(value)
    return text if len(text) < 200 else text[:200] + "..."


def check_equivalence(
    mod: tvm.IRModule,
    args: Sequence[Any],
    backends: Iterable[str] = ("cpp",),
    references: Iterable[str] = ("interpreter",),
    rtol: float = 1e-5,
    atol: float = 1e-6,
    expected: Optional[Any] = None,
    **compile_options,
) -> Any:
    """Run ``mod`` on every backend and reference; raise :class:`Mismatch` naming who disagreed.

    Returns the normalized agreed result. ``expected`` (a plain value) is checked too.
    """
    from . import compile as aot_compile

    results: list[tuple[str, Any]] = []
    if expected is not None:
        results.append(("expected value", normalize(expected)))
    for reference in references:
        results.append((reference, normalize(run_reference(mod, args, reference))))
    for backend in backends:
        compiled = aot_compile(mod, backend=backend, **compile_options)
        results.append((f"relay_aot {backend} backend", normalize(compiled(*args))))
    base_name, base = results[0]
    for name, value in results[1:]:
        assert_same(value, base, rtol, atol, names=(name, base_name))
    return base

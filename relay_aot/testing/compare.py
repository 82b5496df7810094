"""Comparing results of different executors: one normalized form, compared with tolerances.

``normalize`` (``relay_aot.runtime.inspect.plain``) turns the values of every executor into one
comparable form (numpy arrays, ``("adt", tag, fields)``, ``("ref", value)``, ``("closure",)``);
``assert_same`` compares two normalized values (integers and booleans exactly, floats with
tolerances) and names the path of the first difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime.inspect import plain as normalize

__all__ = ["Mismatch", "assert_same", "normalize", "summary"]


class Mismatch(AssertionError):
    """Two executors disagreed; the message names them, the path and both values."""


def assert_same(
    actual: Any,
    expected: Any,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    path: str = "result",
    names: tuple[str, str] = ("actual", "expected"),
) -> None:
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
        raise Mismatch(f"{path}: {names[0]} is {summary(actual)}, {names[1]} is {summary(expected)}")
    kind = expected[0]
    if kind == "adt":
        if actual[1] != expected[1] or len(actual[2]) != len(expected[2]):
            raise Mismatch(f"{path}: {names[0]} is {summary(actual)}, {names[1]} is {summary(expected)}")
        for i, (a, e) in enumerate(zip(actual[2], expected[2])):
            assert_same(a, e, rtol, atol, f"{path}[{i}]", names)
    elif kind == "ref":
        assert_same(actual[1], expected[1], rtol, atol, f"{path}.value", names)


def summary(value: Any) -> str:
    """A short description of a normalized value, for messages."""
    if isinstance(value, tuple) and value and value[0] == "adt":
        return f"ADT(tag={value[1]}, {len(value[2])} fields)"
    text = repr(value)
    return text if len(text) < 200 else text[:200] + "..."

"""How ``relay-aot run`` prints a result: one line per tensor, tuple/ADT, reference or function.

``examples/cpp_deploy/deploy.cc`` prints the same lines, so the two can be compared as text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..runtime.inspect import plain


def _element_format(dtype: np.dtype):
    """How elements of ``dtype`` print (as deploy.cc prints them); None for unsupported dtypes."""
    if dtype.kind == "b":
        return lambda x: "true" if x else "false"
    if dtype.kind in "iu" and dtype.itemsize in (1, 2, 4, 8):
        return lambda x: str(int(x))
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        spec = ".9g" if dtype.itemsize == 4 else ".17g"  # shortest widths that round-trip
        return lambda x: "nan" if np.isnan(x) else format(float(x), spec)
    return None


def _parts(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(path, plain value)`` of a plain value and of everything inside it, in printing order."""
    yield path, value
    if isinstance(value, np.ndarray):
        return
    if value[0] == "adt":
        for i, field in enumerate(value[2]):
            yield from _parts(field, f"{path}[{i}]")
    elif value[0] == "ref":
        yield from _parts(value[1], f"{path}.value")


def _line(path: str, value: Any) -> str:
    if isinstance(value, np.ndarray):
        element = _element_format(value.dtype) or (lambda x: "?")
        dims = ", ".join(str(d) for d in value.shape)
        return f"{path} = {value.dtype}[{dims}]" + "".join(" " + element(x) for x in value.ravel())
    if value[0] == "adt":
        return f"{path} = adt tag {value[1]}, {len(value[2])} fields"
    return f"{path} = {'ref' if value[0] == 'ref' else 'function'}"


def format_result(value: Any, path: str = "result") -> list[str]:
    """Lines describing a result (of any executor), one per tensor, tuple/ADT, reference or
    function (tuples are ADTs with tag 0, as in ``deploy.cc``)::

        result = adt tag 0, 2 fields
        result[0] = float32[1, 16] 0.0769425705 0.0761797205 ...
        result[1] = ref
        result[1].value = int32[] 3
    """
    return [_line(p, v) for p, v in _parts(plain(value), path)]


def result_tensors(value: Any) -> dict[str, np.ndarray]:
    """The tensors inside a result, by the paths :func:`format_result` prints (``--output``)."""
    return {p: v for p, v in _parts(plain(value), "result") if isinstance(v, np.ndarray)}

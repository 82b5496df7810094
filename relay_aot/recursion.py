"""Room for the Python code that walks Relay recursively.

TVM's Python ``ExprMutator`` and relay_aot's lowering recurse once per nested expression. A
program nested a few thousand deep (a long dataflow chain, inlined into one expression before
fusion) needs more than Python's default 1,000 frames; both walk it inside :func:`deep_recursion`,
and a program deeper still raises ``RecursionError``, which each caller turns into what it means
there (an optimisation skipped, or a clear error).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

#: Python frames allowed while walking a program.
LIMIT = 20000


@contextlib.contextmanager
def deep_recursion() -> Iterator[None]:
    """Raise Python's recursion limit to :data:`LIMIT` (never lower it) for the ``with`` body."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)

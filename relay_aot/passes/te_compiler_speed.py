"""TVM's TE compiler without its per-dimension library-info query, while relay_aot compiles.

``tvm.relay.backend.te_compiler.get_shape`` -- run for every output of every operator that
``AlterOpLayout`` or kernel lowering looks at -- calls ``tvm.support.libinfo()`` once per
dimension, and each call converts TVM's whole build-information map through the FFI (some 13 ms
on the development machine: 11 of the 37 seconds of a SqueezeNet compile). The map cannot change
in a process, so within :func:`cached_libinfo` the TE compiler reads one copy. The original is
put back afterwards, so ``relay.build`` in the same process is measured as TVM ships it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_original = None


@contextlib.contextmanager
def cached_libinfo() -> Iterator[None]:
    """Within the block, ``te_compiler`` reads ``libinfo()`` once (nested and threaded uses share it)."""
    global _depth, _original
    from tvm.relay.backend import te_compiler

    with _lock:
        if _depth == 0:
            _original = te_compiler.libinfo
            info = dict(_original())
            te_compiler.libinfo = lambda: info
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                te_compiler.libinfo = _original

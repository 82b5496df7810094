"""Changes to TVM's kernel building (and layout choice) in force only while relay_aot uses them.

relay_aot replaces a few of TVM's process-wide hooks (an intrinsic's lowering rule, a TOPI
schedule function, x86's convolution layout choice) with dispatchers. A :class:`Gate` installs such a dispatcher the first time
it is entered and tells it whether the calling thread is inside :meth:`Gate.building`; outside,
the dispatcher does what TVM did, so ``relay.build``, TVM's executors and AutoTVM in the same
process are unchanged.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class Gate:
    """``install`` (replacing TVM's hooks with dispatchers) runs once per process, at the first
    :meth:`building`; :meth:`active` is what the dispatchers ask."""

    def __init__(self, install: Callable[[], None]) -> None:
        self._install = install
        self._installed = False
        self._lock = threading.Lock()
        self._state = threading.local()

    def active(self) -> bool:
        """Whether this thread is inside :meth:`building`."""
        return getattr(self._state, "depth", 0) > 0

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """Within the block, on this thread, relay_aot's change is in force."""
        if not self._installed:
            with self._lock:
                if not self._installed:
                    self._install()
                    self._installed = True
        self._state.depth = getattr(self._state, "depth", 0) + 1
        try:
            yield
        finally:
            self._state.depth -= 1

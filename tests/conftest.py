"""Shared fixtures: backends under test, a build cache private to the test run, program files."""

import os
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A cache private to test runs (kept between runs in the checkout, for speed; CI starts empty).
os.environ.setdefault("RELAY_AOT_CACHE_DIR", str(ROOT / ".cache" / "relay_aot-tests"))
os.environ.setdefault("TOPHUB_LOCATION", "NONE")

#: Backends every differential test runs on (RELAY_AOT_TEST_BACKENDS="cpp,python" to choose).
BACKENDS = [b for b in os.environ.get("RELAY_AOT_TEST_BACKENDS", "cpp,python").split(",") if b]


#: Of the differential tests with a C++ and a Python variant, CI (``-m "not slow"``) runs the
#: Python variant of one in PYTHON_SAMPLE (chosen by a hash of its name: the same ones on every
#: run); ``-m slow`` runs the others. Both backends print the same control IR through one table
#: and call the same kernels; the C++ one is what users deploy (CI time).
PYTHON_SAMPLE = 3


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each relay_aot backend under test."""
    return request.param


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks added here
def pytest_collection_modifyitems(items):
    """Tests marked ``early`` (a minute or more each) come first: ``-n 2`` splits the collection
    in halves, one per worker, and the wheel's install test, in the middle, began as the first
    worker's half ended, the other worker then idle for minutes.

    Each test's backend variants run next to each other (pytest puts the ``backend`` parameter
    outermost: every C++ variant of a file, then every Python one). Workers take neighbouring
    tests, so both variants usually share a worker, and what they have in common -- the
    reference run (``oracle.evaluate`` remembers it), the kernel cache's entries -- is computed
    once. Python variants outside the :data:`PYTHON_SAMPLE` are marked ``slow``."""
    first: dict = {}
    backends: dict = {}
    for index, item in enumerate(items):
        first.setdefault(_without_backend(item), index)
        backends.setdefault(_without_backend(item), set()).add(_backend(item))
    for item in items:
        if _backend(item) == "python" and "cpp" in backends[_without_backend(item)]:
            # the name without the backend's: the same on every xdist worker and every run
            stable = item.nodeid.replace("python", "")
            if zlib.crc32(stable.encode()) % PYTHON_SAMPLE:
                item.add_marker(pytest.mark.slow)
    order = {
        id(item): (item.get_closest_marker("early") is None, first[_without_backend(item)], index)
        for index, item in enumerate(items)
    }
    items.sort(key=lambda item: order[id(item)])


def _backend(item) -> str | None:
    spec = getattr(item, "callspec", None)
    return spec.params.get("backend") if spec is not None else None


def _without_backend(item) -> tuple:
    spec = getattr(item, "callspec", None)
    if spec is None or "backend" not in spec.params:
        return (item.nodeid,)
    # the variants share their other parameters' objects (not their indices, which pytest counts
    # across the whole parametrization)
    others = tuple(sorted((name, id(value)) for name, value in spec.params.items() if name != "backend"))
    return (item.path, item.originalname, item.cls.__name__ if item.cls else None, others)

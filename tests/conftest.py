"""Shared fixtures: backends under test, a build cache private to the test run, program files."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A cache private to test runs (kept between runs in the checkout, for speed; CI starts empty).
os.environ.setdefault("RELAY_AOT_CACHE_DIR", str(ROOT / ".cache" / "relay_aot-tests"))
os.environ.setdefault("TOPHUB_LOCATION", "NONE")

#: Backends every differential test runs on (RELAY_AOT_TEST_BACKENDS="cpp,python" to choose).
BACKENDS = [b for b in os.environ.get("RELAY_AOT_TEST_BACKENDS", "cpp,python").split(",") if b]


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each relay_aot backend under test."""
    return request.param

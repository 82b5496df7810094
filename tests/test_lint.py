"""The project's own checks: ruff's linter and formatter, and mypy on ``relay_aot`` -- with the
rule sets of ``pyproject.toml`` (``[tool.ruff]``, ``[tool.mypy]``), so that the README's test
command, which CI runs, keeps the code as they leave it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    """The venv's copy of ``name`` (the test extra installs it), else one on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


@pytest.mark.parametrize(
    "command",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy", "relay_aot"]],
    ids=lambda c: " ".join(c),
)
def test_the_checks_pass(command):
    done = subprocess.run([_tool(command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

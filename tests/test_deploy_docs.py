"""docs/deployment.md runs as written: its ``sh`` and ``python`` blocks, in order, in one
directory, and the ``text`` block after a command block shows (part of) that block's output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_support import ROOT, assert_same_printout

DOC = ROOT / "docs" / "deployment.md"
BLOCK = re.compile(r"^```(sh|python|text)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    """The fenced blocks of the page that the test runs or checks, in order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def check_shown_output(shown: str, actual: str) -> None:
    """Each line shown (a trailing ``...`` elides the rest of it) begins some line of the output."""
    lines = actual.splitlines()
    for line in shown.strip().splitlines():
        prefix = line[:-3] if line.endswith("...") else line
        assert any(a.startswith(prefix) if line.endswith("...") else a == line for a in lines), (
            f"docs/deployment.md shows {line!r}, but the output was:\n{actual}"
        )


def test_documented_commands_run_as_shown(tmp_path):
    pytest.importorskip("onnx")
    bindir = Path(sys.executable).parent
    if shutil.which("relay-aot", path=str(bindir)) is None:
        pytest.skip("the relay-aot script is not installed next to this interpreter")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    assignments: list[str] = []  # shell variables set by earlier sh blocks (TVM_INCLUDES=...)
    outputs = {}
    previous = None
    for index, (kind, body) in enumerate(blocks()):
        if kind == "text":
            assert previous is not None, "a text block before any command block"
            check_shown_output(body, previous)
            continue
        if kind == "sh":
            command = ["bash", "-euo", "pipefail", "-c", "\n".join(assignments + [body])]
            assignments += [line for line in body.splitlines() if re.match(r"[A-Za-z_]\w*=", line)]
        else:
            command = [sys.executable, "-c", body]
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"block {index} failed:\n{body}\n{result.stdout}\n{result.stderr}"
        previous = outputs[index] = result.stdout
    run_output = next(out for i, out in outputs.items() if "relay-aot run lstm.so" in blocks()[i][1])
    cpp_output = next(out for i, out in outputs.items() if "./deploy lstm.so" in blocks()[i][1])
    result_lines = "\n".join(l for l in run_output.splitlines() if l.startswith("result"))
    assert_same_printout(cpp_output, result_lines)

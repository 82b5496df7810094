"""docs/deployment.md runs as written: its ``sh`` and ``python`` blocks, in order, in one
directory, each in a process of its own (the page loads libraries "in another process"), and the
``text`` block right after a command block shows (part of) that block's output (the rules of
``doc_examples.py``, which ``test_docs.py`` applies to the other pages)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_support import ROOT, assert_same_printout
from doc_examples import blocks, check_shown_output

DOC = ROOT / "docs" / "deployment.md"


@pytest.mark.early
def test_documented_commands_run_as_shown(tmp_path):
    pytest.importorskip("onnx")
    bindir = Path(sys.executable).parent
    if shutil.which("relay-aot", path=str(bindir)) is None:
        pytest.skip("the relay-aot script is not installed next to this interpreter")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    assignments: list[str] = []  # shell variables set by earlier sh blocks (TVM_INCLUDES=...)
    page = blocks(DOC)
    outputs = {}
    for index, block in enumerate(page):
        if block.shows is not None:
            check_shown_output(block.body, outputs[block.shows], f"docs/deployment.md:{block.line}")
        if not block.runs:
            continue
        if block.kind == "sh":
            command = ["bash", "-euo", "pipefail", "-c", "\n".join(assignments + [block.body])]
            assignments += [line for line in block.body.splitlines() if re.match(r"[A-Za-z_]\w*=", line)]
        else:
            command = [sys.executable, "-c", block.body]
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, (
            f"block at line {block.line} failed:\n{block.body}\n{result.stdout}\n{result.stderr}"
        )
        outputs[index] = result.stdout
    run_output = next(out for i, out in outputs.items() if "relay-aot run lstm.so" in page[i].body)
    result_lines = "\n".join(line for line in run_output.splitlines() if line.startswith("result"))
    for program in ("./deploy lstm.so", "./deploy_c ", "./packed "):  # C++, the C API, W1b
        printed = next(out for i, out in outputs.items() if program in page[i].body)
        assert_same_printout(printed, result_lines)

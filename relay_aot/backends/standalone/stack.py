"""The stack a standalone package's run needs, measured by its target's GCC.

A package whose kernels are C (the Cortex-M4's ``kernels.c``) is compiled by the user's
toolchain, so its stack depends on that compiler and its flags. When the target's GCC is
installed as the package is written, its functions are compiled once with the target row's
flags and GCC's ``-fstack-usage -fcallgraph-info=su``, which give each function's frame and the
calls it makes; the run's stack is the deepest chain of calls from the run function (the entry's
frame, a kernel's, the micro-kernel it calls). Functions GCC does not compile here (the C
library's ``memcpy`` and ``memset``) count as none; a frame of run-time size, or a cycle of
calls (recursion: the stack budget bounds it), leaves the stack unmeasured.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .targets import StandaloneTarget

_NODE = re.compile(r'node: \{ title: "([^"]+)" label: "[^"]*\\n(\d+) bytes \(([a-z,]+)\)" \}')
_EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


def call_graph(text: str) -> tuple[dict[str, int | None], dict[str, set[str]]]:
    """The frames (bytes; None: of run-time size) and the callees of the functions of GCC's
    ``-fcallgraph-info=su`` output ``text``."""
    frames: dict[str, int | None] = {}
    calls: dict[str, set[str]] = {}
    for title, size, kind in _NODE.findall(text):
        frames[title] = int(size) if kind == "static" else None
    for source, target in _EDGE.findall(text):
        calls.setdefault(source, set()).add(target)
    return frames, calls


def deepest(root: str, frames: Mapping[str, int | None], calls: Mapping[str, set[str]]) -> int | None:
    """The bytes of the deepest chain of calls from ``root`` (functions without a frame in
    ``frames`` count as none); None if a frame on the way has a run-time size or the calls
    from ``root`` can recurse."""
    depth: dict[str, int | None] = {}
    active: set[str] = set()

    def visit(fn: str) -> int | None:
        if fn in depth:
            return depth[fn]
        if fn in active:
            return None  # recursion
        active.add(fn)
        frame = frames.get(fn, 0)
        below = [visit(callee) for callee in sorted(calls.get(fn, ()))]
        active.discard(fn)
        result = None if frame is None or None in below else frame + max((b for b in below if b is not None), default=0)
        depth[fn] = result
        return result

    return visit(root)


def measure(files: Mapping[str, str | bytes | Path], row: StandaloneTarget, run: str, cxxflags, cflags) -> int | None:
    """The stack (bytes) a run of the package of ``files`` (path in the package -> text, bytes
    or a file to copy) needs, its run function ``run``, measured as the module says with the
    package's own flags ``cxxflags`` and ``cflags``; None where it cannot be (no ``kernels.c``,
    the target's GCC not installed, a compile failing, a frame of run-time size, recursion)."""
    gcc, gxx = shutil.which(row.tool("gcc")), shutil.which(row.tool("g++"))
    if "kernels.c" not in files or gcc is None or gxx is None:
        return None
    with tempfile.TemporaryDirectory(prefix="relay_aot_stack_") as tmp:
        root = Path(tmp)
        for name, content in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, path)
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        frames: dict[str, int | None] = {}
        calls: dict[str, set[str]] = {}
        for compiler, flags, source in ((gxx, cxxflags, "entry.cc"), (gcc, cflags, "kernels.c")):
            command = [compiler, *flags, *row.cflags, "-fstack-usage", "-fcallgraph-info=su", "-c", source]
            try:
                done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                return None
            graph = root / (Path(source).stem + ".ci")
            if done.returncode != 0 or not graph.exists():
                return None
            unit_frames, unit_calls = call_graph(graph.read_text())
            frames.update(unit_frames)
            for fn, callees in unit_calls.items():
                calls.setdefault(fn, set()).update(callees)
        return deepest(run, frames, calls)

"""The toolchain's shared objects, built when relay_aot is installed: an empty cache starts with them.

A first compile into an empty cache would otherwise compile its unit without the precompiled
runtime header and with the runtime's source included (``pch.py``): parsing TVM's headers is
most of a small program's compile (about 2.3 of its 3 seconds on two cores). ``pip install``
builds both for the installing toolchain -- ``setup.py`` runs :func:`build` after the
extension, into ``relay_aot/builder/_prebuilt`` -- and a build that finds the cache without them copies them in (``pch.py``, and
``_runtime_object`` in ``__init__.py``) instead of compiling them.

They are used only where they are what this process would build: the same compiler and flags
(with TVM's and the runtime's directories, which differ between pip's build environment and
the installation, written as placeholders), the same runtime sources and TVM version, and
byte for byte the same headers (every file the compiler read for them, listed with its digest
in ``manifest.json``). Anything else -- another ``CXX`` or ``RELAY_AOT_CXXFLAGS``, a TVM
reinstalled with other headers -- builds them as before, in the background.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import tvm

from ..config import Config
from .cache import file_digest
from .toolchain import (
    PCH_HEADER,
    RUNTIME_OBJECT,
    RUNTIME_SOURCE,
    BuildFlags,
    command_line,
    pch_stub,
    runtime_include_dir,
    runtime_sources_digest,
)

#: Where ``pip install`` puts them (inside the package; tests point it elsewhere).
PREBUILT_DIR = Path(__file__).resolve().parent / "_prebuilt"
MANIFEST = "manifest.json"
_FORMAT = 1


def pch() -> Path:
    """The prebuilt precompiled header."""
    return PREBUILT_DIR / "pch" / (PCH_HEADER + ".gch")


def runtime_object() -> Path:
    """The prebuilt runtime object."""
    return PREBUILT_DIR / RUNTIME_OBJECT


def _places() -> list[tuple[str, str]]:
    """(directory, placeholder) pairs that differ between the build environment and the installation."""
    return [(str(Path(tvm.__file__).resolve().parent), "<tvm>"), (str(runtime_include_dir()), "<runtime_cpp>")]


def portable(text: str) -> str:
    """``text`` with TVM's package directory and the runtime's header directory as placeholders."""
    for place, name in _places():
        text = text.replace(place, name)
    return text


def _local(path: str) -> Path:
    """The file a :func:`portable` path names in this installation."""
    for place, name in _places():
        if path.startswith(name):
            return Path(place + path[len(name) :])
    return Path(path)


def _dependencies(dep_file: Path) -> list[str]:
    """The files a compiler's ``-MD`` output lists (the target excluded)."""
    text = dep_file.read_text().replace("\\\n", " ")
    return [p for p in text.split(":", 1)[1].split() if p]


def build(out: Path) -> None:
    """Compile the precompiled header and the runtime object for the default toolchain into
    ``out`` (replacing what is there), with their manifest; the two compiles run in parallel."""
    flags = BuildFlags.default(Config.from_environment()).with_pch(None)
    shutil.rmtree(out, ignore_errors=True)
    stub = pch_stub(out / "pch")
    jobs = {
        "runtime object": flags.compile_command(str(runtime_include_dir() / RUNTIME_SOURCE), str(out / RUNTIME_OBJECT))
        + ["-MD", "-MF", str(out / "runtime.d")],
        "precompiled header": flags.pch_command(str(stub), f"{stub}.gch") + ["-MD", "-MF", str(out / "pch.d")],
    }
    running = {
        what: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for what, cmd in jobs.items()
    }
    for what, proc in running.items():
        output = proc.communicate()[0]
        if proc.returncode != 0:
            raise RuntimeError(f"compiling the {what} failed: {command_line(jobs[what])}\n{output}")
    files = sorted({dep for name in ("runtime.d", "pch.d") for dep in _dependencies(out / name)} - {str(stub)})
    manifest = {
        "format": _FORMAT,
        "identity": portable(flags.compile_identity()),
        "runtime_sources": runtime_sources_digest(),
        "tvm": tvm.__version__,
        "files": {portable(str(Path(f).resolve())): file_digest(Path(f)) for f in files},
    }
    for name in ("runtime.d", "pch.d"):
        (out / name).unlink()
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))


def mismatch(flags: BuildFlags) -> str | None:
    """Why the objects in :data:`PREBUILT_DIR` are not what ``flags`` (without a PCH) would
    build, or None when they are."""
    return _mismatch(flags.with_pch(None), PREBUILT_DIR)


@functools.cache
def _mismatch(flags: BuildFlags, directory: Path) -> str | None:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return f"no prebuilt toolchain objects in {directory}"
    if manifest.get("format") != _FORMAT:
        return "prebuilt by another relay_aot"
    for what, theirs, ours in (
        ("compiler or flags", manifest.get("identity"), portable(flags.compile_identity())),
        ("runtime sources", manifest.get("runtime_sources"), runtime_sources_digest()),
        ("TVM version", manifest.get("tvm"), tvm.__version__),
    ):
        if theirs != ours:
            return f"prebuilt with other {what}"
    for name, digest in manifest.get("files", {}).items():
        path = _local(name)
        if not path.is_file() or file_digest(path) != digest:
            return f"prebuilt from another {path}"
    return None

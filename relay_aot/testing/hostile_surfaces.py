"""Hostile surfaces around the compiler: model names and the places libraries and packages are
written. (The hostile programs and values are ``hostile.py``'s.)

Each check runs in a child process with a time limit, since what it looks for is a crash or a
hang of the process that compiles (a model named ``memcpy`` killed it) or exports (a FIFO in a
package's place blocked it):

* :func:`check_name`: ``relay_aot.compile(mod, name=NAME)`` either refuses the name with
  ``ValueError``, or gives a library that computes the right values, exports no symbol that the
  C library, libm, the C++ and compiler runtimes or TVM's runtime define
  (``names.symbol_collision``), and whose standalone package, linked into a C99 ``main`` on
  this machine, runs and computes the same values;
* :func:`check_path`: ``export_library`` and ``export_standalone`` into a place where one of the
  files they write is a symbolic link (to a file that must stay as it is), a FIFO or a
  directory refuse it with ``ValueError`` naming that path, within the time limit.

:func:`run` draws both from the campaign's seed; ``python -m relay_aot.testing.fuzz --hostile``
runs it once per campaign.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

#: Model names a hostile user tries: the C library's and libm's functions, the compiler
#: runtime's and TVM's symbols, C and C++ keywords, names of generated identifiers and of the
#: program's own symbols, reserved and overlong ones.
NAMES = (
    "memcpy", "malloc", "free", "strlen", "printf", "exit", "abort", "write", "open", "signal", "time", "qsort",
    "exp", "expf", "sinf", "log", "pow", "sqrt", "sincosf", "pthread_create", "dlopen", "environ", "errno",
    "__aeabi_memcpy", "__udivdi3", "_start", "_init", "__tvm_main__", "TVMFuncCall", "TVMArrayAlloc",
    "TVMBackendAllocWorkspace", "TVMAPISetLastError", "main", "int", "for", "return", "class", "namespace",
    "template", "default", "v0", "f0", "k0", "self", "args", "kTypes", "Closure_f0", "entry_f0", "tvmgen_x",
    "x" * 64, "x" * 65, "9lives", "a-b", "", "modèle", "relay_aot", "std",
)

#: Kinds of thing put where an export writes a file.
PATH_KINDS = ("symbolic link", "FIFO", "directory")

#: Seconds a check's child may take (a compile, a package build and a C program's run).
TIMEOUT = 300

_NAME_CHILD = r'''
import json, sys
from pathlib import Path
import numpy as np, tvm
from tvm import relay
import relay_aot
from relay_aot import names
from relay_aot.runtime.module import exported_symbols
from relay_aot.testing import standalone as sa

name, work = sys.argv[1], Path(sys.argv[2])
x = relay.var("x", shape=(3,), dtype="float32")
mod = tvm.IRModule.from_expr(relay.Function([x], relay.abs(x) + relay.const(1.0)))
data = np.array([-1.0, 2.0, -3.5], "float32")
want = np.abs(data) + 1
try:
    compiled = relay_aot.compile(mod, name=name)
except ValueError as err:
    print(json.dumps({"refused": str(err)}))
    sys.exit(0)
problems = []
got = compiled(data).numpy()
if not np.array_equal(got, want):
    problems.append(f"the library computes {got.tolist()}, not {want.tolist()}")
loader = set(names.TVM_LOADER_SYMBOLS)
clashes = sorted(s for s in exported_symbols(compiled.library_path) - loader if names.symbol_collision(s))
if clashes:
    problems.append(f"the library exports symbols of system libraries: {clashes}")
package = relay_aot.export_standalone(mod, work / "package", name=name)
sa.make_package(package)
rc, error, outputs = sa.run_c_main(package, [data], work=work)
if rc != 0 or not np.array_equal(outputs[0], want):
    problems.append(f"the standalone package's C program returned {rc} ({error}): {[o.tolist() for o in outputs]}")
print(json.dumps({"problems": problems}))
'''

_PATH_CHILD = r'''
import json, os, sys
from pathlib import Path
import tvm
from tvm import relay
import relay_aot

export, victim, kind, work = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
x = relay.var("x", shape=(3,), dtype="float32")
mod = tvm.IRModule.from_expr(relay.Function([x], relay.abs(x)))
place = work / "out"
place.mkdir()
sentinel = work / "sentinel.txt"
sentinel.write_text("keep me")
path = place / victim
if kind == "symbolic link":
    path.symlink_to(sentinel)
elif kind == "FIFO":
    os.mkfifo(path)
else:
    path.mkdir()
try:
    if export == "standalone":
        relay_aot.export_standalone(mod, place, name="m")
    else:
        relay_aot.compile(mod, name="m").export_library(place / "m.so", c_header=place / "tvmgen_m.h")
    outcome = {"problems": [f"{export} wrote over {kind} {victim}"]}
except ValueError as err:
    outcome = {"problems": [] if str(path) in str(err) else [f"the error does not name {path}: {err}"]}
if sentinel.read_text() != "keep me":
    outcome["problems"].append(f"{export} changed the file the symbolic link {victim} points to")
print(json.dumps(outcome))
'''

#: Files each export writes, where a hostile thing is put.
_VICTIMS = {"standalone": ("Makefile", "entry.cc", "tvmgen_m.h", "relay_aot_standalone.h"),
            "library": ("m.so", "tvmgen_m.h")}


def _child(code: str, *args: str) -> list[str]:
    """Run ``code`` with ``args`` in a child: the problems it reports, or why it failed."""
    with tempfile.TemporaryDirectory(prefix="relay_aot-hostile-") as work:
        try:
            done = subprocess.run([sys.executable, "-c", code, *args, work], capture_output=True, text=True,
                                  timeout=TIMEOUT, env=dict(os.environ, TOPHUB_LOCATION="NONE"))
        except subprocess.TimeoutExpired:
            return [f"hung: no answer in {TIMEOUT} s"]
    if done.returncode != 0:
        return [f"the child process ended with status {done.returncode}: {done.stderr.strip()[-1500:]}"]
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]).get("problems", [])


def check_name(name: str) -> list[str]:
    """What goes wrong with model name ``name`` (module docstring); empty if nothing."""
    return _child(_NAME_CHILD, name)


def check_path(export: str, victim: str, kind: str) -> list[str]:
    """What goes wrong when ``export`` ("standalone" or "library") meets ``kind`` in the place
    of its file ``victim`` (module docstring); empty if nothing."""
    return _child(_PATH_CHILD, export, victim, kind)


def run(seed, names: int = 6, paths: int = 4) -> list[str]:
    """``names`` model names and ``paths`` export places drawn from ``seed``, checked: the
    findings, each one line."""
    rng = random.Random(f"{seed}:surfaces")
    findings = []
    for name in rng.sample(NAMES, names):
        findings += [f"model name {name!r}: {problem}" for problem in check_name(name)]
    for _ in range(paths):
        export = rng.choice(sorted(_VICTIMS))
        victim, kind = rng.choice(_VICTIMS[export]), rng.choice(PATH_KINDS)
        findings += [f"{export} with a {kind} at {victim}: {problem}" for problem in check_path(export, victim, kind)]
    return findings

"""Hostile surfaces around the compiler: model names and the places libraries and packages are
written, and tuning logs. (The hostile programs and values are ``hostile.py``'s.)

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
  directory refuse it with ``ValueError`` naming that path, within the time limit;
* :func:`check_log`: a compile with a tuning log damaged in one of the ways of :data:`LOG_DAMAGE`
  (cut mid-write, bytes that are not a record, a knob outside its task's space, a cost that is
  no time) either refuses it with ``ValueError`` naming the log and the line, or -- a last line
  cut off mid-write, dropped with a warning -- computes what numpy computes.

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

#: Model names a hostile user tries: the C library's and libm's functions, the compiler
#: runtime's and TVM's symbols, C and C++ keywords, names of generated identifiers and of the
#: program's own symbols, reserved and overlong ones.
NAMES = (
    "memcpy",
    "malloc",
    "free",
    "strlen",
    "printf",
    "exit",
    "abort",
    "write",
    "open",
    "signal",
    "time",
    "qsort",
    "exp",
    "expf",
    "sinf",
    "log",
    "pow",
    "sqrt",
    "sincosf",
    "pthread_create",
    "dlopen",
    "environ",
    "errno",
    "__aeabi_memcpy",
    "__udivdi3",
    "_start",
    "_init",
    "__tvm_main__",
    "TVMFuncCall",
    "TVMArrayAlloc",
    "TVMBackendAllocWorkspace",
    "TVMAPISetLastError",
    "main",
    "int",
    "for",
    "return",
    "class",
    "namespace",
    "template",
    "default",
    "v0",
    "f0",
    "k0",
    "self",
    "args",
    "kTypes",
    "Closure_f0",
    "entry_f0",
    "tvmgen_x",
    "x" * 64,
    "x" * 65,
    "9lives",
    "a-b",
    "",
    "modèle",
    "relay_aot",
    "std",
)

#: Ways a tuning log is damaged, each applied to a log of two good records of a dense product's
#: task (``cut``: the last line cut at a byte offset drawn from the seed, the only damage a
#: compile gets past).
LOG_DAMAGE = (
    "cut",
    "nul tail",
    "not utf-8",
    "not an object",
    "huge split",
    "split not dividing",
    "unknown option",
    "reorder out of range",
    "nan cost",
    "negative cost",
    "string index",
    "missing knob",
)

#: Kinds of thing put where an export writes a file.
PATH_KINDS = ("symbolic link", "FIFO", "directory")

#: Seconds a check's child may take (a compile, a package build and a C program's run).
TIMEOUT = 300

_NAME_CHILD = r"""
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
"""

_PATH_CHILD = r"""
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
"""

_LOG_CHILD = r"""
import json, sys
from pathlib import Path
import numpy as np, tvm
from tvm import autotvm, relay
import relay_aot

damage, offset, work = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
x = relay.var("x", shape=(2, 24), dtype="float32")
w = np.random.default_rng(0).uniform(-1, 1, (40, 24)).astype("float32")
mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, relay.const(w))))
task = next(t for t in relay_aot.tuner.tasks(mod) if t.name.startswith("dense"))
rows = [json.loads(autotvm.record.encode(autotvm.MeasureInput(task.target, task, task.config_space.get(i)),
                                         autotvm.MeasureResult((1e-6 * (i + 1),), 0, 0.0, 1.0))) for i in (0, 1)]
bad = rows[0]
entity = bad["config"]["entity"]
split = next(e for e in entity if e[1] == "sp")
option = next((e for e in entity if e[1] == "ot"), None)
reorder = next((e for e in entity if e[1] == "re"), None)
if damage == "huge split":
    split[2] = [-1] + [1] * (len(split[2]) - 2) + [2 ** 40]
elif damage == "split not dividing":
    split[2] = [-1] + [1] * (len(split[2]) - 2) + [7]
elif damage == "unknown option" and option is not None:
    option[2] = 12345
elif damage == "reorder out of range" and reorder is not None:
    reorder[2] = [99] * len(reorder[2])
elif damage == "nan cost":
    bad["result"][0] = [float("nan")]
elif damage == "negative cost":
    bad["result"][0] = [-1.0]
elif damage == "string index":
    bad["config"]["index"] = "0"
elif damage == "missing knob":
    del entity[0]
text = "".join(json.dumps(r) + "\n" for r in rows)
data = text.encode()
if damage == "cut":
    data = data[:len(json.dumps(rows[0])) + 1 + 1 + offset % (len(json.dumps(rows[1])) - 1)]
elif damage == "nul tail":
    data += bytes(64)
elif damage == "not utf-8":
    data = data.replace(b"{", b"\xff{", 1)
elif damage == "not an object":
    data = b"[1, 2, 3]\n" + data
log = work / "records.json"
log.write_bytes(data)
problems = []
try:
    compiled = relay_aot.compile(mod, tuning_records=log, name="t")
except ValueError as err:
    if damage in ("cut", "nul tail"):
        problems.append(f"refused a log whose last line was cut off: {err}")
    elif f"tuning records {log}, line" not in str(err):
        problems.append(f"the error does not name the log and the line: {err}")
else:
    if damage not in ("cut", "nul tail") and not (damage == "unknown option" and option is None) \
            and not (damage == "reorder out of range" and reorder is None):
        problems.append(f"accepted a log with {damage}")
    data_in = np.random.default_rng(1).uniform(-1, 1, (2, 24)).astype("float32")
    got = compiled(data_in).numpy()
    if not np.allclose(got, data_in @ w.T, rtol=1e-5, atol=1e-5):
        problems.append(f"with {damage}, the library computes {got.ravel()[:4]}..., numpy {(data_in @ w.T).ravel()[:4]}...")
print(json.dumps({"problems": problems}))
"""

#: Files each export writes, where a hostile thing is put.
_VICTIMS = {
    "standalone": ("Makefile", "entry.cc", "tvmgen_m.h", "relay_aot_standalone.h"),
    "library": ("m.so", "tvmgen_m.h"),
}


def _child(code: str, *args: str) -> list[str]:
    """Run ``code`` with ``args`` in a child: the problems it reports, or why it failed."""
    with tempfile.TemporaryDirectory(prefix="relay_aot-hostile-") as work:
        try:
            done = subprocess.run(
                [sys.executable, "-c", code, *args, work],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                env=dict(os.environ, TOPHUB_LOCATION="NONE"),
            )
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


def check_log(damage: str, offset: int = 0) -> list[str]:
    """What goes wrong when a compile reads a tuning log with ``damage`` (:data:`LOG_DAMAGE`;
    ``offset``: where a cut falls) (module docstring); empty if nothing."""
    return _child(_LOG_CHILD, damage, str(offset))


def run(seed, names: int = 6, paths: int = 4, logs: int = 4) -> list[str]:
    """``names`` model names, ``paths`` export places and ``logs`` damaged tuning logs drawn
    from ``seed``, checked: the findings, each one line."""
    rng = random.Random(f"{seed}:surfaces")
    findings = []
    for damage in rng.sample(LOG_DAMAGE, logs):
        findings += [f"tuning log with {damage}: {problem}" for problem in check_log(damage, rng.randrange(10**6))]
    for name in rng.sample(NAMES, names):
        findings += [f"model name {name!r}: {problem}" for problem in check_name(name)]
    for _ in range(paths):
        export = rng.choice(sorted(_VICTIMS))
        victim, kind = rng.choice(_VICTIMS[export]), rng.choice(PATH_KINDS)
        findings += [f"{export} with a {kind} at {victim}: {problem}" for problem in check_path(export, victim, kind)]
    return findings

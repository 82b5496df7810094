"""The build layer: cache hits across processes, misses, concurrent builds, killed builds,
compiler errors, the precompiled header, progress and verbose output.

Compiles are detected through a compiler wrapper (``CXX``) that logs every invocation, not
through timing. Each test gets its own empty cache directory; most disable the precompiled
header (``RELAY_AOT_PCH=0``) and compile at ``-O0``, so as not to spend CI time on building
one PCH per test -- ``test_precompiled_header`` covers it, and every other test file uses the
default flags and the PCH.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot import builder

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32], %n: int32) -> Tensor[(4), float32] {
  if (less(%n, 1)) { %x } else { multiply(add(%x, SALTf), 2f) }
}
"""

#: A stand-in for the C++ compiler: logs each call, optionally stalls in a compile or link
#: (to be killed there), then runs g++. Its path is part of the cache key, its environment not.
WRAPPER = """#!/bin/sh
[ -n "$RELAY_AOT_TEST_CXX_LOG" ] && echo "$$ $*" >> "$RELAY_AOT_TEST_CXX_LOG"
case " $* " in
  *" -c "*|*" -shared "*)
    if [ -n "$RELAY_AOT_TEST_CXX_STALL" ]; then touch "$RELAY_AOT_TEST_CXX_STALL"; sleep 120; fi
    [ -n "$RELAY_AOT_TEST_CXX_DELAY" ] && sleep "$RELAY_AOT_TEST_CXX_DELAY";;
esac
exec g++ "$@"
"""

#: Run in a new process: compile PROGRAM (salted), call it, report how the library was obtained.
CHILD = """
import json, sys
import numpy as np, tvm, relay_aot
from relay_aot import builder
mod = tvm.relay.parse(sys.argv[1])
compiled = relay_aot.compile(mod)
out = compiled(np.arange(4, dtype="float32"), np.int32(1)).numpy().tolist()
print(json.dumps({"cached": compiled.build_result.cached, "builds": builder.stats.builds,
                  "library": str(compiled.library_path), "out": out}))
"""


def program(salt: float) -> str:
    """A small program with a kernel and an ``if``; ``salt`` makes it a different module."""
    return PROGRAM.replace("SALT", repr(float(salt)))


def expected(salt: float) -> list:
    return ((np.arange(4, dtype="float32") + np.float32(salt)) * 2).tolist()


class Env:
    """A private cache directory, the logging compiler wrapper, and helpers to compile."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.cache = tmp_path / "cache"
        self.log = tmp_path / "cxx.log"
        self.cxx = tmp_path / "cxx-wrapper"
        self.cxx.write_text(WRAPPER)
        self.cxx.chmod(0o755)
        self.env = {
            "RELAY_AOT_CACHE_DIR": str(self.cache),
            "RELAY_AOT_TEST_CXX_LOG": str(self.log),
            "CXX": str(self.cxx),
            "RELAY_AOT_PCH": "0",
            # Quicker C++ builds; the default flags are what every other test file uses.
            "RELAY_AOT_CXXFLAGS": "-O0",
            "TOPHUB_LOCATION": "NONE",
        }
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("RELAY_AOT_PROGRESS", raising=False)

    def calls(self, kind: str) -> list[str]:
        """Logged compiler calls: ``compile`` (a unit), ``link`` or ``pch``."""
        marker = {"compile": " -c ", "link": " -shared ", "pch": " c++-header "}[kind]
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if marker in f" {line} "]

    def spawn(self, salt: float, **env) -> subprocess.Popen:
        """Start compiling ``program(salt)`` in a new process (its own session, to kill it)."""
        return subprocess.Popen(
            [sys.executable, "-c", CHILD, program(salt)],
            env={**os.environ, **self.env, **env},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def run(self, salt: float, **env) -> dict:
        """Compile ``program(salt)`` in a new process and return its report."""
        proc = self.spawn(salt, **env)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])

    def libraries(self) -> list[Path]:
        return sorted((self.cache / "lib").glob("*/*/*.so"))


@pytest.fixture
def env(tmp_path, monkeypatch):
    return Env(tmp_path, monkeypatch)


def compile_salted(salt: float, **options):
    compiled = relay_aot.compile(tvm.relay.parse(program(salt)), **options)
    assert compiled(np.arange(4, dtype="float32"), np.int32(1)).numpy().tolist() == expected(salt)
    return compiled


def test_new_process_hits_the_cache_without_compiling(env):
    first = env.run(1.5)
    assert first["out"] == expected(1.5)
    assert not first["cached"] and first["builds"] == 1
    compiles, links = len(env.calls("compile")), len(env.calls("link"))
    assert compiles >= 1 and links == 1

    second = env.run(1.5)
    assert second == {**first, "cached": True, "builds": 0}
    assert (len(env.calls("compile")), len(env.calls("link"))) == (compiles, links)

    # A damaged library in the cache is rebuilt, not trusted.
    Path(first["library"]).write_bytes(b"\x7fELF truncated")
    third = env.run(1.5)
    assert third["out"] == expected(1.5) and not third["cached"]
    assert len(env.calls("link")) == links + 1


def test_the_same_module_twice_in_one_process_hits(env):
    """The generated source must not depend on what the process compiled before (TVM numbers
    the variables that passes invent with a process-wide counter)."""
    first = compile_salted(2.5)
    compile_salted(3.5)
    for path in (env.cache / "index").rglob("*.json"):
        path.unlink()
    again = compile_salted(2.5)
    assert again.build_result.cached and again.build_result.key == first.build_result.key


def test_changing_a_flag_or_the_program_misses(env, monkeypatch):
    base = compile_salted(4.0)
    assert not base.build_result.cached
    assert compile_salted(4.0).build_result.cached

    monkeypatch.setenv("RELAY_AOT_CXXFLAGS", "-O0 -DRELAY_AOT_TEST_FLAG=1")
    flagged = compile_salted(4.0)
    assert not flagged.build_result.cached
    assert flagged.build_result.key != base.build_result.key
    assert "-DRELAY_AOT_TEST_FLAG=1" in env.calls("compile")[-1]
    monkeypatch.setenv("RELAY_AOT_CXXFLAGS", env.env["RELAY_AOT_CXXFLAGS"])

    other = compile_salted(4.25)
    assert not other.build_result.cached and other.build_result.key != base.build_result.key
    assert len(env.calls("link")) == 3


def test_four_processes_compiling_at_once_build_once(env):
    # The delay keeps the first build running while the others reach its lock.
    procs = [env.spawn(5.0, RELAY_AOT_TEST_CXX_DELAY="1") for _ in range(4)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["out"] == expected(5.0) for r in reports)
    assert len({r["library"] for r in reports}) == 1
    assert sorted(r["cached"] for r in reports) == [False, True, True, True]
    assert len(env.calls("link")) == 1
    builder.wait_for_background()
    units = [c for c in env.calls("compile") if RUNTIME_OBJECT_COMPILE not in c]
    assert len(units) == len(list(Path(reports[0]["library"]).parent.glob("unit*.cc")))


def test_build_killed_midway_leaves_nothing_finished(env):
    stall = env.cache.parent / "stalled"
    proc = env.spawn(6.0, RELAY_AOT_TEST_CXX_STALL=str(stall))
    try:
        deadline = time.monotonic() + 120
        while not stall.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the build never reached the compiler"
            time.sleep(0.05)
        # Kill only the Python process: ninja and the compiler live on as orphans and must not
        # keep its lock (or anything else) alive.
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        assert env.libraries() == []
        leftovers = list((env.cache / "tmp").iterdir())
        assert leftovers, "the killed build's directory should still be there"
        old = time.time() - 7200
        for path in leftovers:
            os.utime(path, (old, old))

        report = env.run(6.0)
        assert report["out"] == expected(6.0) and not report["cached"]
        assert len(env.libraries()) == 1
        assert not any(path.exists() for path in leftovers), "the dead build was not swept"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the orphans of the killed build
        except ProcessLookupError:
            pass


def test_compiler_errors_surface_with_their_message(env):
    def inject(name: str, text: str) -> str:
        return text + "\nint relay_aot_injected_error = ;\n" if name == "unit0.cc" else text

    with builder.source_hook(inject), pytest.raises(relay_aot.CompileError) as info:
        compile_salted(7.0)
    err = info.value
    assert "relay_aot_injected_error" in err.output and "error" in err.output
    assert err.output in str(err)
    kept = Path(err.source_dir)
    assert kept.parent == env.cache / "failed" and str(kept) in str(err)
    assert "relay_aot_injected_error" in (kept / "unit0.cc").read_text()
    assert (kept / "build.ninja").is_file()
    assert env.libraries() == [] and list((env.cache / "tmp").iterdir()) == []
    # The same program without the injected error builds normally.
    assert not compile_salted(7.0).build_result.cached


@pytest.mark.slow  # CI time; a build reliability check -m slow runs
def test_waiting_for_a_lock_times_out_naming_the_lock_file(env, monkeypatch):
    key = compile_salted(8.0).build_result.key
    relay_aot.clear_cache()
    lock_path = env.cache / "locks" / f"{key}.lock"
    monkeypatch.setenv("RELAY_AOT_LOCK_TIMEOUT", "0.3")
    with builder.Lock(lock_path, 0):
        with pytest.raises(relay_aot.CompileError, match="timed out") as info:
            compile_salted(8.0)
    assert str(lock_path) in str(info.value)
    builder.wait_for_background()  # the runtime object the first build left to compile
    assert list((env.cache / "tmp").iterdir()) == []


def test_cache_directory_is_private(env):
    compiled = compile_salted(9.0)
    assert stat.S_IMODE(env.cache.stat().st_mode) == 0o700
    assert compiled.library_path.is_relative_to(env.cache / "lib")
    env.cache.chmod(0o777)
    try:
        with pytest.raises(relay_aot.CompileError, match="writable by others"):
            compile_salted(9.0)
    finally:
        env.cache.chmod(0o700)


def test_cache_false_builds_outside_the_cache_and_clear_cache_empties_it(env):
    private = compile_salted(10.0, cache=False)
    assert not private.build_result.cached
    assert not private.library_path.is_relative_to(env.cache / "lib")
    assert env.libraries() == []
    assert not compile_salted(10.0).build_result.cached  # cache=False did not fill the cache
    assert compile_salted(10.0).build_result.cached
    relay_aot.clear_cache()
    assert env.libraries() == [] and not (env.cache / "index").exists()
    assert private(np.zeros(4, "float32"), np.int32(0)).numpy().tolist() == [0.0] * 4


def test_progress_on_request_and_quiet_otherwise(env, capsys, monkeypatch):
    compile_salted(11.0)
    assert capsys.readouterr().err == ""  # stderr is not a terminal under pytest

    monkeypatch.setenv("RELAY_AOT_TEST_CXX_DELAY", "0.6")  # longer than the progress delay
    monkeypatch.setenv("RELAY_AOT_PROGRESS", "1")
    compile_salted(11.5)
    err = capsys.readouterr().err
    assert "relay_aot: " in err and "C++ [" in err and err.endswith("\r\033[K")


def test_precompiled_header(env, monkeypatch, capsys):
    monkeypatch.setenv("RELAY_AOT_PCH", "1")
    compiled = compile_salted(13.0)
    assert len(env.calls("pch")) == 1
    builder.wait_for_background()  # the first build does not wait for it
    gch = next((env.cache / "pch").glob("*/relay_aot/runtime.h.gch"))
    header = compiled.source.split("// Compiled with: ", 1)[1].splitlines()[0]
    assert f"-I{gch.parent.parent} -Winvalid-pch -include relay_aot/runtime.h" in header

    compile_salted(13.5, verbose=True)  # uses it: no second PCH build, no complaint from GCC
    err = capsys.readouterr().err
    assert len(env.calls("pch")) == 1 and "[-Winvalid-pch]" not in err
    assert f"{env.cxx} -I{gch.parent.parent} " in err and " -c unit0.cc -o unit0.o" in err  # verbose

    gch.write_bytes(b"not a precompiled header")  # unusable: GCC reads the real header
    compile_salted(14.0)
    assert len(env.calls("pch")) == 1


#: The compiler call that compiles the runtime object (in the background, once per toolchain).
RUNTIME_OBJECT_COMPILE = "relay_aot/runtime.cc -o "


def test_the_runtime_object_is_compiled_once_and_linked_only_when_intact(env, monkeypatch, capsys):
    monkeypatch.setenv("RELAY_AOT_PCH", "1")
    compile_salted(15.0)
    first = env.calls("compile")
    # No runtime object yet: the units include the runtime source, inline. (No PCH either: the
    # entry unit is compiled inside the first function unit, as combined.cc.)
    units = [c for c in first if " -c unit" in c or " -c combined.cc" in c]
    assert any(" -c combined.cc" in c for c in units)
    assert units and all("-DRELAY_AOT_RUNTIME_LINKAGE=inline -include" in c for c in units)
    builder.wait_for_background()
    assert len([c for c in env.calls("compile") if RUNTIME_OBJECT_COMPILE in c]) == 1
    (obj,) = (env.cache / "runtime").rglob("*.o")

    before = len(env.calls("compile"))
    compile_salted(15.5)
    later = env.calls("compile")[before:]
    assert later and not any("runtime.cc" in c for c in later)
    assert " runtime.o " in env.calls("link")[-1]

    obj.write_bytes(b"not an object file")  # damaged: never linked, compiled again
    compile_salted(16.0)
    assert "-include" in env.calls("compile")[-1] and " runtime.o " not in env.calls("link")[-1]
    builder.wait_for_background()
    assert len([c for c in env.calls("compile") if RUNTIME_OBJECT_COMPILE in c]) == 2

    # The PCH stays valid for units that include the runtime source.
    shutil.rmtree(env.cache / "runtime")
    compile_salted(16.5, verbose=True)
    assert "[-Winvalid-pch]" not in capsys.readouterr().err
    builder.wait_for_background()


def test_an_empty_cache_starts_with_the_objects_pip_install_built(env, monkeypatch, tmp_path, capsys):
    from relay_aot.builder import prebuilt

    monkeypatch.setenv("RELAY_AOT_PCH", "1")
    made = tmp_path / "prebuilt"
    prebuilt.build(made)  # what setup.py does, here for the test's toolchain (its -O0 and wrapper)
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", made)
    before = len(env.calls("compile"))
    assert len(env.calls("pch")) == 1 and before == 1  # the two compiles of prebuilt.build

    capsys.readouterr()
    compile_salted(17.0, verbose=True)
    assert len(env.calls("pch")) == 1  # no PCH build: the units use the copy, and GCC takes it
    gch = next((env.cache / "pch").glob("*/relay_aot/runtime.h.gch"))
    units = env.calls("compile")[before:]
    assert [" -c entry.cc " in u for u in units].count(True) == 1 and len(units) == 2  # and unit0.cc
    assert all(f"-I{gch.parent.parent} -Winvalid-pch" in u for u in units)
    assert "[-Winvalid-pch]" not in capsys.readouterr().err
    assert not any("RELAY_AOT_RUNTIME_LINKAGE" in u for u in units) and " runtime.o " in env.calls("link")[-1]
    builder.wait_for_background()
    assert len(env.calls("compile")) == before + 2  # nothing left to compile in the background

    # Headers that differ from the ones they were built from: not used, built as before.
    manifest = json.loads((made / prebuilt.MANIFEST).read_text())
    header = next(name for name in manifest["files"] if name.endswith("relay_aot/tensor.h"))
    manifest["files"][header] = "0" * 64
    other = tmp_path / "other"
    shutil.copytree(made, other)
    (other / prebuilt.MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", other)
    assert "tensor.h" in prebuilt.mismatch(builder.BuildFlags.default())
    monkeypatch.setenv("RELAY_AOT_CACHE_DIR", str(tmp_path / "cache2"))
    compile_salted(17.5)
    unit = [c for c in env.calls("compile") if " -c combined.cc " in c][-1]  # no PCH yet: one unit
    assert len(env.calls("pch")) == 2 and "RELAY_AOT_RUNTIME_LINKAGE=inline" in unit
    builder.wait_for_background()

    # RELAY_AOT_PREBUILT=0: built as before, even when they match.
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", made)
    monkeypatch.setenv("RELAY_AOT_CACHE_DIR", str(tmp_path / "cache3"))
    monkeypatch.setenv("RELAY_AOT_PREBUILT", "0")
    compile_salted(18.0)
    assert len(env.calls("pch")) == 3
    builder.wait_for_background()


def test_pip_install_prebuilt_the_objects_of_the_default_toolchain():
    from relay_aot.builder import prebuilt
    from relay_aot.config import Config

    # setup.py's step: an installation without them starts every cache with a slow compile.
    assert prebuilt.mismatch(builder.BuildFlags.default(Config.from_environment({}))) is None


def test_an_interrupted_build_publishes_nothing(env, monkeypatch):
    from relay_aot import kernels

    def interrupted(self, path, progress=None):
        raise KeyboardInterrupt  # while the C++ units compile in the background

    monkeypatch.setattr(kernels.KernelTable, "write_object", interrupted)
    with pytest.raises(KeyboardInterrupt):
        compile_salted(15.0)
    assert env.libraries() == [] and not (env.cache / "failed").exists()
    assert list((env.cache / "tmp").iterdir()) == []


def _damage(library: Path, how: str) -> None:
    data = bytearray(library.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    else:  # a page of zeros in the middle (a write that never reached the disk)
        middle = len(data) // 2 // 4096 * 4096
        data[middle : middle + 4096] = bytes(4096)
    library.write_bytes(bytes(data))


# a truncated library is also test_new_process_hits_the_cache_without_compiling's (-m slow: CI time)
@pytest.mark.parametrize("how", [pytest.param("truncated", marks=pytest.mark.slow), "zeroed page"])
def test_a_damaged_library_is_evicted_and_rebuilt(env, how):
    first = env.run(16.0)
    library = Path(first["library"])
    _damage(library, how)
    # A new process would crash in dlopen (SIGBUS) or at the first call if it loaded it.
    again = env.run(16.0)
    assert again["out"] == expected(16.0)
    assert not again["cached"] and again["builds"] == 1
    assert env.run(16.0)["cached"]  # the rebuilt entry is trusted again


def test_an_index_record_cannot_name_a_library_outside_the_cache(env, tmp_path):
    first = env.run(17.0)
    marker = tmp_path / "loaded"
    planted = tmp_path / "planted.so"
    source = tmp_path / "planted.c"
    source.write_text(
        f'#include <stdio.h>\n__attribute__((constructor)) static void f(void) {{ fopen("{marker}", "w"); }}\n'
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(planted), str(source)], check=True)
    records = list((env.cache / "index").glob("*/*.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert record["library"] == str(Path(first["library"]).relative_to(env.cache))
    for library in (str(planted), "lib/../../planted.so", "../planted.so"):
        records[0].write_text(json.dumps(dict(record, library=library)))
        again = env.run(17.0)
        assert again["out"] == expected(17.0)
        assert not marker.exists(), f"an index record naming {library} was loaded"


@pytest.mark.slow  # CI time; a build reliability check -m slow runs
def test_every_cache_directory_is_private_whatever_the_umask(env):
    child = "import os; os.umask(0)\n" + CHILD
    proc = subprocess.run(
        [sys.executable, "-c", child, program(18.0)],
        env={**os.environ, **env.env, "RELAY_AOT_PCH": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    directories = [env.cache] + [p for p in env.cache.rglob("*") if p.is_dir()]
    assert {"index", "lib", "pch", "tmp", "locks"} <= {p.name for p in directories}
    modes = {str(p.relative_to(env.cache)): oct(stat.S_IMODE(p.stat().st_mode)) for p in directories}
    assert set(modes.values()) == {"0o700"}, modes


def test_a_cache_subdirectory_writable_by_others_is_refused(env):
    compile_salted(19.0)
    (env.cache / "index").chmod(0o777)
    try:
        with pytest.raises(relay_aot.CompileError, match=r"index is writable by others.*RELAY_AOT_CACHE_DIR"):
            compile_salted(19.5)
    finally:
        (env.cache / "index").chmod(0o700)


def test_a_library_that_needs_a_missing_symbol_fails_to_load_instead_of_crashing_later(tmp_path):
    """Libraries link with -z now (toolchain.BuildFlags): a symbol nothing defines makes the
    load fail with the loader's message. Bound lazily, the load succeeded and the first call
    reaching the symbol ended the process."""
    from relay_aot.builder.toolchain import BuildFlags

    flags = BuildFlags.default()
    (tmp_path / "lib.cc").write_text(
        textwrap.dedent("""\
        extern "C" void relay_aot_no_such_function();
        extern "C" __attribute__((visibility("default"))) void entry() { relay_aot_no_such_function(); }
        """)
    )
    (tmp_path / "exports.map").write_text("{ global: entry; local: *; };\n")
    subprocess.run([flags.cxx, *flags.cxxflags, "lib.cc", "-o", "lib.so", *flags.ldflags], cwd=tmp_path, check=True)
    with pytest.raises(tvm.TVMError, match="undefined symbol: relay_aot_no_such_function"):
        tvm.runtime.load_module(str(tmp_path / "lib.so"))


def _constant_program(values: list, nested: bool) -> tvm.IRModule:
    """``if n < 1 { C } else { x + x }`` with the constant ``C`` (in the library's constant
    table: it is a result); ``nested``: the same with ``@main``'s body moved into ``@body``,
    which ``@main`` calls -- other control code, the same interface, constants and types."""
    x = relay.var("x", shape=(4,), dtype="float32")
    n = relay.var("n", shape=(), dtype="int32")
    body = relay.If(relay.less(n, relay.const(1, "int32")), relay.const(np.array(values, "float32")), relay.add(x, x))
    mod = tvm.IRModule.from_expr(relay.Function([x, n], body))
    if nested:
        inner = relay.GlobalVar("body")
        mod[inner] = relay.Function([x, n], body, relay.TensorType((4,), "float32"))
        x2, n2 = relay.var("x", shape=(4,), dtype="float32"), relay.var("n", shape=(), dtype="int32")
        mod["main"] = relay.Function([x2, n2], relay.Call(inner, [x2, n2]))
    return relay.transform.InferType()(mod)


def test_a_unit_compiled_before_from_the_same_inputs_is_not_compiled_again(env, monkeypatch):
    """entry.cc (tables, entry points) does not include program.h: a module whose functions
    change but whose interface, constants and types do not has the same entry.cc, and its
    object comes from the cache. Its inputs are part of the key: new constant values (the
    same entry.cc text, another constants.bin) compile it again."""
    monkeypatch.setenv("RELAY_AOT_PCH", "1")
    compile_salted(20.0)  # builds the PCH beside it, for the compiles below
    builder.wait_for_background()
    x = np.arange(4, dtype="float32")

    def check(values, nested):
        before, hits = len(env.calls("compile")), builder.stats.unit_hits
        compiled = relay_aot.compile(_constant_program(values, nested))
        assert compiled(x, np.int32(0)).numpy().tolist() == values
        assert compiled(x, np.int32(5)).numpy().tolist() == (x + x).tolist()
        units = [c.split(" -c ")[1].split()[0] for c in env.calls("compile")[before:]]
        return sorted(units), builder.stats.unit_hits - hits

    assert check([1.0, 2.0, 3.0, 4.0], nested=False) == (["entry.cc", "unit0.cc"], 0)
    assert check([1.0, 2.0, 3.0, 4.0], nested=True) == (["unit0.cc"], 1)
    assert check([5.0, 6.0, 7.0, 8.0], nested=True) == (["entry.cc"], 1)  # unit0.cc: as the one before
    # A damaged object in the cache is compiled again, never linked.
    for obj in (env.cache / "units").rglob("*.o"):
        obj.write_bytes(b"not an object file")
    assert check([5.0, 6.0, 7.0, 8.0], nested=False) == (["entry.cc", "unit0.cc"], 0)
    relay_aot.clear_cache()
    assert not (env.cache / "units").exists()


def test_unit_inputs_follow_includes_and_incbin():
    files = {
        "a.cc": '#include "h.h"\n#include <vector>\nasm(".incbin \\"c.bin\\"");',
        "h.h": '#include "g.h"',
        "g.h": "",
        "b.cc": "int x;",
    }
    assert builder.unit_inputs(files, {"c.bin": b""}, ["a.cc", "b.cc"]) == {"a.cc": ["c.bin", "g.h", "h.h"], "b.cc": []}


def test_link_flags_key_the_library_not_the_objects():
    """Objects (the PCH, the runtime object, units) depend on compile flags only: a build that
    links differently (``ld.gold`` on ``PATH`` or not) shares them, and has its own library."""
    import dataclasses

    from relay_aot.builder.toolchain import runtime_object_identity
    from relay_aot.config import Config

    config = Config.from_environment()
    flags = builder.BuildFlags.default(config)
    relinked = dataclasses.replace(flags, ldflags=flags.ldflags + ("-Wl,-O1",))
    assert relinked.identity() != flags.identity()
    assert relinked.compile_identity() == flags.compile_identity()
    assert builder.pch_directory(relinked, config) == builder.pch_directory(flags, config)
    assert runtime_object_identity(relinked) == runtime_object_identity(flags)


@pytest.mark.parametrize("threads", [None, "1", "2"], ids=["unset", "1", "2"])
def test_parallel_loops_run_under_every_thread_setting(threads):
    """A kernel's parallel loop goes through relay_aot's launch (the library's
    __TVMBackendParallelLaunch slot): on the calling thread where one thread is to run it
    (TVM_NUM_THREADS=1, or unset where TVM counts one processor), TVM's pool otherwise."""
    from isolated import run_isolated

    code = """
        import json
        import numpy as np, tvm, relay_aot
        from tvm import relay
        x = relay.var("x", shape=(256, 256))
        mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(x) * relay.const(2.0)))
        compiled = relay_aot.compile(mod, name="parallel")
        assert "relay_aot::parallel_launch" in compiled.source
        v = np.random.default_rng(0).standard_normal((256, 256)).astype("float32")
        print(json.dumps(all(np.array_equal(compiled(v).numpy(), np.maximum(v, 0) * 2) for _ in range(20))))
    """
    assert run_isolated(code, env={"TVM_NUM_THREADS": threads, "OMP_NUM_THREADS": None}) is True

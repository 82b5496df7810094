"""relay_aot installed the ordinary way: a wheel in a fresh virtual environment, not editable.

The rest of the suite imports relay_aot from the checkout (the README's ``pip install -e``), so
it cannot notice a wheel that lacks a subpackage, a runtime header or the prebuilt toolchain
objects (issue 29). This test builds the sdist from the checkout and the wheel from the sdist,
as ``python -m build`` does (so both are checked, and the build starts from a clean tree: an
in-tree ``pip wheel .`` would also pack whatever an earlier build left in ``build/``), in pip's
isolated build environment; checks that the wheel holds every file of the checkout's
``relay_aot/`` and ``runtime_cpp/`` and the prebuilt objects; installs it into a fresh virtual
environment, first without extras (the dependencies it declares must suffice) and then with the
``onnx`` and ``test`` extras; and runs :data:`SMOKE` there, from a directory outside the
checkout. One test, because the build and the environment are what it costs: about
three minutes, most of it pip installing TVM and LLVM into the two environments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import relay_aot
from relay_aot.builder import prebuilt

ROOT = Path(__file__).resolve().parent.parent

#: The compiled extension module (setup.py), the one module without a source file in the checkout.
EXTENSION = "relay_aot.runtime._fastcall"

#: Run by the fresh environment's Python (``python -I smoke.py PHASE``) in an empty directory,
#: with an empty build cache. ``core`` needs only the wheel's own dependencies; ``extras`` runs
#: after the ``onnx`` and ``test`` extras are installed and prints the module names it imported.
SMOKE = r'''
import contextlib
import importlib
import importlib.metadata
import io
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import tvm

import relay_aot

FIB = """#[version = "0.0.5"]
def @fib(%n: int32) -> int32 {
  if (less(%n, 2)) { %n } else { add(@fib(subtract(%n, 1)), @fib(subtract(%n, 2))) }
}
def @main(%n: int32) -> int32 { @fib(%n) }
"""

# Recursion inside, tensors at the boundary: a library with the plain C API.
LOOP = """#[version = "0.0.5"]
def @loop(%x: Tensor[(4), float32], %n: int32) -> Tensor[(4), float32] {
  if (equal(%n, 0)) { %x } else { @loop(add(%x, 1f), subtract(%n, 1)) }
}
def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] { @loop(%x, 10) }
"""

MAIN_CC = r"""#include <cstdio>
#include "tvmgen_smoke.h"

int main() {
  alignas(64) float x[4] = {0, 1, 2, 3};
  alignas(64) float y[4];
  tvmgen_smoke_inputs inputs = {x};
  tvmgen_smoke_outputs outputs = {y};
  if (tvmgen_smoke_run(&inputs, &outputs) != 0) {
    std::fprintf(stderr, "%s\n", tvmgen_smoke_last_error());
    return 1;
  }
  for (float v : y) std::printf("%g\n", v);
  return 0;
}
"""

WORK = Path.cwd()


def run(*command):
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, cwd=WORK, timeout=600)
    assert proc.returncode == 0, f"{command}: exit status {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def core():
    assert Path(relay_aot.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), relay_aot.__file__
    version = importlib.metadata.version("relay_aot")
    assert relay_aot.__version__ == version, (relay_aot.__version__, version)
    for command in (["relay-aot"], [sys.executable, "-m", "relay_aot.cli"]):
        assert run(*command, "--version").strip() == f"relay-aot {version}"

    # The first compile into the empty cache takes the precompiled header and the runtime
    # object from the wheel: nothing compiles them, now or in the background.
    from relay_aot import builder
    from relay_aot.builder import pch, prebuilt
    from relay_aot.config import Config

    config = Config.from_environment()
    flags = builder.BuildFlags.default(config)
    assert not config.cache_dir.exists() or not any(config.cache_dir.iterdir()), config.cache_dir
    assert prebuilt.mismatch(flags) is None, prebuilt.mismatch(flags)
    compiles = []
    launch = pch.BackgroundCompile.launch
    pch.BackgroundCompile.launch = lambda self: (compiles.append(self.what), launch(self))
    log = io.StringIO()
    with contextlib.redirect_stderr(log):  # the build's commands and the compiler's warnings
        fib = relay_aot.compile(tvm.relay.parse(FIB), verbose=True)
        builder.wait_for_background()
    assert int(fib(np.int32(20)).numpy()) == 6765
    assert compiles == [] and builder.stats.runtime_builds == 0, (compiles, builder.stats)
    if pch.pch_enabled(flags, config):  # GCC: the units used the copied PCH, and GCC took it
        assert f"-I{config.cache_dir / 'pch'}/" in log.getvalue() and "[-Winvalid-pch]" not in log.getvalue(), log.getvalue()

    # The command line, and the library it writes.
    (WORK / "prog.relay").write_text(FIB)
    run("relay-aot", "compile", "prog.relay", "-o", "prog.so")
    assert int(relay_aot.load(WORK / "prog.so")(np.int32(20)).numpy()) == 6765

    # A C++ program that links an exported library and libtvm_runtime.so, nothing else.
    relay_aot.compile(tvm.relay.parse(LOOP), name="smoke").export_library(WORK / "smoke.so", c_header=WORK / "tvmgen_smoke.h")
    (WORK / "main.cc").write_text(MAIN_CC)
    tvm_lib = Path(tvm._ffi.libinfo.find_lib_path()[0]).parent
    run(os.environ.get("CXX", "g++"), "-std=c++17", "-O2", "main.cc", "-o", "main", "-I.", WORK / "smoke.so",
        f"-L{tvm_lib}", "-Wl,--no-as-needed", "-ltvm_runtime", f"-Wl,-rpath,{tvm_lib}")
    assert run(WORK / "main").split() == ["10", "11", "12", "13"]


def extras():
    def failed(name):
        raise  # noqa: PLE0704 - walk_packages calls this while the package's ImportError is raised

    names = ["relay_aot"]
    for module in pkgutil.walk_packages(relay_aot.__path__, "relay_aot.", onerror=failed):
        names.append(module.name)
        if not module.name.endswith(".__main__"):  # those run a program (relay_aot.cli's: above)
            importlib.import_module(module.name)

    # An ONNX model with a Loop (h <- tanh(h W + b), every state a scan output), through the
    # command line.
    import onnx
    import onnx.numpy_helper
    from relay_aot.testing import onnx_models

    model, make_inputs = onnx_models.loop_rnn()
    onnx.save(model, str(WORK / "loop.onnx"))
    run("relay-aot", "compile", "loop.onnx", "-o", "loop.so")
    inputs = make_inputs(5)
    library = relay_aot.load(WORK / "loop.so")
    h_final, hs = library(*[inputs[param.name] for param in library.signature.params])
    body = onnx.helper.get_attribute_value(model.graph.node[0].attribute[0])
    weights = {tensor.name: onnx.numpy_helper.to_array(tensor) for tensor in body.initializer}
    states = [inputs["h0"]]
    for _ in range(5):
        states.append(np.tanh(states[-1] @ weights["W"] + weights["b"]))
    np.testing.assert_allclose(h_final.numpy(), states[-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hs.numpy(), np.stack(states[1:]), rtol=1e-5, atol=1e-6)
    print(json.dumps(names))


{"core": core, "extras": extras}[sys.argv[1]]()
'''


def _run(command: list, env: dict, cwd: Path, timeout: float = 1200) -> str:
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    assert proc.returncode == 0, (
        f"{command}: exit status {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    )
    return proc.stdout


def _checkout_files() -> set[str]:
    """Where each file of the checkout's ``relay_aot/`` and ``runtime_cpp/`` belongs in the
    wheel: tracked ones, and new ones git does not ignore (a module not added yet)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "relay_aot", "runtime_cpp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    files = {name for name in listed.split("\0") if name and (ROOT / name).is_file()}
    return {f"relay_aot/{name}" if name.startswith("runtime_cpp/") else name for name in files}


def _module_name(path: str) -> str:
    """``relay_aot/a/b.py`` -> ``relay_aot.a.b``; ``relay_aot/a/__init__.py`` -> ``relay_aot.a``."""
    parts = path[: -len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.early
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="lists the checkout's files with git")
def test_the_wheel_installs_and_works_outside_the_checkout(tmp_path):
    assert not tmp_path.resolve().is_relative_to(ROOT)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("RELAY_AOT_")
    }
    env["TOPHUB_LOCATION"] = "NONE"
    # pip byte-compiles every module it installs (TVM's thousands, three times: the build
    # environment and the two installs below); imports compile what they use.
    env["PIP_COMPILE"] = "0"  # pip --no-compile; PIP_NO_COMPILE=1 would mean the opposite

    # The sdist, built in this environment (setuptools and pybind11 come with the test extra),
    # and the wheel from it in pip's isolated build environment, which also prebuilds.
    dist = tmp_path / "dist"
    code = "import sys, setuptools.build_meta as backend; print(backend.build_sdist(sys.argv[1]))"
    sdist = dist / _run([sys.executable, "-c", code, dist], env, ROOT).strip().splitlines()[-1]
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", dist, sdist], env, tmp_path)
    (wheel,) = dist.glob("relay_aot-*.whl")

    # Every file of the checkout, the extension and the prebuilt objects; nothing else.
    with zipfile.ZipFile(wheel) as archive:
        packed = {name for name in archive.namelist() if not name.split("/")[0].endswith(".dist-info")}
    expected = _checkout_files()
    package = Path(relay_aot.__file__).resolve().parent
    extension = EXTENSION.replace(".", "/") + sysconfig.get_config_var("EXT_SUFFIX")
    built = {extension} | {
        path.relative_to(package.parent).as_posix()
        for path in (prebuilt.pch(), prebuilt.runtime_object(), prebuilt.PREBUILT_DIR / prebuilt.MANIFEST)
    }
    assert not (expected | built) - packed, f"missing from the wheel: {sorted((expected | built) - packed)}"
    prebuilt_dir = prebuilt.PREBUILT_DIR.relative_to(package.parent).as_posix() + "/"
    unexpected = {name for name in packed - expected - built if not name.startswith(prebuilt_dir)}
    assert not unexpected, f"in the wheel but not in the checkout: {sorted(unexpected)}"

    # A fresh environment with the wheel and what it declares; then the extras.
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "venv", venv], env, tmp_path)
    _run([python, "-m", "pip", "install", wheel], env, tmp_path)
    _run([python, "-m", "pip", "check"], env, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "smoke.py").write_text(SMOKE)
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        RELAY_AOT_CACHE_DIR=str(tmp_path / "cache"),
    )
    _run([python, "-I", tmp_path / "smoke.py", "core"], env, work)

    _run([python, "-m", "pip", "install", f"{wheel}[onnx,test]"], env, tmp_path)
    imported = json.loads(_run([python, "-I", tmp_path / "smoke.py", "extras"], env, work).splitlines()[-1])
    modules = {_module_name(name) for name in expected if name.endswith(".py")} | {EXTENSION}
    assert set(imported) == modules, (
        f"not installed: {sorted(modules - set(imported))}; not in the checkout: {sorted(set(imported) - modules)}"
    )

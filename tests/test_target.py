"""The target (issue 30): this machine's CPU by default, named explicitly, in every key; and a
library compiled for a CPU this machine is not is refused by name on every load and call path,
the process going on.

The foreign library is compiled for ``llvm -mcpu=sapphirerapids`` (AVX-512 with FP16 and BF16,
AMX) or, on a machine that has those, ``diamondrapids`` (AVX10.2, APX's extra registers and
three-operand forms); the features this machine lacks are computed with LLVM, and every path must
name exactly those. Each path runs in a fresh process that must exit normally: a kernel reached without the
check dies of SIGILL, which :func:`test_without_the_check_the_library_dies_of_an_illegal_instruction`
shows, so that the others cannot pass for a library that would have run anyway.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tvm
from deploy_support import build_deploy, save_npy, tvm_dir
from isolated import ROOT, run_isolated
from tvm import relay
from tvm.target import codegen

import relay_aot
from relay_aot import builder, cpu, names
from relay_aot.compiler import generate_source
from relay_aot.config import Config
from relay_aot.errors import CpuFeatureError, UnsupportedError
from relay_aot.ir.signature import Signature
from relay_aot.request import Request, target_of
from relay_aot.runtime import fastcall

MODEL = "foreign"
# Candidates for the foreign CPU, in order. One counts only if this machine lacks an instruction
# set a float32 dense kernel's code uses (wider vectors, FMA, APX's registers): a Zen 5 lacks
# only Sapphire Rapids' AMX and FP16, which such a kernel never contains, and a Xeon that is
# itself a Sapphire Rapids lacks nothing of it that code uses.
FOREIGN_CPUS = ("sapphirerapids", "diamondrapids")
CODE_FEATURES = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "egpr", "ndd"}


def _lacked(target: str) -> list[str]:
    detected = cpu.host_features()
    return [f for f in cpu.requirement(target_of(target)).features if not detected[f]]


def _foreign() -> str:
    for name in FOREIGN_CPUS:
        if CODE_FEATURES & set(_lacked(f"llvm -mcpu={name}")):
            return f"llvm -mcpu={name}"
    return f"llvm -mcpu={FOREIGN_CPUS[0]}"


FOREIGN = _foreign()


W = np.linspace(-1, 1, 64 * 32, dtype="float32").reshape(64, 32)


def _dense() -> tvm.IRModule:
    """relu(x W^T): TVM vectorizes the product with the widest registers the target has."""
    x = relay.var("x", shape=(4, 32), dtype="float32")
    return tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.dense(x, relay.const(W)))))


def _x() -> np.ndarray:
    return np.linspace(-2, 2, 4 * 32, dtype="float32").reshape(4, 32)


def _missing() -> list[str]:
    """What LLVM says this machine lacks of the foreign target's features (sorted)."""
    return _lacked(FOREIGN)


def _message() -> str:
    return "use CPU features this machine does not have: " + ", ".join(_missing()) + "."


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """The model compiled for the foreign CPU (cached), exported with its C header and an input."""
    if not CODE_FEATURES & set(_missing()):
        pytest.skip(f"this CPU has every instruction set of {FOREIGN}")
    directory = tmp_path_factory.mktemp("foreign")
    compiled = relay_aot.compile(_dense(), target=FOREIGN, name=MODEL)
    library = compiled.export_library(directory / f"{MODEL}.so", c_header=directory / f"tvmgen_{MODEL}.h")
    save_npy([_x()], directory)
    return directory, library


# -- the default target ------------------------------------------------------------------------


def test_the_default_target_is_this_cpu_named_explicitly(monkeypatch):
    monkeypatch.delenv("RELAY_AOT_TARGET", raising=False)
    target = Request.make(_dense()).target
    assert str(target) == str(target_of(cpu.host_target())) == str(target_of("host"))
    assert target.attrs["mcpu"] == codegen.llvm_get_system_cpu()
    # It claims exactly the features this CPU has (of those LLVM can detect).
    detected = cpu.host_features()
    assert detected, "LLVM detects no features on this machine"
    has = {name for name, value in detected.items() if value}
    assert set(codegen.llvm_get_cpu_features(target)) & set(detected) == has
    assert cpu.requirement(target).features == tuple(sorted(f for f in has if cpu.used_by_code(f)))
    # A setting chooses another default; an argument wins over it.
    monkeypatch.setenv("RELAY_AOT_TARGET", "llvm")
    assert str(Request.make(_dense()).target) == str(tvm.target.Target("llvm"))
    assert str(Request.make(_dense(), target="host").target) == str(target)
    with pytest.raises(UnsupportedError, match="relay_aot targets the CPU"):
        Request.make(_dense(), target="cuda")


def test_the_library_records_its_target(monkeypatch, tmp_path):
    monkeypatch.delenv("RELAY_AOT_TARGET", raising=False)
    host = cpu.requirement(target_of("host"))
    compiled = relay_aot.compile(_dense())
    np.testing.assert_allclose(compiled(_x()).numpy(), np.maximum(_x() @ W.T, 0), rtol=1e-5, atol=1e-5)
    assert compiled.signature.cpu == host
    assert relay_aot.load(compiled.export_library(tmp_path / "host.so")).signature.cpu == host
    source = generate_source(_dense())
    assert (
        f'const CpuRequirement {names.CPU_REQUIREMENT}{{"{host.target}", kCpuFeatures, {len(host.features)}, {{0}}}};'
        in source
    )
    # The portable build needs the x86-64 baseline only.
    assert relay_aot.compile(_dense(), target="llvm").signature.cpu.features == ("64bit", "cx8", "sse", "sse2")


def test_the_runtime_detects_what_llvm_detects():
    """The libraries' check (cpu.h) and LLVM agree on every feature, so a library compiled for
    this machine runs here and one missing a feature is refused."""
    assert fastcall.cpu_features() == cpu.host_features()


def test_the_target_is_in_every_key(monkeypatch):
    monkeypatch.delenv("RELAY_AOT_TARGET", raising=False)
    config = Config.from_environment()
    flags = builder.BuildFlags.default(config)
    keys = set()
    for target in (None, "llvm", "llvm -mcpu=skylake", "llvm -mcpu=skylake -mattr=-avx2"):
        request = Request.make(_dense(), target=target)
        keys.add(builder.index_key(request.fingerprint() + ["cpp"], flags, request.config))
    assert len(keys) == 4


def test_metadata_without_a_cpu_is_a_library_from_before():
    signature = Signature.from_json(
        json.dumps({"format": 1, "model": "m", "params": [], "ret": ["tensor", [], "int32"], "adts": []})
    )
    assert signature.cpu is None
    fastcall.check_cpu(None, "old.so")  # nothing recorded: nothing to check
    recorded = Signature("m", [], signature.ret, [], cpu.CpuRequirement("llvm", ("sse2",)))
    assert Signature.from_json(recorded.to_json()).cpu == recorded.cpu


# -- a library for another CPU -----------------------------------------------------------------


def _python(code: str, directory) -> object:
    """Run ``code`` in a fresh process that must exit normally (``x``: the input); its last
    line's JSON. This module is importable there."""
    prelude = f"import json, numpy as np, tvm, relay_aot\nx = np.load({str(directory / 'arg0.npy')!r})\n"
    return run_isolated(prelude + code, env={"PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])})


def test_compile_fresh_or_cached_refuses_to_run(foreign):
    directory, _ = foreign
    out = _python(
        f"""
from test_target import _dense, FOREIGN
seen = []
# The second compile may find the library the fixture cached, or build it (another test process
# may have emptied the shared cache since); the third is a cache hit either way.
for cache in (False, True, True):
    compiled = relay_aot.compile(_dense(), target=FOREIGN, name="{MODEL}", cache=cache)
    for call in (compiled, compiled.entry):  # the fast path, and TVM's FFI with converted values
        try:
            call(x if call is compiled else tvm.nd.array(x))
            seen.append("ran")
        except relay_aot.CpuFeatureError as err:
            seen.append([compiled.build_result.cached, str(err)])
print(json.dumps(seen))
""",
        directory,
    )
    cached = [cached for cached, _ in out]
    assert len(out) == 6 and cached[:2] == [False, False] and cached[4:] == [True, True], out
    for _, message in out:
        assert f"compiled for `{target_of(FOREIGN)}`" in message and _message() in message


def test_relay_aot_load_refuses(foreign):
    directory, library = foreign
    out = _python(
        f"""
try:
    relay_aot.load("{library}")
    print(json.dumps("loaded"))
except relay_aot.CpuFeatureError as err:
    print(json.dumps(str(err)))
""",
        directory,
    )
    assert out.startswith(f"{library}: the kernels were compiled for") and _message() in out


def test_tvm_load_module_entry_refuses(foreign):
    directory, library = foreign
    out = _python(
        f"""
module = tvm.runtime.load_module("{library}")
try:
    module["{MODEL}"](tvm.nd.array(x))
    print(json.dumps("ran"))
except tvm.error.TVMError as err:
    print(json.dumps([type(err).__name__, str(err).splitlines()[-1]]))
""",
        directory,
    )
    assert out[0] == "CpuFeatureError" and _message() in out[1]


_C_PROGRAM = """#include <stdio.h>
#include "tvmgen_foreign.h"

int main(void) {
  static float x[TVMGEN_FOREIGN_X_SIZE / 4] __attribute__((aligned(64)));
  static float y[TVMGEN_FOREIGN_OUTPUT_SIZE / 4] __attribute__((aligned(64)));
  struct tvmgen_foreign_inputs inputs = {x};
  struct tvmgen_foreign_outputs outputs = {y};
  for (int i = 0; i < 2; ++i) {  /* refused every time */
    int32_t status = tvmgen_foreign_run(&inputs, &outputs);
    printf("%d %s\\n", (int)status, tvmgen_foreign_last_error());
  }
  return 0;
}
"""


def test_c_api_returns_the_error(foreign):
    directory, library = foreign
    (directory / "prog.c").write_text(_C_PROGRAM)
    command = [
        os.environ.get("CC", "gcc"),
        "-std=c99",
        "-Wall",
        "-Werror",
        "prog.c",
        "-o",
        "prog",
        str(library),
        f"-L{tvm_dir()}",
        "-ltvm_runtime",
        f"-Wl,-rpath,{tvm_dir()}",
    ]
    subprocess.run(command, cwd=directory, check=True, capture_output=True, text=True)
    done = subprocess.run(["./prog"], cwd=directory, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("-1 CpuFeatureError: the kernels were compiled for") and _message() in line


def test_cpp_deploy_reports_the_error(foreign):
    directory, library = foreign
    deploy = build_deploy(directory / "deploy")
    done = subprocess.run(
        [str(deploy), str(library), "arg0.npy"], cwd=directory, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("deploy: error: CpuFeatureError: the kernels were compiled for") and _message() in line


def test_the_cli_refuses(foreign):
    directory, library = foreign
    done = subprocess.run(
        [sys.executable, "-m", "relay_aot.cli", "run", str(library), "--inputs", "arg0.npy"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("relay-aot: error: ") and _message() in done.stderr


def test_the_python_backend_refuses(foreign):
    directory, _ = foreign
    out = _python(
        """
from test_target import _dense, FOREIGN
try:
    relay_aot.compile(_dense(), target=FOREIGN, backend="python")(x)
    print(json.dumps("ran"))
except relay_aot.CpuFeatureError as err:
    print(json.dumps(str(err)))
""",
        directory,
    )
    assert out.startswith("model default (python backend): the kernels were compiled for") and _message() in out


def test_without_the_check_the_library_dies_of_an_illegal_instruction(foreign):
    """The control: the same library recording no requirement reaches a kernel this CPU cannot run."""
    directory, _ = foreign
    code = f"""
import numpy as np, relay_aot
from relay_aot import cpu
from test_target import _dense, FOREIGN
cpu.requirement = lambda target: cpu.CpuRequirement(str(target), ())
compiled = relay_aot.compile(_dense(), target=FOREIGN, name="{MODEL}", cache=False)
compiled(np.load("arg0.npy"))
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=directory, capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == -signal.SIGILL, (done.returncode, done.stderr[-2000:])


def test_the_machines_own_cpu_name_runs_here():
    """``-mcpu=<this CPU's LLVM name>``, with no ``-mattr``: LLVM's model of the CPU has system
    features a hypervisor hides (on a Xeon VM: enqcmd, pconfig, ptwrite, uintr, waitpkg), which
    no kernel contains, so they are not required (they refused every call)."""
    target = f"llvm -mcpu={codegen.llvm_get_system_cpu()}"
    assert all(cpu.used_by_code(f) for f in cpu.requirement(target_of(target)).features)
    compiled = relay_aot.compile(_dense(), target=target)
    np.testing.assert_allclose(compiled(_x()).numpy(), np.maximum(_x() @ W.T, 0), rtol=1e-5, atol=1e-6)


def test_only_features_of_generated_code_are_required():
    """Every CPU model LLVM knows: what a library built for it requires is vector, FMA, bit
    manipulation, conversion, crypto or APX features, never a system instruction."""
    system = {"enqcmd", "pconfig", "ptwrite", "uintr", "waitpkg", "sgx", "xsave", "rdrnd", "rtm", "clwb", "shstk"}
    for name in ("emeraldrapids", "sapphirerapids", "diamondrapids", "graniterapids", "znver5", "skylake-avx512"):
        required = set(cpu.requirement(target_of(f"llvm -mcpu={name}")).features)
        assert not required & system, (name, required & system)
        assert "avx2" in required, name


def test_the_check_accepts_this_cpu_and_names_what_it_lacks():
    host = cpu.requirement(target_of("host"))
    fastcall.check_cpu(host, "host.so")
    if _missing():
        with pytest.raises(CpuFeatureError, match=f"^here.so: the kernels were compiled for .*{_message()}"):
            fastcall.check_cpu(cpu.requirement(target_of(FOREIGN)), "here.so")
    with pytest.raises(
        CpuFeatureError, match=r"use CPU features this machine does not have: sse9 \(not detectable here\)"
    ):
        fastcall.check_cpu(cpu.CpuRequirement("llvm -mattr=+sse9", ("sse2", "sse9")), "made-up.so")

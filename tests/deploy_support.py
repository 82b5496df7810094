"""Shared by the deployment and CLI tests: models, the C++ example's build, output comparison."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import tvm

import relay_aot

ROOT = Path(__file__).resolve().parent.parent
LSTM = ROOT / "examples" / "lstm.relay"
DEPLOY_CC = ROOT / "examples" / "cpp_deploy" / "deploy.cc"

#: Tensors, a polymorphic List ADT built by recursion, a higher-order global, a closure
#: (captured tensor; also returned), a reference, a bool tensor and an int scalar in the result.
STRUCTURES = """#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}

def @range(%n: int32) -> List[int32] {
  if (less_equal(%n, 0)) { Nil } else { Cons(%n, @range(subtract(%n, 1))) }
}

def @map[A, B](%f: fn (A) -> B, %l: List[A]) -> List[B] {
  match (%l) {
    Cons(%x, %rest) => Cons(%f(%x), @map(%f, %rest)),
    Nil => Nil,
  }
}

def @main(%x: Tensor[(2, 3), float32], %n: int32) {
  let %scale = fn (%i: int32) -> Tensor[(2, 3), float32] { multiply(%x, cast(%i, dtype="float32")) };
  let %total = ref(sum(%x));
  (@map(%scale, @range(%n)), %total, greater(%x, 0f), add(%n, 1), %scale)
}
"""


def structures_args() -> tuple:
    """Arguments of STRUCTURES's @main."""
    return (np.array([[1, -2, 3], [0.5, 0, -1]], dtype="float32"), np.int32(3))


def lstm_args() -> tuple:
    """Arguments of the LSTM example's @main (xs, w_ih, w_hh, bias)."""
    rng = np.random.default_rng(0)
    shapes = [(10, 1, 8), (64, 8), (64, 16), (64,)]
    return tuple(rng.uniform(-1, 1, shape).astype("float32") for shape in shapes)


#: ``?`` dimensions: a recursion growing a tensor by concatenate, a dynamic-batch dense and a
#: data-dependent argwhere, in one library that serves every shape.
DYNAMIC = """#[version = "0.0.5"]
def @grow(%acc: Tensor[(?, 3), float32], %row: Tensor[(?, 3), float32], %n: int32) -> Tensor[(?, 3), float32] {
  if (equal(%n, 0)) { %acc } else { @grow(concatenate((%acc, multiply(%row, cast(%n, dtype="float32")))), %row, subtract(%n, 1)) }
}

def @main(%x: Tensor[(?, 3), float32], %w: Tensor[(2, 3), float32], %n: int32) {
  (@grow(%x, %x, %n), nn.dense(%x, %w, units=2), argwhere(greater(%x, 0f)))
}
"""


def dynamic_args() -> tuple:
    """Arguments of DYNAMIC's @main."""
    return (
        np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3),
        np.linspace(0, 1, 6, dtype="float32").reshape(2, 3),
        np.int32(3),
    )


#: name -> (Relay text, arguments); the model names are the ones the tests compile them with.
MODELS = {
    "structures": (STRUCTURES, structures_args),
    "lstm": (LSTM.read_text(), lstm_args),
    "dynamic": (DYNAMIC, dynamic_args),
}


def parse(text: str) -> tvm.IRModule:
    """A Relay module from text."""
    return tvm.relay.parse(text)


def export(model: str, name: str, directory: Path) -> Path:
    """Compile MODELS[model] with model name ``name`` and export it to ``directory/<name>.so``."""
    path = directory / f"{name}.so"
    if not path.exists():
        relay_aot.compile(parse(MODELS[model][0]), name=name).export_library(path)
    return path


def tvm_dir() -> Path:
    """The directory of the TVM wheel (holding libtvm_runtime.so, include/ and 3rdparty/)."""
    return Path(tvm.__file__).resolve().parent


def build_deploy(output: Path, link: tuple = ()) -> Path:
    """Build examples/cpp_deploy/deploy.cc against libtvm_runtime.so only (plus ``link``ed libraries)."""
    includes = [f"-I{d}" for d in tvm._ffi.libinfo.find_include_path()]
    extra = ["-Wl,--no-as-needed", *map(str, link), "-Wl,--as-needed"] if link else []
    command = [
        os.environ.get("CXX", "g++"),
        "-std=c++17",
        "-O2",
        str(DEPLOY_CC),
        "-o",
        str(output),
        *includes,
        "-DDMLC_USE_LOGGING_LIBRARY=<tvm/runtime/logging.h>",
        *extra,
        f"-L{tvm_dir()}",
        "-ltvm_runtime",
        f"-Wl,-rpath,{tvm_dir()}",
    ]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return output


def save_npy(args, directory: Path) -> list[str]:
    """Write each argument to ``directory/arg<i>.npy``; the paths, in order."""
    paths = []
    for i, arg in enumerate(args):
        paths.append(str(directory / f"arg{i}.npy"))
        np.save(paths[-1], np.asarray(arg))
    return paths


_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$|^-?inf$|^nan$")


def assert_same_printout(actual: str, expected: str, rtol: float = 1e-5) -> None:
    """Two printed results (``relay-aot run`` / deploy.cc format) agree: same lines and words,
    floats within ``rtol``."""
    a_lines, e_lines = actual.strip().splitlines(), expected.strip().splitlines()
    assert len(a_lines) == len(e_lines), f"{len(a_lines)} lines vs {len(e_lines)}:\n{actual}\n---\n{expected}"
    for a_line, e_line in zip(a_lines, e_lines):
        a_head, _, a_values = a_line.partition("] ")
        e_head, _, e_values = e_line.partition("] ")
        assert a_head == e_head, f"{a_line!r} != {e_line!r}"
        a_words, e_words = a_values.split(), e_values.split()
        assert len(a_words) == len(e_words), f"{a_line!r} != {e_line!r}"
        for a, e in zip(a_words, e_words):
            if _NUMBER.match(e) and _NUMBER.match(a):
                assert np.isclose(float(a), float(e), rtol=rtol, atol=1e-7, equal_nan=True), f"{a} != {e} in {e_head}"
            else:
                assert a == e, f"{a_line!r} != {e_line!r}"


def run_python(code: str, env_extra: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """Run Python ``code`` in a fresh interpreter (this one's), failing the test on a crash."""
    env = dict(os.environ, **(env_extra or {}))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    assert result.returncode == 0, f"exit status {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result

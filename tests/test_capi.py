"""The plain C API (issue 15): generated headers compiled by ``gcc -std=c99 -Wall -Werror``, C
programs that link only the model libraries and libtvm_runtime.so, run in fresh processes, with
every output compared with TVM's interpreter; two models in one program; 8 threads; a failing
run returning non-zero while the process goes on; the PackedFunc entry called from C (W1b).

The models are compiled once for the module (``libs``); the C programs are generated from each
model's :class:`~relay_aot.backends.cpp.capi.CApi`, so they exercise whatever the header declares.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm
from deploy_support import LSTM, ROOT, assert_same_printout, lstm_args, save_npy, tvm_dir

import relay_aot
from relay_aot import names, testing
from relay_aot.backends.cpp.capi import c_api, c_identifier
from relay_aot.cli import format_result
from relay_aot.cli import main as cli_main
from relay_aot.errors import UnsupportedError
from relay_aot.ir.signature import Signature

C_DEPLOY = ROOT / "examples" / "c_deploy"

#: One result tensor; recursion; a tensor, a 0-d int32 and a bool parameter.
SINGLE = """#[version = "0.0.5"]
def @power(%x: Tensor[(2, 3), float32], %n: int32) -> Tensor[(2, 3), float32] {
  if (less_equal(%n, 0)) { ones_like(%x) } else { multiply(%x, @power(%x, subtract(%n, 1))) }
}

def @main(%x: Tensor[(2, 3), float32], %n: int32, %flag: bool) -> Tensor[(2, 3), float32] {
  if (%flag) { @power(%x, %n) } else { negative(%x) }
}
"""

#: An LSTM cell folded over a List built by recursion, and a recursive @fib: a nested tuple
#: result holding a 0-d tensor.
NESTED = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }

def @steps(%xs: Tensor[(5, 1, 8), float32], %i: int32) -> List[Tensor[(1, 8), float32]] {
  if (greater_equal(%i, 5)) { Nil } else { Cons(take(%xs, %i, axis=0), @steps(%xs, add(%i, 1))) }
}

def @fold[A, B](%f: fn (A, B) -> A, %acc: A, %l: List[B]) -> A {
  match (%l) { Cons(%x, %rest) => @fold(%f, %f(%acc, %x), %rest), Nil => %acc }
}

def @fib(%n: int32) -> int32 {
  if (less(%n, 2)) { %n } else { add(@fib(subtract(%n, 1)), @fib(subtract(%n, 2))) }
}

def @main(%xs: Tensor[(5, 1, 8), float32], %w_ih: Tensor[(64, 8), float32],
          %w_hh: Tensor[(64, 16), float32], %bias: Tensor[(64), float32], %n: int32) {
  let %cell = fn (%state: (Tensor[(1, 16), float32], Tensor[(1, 16), float32]), %x: Tensor[(1, 8), float32])
      -> (Tensor[(1, 16), float32], Tensor[(1, 16), float32]) {
    let %gates = add(add(nn.dense(%x, %w_ih, units=64), nn.dense(%state.0, %w_hh, units=64)), %bias);
    let %g = split(%gates, indices_or_sections=4, axis=1);
    let %c = add(multiply(sigmoid(%g.1), %state.1), multiply(sigmoid(%g.0), tanh(%g.2)));
    (multiply(sigmoid(%g.3), tanh(%c)), %c)
  };
  let %zero = zeros(shape=[1, 16], dtype="float32");
  let %r = @fold(%cell, (%zero, %zero), @steps(%xs, 0));
  (%r, (@fib(%n), add(%r.0, %r.1)))
}
"""

#: A non-exhaustive match that fails for %i != 0.
MATCH = (ROOT / "tests" / "programs" / "match_failure.relay").read_text()


def _single_args():
    return (np.array([[1, -2, 3], [0.5, 0, -1.5]], dtype="float32"), np.int32(3), np.bool_(True))


def _nested_args():
    rng = np.random.default_rng(1)
    shapes = [(5, 1, 8), (64, 8), (64, 16), (64,)]
    return tuple(rng.uniform(-1, 1, s).astype("float32") for s in shapes) + (np.int32(12),)


#: name -> (Relay text, arguments)
MODELS = {"single": (SINGLE, _single_args), "nested": (NESTED, _nested_args), "match": (MATCH, lambda: (np.int32(0),))}


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """Each model compiled once, exported with its header: name -> (library, header, CApi)."""
    directory = tmp_path_factory.mktemp("capi")
    out = {}
    for name, (text, _) in MODELS.items():
        compiled = relay_aot.compile(tvm.relay.parse(text), name=name)
        library, header = directory / f"{name}.so", directory / f"tvmgen_{name}.h"
        compiled.export_library(library, c_header=header)
        out[name] = (library, header, c_api(compiled.signature))
    return out


def _leaves(value) -> list:
    """The tensors of a normalized value, depth first (the order of the outputs struct)."""
    if isinstance(value, np.ndarray):
        return [value]
    return [leaf for field in value[2] for leaf in _leaves(field)]


def _reference(name: str) -> list:
    text, make_args = MODELS[name]
    return _leaves(testing.normalize(testing.run_reference(tvm.relay.parse(text), make_args(), "interpreter")))


def _build(source: str, directory: Path, libraries, exe: str = "prog", extra=()) -> Path:
    """Compile C99 ``source`` with -Wall -Werror, linking only ``libraries`` and libtvm_runtime.so."""
    (directory / f"{exe}.c").write_text(source)
    command = [
        os.environ.get("CC", "gcc"),
        "-std=c99",
        "-Wall",
        "-Werror",
        "-O1",
        "-pthread",
        f"-I{directory}",
        *extra,
        f"{exe}.c",
        "-o",
        exe,
        "-Wl,--no-as-needed",
        *map(str, libraries),
        f"-L{tvm_dir()}",
        "-ltvm_runtime",
        f"-Wl,-rpath,{tvm_dir()}",
    ]
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr}"
    return directory / exe


_PRELUDE = """#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
{includes}
"""

_IO = """
/* The file's bytes in a 64-byte aligned buffer, at byte OFFSET (OFFSET != 0: misaligned). */
static void* read_input(const char* path, size_t size, size_t offset) {
  char* block;
  FILE* f = fopen(path, "rb");
  if (f == NULL || posix_memalign((void**)&block, 64, size + offset + 1) != 0) exit(3);
  if (fread(block + offset, 1, size, f) != size) exit(4);
  fclose(f);
  return block + offset;
}

static void write_output(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, size, f) != size) exit(5);
  fclose(f);
}
"""


def _model_code(name: str, api, files: list[str]) -> dict[str, str]:
    """C statements for one model: declare, read the inputs, allocate outputs, run, write, check."""
    run, error = names.c_api(name, "run"), names.c_api(name, "last_error")
    size = api.size_macro
    declare = [f"struct {names.c_api(name, 'inputs')} {name}_in;", f"struct {names.c_api(name, 'outputs')} {name}_out;"]
    setup = [f'{name}_in.{f.name} = read_input("{path}", {size(f)}, offset);' for f, path in zip(api.inputs, files)]
    setup += [f"{name}_out.{f.name} = malloc({size(f)});" for f in api.outputs]
    call = [f'if ({run}(&{name}_in, &{name}_out) != 0) {{ fprintf(stderr, "{name}: %s\\n", {error}()); return 1; }}']
    write = [f'write_output("{name}_{f.name}.bin", {name}_out.{f.name}, {size(f)});' for f in api.outputs]
    return {
        "declare": "\n  ".join(declare),
        "setup": "\n    ".join(setup),
        "call": "\n    ".join(call),
        "write": "\n  ".join(write),
    }


def _runner(models: dict, directory: Path) -> str:
    """A C program running each model twice (aligned inputs: read in place; misaligned: copied)
    and writing its outputs; the inputs must be unchanged and both runs equal."""
    includes, declare, body, write = [], [], [], []
    for name, (api, files) in models.items():
        code = _model_code(name, api, files)
        includes.append(f'#include "tvmgen_{name}.h"')
        declare.append(code["declare"])
        body.append(f"""    {code["setup"]}
    {code["call"]}""")
        write.append(code["write"])
        checks = [
            f"if (memcmp(first_{name}_{f.name}, {name}_out.{f.name}, {api.size_macro(f)}) != 0) return 7;"
            for f in api.outputs
        ]
        saves = [f"memcpy(first_{name}_{f.name}, {name}_out.{f.name}, {api.size_macro(f)});" for f in api.outputs]
        declare += [f"static char first_{name}_{f.name}[{api.size_macro(f)}];" for f in api.outputs]
        unchanged = [
            f"if (memcmp({name}_in.{f.name}, original_{name}_{f.name}, {api.size_macro(f)}) != 0) return 8;"
            for f in api.inputs
        ]
        declare += [f"static char original_{name}_{f.name}[{api.size_macro(f)}];" for f in api.inputs]
        originals = [f"memcpy(original_{name}_{f.name}, {name}_in.{f.name}, {api.size_macro(f)});" for f in api.inputs]
        body[-1] = body[-1].replace(code["call"], "\n    ".join(originals + [code["call"]] + unchanged))
        body.append(
            "    if (offset == 0) {\n      "
            + "\n      ".join(saves)
            + "\n    } else {\n      "
            + "\n      ".join(checks)
            + "\n    }"
        )
    return (
        _PRELUDE.format(includes="\n".join(includes))
        + _IO
        + f"""
int main(void) {{
  size_t offset;
  {chr(10).join("  " + d for d in declare).strip()}
  for (offset = 0; offset <= 4; offset += 4) {{
{chr(10).join(body)}
  }}
  {chr(10).join("  " + w for w in write).strip()}
  printf("ok\\n");
  return 0;
}}
"""
    )


def _inputs(name: str, directory: Path) -> list[str]:
    paths = []
    for i, arg in enumerate(MODELS[name][1]()):
        paths.append(str(directory / f"{name}_arg{i}.bin"))
        np.ascontiguousarray(np.asarray(arg)).tofile(paths[-1])
    return paths


def _check_outputs(name: str, api, directory: Path) -> None:
    expected = _reference(name)
    assert len(expected) == len(api.outputs)
    for f, want in zip(api.outputs, expected):
        got = np.fromfile(directory / f"{name}_{f.name}.bin", dtype=f.type.dtype).reshape(f.type.shape)
        testing.assert_same(got, want, rtol=1e-4, path=f.what, names=("C API", "interpreter"))


def _run(exe: Path, directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe)], cwd=directory, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", ["single", "nested"])
def test_c_program_matches_interpreter(libs, name, tmp_path):
    library, header, api = libs[name]
    (tmp_path / header.name).write_bytes(header.read_bytes())
    exe = _build(_runner({name: (api, _inputs(name, tmp_path))}, tmp_path), tmp_path, [library])
    done = _run(exe, tmp_path)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    _check_outputs(name, api, tmp_path)


def test_header_declares_the_convention(libs):
    text = libs["nested"][1].read_text()
    for line in [
        "struct tvmgen_nested_inputs {",
        "  void* xs; /* %xs: Tensor[(5, 1, 8), float32] */",
        "struct tvmgen_nested_outputs {",
        "  void* output0; /* result[0][0]: Tensor[(1, 16), float32] */",
        "  void* output3; /* result[1][1]: Tensor[(1, 16), float32] */",
        "#define TVMGEN_NESTED_XS_SIZE 160 /* %xs: Tensor[(5, 1, 8), float32] */",
        "#define TVMGEN_NESTED_OUTPUT2_SIZE 4 /* result[1][0]: Tensor[(), int32] */",
        "int32_t tvmgen_nested_run(struct tvmgen_nested_inputs* inputs, struct tvmgen_nested_outputs* outputs);",
        "const char* tvmgen_nested_last_error(void);",
    ]:
        assert line in text.splitlines(), line
    assert "void* output;" in libs["single"][1].read_text()


def test_header_is_valid_cpp(libs, tmp_path):
    source = tmp_path / "both.cc"
    source.write_text("".join(f'#include "{h.name}"\n' for _, h, _ in libs.values()) + "int main() { return 0; }\n")
    command = [
        os.environ.get("CXX", "g++"),
        "-std=c++11",
        "-Wall",
        "-Werror",
        "-fsyntax-only",
        f"-I{libs['single'][1].parent}",
        str(source),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_two_models_in_one_program(libs, tmp_path):
    models = {}
    for name in ("single", "nested"):
        library, header, api = libs[name]
        (tmp_path / header.name).write_bytes(header.read_bytes())
        models[name] = (api, _inputs(name, tmp_path))
    exe = _build(_runner(models, tmp_path), tmp_path, [libs["single"][0], libs["nested"][0]])
    done = _run(exe, tmp_path)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    for name in models:
        _check_outputs(name, models[name][0], tmp_path)


_THREADS = """
#define THREADS 8
#define RUNS 25
static struct tvmgen_nested_inputs inputs;
static char expected[4][64];
static const size_t sizes[4] = {TVMGEN_NESTED_OUTPUT0_SIZE, TVMGEN_NESTED_OUTPUT1_SIZE,
                                TVMGEN_NESTED_OUTPUT2_SIZE, TVMGEN_NESTED_OUTPUT3_SIZE};

static void* worker(void* arg) {
  char buffers[4][64];
  struct tvmgen_nested_outputs outputs;
  int run, k;
  (void)arg;
  outputs.output0 = buffers[0];
  outputs.output1 = buffers[1];
  outputs.output2 = buffers[2];
  outputs.output3 = buffers[3];
  for (run = 0; run < RUNS; ++run) {
    if (tvmgen_nested_run(&inputs, &outputs) != 0) return (void*)"run failed";
    for (k = 0; k < 4; ++k) {
      if (memcmp(buffers[k], expected[k], sizes[k]) != 0) return (void*)"different result";
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  pthread_t threads[THREADS];
  struct tvmgen_nested_outputs outputs;
  int i, failed = 0;
  (void)argc;
  inputs.xs = read_input(argv[1], TVMGEN_NESTED_XS_SIZE, 0);
  inputs.w_ih = read_input(argv[2], TVMGEN_NESTED_W_IH_SIZE, 0);
  inputs.w_hh = read_input(argv[3], TVMGEN_NESTED_W_HH_SIZE, 4);
  inputs.bias = read_input(argv[4], TVMGEN_NESTED_BIAS_SIZE, 0);
  inputs.n = read_input(argv[5], TVMGEN_NESTED_N_SIZE, 0);
  outputs.output0 = expected[0];
  outputs.output1 = expected[1];
  outputs.output2 = expected[2];
  outputs.output3 = expected[3];
  if (tvmgen_nested_run(&inputs, &outputs) != 0) return 1;
  for (i = 0; i < THREADS; ++i) pthread_create(&threads[i], NULL, worker, NULL);
  for (i = 0; i < THREADS; ++i) {
    void* result;
    pthread_join(threads[i], &result);
    if (result != NULL) {
      fprintf(stderr, "thread %d: %s\\n", i, (const char*)result);
      failed = 1;
    }
  }
  for (i = 0; i < 4; ++i) write_output(i == 0 ? "nested_output0.bin" : i == 1 ? "nested_output1.bin" :
                                       i == 2 ? "nested_output2.bin" : "nested_output3.bin", expected[i], sizes[i]);
  printf(failed ? "failed\\n" : "ok\\n");
  return failed;
}
"""


def test_eight_threads(libs, tmp_path):
    library, header, api = libs["nested"]
    (tmp_path / header.name).write_bytes(header.read_bytes())
    exe = _build(_PRELUDE.format(includes='#include "tvmgen_nested.h"') + _IO + _THREADS, tmp_path, [library])
    done = subprocess.run(
        [str(exe), *_inputs("nested", tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    _check_outputs("nested", api, tmp_path)


_ERRORS = """
static int try_run(int32_t i, struct tvmgen_match_inputs* inputs) {
  int32_t out = -1;
  struct tvmgen_match_outputs outputs;
  int status;
  outputs.output = &out;
  if (inputs != NULL) inputs->i = &i;
  status = tvmgen_match_run(inputs, &outputs);
  printf("status %s: %s: out %d\\n", status == 0 ? "0" : "nonzero", status == 0 ? "-" : tvmgen_match_last_error(),
         (int)out);
  return status;
}

int main(void) {
  struct tvmgen_match_inputs inputs;
  try_run(1, &inputs);    /* no clause matches */
  try_run(0, &inputs);    /* the process goes on */
  try_run(0, NULL);       /* a bad argument */
  inputs.i = NULL;
  {
    int32_t out;
    struct tvmgen_match_outputs outputs;
    outputs.output = &out;
    printf("null input: %s\\n", tvmgen_match_run(&inputs, &outputs) != 0 ? tvmgen_match_last_error() : "ran");
  }
  return 0;
}
"""


def test_failed_run_returns_nonzero_and_the_process_goes_on(libs, tmp_path):
    library, header, _ = libs["match"]
    (tmp_path / header.name).write_bytes(header.read_bytes())
    exe = _build(_PRELUDE.format(includes='#include "tvmgen_match.h"') + _ERRORS, tmp_path, [library])
    done = _run(exe, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "status nonzero: MatchError: no clause matched the value in @unwrap: out -1"
    assert lines[1] == "status 0: -: out 0"
    assert lines[2] == "status nonzero: ArgumentTypeError: inputs is NULL: out -1"
    assert lines[3] == "null input: ArgumentTypeError: input i (%i) is NULL"


UNSUPPORTED = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }

def @main(%x: Tensor[(3), float32], %l: List[int32]) -> (Tensor[(3), float32], fn (int32) -> int32) {
  (%x, fn (%i: int32) -> int32 { %i })
}
"""


def test_unsupported_main_names_the_parameter_and_result(tmp_path):
    compiled = relay_aot.compile(tvm.relay.parse(UNSUPPORTED), name="unsupported")
    with pytest.raises(UnsupportedError, match=r"parameter %l has type List\[Tensor\[\(\), int32\]\]"):
        compiled.export_library(tmp_path / "u.so", c_header=tmp_path / "u.h")
    assert not (tmp_path / "u.so").exists() and not (tmp_path / "u.h").exists()
    # The PackedFunc entry is unaffected.
    nil = relay_aot.load(compiled.export_library(tmp_path / "u.so")).signature.params[1]
    assert nil.name == "l"
    signature = compiled.signature
    tensors_only = Signature(signature.model, signature.params[:1], signature.ret, signature.adts)
    with pytest.raises(UnsupportedError, match=r"result\[1\] has type fn\(Tensor\[\(\), int32\]\) ->"):
        c_api(tensors_only)


def test_cli_writes_the_header(libs, tmp_path, capsys):
    model = tmp_path / "single.relay"
    model.write_text(SINGLE)
    out, header = tmp_path / "single.so", tmp_path / "single.h"
    assert cli_main(["compile", str(model), "-o", str(out), "--name", "single", "--c-header", str(header)]) == 0
    assert header.read_text() == libs["single"][1].read_text()
    assert f"wrote {header}: the C API, tvmgen_single_run" in capsys.readouterr().out
    bad = tmp_path / "bad.relay"
    bad.write_text(UNSUPPORTED)
    assert cli_main(["compile", str(bad), "-o", str(tmp_path / "bad.so"), "--c-header", str(tmp_path / "bad.h")]) == 1
    assert "parameter %l has type List[Tensor[(), int32]]" in capsys.readouterr().err
    assert not (tmp_path / "bad.so").exists() and not (tmp_path / "bad.h").exists()


def test_field_names_are_unique_c_identifiers():
    assert c_identifier("x.1") == "x_1"
    assert c_identifier("1x") == "p_1x"
    assert c_identifier("int") == "int_"
    assert c_identifier("class") == "class_"
    assert c_identifier("INT32_MAX") == "INT32_MAX_"
    assert c_identifier("__x") == "p_x"
    from relay_aot import ir

    t = ir.TensorType((2,), "float32")
    params = [ir.Param(n, t) for n in ("output", "X", "x", "x_2", "int")]
    api = c_api(Signature("m", params, t, []))
    assert [f.name for f in api.inputs] == ["output_2", "X", "x_2", "x_2_2", "int_"]
    assert [f.name for f in api.outputs] == ["output"]


def test_packed_entry_from_c(tmp_path):
    """W1b: examples/c_deploy/packed.c calls the PackedFunc entry through TVM's C runtime API."""
    library = tmp_path / "lstm.so"
    relay_aot.compile(tvm.relay.parse(LSTM.read_text()), name="lstm").export_library(library)
    includes = [f"-I{d}" for d in tvm._ffi.libinfo.find_include_path()]
    command = [
        os.environ.get("CC", "gcc"),
        "-std=c99",
        "-Wall",
        "-Werror",
        "-O1",
        *includes,
        str(C_DEPLOY / "packed.c"),
        str(C_DEPLOY / "npy.c"),
        "-o",
        "packed",
        f"-L{tvm_dir()}",
        "-ltvm_runtime",
        f"-Wl,-rpath,{tvm_dir()}",
    ]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, text=True)
    inputs = save_npy(lstm_args(), tmp_path)
    done = subprocess.run([str(tmp_path / "packed"), str(library), *inputs], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    expected = format_result(testing.run_reference(tvm.relay.parse(LSTM.read_text()), lstm_args(), "interpreter"))
    assert_same_printout(done.stdout, "\n".join(expected), rtol=1e-4)


def test_dynamic_dimensions_have_no_c_api(tmp_path):
    """A `?` dimension has no size for the header: asking for one names the parameter; the
    PackedFunc entry serves every shape."""
    mod = tvm.relay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(?, 2), float32]) { add(%x, %x) }\n')
    compiled = relay_aot.compile(mod, name="dyn_capi")
    with pytest.raises(UnsupportedError, match=r"parameter %x has the dynamic type Tensor\[\(\?, 2\), float32\]"):
        compiled.export_library(tmp_path / "d.so", c_header=tmp_path / "d.h")
    assert not (tmp_path / "d.h").exists()
    loaded = relay_aot.load(compiled.export_library(tmp_path / "d.so"))
    np.testing.assert_array_equal(loaded(np.ones((3, 2), "float32")).numpy(), np.full((3, 2), 2, "float32"))

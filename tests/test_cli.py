"""The relay-aot command line: every sub-command, its --help, and its error paths.

The happy paths run the real script in a subprocess (``python -m relay_aot.cli``); the table of
mistakes calls ``main`` in-process (each must end with one line on stderr and a non-zero exit).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from deploy_support import LSTM, MODELS, STRUCTURES, assert_same_printout, lstm_args, parse, save_npy

import relay_aot
from relay_aot import cli, testing

CLI = [sys.executable, "-m", "relay_aot.cli"]


def relay_aot_cli(*args, cwd=None, env=None, check=True) -> subprocess.CompletedProcess:
    """Run the command line in a subprocess."""
    result = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env)
    if check:
        assert result.returncode == 0, f"exit status {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def lstm_so(tmp_path_factory):
    """The LSTM example compiled through the CLI (model name lstm)."""
    out = tmp_path_factory.mktemp("cli") / "lstm.so"
    result = relay_aot_cli("compile", LSTM, "-o", out, "--name", "lstm")
    assert result.stdout.startswith(f"wrote {out}: model lstm, @main(%xs: Tensor[(10, 1, 8), float32]")
    return out


def interpreter(text: str, args) -> object:
    return testing.normalize(testing.run_reference(parse(text), args))


_OPTIONS = {
    "": ["compile", "run", "show", "--debug"],
    "compile": [
        "MODEL",
        "-o",
        "--name",
        "--params",
        "--backend",
        "--opt-level",
        "--input-shapes",
        "--format",
        "--profile",
        "--debug",
    ],
    "run": ["LIBRARY", "--inputs", "--output", "--name", "--profile", "--profile-json", "--debug"],
    "show": ["MODEL", "--backend", "--name", "--params", "--input-shapes", "--ir", "--profile", "--debug"],
}


@pytest.mark.parametrize("command", list(_OPTIONS))
def test_help(command, capsys):
    argv = [command, "--help"] if command else ["--help"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: relay-aot {command}".rstrip())
    for option in _OPTIONS[command]:
        assert option in out


def test_installed_script_is_the_cli():
    script = shutil.which("relay-aot", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the relay-aot script is not installed next to this interpreter")
    result = subprocess.run([script, "run", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("usage: relay-aot run")


def test_run_inputs_three_ways_match_the_interpreter(lstm_so, tmp_path):
    """--inputs as .npy files in order, as .npz by parameter name, as .npz from np.savez(*arrays);
    --output keeps the result's tensors by path."""
    args = lstm_args()
    expected = interpreter(LSTM.read_text(), args)
    np.savez(tmp_path / "named.npz", **dict(zip(["xs", "w_ih", "w_hh", "bias"], args)))
    np.savez(tmp_path / "positional.npz", *args)
    printed = []
    for inputs in (save_npy(args, tmp_path), [tmp_path / "named.npz"], [tmp_path / "positional.npz"]):
        out = tmp_path / "out.npz"
        result = relay_aot_cli("run", lstm_so, "--inputs", *inputs, "--output", out)
        printed.append(result.stdout)
        with np.load(out) as saved:
            assert sorted(saved.files) == ["result[0]", "result[1]"]
            actual = ("adt", 0, (saved["result[0]"], saved["result[1]"]))
        testing.assert_same(actual, expected, rtol=1e-4, names=("relay-aot run --output", "interpreter"))
    assert printed[0] == printed[1] == printed[2]
    assert_same_printout(printed[0], "\n".join(cli.format_result(relay_aot.load(lstm_so)(*args))))


def test_compile_with_params_and_opt_level(tmp_path):
    """--params binds @main's weights; --opt-level 0 and the default build differently, same result."""
    model = tmp_path / "scale.relay"
    model.write_text(
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) {\n"
        '  add(multiply(%x, %w), ones(shape=[3], dtype="float32"))\n}\n'
    )
    w, x = np.array([2, -1, 0.5], dtype="float32"), np.array([1, 2, 3], dtype="float32")
    np.savez(tmp_path / "params.npz", w=w)
    np.save(tmp_path / "x.npy", x)
    outputs = []
    for opt in ("0", "3"):
        lib = tmp_path / f"scale{opt}.so"
        compiled = relay_aot_cli("compile", model, "-o", lib, "--params", tmp_path / "params.npz", "--opt-level", opt)
        assert "@main(%x: Tensor[(3), float32]) -> Tensor[(3), float32]" in compiled.stdout
        outputs.append(relay_aot_cli("run", lib, "--inputs", tmp_path / "x.npy").stdout)
    expected = "\n".join(cli.format_result(np.asarray(x * w + 1)))
    for printed in outputs:
        assert_same_printout(printed, expected)


def test_show_prints_the_source_without_building(tmp_path):
    """`show` prints the C++ (entry points, version script) and runs no C++ compiler."""
    model = tmp_path / "structures.relay"
    model.write_text(STRUCTURES)
    env = dict(os.environ, CXX="/nonexistent/c++", RELAY_AOT_CACHE_DIR=str(tmp_path / "cache"))
    source = relay_aot_cli("show", model, "--name", "shown", env=env).stdout
    for expected in (
        "namespace shown_relay_aot",
        '__asm__("shown")',
        '__asm__("shown__metadata")',
        'const char __tvm_main__[] = "shown"',
        "===== exports.map =====",
        "shown_k*;",
        "local:",
    ):
        assert expected in source
    assert not (tmp_path / "cache").exists()


def test_show_python_backend(tmp_path):
    model = tmp_path / "structures.relay"
    model.write_text(STRUCTURES)
    source = relay_aot_cli("show", model, "--backend", "python").stdout
    compile(source, "generated", "exec")  # it is Python


def test_show_ir_prints_the_control_ir(tmp_path):
    """`show --ir` prints the lowered control IR, one block per function, last uses marked."""
    model = tmp_path / "structures.relay"
    model.write_text(STRUCTURES)
    env = dict(os.environ, CXX="/nonexistent/c++", RELAY_AOT_CACHE_DIR=str(tmp_path / "cache"))
    text = relay_aot_cli("show", model, "--ir", env=env).stdout
    assert re.search(r"^main f\d+\(", text, re.M) and re.search(r"^func f\d+ @main\(", text, re.M), text[:400]
    assert "^" in text and "namespace" not in text
    assert not (tmp_path / "cache").exists()


def test_failures_exit_with_one_line(tmp_path):
    """A runtime failure of the program (and an error exit status) through the real script."""
    result = relay_aot_cli("run", tmp_path / "missing.so", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"relay-aot: error: no such library: {tmp_path / 'missing.so'}"]


# -- the table of mistakes -------------------------------------------------------------------------

_BAD_RELAY = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(3), float32]) { add(%x, }\n'
_BAD_TYPES = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(3), float32], %y: Tensor[(4), float32]) { add(%x, %y) }\n'
# nn.dense without units=: TVM's parser builds DenseAttrs by reflection and raises AttributeError
_NO_UNITS = (
    '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) { nn.dense(%x, %w) }\n'
)

MISTAKES = [
    # (argv with {dir} and {lstm} placeholders, exit status, regex the one stderr line must match)
    ([], 2, r"^relay-aot: error: the following arguments are required: COMMAND \(see relay-aot --help\)$"),
    (["frob"], 2, r"invalid choice: 'frob'"),
    (["compile", "{dir}/missing.relay", "-o", "{dir}/x.so"], 1, r"missing\.relay: no such file$"),
    (
        ["compile", "{dir}/good.relay"],
        2,
        r"^relay-aot compile: error: one of the arguments -o/--output --standalone is required",
    ),
    (
        ["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--backend", "rust"],
        2,
        r"--backend: invalid choice: 'rust' \(choose from 'cpp', 'python'\)",
    ),
    (
        ["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--backend", "python"],
        2,
        r"the python backend builds no shared library",
    ),
    (
        ["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--name", "9lives"],
        2,
        r"--name: model name '9lives' is not usable as a symbol prefix",
    ),
    (["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--opt-level", "7"], 2, r"--opt-level: invalid choice"),
    (["compile", "{dir}/good.relay", "-o", "{dir}/no/such/dir/x.so"], 1, r"directory .*no/such/dir does not exist"),
    (
        ["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--input-shapes", "x:[3]"],
        2,
        r"--input-shapes applies to ONNX models",
    ),
    (["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--params", "{dir}/x.npy"], 2, r"expected a \.npz file"),
    (
        ["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--params", "{dir}/unknown.npz"],
        1,
        r"params name no parameter of @main: nope",
    ),
    (["compile", "{dir}/bad.relay", "-o", "{dir}/x.so"], 1, r"bad\.relay:2:48: expected an expression"),
    (["show", "{dir}/badtypes.relay"], 1, r"badtypes\.relay:2:66: Incompatible broadcast type"),
    (
        ["compile", "{dir}/nounits.relay", "-o", "{dir}/x.so"],
        1,
        r"nounits\.relay: the Relay text does not parse: an operator call lacks its attribute 'units', which "
        r"relay\.attrs\.DenseAttrs requires: write it out as TVM prints it \(e\.g\. nn\.dense\(%x, %w, units=None\)\)$",
    ),
    (["show", "{dir}/x.npy"], 1, r"x\.npy: not a Relay text file"),
    (
        ["compile", "{dir}/good.relay", "--format", "onnx", "-o", "{dir}/x.so"],
        1,
        r"good\.relay: not an ONNX model|onnx package",
    ),
    (["run", "{dir}/good.relay"], 1, r"good\.relay is not an ELF shared library"),
    (["run", "{lstm}"], 1, r"@main takes 4 parameters, got no --inputs"),
    (["run", "{lstm}", "--inputs", "{dir}/x.npy"], 1, r"@main takes 4 parameters, got 1 \.npy files"),
    (
        ["run", "{lstm}", "--inputs", "{dir}/x.npy", "{dir}/x.npy", "{dir}/x.npy", "{dir}/x.npy"],
        1,
        r"argument 0 \(%xs\): expected Tensor\[\(10, 1, 8\), float32\], got .*shape \(3,\)",
    ),
    (
        ["run", "{lstm}", "--inputs", "{dir}/unknown.npz"],
        1,
        r"unknown\.npz: expected arrays named xs, w_ih, w_hh, bias \(or arr_0 \.\.\. arr_3\), found nope",
    ),
    (["run", "{lstm}", "--inputs", "{dir}/good.relay"], 2, r"--inputs takes one \.npz file or one \.npy file per"),
    (["run", "{lstm}", "--inputs", *["{dir}/fake.npy"] * 4], 1, r"fake\.npy: not a NumPy"),
    (["run", "{lstm}", "--name", "other"], 1, r"holds no relay_aot model named 'other' \(models: lstm\)"),
    # a path that exists but is not a regular file is named for what it is (a FIFO is not opened)
    (["compile", "{dir}/fifo.relay", "-o", "{dir}/x.so"], 1, r"fifo\.relay: is a FIFO, not a regular file$"),
    (["show", "{dir}"], 1, r": is a directory, not a regular file$"),
    (
        ["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--tuning-records", "{dir}"],
        1,
        r"--tuning-records .*: is a directory, not a regular file$",
    ),
    (["run", "{dir}/fifo.relay"], 1, r"fifo\.relay is a FIFO, not a library file$"),
    (
        ["compile", "{dir}/good.relay", "-o", "{dir}/x.so", "--input-shapes", '{{"x": [1.5]}}'],
        2,
        r"--input-shapes .*a JSON object",
    ),
]


@pytest.mark.parametrize("argv,status,message", MISTAKES, ids=[" ".join(m[0])[:60] for m in MISTAKES])
def test_mistakes(argv, status, message, lstm_so, tmp_path, capsys):
    (tmp_path / "good.relay").write_text(MODELS["structures"][0])
    (tmp_path / "bad.relay").write_text(_BAD_RELAY)
    (tmp_path / "badtypes.relay").write_text(_BAD_TYPES)
    (tmp_path / "nounits.relay").write_text(_NO_UNITS)
    (tmp_path / "fake.npy").write_text("not numpy")
    os.mkfifo(tmp_path / "fifo.relay")
    np.save(tmp_path / "x.npy", np.zeros(3, dtype="float32"))
    np.savez(tmp_path / "unknown.npz", nope=np.zeros(3, dtype="float32"))
    assert cli.main([a.format(dir=tmp_path, lstm=lstm_so) for a in argv]) == status
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("relay-aot"), lines[0]
    assert re.search(message, lines[0]), lines[0]
    assert captured.out == ""


def test_parser_failure_through_the_script_is_one_line(tmp_path):
    """The issue's report: `relay-aot compile` of nn.dense without units= printed a 27-line
    AttributeError traceback."""
    (tmp_path / "dense.relay").write_text(_NO_UNITS)
    result = relay_aot_cli("compile", tmp_path / "dense.relay", "-o", tmp_path / "dense.so", check=False)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("relay-aot: error: ") and "'units'" in lines[0], result.stderr


def test_dense_with_units_none_compiles_and_runs(tmp_path, capsys):
    """The program as TVM prints it (what Python's relay.nn.dense(x, w) makes) compiles."""
    (tmp_path / "dense.relay").write_text(_NO_UNITS.replace("nn.dense(%x, %w)", "nn.dense(%x, %w, units=None)"))
    x, w = np.arange(6, dtype="float32").reshape(2, 3), np.ones((4, 3), "float32")
    np.savez(tmp_path / "in.npz", x=x, w=w)
    assert (
        cli.main(["compile", str(tmp_path / "dense.relay"), "-o", str(tmp_path / "dense.so"), "--name", "dense"]) == 0
    )
    assert (
        cli.main(
            [
                "run",
                str(tmp_path / "dense.so"),
                "--inputs",
                str(tmp_path / "in.npz"),
                "--output",
                str(tmp_path / "out.npz"),
            ]
        )
        == 0
    )
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["result"], x @ w.T)


def test_internal_errors_are_one_line_and_debug_shows_the_traceback(monkeypatch, tmp_path, capsys):
    """An exception that is about no input of the user's is a bug: one line that says so;
    --debug (before or after the sub-command) lets the traceback through."""
    (tmp_path / "good.relay").write_text(MODELS["structures"][0])

    def broken(args):
        raise AttributeError("'NoneType' object has no attribute 'shape'")

    monkeypatch.setattr(cli, "cmd_show", broken)
    assert cli.main(["show", str(tmp_path / "good.relay")]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "relay-aot: error: internal error, AttributeError: 'NoneType' object has no attribute 'shape' "
        "(a bug: --debug shows its traceback)"
    ]
    for argv in (["--debug", "show", str(tmp_path / "good.relay")], ["show", str(tmp_path / "good.relay"), "--debug"]):
        with pytest.raises(AttributeError, match="no attribute 'shape'"):
            cli.main(argv)


def test_onnx_importer_failures_are_one_line(monkeypatch, tmp_path, capsys):
    """TVM's ONNX importer fails on some models with whatever its code raises (KeyError,
    AssertionError, ...): one line naming the model."""
    _onnx_model(tmp_path / "mlp.onnx")
    from tvm import relay

    def failing(*args, **kwargs):
        raise KeyError("Softmax_axis")

    monkeypatch.setattr(relay.frontend, "from_onnx", failing)
    assert cli.main(["show", str(tmp_path / "mlp.onnx")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"relay-aot: error: {tmp_path / 'mlp.onnx'}: TVM's ONNX importer failed: KeyError: 'Softmax_axis'"]


def test_text_that_crashes_tvms_parser_is_one_line(tmp_path, capsys):
    """TVM's parser segfaults on a local used after a let but never declared (found by the
    campaign below in CI); the CLI parses in a child first and says so."""
    (tmp_path / "undeclared.relay").write_text('#[version = "0.0.5"]\ndef @main(%x: int32) {\n  let %a = 1;\n  %y\n}\n')
    assert cli.main(["show", str(tmp_path / "undeclared.relay")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "crashed (SIGSEGV) parsing this Relay text" in lines[0], lines


def test_damaged_relay_text_ends_in_one_line(tmp_path, capsys):
    """Relay text with tokens removed, repeated or swapped (a small fuzz campaign): `show`
    prints the source, or one error line with exit status 1."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    text = MODELS["structures"][0]
    tokens = re.findall(r"\w+|\s+|.", text)

    @hypothesis.settings(max_examples=40, deadline=None, database=None)
    @hypothesis.given(
        edits=st.lists(
            st.tuples(st.sampled_from(["drop", "repeat", "swap"]), st.integers(0, 10_000)), min_size=1, max_size=3
        )
    )
    def damaged(edits):
        mutated = list(tokens)
        for how, position in edits:
            i = position % len(mutated)
            if how == "drop":
                del mutated[i]
            elif how == "repeat":
                mutated.insert(i, mutated[i])
            elif i + 1 < len(mutated):
                mutated[i], mutated[i + 1] = mutated[i + 1], mutated[i]
        (tmp_path / "damaged.relay").write_text("".join(mutated))
        status = cli.main(["show", str(tmp_path / "damaged.relay"), "--ir"])
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert status == 0 or (
            status == 1
            and len(lines) == 1
            and lines[0].startswith("relay-aot: error: ")
            and "internal error" not in lines[0]
        ), (status, captured.err, "".join(mutated))

    damaged()


def test_program_failure_is_one_line(tmp_path, capsys):
    """A match failure inside the compiled program, reported by `run` as one line."""
    model = tmp_path / "partial.relay"
    model.write_text(
        '#[version = "0.0.5"]\ntype T { A, B }\n'
        "def @main(%x: int32) -> int32 {\n"
        "  let %t = if (less(%x, 0)) { A } else { B };\n"
        "  match? (%t) { A => 1 }\n}\n"
    )
    np.save(tmp_path / "x.npy", np.int32(5))
    lib = tmp_path / "partial.so"
    assert cli.main(["compile", str(model), "-o", str(lib), "--name", "partial"]) == 0
    capsys.readouterr()
    assert cli.main(["run", str(lib), "--inputs", str(tmp_path / "x.npy")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("relay-aot: error: MatchError"), err


# -- ONNX ------------------------------------------------------------------------------------------


def _onnx_model(path: Path):
    """An MLP with a dynamic batch dimension and initializers: MatMul, Add, Relu, Softmax,
    Concat, and two outputs (a tuple in Relay)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    weights = [
        numpy_helper.from_array(rng.standard_normal(shape).astype("float32"), name)
        for name, shape in (("w", (4, 3)), ("b", (3,)))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Softmax", ["r"], ["probs"], axis=1),
        helper.make_node("Concat", ["r", "a"], ["both"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("both", TensorProto.FLOAT, ["batch", 6]),
        ],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return model


def test_onnx_model_through_the_cli(tmp_path):
    """An ONNX model built with onnx.helper compiles and runs through the CLI and matches
    onnx's reference evaluator."""
    model = _onnx_model(tmp_path / "mlp.onnx")
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(2).standard_normal((5, 4)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    # with the batch given, and with it left dynamic (one library for every batch size)
    for name, shapes in [("mlp", ["--input-shapes", "x:[5,4]"]), ("mlp_dyn", [])]:
        wrote = relay_aot_cli("compile", tmp_path / "mlp.onnx", "-o", tmp_path / f"{name}.so", "--name", name, *shapes)
        assert ("Tensor[(?, 4), float32]" in wrote.stdout) == (not shapes), wrote.stdout
        relay_aot_cli("run", tmp_path / f"{name}.so", "--inputs", tmp_path / "x.npy", "--output", tmp_path / "out.npz")
        with np.load(tmp_path / "out.npz") as out:
            np.testing.assert_allclose(out["result[0]"], expected[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(out["result[1]"], expected[1], rtol=1e-5, atol=1e-6)


def test_input_shapes_name_inputs_with_spaces_and_colons(tmp_path, capsys):
    """ONNX input names may hold spaces and colons (TensorFlow's exports: "serving_default_x:0"):
    quoted, or in a JSON object, --input-shapes names them."""
    onnx = pytest.importorskip("onnx")
    model = _onnx_model(tmp_path / "plain.onnx")
    renamed = {"x": "in put:0"}
    for node in model.graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    model.graph.input[0].name = "in put:0"
    onnx.save(model, str(tmp_path / "named.onnx"))
    for shapes in ('"in put:0":[5,4]', "'in put:0':[5,4]", '{"in put:0": [5, 4]}'):
        argv = ["show", str(tmp_path / "named.onnx"), "--input-shapes", shapes]
        assert cli.main(argv) == 0, capsys.readouterr().err
        assert "Tensor[(5, 4), float32]" in capsys.readouterr().out, shapes


@pytest.mark.parametrize(
    "shapes,message",
    [
        ("y:[5,4]", r"--input-shapes names y, but the model's inputs are x"),
        ("x:[5]", r"--input-shapes gives 'x' 1 dimensions, the model has 2"),
        ("x:5,4", r"--input-shapes 'x:5,4': expected entries like"),
    ],
)
def test_onnx_shape_mistakes(shapes, message, tmp_path, capsys):
    _onnx_model(tmp_path / "mlp.onnx")
    argv = ["compile", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "x.so"), "--input-shapes", shapes]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err


def test_run_takes_tensor_parameters_only(tmp_path, capsys):
    model = tmp_path / "pair.relay"
    model.write_text('#[version = "0.0.5"]\ndef @main(%p: (Tensor[(3), float32], Tensor[(3), float32])) { %p.1 }\n')
    lib = tmp_path / "pair.so"
    assert cli.main(["compile", str(model), "-o", str(lib), "--name", "pair"]) == 0
    capsys.readouterr()
    assert cli.main(["run", str(lib)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "relay-aot: error: parameter %p has type (Tensor[(3), float32], Tensor[(3), float32]): "
        "relay-aot run passes tensors only"
    ], err


# -- damaged and unexpected input files ------------------------------------------------------------


def _input_files(directory: Path) -> dict[str, list[str]]:
    """``--inputs`` argument lists of every kind of bad input file, by name."""
    good = save_npy(lstm_args(), directory)
    np.savez(directory / "good.npz", *lstm_args())
    data = Path(good[0]).read_bytes()
    archive = (directory / "good.npz").read_bytes()
    files = {
        "empty.npy": b"",
        "truncated.npy": data[: len(data) // 2],
        "header-only.npy": data[:128],
        "garbage.npy": bytes(range(256)) * 4,
        "empty.npz": b"",
        "truncated.npz": archive[: len(archive) // 2],
        "garbage.npz": b"PK\x03\x04" + bytes(200),
    }
    for name, content in files.items():
        (directory / name).write_bytes(content)
    (directory / "dir.npy").mkdir()
    (directory / "dir.npz").mkdir()
    np.save(directory / "object.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    # float64 values float32 does not hold (exactly representable ones are converted)
    np.save(directory / "float64.npy", np.full(lstm_args()[0].shape, 0.1))
    np.save(directory / "wrong-shape.npy", lstm_args()[0][:5])
    np.savez(directory / "wrong-names.npz", a=lstm_args()[0], b=lstm_args()[1])
    np.save(directory / "npz-named.npy", 0)
    (directory / "npz-named.npy").write_bytes(archive)
    rest = good[1:]
    cases = {
        name: [str(directory / name), *rest]
        for name in (
            "empty.npy",
            "truncated.npy",
            "header-only.npy",
            "garbage.npy",
            "dir.npy",
            "object.npy",
            "float64.npy",
            "wrong-shape.npy",
            "npz-named.npy",
        )
    }
    cases.update(
        {
            name: [str(directory / name)]
            for name in ("empty.npz", "truncated.npz", "garbage.npz", "dir.npz", "wrong-names.npz")
        }
    )
    cases["too few"] = good[:2]
    return cases


def test_bad_input_files_end_in_one_line(lstm_so, tmp_path, capsys):
    """Every damaged or unexpected input file: exit status 1, one line naming the file."""
    cases = _input_files(tmp_path)
    problems = []
    for name, inputs in cases.items():
        status = cli.main(["run", str(lstm_so), "--inputs", *inputs])
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        if status != 1 or len(lines) != 1 or not lines[0].startswith("relay-aot: error: "):
            problems.append(f"{name}: status {status}, stderr {captured.err!r}")
        elif name.endswith((".npy", ".npz")) and name not in lines[0] and "%" not in lines[0]:
            problems.append(f"{name}: the message names neither the file nor the parameter: {lines[0]}")
    assert not problems, "\n".join(problems)


def test_randomly_damaged_input_files_end_in_one_line(lstm_so, tmp_path, capsys):
    """Truncations and byte flips of a good .npy and .npz (a small fuzz campaign)."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    good = save_npy(lstm_args(), tmp_path)
    np.savez(tmp_path / "good.npz", *lstm_args())
    originals = {".npy": Path(good[0]).read_bytes(), ".npz": (tmp_path / "good.npz").read_bytes()}

    @hypothesis.settings(max_examples=60, deadline=None, database=None)
    @hypothesis.given(
        suffix=st.sampled_from([".npy", ".npz"]),
        cut=st.integers(0, 100_000),
        flips=st.lists(st.tuples(st.integers(0, 100_000), st.integers(1, 255)), max_size=4),
    )
    def damaged(suffix, cut, flips):
        data = bytearray(originals[suffix])
        for position, value in flips:
            data[position % len(data)] ^= value
        data = data[: cut % (len(data) + 1)]
        path = tmp_path / f"damaged{suffix}"
        path.write_bytes(bytes(data))
        inputs = [str(path), *good[1:]] if suffix == ".npy" else [str(path)]
        status = cli.main(["run", str(lstm_so), "--inputs", *inputs])
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 0 or (status == 1 and len(err) == 1 and err[0].startswith("relay-aot: error: ")), err

    damaged()


def test_tune_writes_records_that_compile_reads(tmp_path, capsys):
    (tmp_path / "dense.relay").write_text(
        '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 24), float32], %w: Tensor[(40, 24), float32]) {\n'
        "  nn.relu(nn.dense(%x, %w, units=40))\n}\n"
    )
    log = tmp_path / "records.json"
    assert cli.main(["tune", str(tmp_path / "dense.relay"), "-o", str(log), "--trials", "1", "--tuner", "random"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {log}" in out and "--tuning-records" in out, out
    assert log.read_text().count("\n") >= 1
    assert cli.main(["tune", str(tmp_path / "dense.relay"), "-o", str(log), "--trials", "1"]) == 0
    assert "0 trials measured now" in capsys.readouterr().out
    assert (
        cli.main(
            ["compile", str(tmp_path / "dense.relay"), "-o", str(tmp_path / "dense.so"), "--tuning-records", str(log)]
        )
        == 0
    )
    x, w = np.ones((2, 24), "float32"), np.ones((40, 24), "float32")
    result = relay_aot.load(tmp_path / "dense.so")(x, w).numpy()
    np.testing.assert_allclose(result, np.full((2, 40), 24.0))
    assert (
        cli.main(
            [
                "compile",
                str(tmp_path / "dense.relay"),
                "-o",
                str(tmp_path / "x.so"),
                "--tuning-records",
                str(tmp_path / "none.json"),
            ]
        )
        == 1
    )
    assert "--tuning-records" in capsys.readouterr().err

"""examples/cpp_deploy: built against libtvm_runtime.so only, run on exported libraries, and
compared with the Relay interpreter's result printed the way ``relay-aot run`` prints."""

from __future__ import annotations

import subprocess

import pytest
from deploy_support import MODELS, assert_same_printout, build_deploy, export, parse, save_npy

from relay_aot import testing
from relay_aot.cli import format_result


@pytest.fixture(scope="module")
def deploy(tmp_path_factory):
    """The example program, built once."""
    return build_deploy(tmp_path_factory.mktemp("cpp") / "deploy")


def test_links_only_the_tvm_runtime(deploy):
    libraries = subprocess.run(["ldd", str(deploy)], capture_output=True, text=True, check=True).stdout
    assert "libtvm_runtime.so" in libraries
    assert "libtvm.so" not in libraries and "libpython" not in libraries


@pytest.mark.parametrize("model", ["structures", "lstm", "dynamic"])
def test_cpp_result_matches_interpreter(deploy, model, tmp_path):
    text, make_args = MODELS[model]
    library = export(model, model, tmp_path)
    inputs = save_npy(make_args(), tmp_path)
    run = subprocess.run([str(deploy), str(library), *inputs], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    expected = format_result(testing.run_reference(parse(text), make_args(), "interpreter"))
    assert_same_printout(run.stdout, "\n".join(expected), rtol=1e-4)


@pytest.mark.parametrize(
    "inputs,message",
    [
        (["missing.npy"], "missing.npy: cannot open"),
        (["notnpy.npy"], "notnpy.npy: not a .npy file"),
        (["x.npy"], "ArgumentTypeError: the program takes 2 arguments, got 1"),
    ],
)
def test_cpp_errors_are_one_line(deploy, inputs, message, tmp_path):
    library = export("structures", "structures", tmp_path)
    (tmp_path / "notnpy.npy").write_text("hello")
    save_npy(MODELS["structures"][1]()[:1], tmp_path)
    (tmp_path / "arg0.npy").rename(tmp_path / "x.npy")
    run = subprocess.run([str(deploy), str(library), *inputs], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.strip().splitlines() == [f"deploy: error: {message}"]


def test_cpp_usage(deploy):
    run = subprocess.run([str(deploy)], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.startswith("usage:")

"""Exported libraries: loaded in a fresh process the TVM way and with relay_aot.load, symbol
prefixes (checked with nm), several models in one process and linked into one executable."""

from __future__ import annotations

import pickle
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_support import MODELS, assert_same_printout, build_deploy, export, parse, run_python, save_npy, tvm_dir

import relay_aot
from relay_aot import names, testing
from relay_aot.cli import format_result
from relay_aot.runtime import exported_symbols

TESTS = str(Path(__file__).resolve().parent)

needs_binutils = pytest.mark.skipif(not (shutil.which("nm") and shutil.which("readelf")), reason="needs binutils")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """Exported libraries by model name: both models, and the LSTM once more as "lstm2"."""
    directory = tmp_path_factory.mktemp("libs")
    return {
        "structures": export("structures", "structures", directory),
        "lstm": export("lstm", "lstm", directory),
        "lstm2": export("lstm", "lstm2", directory),
        "dynamic": export("dynamic", "dynamic", directory),
    }


def reference(model: str):
    """The interpreter's result for MODELS[model], normalized."""
    text, make_args = MODELS[model]
    return testing.normalize(testing.run_reference(parse(text), make_args(), "interpreter"))


# Runs in a fresh interpreter: loads the library four ways and pickles each normalized result.
_LOAD_FOUR_WAYS = """
import pickle
import numpy as np, tvm
import relay_aot
from relay_aot import testing
path, name, args = {path!r}, {name!r}, pickle.loads({args!r})
lib = tvm.runtime.load_module(path)
raw = [tvm.nd.array(np.asarray(a)) for a in args]
results = {{
    "load_module(path)[name]": lib[name](*raw),
    "load_module(path).entry_func": lib.entry_func(*raw),
    "relay_aot.load(path)": relay_aot.load(path)(*args),
    "relay_aot.load(path, name)": relay_aot.load(path, name)(*args),
}}
with open({out!r}, "wb") as out:
    pickle.dump({{k: testing.normalize(v) for k, v in results.items()}}, out)
"""


@pytest.mark.parametrize("model", ["structures", "lstm", "dynamic"])
def test_fresh_process_matches_interpreter(libs, model, tmp_path):
    """Plain TVM (by name and as the module's entry_func) and relay_aot.load, in a process
    with no C++ compiler and an empty cache: nothing is compiled, results match the interpreter."""
    out, cache = tmp_path / "results.pickle", tmp_path / "cache"
    args = MODELS[model][1]()
    code = _LOAD_FOUR_WAYS.format(path=str(libs[model]), name=model, args=pickle.dumps(args), out=str(out))
    run_python(code, {"RELAY_AOT_CACHE_DIR": str(cache), "CXX": "/nonexistent/c++"})
    assert not cache.exists(), "loading a library must not compile anything"
    expected = reference(model)
    for how, actual in pickle.loads(out.read_bytes()).items():
        testing.assert_same(actual, expected, rtol=1e-4, names=(how, "interpreter"))


@needs_binutils
def test_exported_symbols_carry_the_model_prefix(libs):
    """Every defined dynamic symbol starts with the model name (the C API's with
    ``tvmgen_<model>_``), except TVM's loader protocol; so two libraries share no symbol but
    those. TVM's runtime slots are not exported. (Also checks our ELF reader against nm.
    Local symbols in the dynamic table export nothing: GNU gold keeps the thread-local statics
    there, bound LOCAL, for their TLS relocations; nm prints their type in lower case.)"""
    exported = {}
    for name, path in libs.items():
        out = subprocess.run(["nm", "-D", "--defined-only", str(path)], check=True, capture_output=True, text=True)
        rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
        symbols = {row[-1] for row in rows if row[-2].isupper() or row[-2] in "uvw"}
        assert symbols == exported_symbols(path)
        prefixes = (name, names.c_api(name, ""))
        foreign = sorted(s for s in symbols if not s.startswith(prefixes) and s not in names.TVM_LOADER_SYMBOLS)
        assert not foreign, f"{path.name} exports symbols without the prefix {name!r}: {foreign}"
        assert {name, names.metadata_symbol(name), "__tvm_main__"} <= symbols
        assert any(s.startswith(f"{name}_k") for s in symbols)  # kernels are exported too
        assert not symbols & set(names.TVM_SLOTS)
        exported[name] = symbols
    shared = exported["lstm"] & exported["lstm2"]
    assert shared <= set(names.TVM_LOADER_SYMBOLS), sorted(shared - set(names.TVM_LOADER_SYMBOLS))


@needs_binutils
def test_references_to_own_symbols_bind_locally(libs):
    """No dynamic relocation names a symbol the library defines (-Bsymbolic): the loader slots
    TVM fills per library cannot be interposed by another library's copies."""
    for path in libs.values():
        defined = exported_symbols(path)
        out = subprocess.run(["readelf", "-rW", str(path)], check=True, capture_output=True, text=True)
        targets = set()
        for line in out.stdout.splitlines():
            fields = line.split()
            if len(fields) >= 5 and fields[2].startswith("R_"):
                targets.add(fields[4].split("@")[0])
        assert not targets & defined, f"{path.name}: interposable references to {sorted(targets & defined)}"


def test_models_side_by_side_in_one_process(libs, tmp_path):
    """The same program under two names and a second program, loaded and run in one process."""
    out = tmp_path / "results.pickle"
    args = {name: MODELS["lstm" if name.startswith("lstm") else name][1]() for name in libs}
    run_python(f"""
import pickle
import relay_aot
from relay_aot import testing
paths, args = { ({k: str(v) for k, v in libs.items()})!r}, pickle.loads({pickle.dumps(args)!r})
modules = {{name: relay_aot.load(path) for name, path in paths.items()}}
results = {{name: testing.normalize(module(*args[name])) for name, module in modules.items()}}
with open({str(out)!r}, "wb") as f:
    pickle.dump(results, f)
""")
    for name, actual in pickle.loads(out.read_bytes()).items():
        model = "lstm" if name.startswith("lstm") else name
        testing.assert_same(actual, reference(model), rtol=1e-4, names=(name, "interpreter"))


def test_values_outlive_the_module(libs):
    """ADTs, references and closures the library made stay usable after its module is freed."""
    run_python(
        f"""
import gc, numpy as np, tvm, relay_aot
from deploy_support import structures_args
module = relay_aot.load({str(libs["structures"])!r})
result = module(*structures_args())
scale = result[4]  # a closure inside a tuple: a plain PackedFunc
del module
gc.collect()
assert float(result[1][0].numpy()) == 1.5, result[1][0]
np.testing.assert_allclose(scale(tvm.nd.array(np.int32(2))).numpy(), 2 * structures_args()[0])
del result, scale
gc.collect()
""",
        {"PYTHONPATH": TESTS},
    )


def test_two_models_linked_into_one_executable(libs, tmp_path):
    """deploy.cc linked against lstm.so and lstm2.so (both loaded at start-up, in the global
    symbol scope), running each. Running only lstm2 was a crash before -Bsymbolic: its kernels
    used lstm.so's loader slots, which TVM never filled since lstm.so was never loaded."""
    deploy = build_deploy(tmp_path / "deploy_linked", link=(libs["lstm"], libs["lstm2"]))
    needed = subprocess.run(["readelf", "-d", str(deploy)], capture_output=True, text=True).stdout
    assert "lstm.so" in needed and "lstm2.so" in needed
    inputs = save_npy(MODELS["lstm"][1](), tmp_path)
    expected = "\n".join(format_result(relay_aot.load(libs["lstm"])(*MODELS["lstm"][1]())))
    for name in ("lstm2", "lstm"):
        run = subprocess.run([str(deploy), str(libs[name]), *inputs], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert_same_printout(run.stdout, expected)


def test_load_finds_the_model_name_and_rejects_bad_files(libs, tmp_path):
    assert relay_aot.load(libs["lstm2"]).name == "lstm2"
    with pytest.raises(ValueError, match="no relay_aot model named 'lstm'.*models: lstm2"):
        relay_aot.load(libs["lstm2"], name="lstm")
    with pytest.raises(ValueError, match="not usable as a symbol prefix"):
        relay_aot.load(libs["lstm2"], name="no-dashes")
    text = tmp_path / "model.so"
    text.write_text("not a library")
    with pytest.raises(ValueError, match="not an ELF shared library"):
        relay_aot.load(text)
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(libs["lstm"].read_bytes()[:100])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        relay_aot.load(truncated)
    with pytest.raises(ValueError, match="holds no relay_aot model"):
        relay_aot.load(tvm_dir() / "libtvm_runtime.so")
    with pytest.raises(FileNotFoundError):
        relay_aot.load(tmp_path / "missing.so")


def test_export_library_is_self_contained(tmp_path):
    """The exported copy (constants included) runs after its build directory is deleted."""
    compiled = relay_aot.compile(parse(MODELS["lstm"][0]), name="lstm", cache=False)
    copy = compiled.export_library(tmp_path / "copy.so")
    shutil.rmtree(compiled.library_path.parent)
    out = tmp_path / "result.pickle"
    run_python(
        f"""
import pickle, relay_aot
from relay_aot import testing
from deploy_support import lstm_args
with open({str(out)!r}, "wb") as f:
    pickle.dump(testing.normalize(relay_aot.load({str(copy)!r})(*lstm_args())), f)
""",
        {"PYTHONPATH": TESTS},
    )
    testing.assert_same(pickle.loads(out.read_bytes()), reference("lstm"), rtol=1e-4)

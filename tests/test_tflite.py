"""TFLite models in (issue 48): ``relay_aot.read_tflite`` and ``relay-aot compile M.tflite``.

The four MLPerf Tiny v1.0 int8 reference models are in ``tests/data/tinyml`` (Apache-2.0, see
its README). A file is recognised as TFLite by its flatbuffer identifier, whatever its name;
inputs and outputs are named, shaped and typed from the file, and the C API's fields are named
after them as TVM's AOT executor names them.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import relay_aot
from relay_aot import cli
from relay_aot.errors import RelayAotError

TINYML = Path(__file__).resolve().parent / "data" / "tinyml"
KWS = TINYML / "kws_ref_model.tflite"


def test_the_file_names_types_and_quantizes_the_inputs_and_outputs():
    model = relay_aot.read_tflite(KWS)
    ((x,), (y,)) = model.inputs, model.outputs
    assert (x.name, x.shape, x.dtype, x.zero_point) == ("input_1", (1, 49, 10, 1), "int8", (83,))
    assert (y.name, y.shape, y.dtype, y.zero_point) == ("Identity", (1, 12), "int8", (-128,))
    assert x.scale is not None and abs(x.scale[0] - 0.5847029) < 1e-6
    # the weights are parameters that model.params binds; the input is the one left
    main = model.mod["main"]
    assert [p.name_hint for p in main.params if p.name_hint not in model.params] == ["input_1"]


def test_the_command_line_recognises_a_model_by_its_identifier(tmp_path, capsys):
    """No suffix, no --format: the TFL3 identifier says it; the C header's fields are the
    model's input and output names (TVM's AOT interface: input_1, Identity)."""
    model = tmp_path / "kws"  # no .tflite suffix
    shutil.copyfile(KWS, model)
    library, header = tmp_path / "kws.so", tmp_path / "tvmgen_kws.h"
    argv = ["compile", str(model), "-o", str(library), "--name", "kws", "--c-header", str(header)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "@main(%input_1: Tensor[(1, 49, 10, 1), int8]) -> Tensor[(1, 12), int8]" in capsys.readouterr().out
    text = header.read_text()
    assert re.search(r"void\* input_1;", text) and re.search(r"void\* Identity;", text), text
    compiled = relay_aot.load(library)
    out = compiled(np.zeros((1, 49, 10, 1), "int8")).numpy()
    assert out.shape == (1, 12) and out.dtype == np.int8


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["--format", "tflite"], r"not a TFLite model \(no TFL3 identifier at byte 4\)"),
        (["--input-shapes", "x:[1]"], r"--input-shapes applies to ONNX models; a TFLite model declares"),
    ],
)
def test_command_line_mistakes_are_one_line(argv_tail, message, tmp_path, capsys):
    model = tmp_path / ("x.relay" if "--format" in argv_tail else "kws.tflite")
    if "--format" in argv_tail:
        model.write_text('#[version = "0.0.5"]\ndef @main(%x: float32) { %x }\n')
    else:
        shutil.copyfile(KWS, model)
    status = cli.main(["compile", str(model), "-o", str(tmp_path / "x.so"), *argv_tail])
    err = capsys.readouterr().err.strip().splitlines()
    assert status != 0 and len(err) == 1 and re.search(message, err[0]), err


def test_without_the_tflite_package_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tflite", None)
    with pytest.raises(RelayAotError, match=r"pip install 'relay_aot\[tflite\]'"):
        relay_aot.read_tflite(KWS)


def test_a_damaged_model_is_a_clear_error(tmp_path):
    damaged = tmp_path / "damaged.tflite"
    damaged.write_bytes(KWS.read_bytes()[:64])
    with pytest.raises(RelayAotError, match="damaged.tflite"):
        relay_aot.read_tflite(damaged)

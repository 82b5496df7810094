"""MLPerf Tiny on a Cortex-M4 (issue 49): TFLite int8 models built and run as a user does.

``relay-aot compile M.tflite --standalone DIR --name m --target cortex-m4``, then ``make -C DIR``
with arm-none-eabi-gcc and the Cortex-M4's flags; a C99 ``main`` (``testing.standalone.c_main``)
linked with the board's start-up code and linker script (``examples/standalone/cortex-m4``),
newlib-nano and ``-Wl,--gc-sections``, run on QEMU's ``mps2-an386``. Its outputs equal TFLite's
reference kernels (LiteRT ``BUILTIN_REF``) bit for bit on three inputs -- the full int8 range,
[-40, 40], the full range again -- and the archive needs nothing but libc's memory and string
functions, libm and the compiler runtime.

The held-out networks of the four families (``testing.tflite_models.HELD_OUT_FAMILIES``, a few
seconds each) run in CI; the four MLPerf Tiny models of ``tests/data/tinyml`` are marked slow.
Skipped without the toolchain, QEMU (except in CI, which installs them) or LiteRT.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from relay_aot.backends.standalone.targets import TARGETS
from relay_aot.testing import standalone as sa
from relay_aot.testing.tflite_models import HELD_OUT_FAMILIES, LITERT_MISSING, Reference

M4 = TARGETS["cortex-m4"]
TINYML = Path(__file__).resolve().parent / "data" / "tinyml"
MLPERF_TINY = ["kws_ref_model", "pretrainedResnet_quant", "vww_96_int8", "ad01_int8"]

#: The flags of the issue's make command line (the target's own: make_package passes them).
FLAGS = ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2")

#: The three inputs' ranges, drawn with seeds 0, 1 and 2.
RANGES = [(-128, 127), (-40, 40), (-128, 127)]

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason=LITERT_MISSING)


def _inputs(shape) -> list[np.ndarray]:
    return [
        np.random.default_rng(seed).integers(low, high + 1, size=shape).astype(np.int8)
        for seed, (low, high) in enumerate(RANGES)
    ]


def _command_line_package(model: Path, directory: Path) -> sa.Package:
    """``relay-aot compile MODEL --standalone DIR --name m --target cortex-m4``, the package read back."""
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        ["relay-aot", "compile", str(model), "--standalone", str(directory), "--name", "m", "--target", "cortex-m4"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    assert "libtvmgen_m.a for cortex-m4" in done.stdout, done.stdout
    return sa.read_package(directory, "m", "cortex-m4")


def _check_on_the_cortex_m4(model: Path, tmp_path: Path) -> None:
    """Build, link and run the model's package on QEMU: its outputs are the reference's on the
    three inputs, and its archive needs only libc's memory functions, libm and libgcc."""
    sa.skip_without_tools(M4)
    assert M4.cflags == FLAGS
    package = _command_line_package(model, tmp_path / "pkg")
    header = (tmp_path / "pkg" / "tvmgen_m.h").read_text()
    assert "relay_aot's own micro-kernels" in header and "STACK_SIZE" in header, "the header tells what it holds"
    sa.make_package(package)
    assert not sa.disallowed(sa.undefined_symbols(package))
    reference = Reference(model)
    (field,) = package.api.inputs
    for k, x in enumerate(_inputs(field.type.shape)):
        rc, error, outputs = sa.run_c_main(package, [x], work=tmp_path)
        assert rc == 0, error
        for got, want, out in zip(outputs, reference([x]), package.api.outputs, strict=True):
            assert (got.shape, got.dtype) == (want.shape, want.dtype), out
            wrong = got != want
            assert not wrong.any(), (
                f"{model.name}, input {k} in {RANGES[k]}, output {out.name}: {int(wrong.sum())} of {wrong.size} "
                f"values differ (at most by {int(np.abs(got.astype(int) - want.astype(int)).max())})"
            )


@needs_litert
# CI runs the residual (ResNet) and depthwise (KWS) networks; VWW's and AD's layers are of the
# same kinds (-m slow runs them)
@pytest.mark.parametrize(
    "family",
    [f if f in ("kws", "resnet") else pytest.param(f, marks=pytest.mark.slow) for f in sorted(HELD_OUT_FAMILIES)],
)
def test_held_out_int8_networks_on_the_cortex_m4_are_the_reference_kernels(family, tmp_path):
    path = tmp_path / f"{family}.tflite"
    HELD_OUT_FAMILIES[family]().write(path)
    _check_on_the_cortex_m4(path, tmp_path)


@needs_litert
@pytest.mark.slow
@pytest.mark.parametrize("name", MLPERF_TINY)
def test_mlperf_tiny_models_on_the_cortex_m4_are_the_reference_kernels(name, tmp_path):
    _check_on_the_cortex_m4(TINYML / f"{name}.tflite", tmp_path)


@needs_litert
@pytest.mark.parametrize("family", sorted(HELD_OUT_FAMILIES))
def test_the_three_inputs_exercise_every_layer_of_the_held_out_networks(family, tmp_path):
    """No layer's output saturates or collapses to a few values on the three inputs (TFLite's
    reference kernels, every tensor): an exact result there compares many values."""
    builder = HELD_OUT_FAMILIES[family]()
    path = tmp_path / f"{family}.tflite"
    builder.write(path)
    reference = Reference(path, every_tensor=True)
    runs = [reference([x]) for x in _inputs(builder.tensors[builder.inputs[0]]["shape"])]
    for op in builder.operators:
        index = op["outputs"][0]
        values = np.stack([run[index] for run in runs])
        name = builder.tensors[index]["name"]
        assert np.mean(values == 127) < 0.1 and np.mean(values == -128) < 0.75, (name, values)
        assert len(np.unique(values)) >= min(20, values.size // 2), (name, np.unique(values))


def test_a_package_read_back_from_its_header_has_the_c_api_export_wrote(tmp_path):
    """read_package (the tests' view of a package the command line wrote): the fields, types and
    sizes export_standalone returned, for inputs of several ranks (a 0-d one) and a nested tuple."""
    import tvm

    import relay_aot

    mod = tvm.relay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), int8], %s: Tensor[(), float32]) {
  (cast(%x, dtype="int32"), (multiply(%s, 2f), %x))
}""")
    written = relay_aot.export_standalone(mod, tmp_path / "pkg", name="net")
    read = sa.read_package(tmp_path / "pkg", "net")
    assert read.api == dataclasses.replace(written.api, target="")  # the target string is not read back
    assert [f.type.shape for f in read.api.inputs] == [(2, 3), ()]
    assert (read.workspace_size, read.planned_size, read.target) == (
        written.workspace_size,
        written.planned_size,
        written.target,
    )
    assert set(written.files) <= set(read.files)

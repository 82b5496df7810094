"""relay_aot's int8 kernels for Arm's M-profile DSP extension (``relay_aot/kernels/arm_dsp.py``).

The Cortex-M4 packages run on QEMU's ``mps2-an386`` (skipped without the toolchain, as in
test_standalone.py); the int32 sums are compared with numpy's int64 ones, the int8 results of
TFLite models with TFLite's reference kernels (LiteRT ``BUILTIN_REF``) and with the host's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.relay.op.strategy import generic

import relay_aot
from relay_aot.backends.standalone.targets import TARGETS
from relay_aot.kernels import arm_dsp
from relay_aot.passes import arm_dsp as dsp_pass
from relay_aot.passes import requantization
from relay_aot.testing import standalone as sa
from relay_aot.testing.tflite_models import ModelBuilder, Reference

M4 = TARGETS["cortex-m4"]

#: (batch, depth, units): depths of every remainder mod 4, below 4 and long; units of every
#: rows-per-call (4, 3, 2, 1); a shape twice (two kernels share one micro-kernel).
SHAPES = [
    (1, 640, 128),
    (1, 33, 7),
    (3, 40, 9),
    (2, 7, 6),
    (1, 3, 10),
    (1, 1, 5),
    (1, 130, 12),
    (1, 127, 4),
    (1, 8, 8),
    (1, 8, 8),
]


def _require_m4() -> None:
    sa.skip_without_tools(M4, ("gcc", "ar", "nm"))


def _host_c_output(main: str, tmp_path) -> list[int]:
    """The integers the program ``main`` (C99) prints, built by the host's C compiler (the test
    skips without one)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no host C compiler")
    source, executable = tmp_path / "main.c", tmp_path / "main"
    source.write_text(main)
    subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Werror", str(source), "-o", str(executable)], check=True)
    return [int(v) for v in subprocess.run([str(executable)], capture_output=True, text=True).stdout.split()]


def _extreme_int8(rng, shape) -> np.ndarray:
    """int8 values, a third of them -128 or 127, the rest uniform."""
    x = rng.integers(-128, 128, size=shape)
    pick = rng.random(shape)
    x[pick < 0.17] = -128
    x[pick > 0.83] = 127
    return x.astype(np.int8)


def _dense_program(rng):
    """@main of one int8 input per shape, each ``dense(x, W) + b`` in int32 (W constant, with
    rows of all -128 and all 127 where there are more than two), and the numpy int64 sums."""
    params, outputs, weights = [], [], []
    for k, (batch, depth, units) in enumerate(SHAPES):
        x = relay.var(f"x{k}", shape=(batch, depth), dtype="int8")
        w = _extreme_int8(rng, (units, depth))
        if units > 2:
            w[0], w[1] = -128, 127
        b = rng.integers(-(2**20), 2**20, size=units).astype(np.int32)
        params.append(x)
        weights.append((w, b))
        outputs.append(relay.nn.dense(x, relay.const(w), out_dtype="int32") + relay.const(b))
    return tvm.IRModule.from_expr(relay.Function(params, relay.Tuple(outputs))), weights


def test_int8_dense_sums_on_the_cortex_m4_are_numpys(tmp_path):
    """Every rows-per-call and depth remainder, inputs and weights at -128 and 127: the package's
    int32 sums are numpy's, and the kernels are relay_aot's micro-kernels (one definition per
    shape in kernels.c)."""
    _require_m4()
    rng = np.random.default_rng(7)
    mod, weights = _dense_program(rng)
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="m", target="cortex-m4")
    source = (package.directory / "kernels.c").read_text()
    for _, depth, units in SHAPES:
        name = arm_dsp.micro_kernel_name(arm_dsp.rows_per_call(units), depth)
        assert f"{name}((" in source, f"{name} is not called"
    sa.make_package(package)
    assert not sa.disallowed(sa.undefined_symbols(package))
    inputs = [_extreme_int8(rng, (batch, depth)) for batch, depth, _ in SHAPES]
    inputs[0][:] = -128  # the largest sums: 640 * 128 * 128
    rc, error, outputs = sa.run_c_main(package, inputs, work=tmp_path)
    assert rc == 0, error
    for x, (w, b), got, shape in zip(inputs, weights, outputs, SHAPES, strict=True):
        want = x.astype(np.int64) @ w.astype(np.int64).T + b
        np.testing.assert_array_equal(got, want.astype(np.int32), err_msg=str(shape))


def _fully_connected_model(rng) -> ModelBuilder:
    """FULLY_CONNECTED layers of the shapes, one input each, per-tensor and per-channel scales,
    each fused activation; the output scale maps the accumulator's spread to about 60 LSB."""
    model = ModelBuilder()
    activations = ["NONE", "RELU", "RELU6"]
    ys = []
    for k, (batch, depth, units) in enumerate(SHAPES):
        s_in = float(rng.uniform(0.01, 0.2))
        x = model.input(f"x{k}", (batch, depth), "int8", s_in, int(rng.integers(-60, 60)))
        w = rng.integers(-127, 128, size=(units, depth)).astype(np.int8)
        per_channel = k % 2 == 1
        base = 3.0 / (s_in * np.sqrt(depth) * 73 * 60)
        scales = (base * rng.uniform(0.5, 1.5, size=units if per_channel else 1)).astype(np.float32)
        bias = rng.integers(-3000, 3000, size=units).astype(np.int32)
        activation = activations[k % 3]
        zero_point = int(rng.integers(-30, 30))
        ys.append(model.fully_connected(x, w, scales, bias, 3.0 / 60, zero_point, activation, name=f"fc{k}"))
    model.output(*ys)
    return model


def test_fully_connected_layers_on_the_cortex_m4_are_tflites_reference(tmp_path):
    """TFLite models of every shape: the Cortex-M4 package equals TFLite's reference kernels and
    the host's library, bit for bit, on inputs of the full range, a narrow one and the extremes."""
    _require_m4()
    rng = np.random.default_rng(11)
    path = tmp_path / "fc.tflite"
    _fully_connected_model(rng).write(path)
    imported = relay_aot.read_tflite(path, exact=True)
    package = relay_aot.export_standalone(
        imported.mod, tmp_path / "pkg", name="m", target="cortex-m4", params=imported.params
    )
    assert "relay_aot_dot_s8_r4_k640((" in (package.directory / "kernels.c").read_text()
    sa.make_package(package)
    host = relay_aot.compile(imported.mod, params=imported.params)
    reference = Reference(path)
    for low, high in ((-128, 127), (-10, 10), (-128, -128), (127, 127)):
        inputs = [rng.integers(low, high + 1, size=s.shape).astype(np.int8) for s in imported.inputs]
        rc, error, outputs = sa.run_c_main(package, inputs, work=tmp_path)
        assert rc == 0, error
        result = host(*inputs)
        for k, (got, want) in enumerate(zip(outputs, reference(inputs), strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"{SHAPES[k]} on [{low}, {high}]")
            np.testing.assert_array_equal(got, result[k].numpy(), err_msg=f"{SHAPES[k]} on [{low}, {high}]")


@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize("depth", [1, 3, 4, 9, 66])
def test_the_micro_kernels_c_without_the_dsp_extension_is_the_plain_sum(rows, depth, tmp_path):
    """A package compiled for a core without the DSP extension (or for the host) takes the
    micro-kernel's plain C loop: the same sums."""
    rng = np.random.default_rng(rows * 100 + depth)
    x, w = _extreme_int8(rng, depth), _extreme_int8(rng, (rows, depth))
    name = arm_dsp.micro_kernel_name(rows, depth)
    array = lambda a: ",".join(str(int(v)) for v in a.reshape(-1))  # noqa: E731
    main = f"""{arm_dsp.micro_kernel_c(rows, depth)}
#include <stdio.h>
static const int8_t x[{depth}] = {{{array(x)}}};
static const int8_t w[{rows * depth}] = {{{array(w)}}};
int main(void) {{
  int32_t out[{rows}];
  {name}(x, w, out);
  for (int r = 0; r < {rows}; ++r) printf("%ld\\n", (long)out[r]);
  return 0;
}}
"""
    got = _host_c_output(main, tmp_path)
    assert got == (w.astype(np.int64) @ x.astype(np.int64)).tolist()


def _strategy_name(target: str, dtype: str = "int8") -> str:
    """The first implementation TVM's dense strategy gives an int8 (or ``dtype``) dense on ``target``."""
    x = relay.var("x", shape=(1, 16), dtype=dtype)
    w = relay.var("w", shape=(8, 16), dtype=dtype)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.nn.dense(x, w, out_dtype="int32")))
    call = mod["main"].body
    inputs = [tvm.te.placeholder((1, 16), dtype), tvm.te.placeholder((8, 16), dtype)]
    with tvm.target.Target(target) as t:
        strategy = generic.dense_strategy(call.attrs, inputs, call.checked_type, t)
    return [impl.name for spec in strategy.specializations for impl in spec.implementations][0]


def test_the_kernel_is_chosen_only_for_int8_on_dsp_targets_while_relay_aot_lowers():
    """TVM's strategy everywhere else: the host, aarch64, int16 operands, and outside relay_aot's
    lowering (relay.build and AutoTVM in the same process schedule as TVM does)."""
    with arm_dsp.building():
        assert _strategy_name(M4.tvm_target) == "dense_s8_dsp.relay_aot"
        assert _strategy_name(M4.tvm_target, "int16") == "dense_dsp.arm_cpu"
        assert _strategy_name(TARGETS["aarch64-linux"].tvm_target) != "dense_s8_dsp.relay_aot"
        assert _strategy_name("llvm") != "dense_s8_dsp.relay_aot"
    assert _strategy_name(M4.tvm_target) == "dense_dsp.arm_cpu"


def test_the_micro_kernels_c_is_in_the_code_digest():
    """The C is a string of a Python module: relay_aot's code digest (every cache key) covers it."""
    assert Path(arm_dsp.__file__).suffix == ".py"
    assert "__smlad" in arm_dsp.micro_kernel_c(4, 16)


def _pointwise_model(rng) -> ModelBuilder:
    """Two chained 1x1 convolutions (12 -> 10 channels per channel, RELU6; 10 -> 7 per tensor,
    an odd depth and count), and a 1x1 convolution of stride 2 (not a matrix product)."""
    model = ModelBuilder()
    s_in = 0.05
    x = model.input("x", (1, 5, 7, 12), "int8", s_in, 3)
    y = x
    for k, (channels, out, per_channel, stride, activation) in enumerate(
        [(12, 10, True, 1, "RELU6"), (10, 7, False, 1, "NONE"), (7, 6, True, 2, "RELU")]
    ):
        w = rng.integers(-127, 128, size=(out, 1, 1, channels)).astype(np.int8)
        base = 3.0 / (s_in * np.sqrt(channels) * 73 * 60)
        scales = (base * rng.uniform(0.5, 1.5, size=out if per_channel else 1)).astype(np.float32)
        bias = rng.integers(-3000, 3000, size=out).astype(np.int32)
        y = model.conv_2d(
            y,
            w,
            scales,
            bias,
            3.0 / 60,
            int(rng.integers(-20, 20)),
            stride=(stride, stride),
            padding="VALID",
            activation=activation,
            name=f"conv{k}",
        )
    model.output(y)
    return model


def _ops(mod: tvm.IRModule) -> list[str]:
    found: list[str] = []
    relay.analysis.post_order_visit(
        mod["main"],
        lambda n: found.append(n.op.name) if isinstance(n, relay.Call) and isinstance(n.op, tvm.ir.Op) else None,
    )
    return found


def test_pointwise_convolutions_are_dense_on_dsp_targets_only(tmp_path):
    """The two 1x1 convolutions of unit stride become dense products on the Cortex-M4 (int8
    operands); the strided one stays a convolution, and the host's and aarch64's are untouched."""
    path = tmp_path / "pw.tflite"
    _pointwise_model(np.random.default_rng(3)).write(path)
    imported = relay_aot.read_tflite(path, exact=True)
    mod = relay_aot.passes.bind_params(imported.mod, imported.params)
    mod = relay.transform.InferType()(mod)
    rewritten = dsp_pass.rewrite(mod, tvm.target.Target(M4.tvm_target))
    ops = _ops(rewritten)
    assert ops.count("nn.dense") == 2 and ops.count("nn.conv2d") == 1, ops
    for target in ("llvm", TARGETS["aarch64-linux"].tvm_target):
        assert dsp_pass.rewrite(mod, tvm.target.Target(target)) is mod


def test_an_average_pool_after_a_pointwise_convolution_sums_its_int8_input(tmp_path):
    """Past the requantization's stop_fusion the dense's reshape is left where it is: the pool's
    cast to int32 stays after it and fuses into the sum (moved inside the reshape, it made a
    kernel of its own with an int32 copy of the activation: 32 KB on MLPerf Tiny's KWS)."""
    rng = np.random.default_rng(3)
    model = ModelBuilder()
    x = model.input("x", (1, 5, 7, 12), "int8", 0.05, 3)
    w = rng.integers(-127, 128, size=(8, 1, 1, 12)).astype(np.int8)
    y = model.conv_2d(x, w, np.float32([0.001]), np.zeros(8, np.int32), 0.05, -2, padding="VALID", name="pw")
    model.output(model.pool_2d("AVERAGE_POOL_2D", y, (5, 7), name="pool"))
    model.write(tmp_path / "pool.tflite")
    imported = relay_aot.read_tflite(tmp_path / "pool.tflite", exact=True)
    mod = relay.transform.InferType()(relay_aot.passes.bind_params(imported.mod, imported.params))
    rewritten = relay.transform.InferType()(dsp_pass.rewrite(mod, tvm.target.Target(M4.tvm_target)))
    sums: list[relay.Call] = []
    relay.analysis.post_order_visit(
        rewritten["main"],
        lambda n: sums.append(n) if isinstance(n, relay.Call) and getattr(n.op, "name", "") == "sum" else None,
    )
    assert len(sums) == 1
    cast = sums[0].args[0]
    assert cast.op.name == "cast" and cast.args[0].op.name == "reshape", sums[0]
    assert cast.args[0].args[0].checked_type.dtype == "int8"


def test_pointwise_convolutions_on_the_cortex_m4_are_tflites_reference(tmp_path):
    """The package (two convolutions as dense products, one as TVM's) equals TFLite's reference
    kernels and the host's library bit for bit."""
    _require_m4()
    rng = np.random.default_rng(5)
    path = tmp_path / "pw.tflite"
    _pointwise_model(rng).write(path)
    imported = relay_aot.read_tflite(path, exact=True)
    package = relay_aot.export_standalone(
        imported.mod, tmp_path / "pkg", name="m", target="cortex-m4", params=imported.params
    )
    source = (package.directory / "kernels.c").read_text()
    assert "relay_aot_dot_s8_r2_k12((" in source and "relay_aot_dot_s8_r1_k10((" in source
    assert "_fused_nn_dense_add_relay_aot_requantize" in source, "the requantization is in the dense's kernel"
    sa.make_package(package)
    host = relay_aot.compile(imported.mod, params=imported.params)
    reference = Reference(path)
    for low, high in ((-128, 127), (-10, 10), (-128, -128), (127, 127)):
        x = rng.integers(low, high + 1, size=(1, 5, 7, 12)).astype(np.int8)
        rc, error, outputs = sa.run_c_main(package, [x], work=tmp_path)
        assert rc == 0, error
        np.testing.assert_array_equal(outputs[0], reference([x])[0], err_msg=f"[{low}, {high}]")
        np.testing.assert_array_equal(outputs[0], host(x).numpy(), err_msg=f"[{low}, {high}]")


#: (input shape, filters, kernel, stride, dilation, padding, per-channel, activation): windows of
#: one and several segments, depths of every remainder mod 4, rows per call 4, 3, 2, 1, strides,
#: a height dilation (relay_aot's kernel) and a width dilation (TVM's).
CONVOLUTIONS = [
    ((1, 9, 11, 5), 8, (3, 3), (1, 1), (1, 1), "SAME", True, "RELU6"),
    ((1, 12, 7, 1), 6, (10, 4), (2, 2), (1, 1), "VALID", False, "NONE"),
    ((1, 8, 8, 3), 7, (3, 3), (2, 2), (1, 1), "SAME", True, "RELU"),
    ((1, 10, 9, 3), 10, (3, 2), (1, 1), (2, 1), "VALID", True, "NONE"),
    ((1, 9, 9, 4), 4, (1, 1), (2, 2), (1, 1), "VALID", False, "NONE"),
    ((1, 9, 9, 2), 5, (3, 3), (1, 1), (2, 2), "SAME", True, "NONE"),
]


def _convolution_model(rng) -> ModelBuilder:
    model = ModelBuilder()
    ys = []
    for k, (shape, filters, kernel, stride, dilation, padding, per_channel, activation) in enumerate(CONVOLUTIONS):
        s_in = float(rng.uniform(0.01, 0.2))
        x = model.input(f"x{k}", shape, "int8", s_in, int(rng.integers(-60, 60)))
        taps = kernel[0] * kernel[1] * shape[3]
        w = rng.integers(-127, 128, size=(filters, *kernel, shape[3])).astype(np.int8)
        base = 3.0 / (s_in * np.sqrt(taps) * 73 * 60)
        scales = (base * rng.uniform(0.5, 1.5, size=filters if per_channel else 1)).astype(np.float32)
        bias = rng.integers(-3000, 3000, size=filters).astype(np.int32)
        ys.append(
            model.conv_2d(
                x,
                w,
                scales,
                bias,
                3.0 / 60,
                int(rng.integers(-20, 20)),
                stride=stride,
                dilation=dilation,
                padding=padding,
                activation=activation,
                name=f"conv{k}",
            )
        )
    model.output(*ys)
    return model


def test_convolutions_on_the_cortex_m4_are_tflites_reference(tmp_path):
    """Convolutions of every kind the kernel takes (and a width dilation, which it does not):
    the package equals TFLite's reference kernels and the host's library bit for bit, on inputs
    of the full range, a narrow one and the extremes."""
    _require_m4()
    rng = np.random.default_rng(13)
    path = tmp_path / "conv.tflite"
    _convolution_model(rng).write(path)
    imported = relay_aot.read_tflite(path, exact=True)
    package = relay_aot.export_standalone(
        imported.mod, tmp_path / "pkg", name="m", target="cortex-m4", params=imported.params
    )
    source = (package.directory / "kernels.c").read_text()
    for name in ("r4_s3x15(", "r3_s10x4(", "r1_s3x9(", "r2_s3x6_d2(", "r4_s1x4("):
        assert f"relay_aot_conv_s8_{name}" in source, name
    assert source.count("relay_aot_conv_s8_r") == 2 * 5, "the width-dilated convolution is TVM's"
    # the two undilated SAME ones do their padding: a call per pixel for all filters, a window
    # leaving the image copied (no pad kernel, no padded copy); the dilated one's pad is a kernel
    for name in ("o8_r4_k3x3x5", "o7_r1_k3x3x3"):
        assert f"relay_aot_conv_s8_{name}((&(p0[" in source and f"relay_aot_conv_s8_{name}_border(p0, " in source
    assert len(set(re.findall(r"TVM_DLL int32_t (m_k\d+_fused_nn_pad_nn_conv2d\w*)\(", source))) == 2
    assert len(set(re.findall(r"TVM_DLL int32_t (m_k\d+_fused_nn_pad_cast)\(", source))) == 1, "TVM's int16 pad"
    # the requantization is in the convolution's kernel (its stop_fusion dropped), except the
    # width-dilated one's: one separate requantization kernel
    assert source.count("_fused_nn_conv2d_add_relay_aot_requantize") >= 5
    assert len(set(re.findall(r"TVM_DLL int32_t (m_k\d+_fused_cast_multiply\w*)\(", source))) == 1
    assert "int64_t* p" not in source, "the requantization's multipliers are int32 arrays"
    assert source.count("relay_aot_requantize((") == 5, "the importer's requantization of our sums, as one call"
    sa.make_package(package)
    host = relay_aot.compile(imported.mod, params=imported.params)
    reference = Reference(path)
    for low, high in ((-128, 127), (-10, 10), (-128, -128), (127, 127)):
        inputs = [rng.integers(low, high + 1, size=s.shape).astype(np.int8) for s in imported.inputs]
        rc, error, outputs = sa.run_c_main(package, inputs, work=tmp_path)
        assert rc == 0, error
        result = host(*inputs)
        for k, (got, want) in enumerate(zip(outputs, reference(inputs), strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"{CONVOLUTIONS[k]} on [{low}, {high}]")
            np.testing.assert_array_equal(got, result[k].numpy(), err_msg=f"{CONVOLUTIONS[k]} on [{low}, {high}]")


@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("segments, depth, dilation", [(1, 5, 1), (3, 9, 1), (2, 16, 3)])
def test_the_convolution_micro_kernels_c_without_the_dsp_extension_is_the_plain_sum(
    rows, segments, depth, dilation, tmp_path
):
    rng = np.random.default_rng(rows + depth)
    row = depth + 7  # the input's row stride
    x = _extreme_int8(rng, ((segments - 1) * dilation + 1) * row)
    w = _extreme_int8(rng, (rows, segments, depth))
    windows = np.stack([x[s * dilation * row : s * dilation * row + depth] for s in range(segments)])
    want = (w.astype(np.int64).reshape(rows, -1) @ windows.astype(np.int64).reshape(-1)).tolist()
    name = arm_dsp.micro_kernel_name(rows, depth, segments, dilation)
    array = lambda a: ",".join(str(int(v)) for v in a.reshape(-1))  # noqa: E731
    main = f"""{arm_dsp.micro_kernel_c(rows, depth, segments, dilation)}
#include <stdio.h>
static const int8_t x[{x.size}] = {{{array(x)}}};
static const int8_t w[{w.size}] = {{{array(w)}}};
int main(void) {{
  int32_t out[{rows}];
  {name}(x, {row}, w, out);
  for (int r = 0; r < {rows}; ++r) printf("%ld\\n", (long)out[r]);
  return 0;
}}
"""
    got = _host_c_output(main, tmp_path)
    assert got == want


def test_int64_multipliers_that_fit_are_int32():
    """An int64 product by an int64 constant that fits in int32 multiplies by the int32 constant
    widened in the kernel (GCC's SMULL, LLVM's VPMULDQ); other constants are left alone."""
    x = relay.var("x", shape=(4, 3), dtype="int32")
    wide = relay.cast(x, "int64")
    small = relay.const(np.array([3, -(2**31), 2**31 - 1], np.int64), "int64")
    large = relay.const(np.array([3, 2**31, 1], np.int64), "int64")
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.Tuple([wide * small, wide * large])))
    mod = relay.transform.InferType()(mod)
    narrowed = requantization.narrow_multipliers(mod)
    small_product, large_product = narrowed["main"].body.fields
    assert small_product.args[1].op.name == "cast" and small_product.args[1].args[0].data.dtype == "int32"
    assert isinstance(large_product.args[1], relay.Constant)
    values = np.arange(-6, 6, dtype=np.int32).reshape(4, 3)
    for want, got in zip(relay_aot.compile(mod)(values), relay_aot.compile(narrowed)(values)):
        np.testing.assert_array_equal(want.numpy(), got.numpy())


#: (input shape, multiplier, kernel, stride, dilation, padding, activation): channels a multiple
#: of four, with a remainder, below four; strides; a multiplier of two, a dilation and one
#: channel (TVM's kernels, or the convolution's).
DEPTHWISE = [
    ((1, 9, 7, 8), 1, (3, 3), (1, 1), (1, 1), "SAME", "RELU6"),
    ((1, 10, 9, 6), 1, (3, 3), (2, 2), (1, 1), "SAME", "NONE"),
    ((1, 8, 8, 3), 1, (3, 2), (1, 1), (1, 1), "VALID", "RELU"),
    ((1, 7, 7, 4), 2, (3, 3), (1, 1), (1, 1), "SAME", "NONE"),
    ((1, 11, 11, 4), 1, (3, 3), (1, 1), (2, 2), "VALID", "NONE"),
    ((1, 7, 6, 1), 4, (3, 3), (1, 1), (1, 1), "SAME", "NONE"),
]


def _depthwise_model(rng) -> ModelBuilder:
    model = ModelBuilder()
    ys = []
    for k, (shape, multiplier, kernel, stride, dilation, padding, activation) in enumerate(DEPTHWISE):
        s_in = float(rng.uniform(0.01, 0.2))
        x = model.input(f"x{k}", shape, "int8", s_in, int(rng.integers(-60, 60)))
        channels = shape[3] * multiplier
        w = rng.integers(-127, 128, size=(1, *kernel, channels)).astype(np.int8)
        base = 3.0 / (s_in * np.sqrt(kernel[0] * kernel[1]) * 73 * 60)
        scales = (base * rng.uniform(0.5, 1.5, size=channels)).astype(np.float32)
        bias = rng.integers(-3000, 3000, size=channels).astype(np.int32)
        ys.append(
            model.depthwise_conv_2d(
                x,
                w,
                scales,
                bias,
                3.0 / 60,
                int(rng.integers(-20, 20)),
                stride=stride,
                dilation=dilation,
                padding=padding,
                activation=activation,
                name=f"dw{k}",
            )
        )
    model.output(*ys)
    return model


def test_depthwise_convolutions_on_the_cortex_m4_are_tflites_reference(tmp_path):
    """Depthwise convolutions the kernel takes (and three it does not): the package equals
    TFLite's reference kernels and the host's library bit for bit."""
    _require_m4()
    rng = np.random.default_rng(17)
    path = tmp_path / "dw.tflite"
    _depthwise_model(rng).write(path)
    imported = relay_aot.read_tflite(path, exact=True)
    package = relay_aot.export_standalone(
        imported.mod, tmp_path / "pkg", name="m", target="cortex-m4", params=imported.params
    )
    source = (package.directory / "kernels.c").read_text()
    for name in ("c8_k3x3(", "c6_k3x3(", "c3_k3x2("):
        assert f"relay_aot_dw_s8_{name}(" in source, name
    definitions = re.findall(r"static int32_t (relay_aot_dw_s8_\w+)\(", source)
    assert sorted(definitions) == sorted(
        ["relay_aot_dw_s8_c8_k3x3", "relay_aot_dw_s8_c6_k3x3", "relay_aot_dw_s8_c3_k3x2"]
        + ["relay_aot_dw_s8_c8_k3x3_border", "relay_aot_dw_s8_c6_k3x3_border"]
    ), "multiplier 2 and dilation 2 are TVM's"
    # the SAME ones relay_aot's kernels compute do their padding (no pad kernel, no padded copy):
    # the two depthwise ones and the one of one channel and multiplier 4 (a convolution)
    assert len(set(re.findall(r"TVM_DLL int32_t (m_k\d+_fused_nn_pad_nn_conv2d\w*)\(", source))) == 3
    assert "relay_aot_conv_s8_o4_r4_k3x3x1_border(p0, " in source
    assert len(set(re.findall(r"TVM_DLL int32_t (m_k\d+_fused_nn_pad)\(", source))) == 1, "the multiplier 2's pad"
    sa.make_package(package)
    host = relay_aot.compile(imported.mod, params=imported.params)
    reference = Reference(path)
    for low, high in ((-128, 127), (-10, 10), (-128, -128), (127, 127)):
        inputs = [rng.integers(low, high + 1, size=s.shape).astype(np.int8) for s in imported.inputs]
        rc, error, outputs = sa.run_c_main(package, inputs, work=tmp_path)
        assert rc == 0, error
        result = host(*inputs)
        for k, (got, want) in enumerate(zip(outputs, reference(inputs), strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"{DEPTHWISE[k]} on [{low}, {high}]")
            np.testing.assert_array_equal(got, result[k].numpy(), err_msg=f"{DEPTHWISE[k]} on [{low}, {high}]")


def test_convolutions_pad_their_input_themselves_and_no_padded_copy_is_planned(tmp_path):
    """Two SAME depthwise convolutions and a SAME convolution in a row: no pad kernel, and the
    planned storage is the two intermediates (504 bytes each, 512 aligned), not also the padded
    copies of the importer's pads (11 x 9 x 8 bytes)."""
    rng = np.random.default_rng(29)
    model = ModelBuilder()
    y = model.input("x", (1, 9, 7, 8), "int8", 0.05, 3)
    for k in range(2):
        w = rng.integers(-127, 128, size=(1, 3, 3, 8)).astype(np.int8)
        y = model.depthwise_conv_2d(y, w, np.float32([0.002] * 8), np.zeros(8, np.int32), 0.05, 2 - k, name=f"dw{k}")
    w = rng.integers(-127, 128, size=(4, 3, 3, 8)).astype(np.int8)
    model.output(model.conv_2d(y, w, np.float32([0.001]), np.zeros(4, np.int32), 0.05, -2, name="conv"))
    model.write(tmp_path / "m.tflite")
    imported = relay_aot.read_tflite(tmp_path / "m.tflite", exact=True)
    package = relay_aot.export_standalone(
        imported.mod, tmp_path / "pkg", name="m", target="cortex-m4", params=imported.params
    )
    entry = (package.directory / "entry.cc").read_text()
    assert entry.count("// kernel: nn.pad, nn.conv2d,") == 3 and "// kernel: nn.pad (" not in entry
    assert package.planned_size == 2 * 512


@pytest.mark.parametrize("channels, kh, kw", [(8, 3, 3), (7, 3, 3), (2, 1, 2)])
def test_the_depthwise_micro_kernels_c_without_the_dsp_extension_is_the_plain_sum(channels, kh, kw, tmp_path):
    rng = np.random.default_rng(channels)
    row = (kw + 2) * channels  # the input's row stride
    x = _extreme_int8(rng, kh * row)
    w = _extreme_int8(rng, (kh, kw, channels))
    window = np.stack([x[i * row : i * row + kw * channels].reshape(kw, channels) for i in range(kh)])
    want = (window.astype(np.int64) * w.astype(np.int64)).sum(axis=(0, 1)).tolist()
    name = arm_dsp.depthwise_kernel_name(channels, kh, kw)
    array = lambda a: ",".join(str(int(v)) for v in a.reshape(-1))  # noqa: E731
    main = f"""{arm_dsp.depthwise_kernel_c(channels, kh, kw)}
#include <stdio.h>
static const int8_t x[{x.size}] = {{{array(x)}}};
static const int8_t w[{w.size}] = {{{array(w)}}};
int main(void) {{
  int32_t out[{channels}];
  {name}(x, {row}, w, out);
  for (int c = 0; c < {channels}; ++c) printf("%ld\\n", (long)out[c]);
  return 0;
}}
"""
    got = _host_c_output(main, tmp_path)
    assert got == want


@pytest.mark.parametrize(
    "kind, height, width, channels, kh, kw",
    [("dw", 5, 4, 8, 3, 3), ("dw", 3, 6, 7, 3, 3), ("conv", 4, 5, 3, 3, 3), ("conv", 6, 3, 1, 4, 2)],
)
def test_the_border_functions_c_without_the_dsp_extension_is_the_padded_sum(
    kind, height, width, channels, kh, kw, tmp_path
):
    """The ``_border`` variants (a convolution that does its padding) at every window origin
    that leaves the image, and the plain functions at the others, against numpy's sums over the
    image padded with the pad value."""
    rng = np.random.default_rng(height * width + channels)
    x = _extreme_int8(rng, (height, width, channels))
    pad = -77
    padded = np.pad(x, ((kh, kh), (kw, kw), (0, 0)), constant_values=pad).astype(np.int64)
    filters = 5
    if kind == "dw":
        w = _extreme_int8(rng, (kh, kw, channels))
        name, c = arm_dsp.depthwise_kernel_name(channels, kh, kw), arm_dsp.depthwise_kernel_c(channels, kh, kw, True)
        count = channels
    else:
        w = _extreme_int8(rng, (filters, kh, kw, channels))
        rows = arm_dsp.rows_per_call(filters)
        name, c = (
            arm_dsp.conv_pixel_name(filters, rows, kh, kw, channels),
            arm_dsp.conv_pixel_c(filters, rows, kh, kw, channels),
        )
        count = filters
    origins = [(y0, x0) for y0 in range(1 - kh, height) for x0 in range(1 - kw, width)]
    want = []
    for y0, x0 in origins:
        window = padded[y0 + kh : y0 + 2 * kh, x0 + kw : x0 + 2 * kw]
        sums = window * w if kind == "dw" else window[None] * w
        want += (sums.sum(axis=(0, 1)) if kind == "dw" else sums.sum(axis=(1, 2, 3))).tolist()
    array = lambda a: ",".join(str(int(v)) for v in np.asarray(a).reshape(-1))  # noqa: E731
    main = f"""{c}
#include <stdio.h>
static const int8_t x[{x.size}] = {{{array(x)}}};
static const int8_t w[{w.size}] = {{{array(w)}}};
static const int32_t origins[{2 * len(origins)}] = {{{array(origins)}}};
int main(void) {{
  int32_t out[{count}];
  for (int i = 0; i < {len(origins)}; ++i) {{
    int y0 = origins[2 * i], x0 = origins[2 * i + 1];
    if (y0 >= 0 && x0 >= 0 && y0 + {kh} <= {height} && x0 + {kw} <= {width})
      {name}(x + (y0 * {width} + x0) * {channels}, {width * channels}, w, out);
    else
      {name}_border(x, {height}, {width}, y0, x0, {pad}, w, out);
    for (int c = 0; c < {count}; ++c) printf("%ld\\n", (long)out[c]);
  }}
  return 0;
}}
"""
    got = _host_c_output(main, tmp_path)
    assert got == want


def test_kernels_built_by_llvm_for_a_dsp_core_are_tvms(tmp_path):
    """relay_aot's micro-kernels are C: a package whose kernels LLVM builds for a core with the
    DSP extension (a TVM target string, not a row of the target table) keeps TVM's kernels, and
    its object needs none of them (TVM's conv2d, not relay_aot's OHWI form)."""
    nm = shutil.which("arm-none-eabi-nm")
    if nm is None:
        pytest.skip("arm-none-eabi-nm is not installed")
    rng = np.random.default_rng(19)
    path = tmp_path / "conv.tflite"
    _convolution_model(rng).write(path)
    imported = relay_aot.read_tflite(path, exact=True)
    target = "llvm -mtriple=thumbv7em-none-eabihf -mcpu=cortex-m7 -mfloat-abi=hard"
    package = relay_aot.export_standalone(
        imported.mod, tmp_path / "pkg", name="m", target=target, params=imported.params
    )
    kernels = package.directory / "kernels.o"
    assert kernels.exists() and not (package.directory / "kernels.c").exists()
    undefined = subprocess.run([nm, "-u", str(kernels)], capture_output=True, text=True, check=True).stdout
    assert "relay_aot_" not in undefined, undefined


@pytest.mark.parametrize(
    "shifts",
    [[0, 0, 0], [-7, -7, -7], [-1, -9, -12], [2, 0, -3], [-31, -30, -1]],
    ids=["none", "one shift", "per channel", "left shifts", "extreme shifts"],
)
def test_the_requantization_function_is_the_importers_arithmetic(shifts, tmp_path):
    """relay_aot_requantize (C) equals the importer's Relay arithmetic for
    MultiplyByQuantizedMultiplier on int32 extremes and random values, and the pass recognises
    each of the importer's three forms of the rounding division, with its constants."""
    from relay_aot.frontends import tflite_exact

    rng = np.random.default_rng(len(str(shifts)))
    multipliers = np.array([1 << 30, 2**31 - 1, 1518500250], np.int64)
    x = relay.var("x", shape=(64, 3), dtype="int32")
    expr = tflite_exact._multiply_by_quantized_multiplier(x, multipliers, np.array(shifts, np.int64))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], expr)))
    found = dsp_pass._requantization(mod["main"].body)
    assert found is not None
    _, m, left, right = found
    assert np.broadcast_to(m, 3).tolist() == multipliers.tolist()
    assert np.broadcast_to(left, 3).tolist() == [max(s, 0) for s in shifts]
    assert np.broadcast_to(right, 3).tolist() == [max(-s, 0) for s in shifts]
    edges = [-(2**31), -(2**31) + 1, -(2**30), -12345, -1, 0, 1, 12345, 2**30, 2**31 - 2, 2**31 - 1]
    values = np.array(edges + rng.integers(-(2**31), 2**31, 64 * 3 - len(edges)).tolist(), np.int64)
    # a left shift of x wraps in int32 as the importer's product does; keep those in range
    values = np.where(np.array(shifts * 64)[: values.size] > 0, values >> 8, values).astype(np.int32).reshape(64, 3)
    # TFLite's arithmetic (gemmlowp's, in Python integers); the importer's Relay agrees with it
    want = np.array(
        [
            [
                tflite_exact._rdbpot(
                    tflite_exact._srdhm(tflite_exact._wrap32(int(v) << max(shifts[c], 0)), int(multipliers[c])),
                    max(-shifts[c], 0),
                )
                for c, v in enumerate(row)
            ]
            for row in values
        ]
    )
    importer = relay_aot.compile(mod)(values).numpy()
    np.testing.assert_array_equal(importer, want)
    rows = []
    for c in range(3):
        shift_left, r = max(shifts[c], 0), max(-shifts[c], 0)
        rows.append(f"{{{int(multipliers[c])}, {shift_left}, {r}, {(1 << r) - 1}}}")
    array = ",".join(str(int(v)) for v in values.reshape(-1))
    main = f"""{arm_dsp._COMMON}
#include <stdio.h>
static const int32_t x[{values.size}] = {{{array}}};
static const int32_t p[3][4] = {{{",".join(rows)}}};
int main(void) {{
  for (int i = 0; i < {values.size}; ++i) {{
    const int32_t* q = p[i % 3];
    printf("%ld\\n", (long)relay_aot_requantize(x[i], q[0], q[1], q[2], q[3]));
  }}
  return 0;
}}
"""
    got = _host_c_output(main.replace("-2147483648", "(-2147483647 - 1)"), tmp_path)
    assert got == want.reshape(-1).tolist()


#: (input shape, pad widths, pad value): the padded axes of a depthwise layer's input, every
#: axis padded (the batch and the channels too), one-sided pads.
PADS = [
    ((1, 5, 6, 7), ((0, 0), (1, 1), (1, 1), (0, 0)), -128),
    ((2, 3, 4, 5), ((1, 0), (0, 2), (2, 1), (1, 3)), 17),
    ((1, 4, 1, 3), ((0, 0), (0, 1), (0, 0), (0, 0)), 0),
]


def _pad_strategy_name(target: str) -> str:
    x = relay.var("x", shape=(1, 4, 4, 8), dtype="int8")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.nn.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), 3)))
    call = mod["main"].body
    inputs = [tvm.te.placeholder((1, 4, 4, 8), "int8"), tvm.te.placeholder((), "int8")]
    strategy = tvm.ir.Op.get("nn.pad").get_attr("FTVMStrategy")
    with tvm.target.Target(target) as t:
        chosen = strategy(call.attrs, inputs, call.checked_type, t)
    return [impl.name for spec in chosen.specializations for impl in spec.implementations][0]


def test_the_pad_is_relay_aots_only_on_dsp_targets_while_relay_aot_lowers():
    with arm_dsp.building():
        assert _pad_strategy_name(M4.tvm_target) == "pad.relay_aot"
        assert _pad_strategy_name(TARGETS["aarch64-linux"].tvm_target) != "pad.relay_aot"
        assert _pad_strategy_name("llvm") != "pad.relay_aot"
    assert _pad_strategy_name(M4.tvm_target) != "pad.relay_aot"


def test_pads_on_the_cortex_m4_copy_without_a_test_per_element_and_are_numpys(tmp_path):
    """The pad's loops are split into borders and interior (TVM's loop partitioning of the
    ``likely`` bounds): the C of the pad kernels tests no bound, and the padded tensors equal
    numpy's, after a reshape fused into the pad as in the TFLite importer's models."""
    _require_m4()
    xs = [relay.var(f"x{k}", shape=shape, dtype="int8") for k, (shape, _, _) in enumerate(PADS)]
    ys = [
        relay.nn.pad(relay.reshape(x, shape), widths, relay.const(value, "int8"))
        for x, (shape, widths, value) in zip(xs, PADS)
    ]
    mod = tvm.IRModule.from_expr(relay.Function(xs, relay.Tuple(ys)))
    package = relay_aot.export_standalone(mod, tmp_path / "pkg", name="m", target="cortex-m4")
    source = (package.directory / "kernels.c").read_text()
    kernels = re.findall(r"TVM_DLL int32_t (\w*nn_pad)\([^;{]*\) \{(.*?)\n\}", source, re.S)
    assert len(kernels) == len(PADS), source
    for name, body in kernels:
        assert "?" not in body and "&&" not in body and "if (" not in body, (name, body)
    sa.make_package(package)
    rng = np.random.default_rng(5)
    inputs = [_extreme_int8(rng, shape) for shape, _, _ in PADS]
    rc, error, outputs = sa.run_c_main(package, inputs, work=tmp_path)
    assert rc == 0, error
    for got, x, (_, widths, value) in zip(outputs, inputs, PADS, strict=True):
        np.testing.assert_array_equal(got, np.pad(x, widths, constant_values=value))


def test_kernels_lowered_with_the_micro_kernels_are_not_served_to_a_build_without_them():
    """TVM's TE compiler caches kernels by function and target: lowering the same dense for the
    same target with and without ``c_kernels`` in one process gives each its own kernel."""
    from relay_aot.request import Request

    x = relay.var("x", shape=(1, 16), dtype="int8")
    w = relay.const(np.arange(8 * 16, dtype="int8").reshape(8, 16))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, w, out_dtype="int32")))

    def uses_micro_kernels(c_kernels: bool) -> bool:
        _, table = Request.make(mod, M4.tvm_target, None).standalone(c_kernels=c_kernels).lower()
        return any("relay_aot_" in str(f) for f in table.lower_all(report=False).functions.values())

    assert [uses_micro_kernels(c) for c in (True, False, True)] == [True, False, True]

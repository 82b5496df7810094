"""int8 convolutions of eight filters blocked by eight output channels (``passes/int8_by_eight.py``,
``kernels/int8_by_eight.py``).

Every case is checked exactly against numpy's int64 on mostly extreme values (the largest sums
of products), in the layouts the TFLite import writes (NHWC/HWIO) and in NCHW, at ``opt_level`` 3
(``NCHWc`` kernels) and 2 (the ``NCHW`` form, packed in the kernel); the kernel's 256-bit
``vpdpbusd`` is looked for in the lowered code, for the host and for named CPUs; the rule and the
legalization outside relay_aot are TVM's.
"""

import numpy as np
import pytest
import tvm
from int8_support import conv2d_reference, extremes
from tvm import relay

import relay_aot
from relay_aot import cpu
from relay_aot.passes import int8_by_eight
from relay_aot.request import Request

HOST = tvm.target.Target(cpu.host_target())
HOST_EIGHT = int8_by_eight.eight_lanes(HOST)
VPDPBUSD_256 = int8_by_eight.VPDPBUSD_256


def _lowered(mod: tvm.IRModule, target=None, opt_level: int = 3) -> dict[str, str]:
    """Per kernel symbol, the TIR relay_aot builds."""
    _, table = Request.make(mod, target, None, opt_level=opt_level).lower()
    return {gvar.name_hint: str(func) for gvar, func in table.lower_all(report=False).functions.items()}


#: (input channels, map, kernel, strides, padding): an image's first layer, ResNet-8-like
#: blocks, a 1x1 layer, channels not in fours (padded to them), rows wider than a register run,
#: many products per output (1152: float32 would not hold them exactly).
CASES = [
    (3, (33, 32), 3, (2, 2), (0, 0, 1, 1)),
    (8, (16, 16), 3, (1, 1), (1, 1, 1, 1)),
    (8, (16, 16), 1, (1, 1), (0, 0, 0, 0)),
    (12, (9, 40), 3, (1, 2), (1, 1, 1, 1)),
    (6, (7, 7), 5, (1, 1), (2, 2, 2, 2)),
    (128, (6, 6), 3, (1, 1), (0, 0, 0, 0)),
]


def _model(channels, size, kernel, strides, padding, layout: str, seed: int):
    """A convolution of eight filters, int8 data and weights, int32 sums, then a shift into int8
    (as a requantization would): the module, its input and the expected output."""
    rng = np.random.default_rng(seed)
    w = extremes(rng, (8, channels, kernel, kernel))  # OIHW
    xv = extremes(rng, (1, channels, *size))  # NCHW
    expected = np.clip(conv2d_reference(xv, w, strides, padding) >> 10, -128, 127).astype(np.int8)
    if layout == "NHWC":
        x = relay.var("x", shape=(1, *size, channels), dtype="int8")
        weights, layouts = relay.const(w.transpose(2, 3, 1, 0)), {"data_layout": "NHWC", "kernel_layout": "HWIO"}
        xv, expected = xv.transpose(0, 2, 3, 1).copy(), expected.transpose(0, 2, 3, 1)
    else:
        x = relay.var("x", shape=(1, channels, *size), dtype="int8")
        weights, layouts = relay.const(w), {}
    y = relay.nn.conv2d(
        x, weights, strides=strides, padding=padding, channels=8, kernel_size=kernel, out_dtype="int32", **layouts
    )
    y = relay.cast(relay.clip(relay.right_shift(y, relay.const(10, "int32")), -128, 127), "int8")
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y))), xv, expected


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}ch_{c[1][0]}x{c[1][1]}_k{c[2]}_s{c[3][1]}")
def test_eight_filter_convolutions_are_exact(case, layout):
    mod, xv, expected = _model(*case, layout=layout, seed=sum(case[1]) + case[0])
    np.testing.assert_array_equal(relay_aot.compile(mod)(xv).numpy(), expected)
    if HOST_EIGHT and layout == "NCHW":  # one NHWC convolution alone stays NHWC (TVM's kernel)
        kernels = _lowered(mod)
        convolutions = [text for name, text in kernels.items() if "conv2d" in name]
        assert len(convolutions) == 1 and VPDPBUSD_256 in convolutions[0], sorted(kernels)


@pytest.mark.parametrize("case", [CASES[1], CASES[3]], ids=["8ch", "12ch_s2"])
def test_without_the_layout_choice_the_nchw_form_is_exact(case):
    """At opt_level 2 there is no layout choice: the legalized NCHW convolution packs its
    operands in the kernel."""
    mod, xv, expected = _model(*case, layout="NCHW", seed=5)
    np.testing.assert_array_equal(relay_aot.compile(mod, opt_level=2)(xv).numpy(), expected)
    if HOST_EIGHT:
        convolutions = [text for name, text in _lowered(mod, opt_level=2).items() if "conv2d" in name]
        assert len(convolutions) == 1 and VPDPBUSD_256 in convolutions[0]


@pytest.mark.parametrize(
    "mcpu,eight",
    [("cascadelake", True), ("alderlake", True), ("znver4", True), ("haswell", False), ("skylake-avx512", False)],
)
def test_named_cpus_build_the_kernel_where_they_have_eight_lane_vnni(mcpu, eight):
    """AVX-512 VNNI (with VL) and AVX-VNNI have vpdpbusd on 256-bit registers; Haswell and
    Skylake-AVX512 have no VNNI at all: TVM's forms there. Built, not run: run where this CPU can."""
    target = tvm.target.Target(f"llvm -mcpu={mcpu}")
    assert int8_by_eight.eight_lanes(target) == eight
    mod, xv, expected = _model(*CASES[1], layout="NCHW", seed=6)
    convolutions = [text for name, text in _lowered(mod, target=target).items() if "conv2d" in name]
    assert any(VPDPBUSD_256 in text for text in convolutions) == eight
    compiled = relay_aot.compile(mod, target=target)
    try:
        got = compiled(xv).numpy()
    except relay_aot.CpuFeatureError:
        return
    np.testing.assert_array_equal(got, expected)


def test_the_rule_takes_eight_filters_only():
    """16 filters are TVM's blocks already; 24 and 40 filters stay with exact_int8's forms
    (their NCHW8c outputs met depthwise blocks of 12 and 20); groups, dilation and other dtypes
    are not for this kernel."""
    attrs = relay.nn.conv2d(
        relay.var("x", shape=(1, 3, 8, 8), dtype="int8"),
        relay.var("w", shape=(8, 3, 3, 3), dtype="int8"),
        out_dtype="int32",
    ).attrs
    rule = int8_by_eight.applies
    assert rule(attrs, "int8", (1, 3, 8, 8), "int8", (8, 3, 3, 3), HOST) == HOST_EIGHT
    for filters in (16, 24, 40, 4):
        assert not rule(attrs, "int8", (1, 3, 8, 8), "int8", (filters, 3, 3, 3), HOST)
    assert not rule(attrs, "float32", (1, 3, 8, 8), "int8", (8, 3, 3, 3), HOST)
    dilated = relay.nn.conv2d(
        relay.var("x", shape=(1, 3, 8, 8), dtype="int8"),
        relay.var("w", shape=(8, 3, 3, 3), dtype="int8"),
        dilation=(2, 2),
        out_dtype="int32",
    ).attrs
    assert not rule(dilated, "int8", (1, 3, 8, 8), "int8", (8, 3, 3, 3), HOST)
    assert not rule(attrs, "int8", (1, 3, 8, 8), "int8", (8, 3, 3, 3), tvm.target.Target("llvm"))


@pytest.mark.skipif(not HOST_EIGHT, reason="the host CPU has no eight-lane vpdpbusd")
def test_outside_relay_aot_tvms_legalization_pads_to_sixteen():
    """relay_aot's legalization is in force only while it prepares a module: TVM's pads the
    filters to sixteen and slices them off, before and after a relay_aot compile."""
    mod, xv, expected = _model(*CASES[1], layout="NCHW", seed=7)
    relay_aot.compile(mod)  # installs relay_aot's dispatchers

    def legalized() -> str:
        with tvm.transform.PassContext(opt_level=3), HOST:
            return relay.transform.Legalize()(mod).astext()

    text = legalized()
    assert "strided_slice" in text and "16, 8, 3, 3" in text.replace("(", "").replace(")", ""), text
    with int8_by_eight.building(), tvm.transform.PassContext(opt_level=3), HOST:
        ours = relay.transform.Legalize()(mod).astext()
    assert "strided_slice" not in ours and "uint8" in ours

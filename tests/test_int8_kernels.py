"""int8 kernels with VNNI, and NHWC convolutions in NCHW on x86.

TVM's uint8 x int8 kernels (``conv2d_NCHWc_int8``, ``dense_int8``, ``batch_matmul_int8``) are
built with ``vpdpbusd`` as the linked LLVM declares it (``kernels/vnni.py``); TVM's x86
legalization turns int8 x int8 products into uint8 x int8 ones (the data shifted by 128, the
weights' sums times 128 subtracted). Every kind of product, with both operand types, is checked
exactly against numpy's int64 on extreme values (0, 255, -128, 127) where the host has VNNI, and
built without running for CPUs named by ``-mcpu`` (AVX-512 VNNI, AVX-VNNI, none). NHWC
convolutions and pools become NCHWc kernels on x86 (``passes/nchw.py``): results against the
graph executor (float) and numpy (int8), kernels by their names.
"""

import re

import numpy as np
import pytest
import tvm
from int8_support import conv2d_reference, extremes
from tvm import relay, te, topi
from tvm.contrib import graph_executor
from tvm.target.x86 import get_simd_32bit_lanes

import relay_aot
from relay_aot import cpu
from relay_aot.kernels import vnni
from relay_aot.request import Request

HOST = tvm.target.Target(cpu.host_target())
HOST_VNNI = cpu.has_vnni(HOST)
needs_vnni = pytest.mark.skipif(not HOST_VNNI, reason="the host CPU has no VNNI")


def _lowered(mod: tvm.IRModule, target=None, params=None) -> dict[str, str]:
    """Per kernel symbol, the TIR relay_aot builds (``compile``'s passes and lowering)."""
    _, table = Request.make(mod, target, params).lower()
    return {gvar.name_hint: str(func) for gvar, func in table.lower_all(report=False).functions.items()}


#: name: data shape, weight shape, strides, padding, dilation, groups. Channels not multiples of
#: 4 (inputs) or 16 (outputs) are padded by TVM's legalization; the 1-channel one is KWS's first
#: layer; 1x1 has a schedule of its own.
CONVOLUTIONS = {
    "3x3": ((1, 16, 9, 9), (32, 16, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    "1x1": ((1, 64, 25, 5), (64, 64, 1, 1), (1, 1), (0, 0), (1, 1), 1),
    "one_channel_strided": ((1, 1, 49, 10), (64, 1, 10, 4), (2, 2), (4, 1), (1, 1), 1),
    "odd_channels_dilated": ((1, 6, 11, 11), (10, 6, 3, 3), (1, 2), (2, 1), (2, 2), 1),
    "depthwise": ((1, 64, 25, 5), (64, 1, 3, 3), (1, 1), (1, 1), (1, 1), 64),
}


def _conv2d(name: str, data_dtype: str):
    shape, wshape, strides, padding, dilation, groups = CONVOLUTIONS[name]
    x = relay.var("x", shape=shape, dtype=data_dtype)
    w = relay.var("w", shape=wshape, dtype="int8")
    y = relay.nn.conv2d(
        x,
        w,
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
        channels=wshape[0],
        kernel_size=wshape[2:],
        out_dtype="int32",
    )
    mod = tvm.IRModule.from_expr(relay.Function([x, w], y))
    return mod, lambda xv, wv: conv2d_reference(xv, wv, strides, padding, dilation, groups)


def _product(kind: str, data_dtype: str):
    """A module ``(x, w) -> int32`` of one product kind and its numpy reference."""
    if kind in CONVOLUTIONS:
        return _conv2d(kind, data_dtype)
    if kind.startswith("dense"):
        # K not a multiple of 4, N not of 16: TVM's legalization pads both for int8 data only
        k, n = (150, 20) if kind == "dense_odd" else (256, 32)
        x = relay.var("x", shape=(3, k), dtype=data_dtype)
        w = relay.var("w", shape=(n, k), dtype="int8")
        y = relay.nn.dense(x, w, out_dtype="int32")
        reference = lambda a, b: a.astype(np.int64) @ b.astype(np.int64).T  # noqa: E731
    else:
        x = relay.var("x", shape=(2, 5, 64), dtype=data_dtype)
        w = relay.var("w", shape=(2, 32, 64), dtype="int8")
        y = relay.nn.batch_matmul(x, w, out_dtype="int32")
        reference = lambda a, b: a.astype(np.int64) @ b.astype(np.int64).transpose(0, 2, 1)  # noqa: E731
    return tvm.IRModule.from_expr(relay.Function([x, w], y)), reference


KINDS = [*CONVOLUTIONS, "dense", "dense_odd", "batch_matmul"]


def _tensorized(kind: str, data_dtype: str, lanes: int) -> bool:
    """Whether TVM computes the product with its int8 kernel (vpdpbusd with VNNI). Not a
    depthwise convolution (plain vectors), nor a dilated one of odd channels (TVM's legalization
    does not pad its channels, and exact_int8 widens a uint8 one), nor uint8 data by weights of
    odd shapes in a matrix product (only int8 data is padded); TVM's int8 matrix products need
    AVX-512 (sixteen lanes)."""
    if kind in ("depthwise", "odd_channels_dilated") or (kind == "dense_odd" and data_dtype == "uint8"):
        return False
    return lanes == 16 or kind in CONVOLUTIONS


def _arguments(mod: tvm.IRModule, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    params = relay.transform.InferType()(mod)["main"].params
    return [extremes(rng, [int(d) for d in p.checked_type.shape], p.checked_type.dtype) for p in params]


@needs_vnni
@pytest.mark.parametrize("data_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("kind", KINDS)
def test_int8_products_are_exact_with_vnni(kind, data_dtype):
    """Each kind of product on this CPU, weights constant (as in a model: the layout choice packs
    them) and passed at run time, equals numpy's int64 on extreme values; the tensorized kinds
    call vpdpbusd."""
    mod, reference = _product(kind, data_dtype)
    x, w = _arguments(mod, seed=len(kind))
    expected = reference(x, w)
    np.testing.assert_array_equal(relay_aot.compile(mod)(x, w).numpy(), expected)
    np.testing.assert_array_equal(relay_aot.compile(mod, params={"w": w})(x).numpy(), expected)
    kernels = _lowered(mod, params={"w": w})
    called = any("vpdpbusd" in text for text in kernels.values())
    with HOST:
        assert called == _tensorized(kind, data_dtype, get_simd_32bit_lanes()), sorted(kernels)


@pytest.mark.parametrize(
    "mcpu,intrinsic",
    [
        # AVX-512 VNNI, as znver4 (-m slow: CI time)
        pytest.param("cascadelake", "llvm.x86.avx512.vpdpbusd.512", marks=pytest.mark.slow),
        ("znver4", "llvm.x86.avx512.vpdpbusd.512"),
        ("alderlake", "llvm.x86.avx512.vpdpbusd.256"),  # AVX-VNNI, no AVX-512: 8 lanes
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_int8_products_build_with_vnni_for_named_cpus(kind, mcpu, intrinsic):
    """Built for a CPU with VNNI whatever this machine is: the kernel calls vpdpbusd at the
    CPU's width and LLVM builds it (TVM's own call aborted the build); run where this CPU can."""
    mod, reference = _product(kind, "int8")
    x, w = _arguments(mod, seed=1)
    target = f"llvm -mcpu={mcpu}"
    kernels = _lowered(mod, target=target, params={"w": w})
    lanes = 8 if intrinsic.endswith("256") else 16
    assert any(intrinsic in text for text in kernels.values()) == _tensorized(kind, "int8", lanes), sorted(kernels)
    compiled = relay_aot.compile(mod, target=target, params={"w": w})
    try:
        got = compiled(x).numpy()
    except relay_aot.CpuFeatureError:
        return
    np.testing.assert_array_equal(got, reference(x, w))


@pytest.mark.parametrize("mcpu", ["haswell", "skylake-avx512"])
@pytest.mark.parametrize("kind", ["3x3", "dense"])
def test_without_vnni_products_are_widened_and_exact(kind, mcpu):
    """Without VNNI, TVM's int8 kernels sum pairs of products with saturation (vpmaddubsw):
    relay_aot widens the operands to int16 (passes/exact_int8.py), so no kernel calls it; the
    int16 products are summed in pairs by vpmaddwd (passes/int16_pairs.py)."""
    mod, reference = _product(kind, "int8")
    x, w = _arguments(mod, seed=2)
    target = f"llvm -mcpu={mcpu}"
    kernels = _lowered(mod, target=target, params={"w": w})
    assert not any("pmadd.ub" in text or "vpdpbusd" in text for text in kernels.values())
    assert any("pmadd" in text for text in kernels.values())
    try:
        got = relay_aot.compile(mod, target=target, params={"w": w})(x).numpy()
    except relay_aot.CpuFeatureError:
        return
    np.testing.assert_array_equal(got, reference(x, w))


@pytest.mark.parametrize("mcpu", ["haswell", "skylake-avx512"])
def test_tvms_vpmaddubsw_kernel_builds_and_is_exact_below_saturation(mcpu):
    """TVM's kernel without VNNI (vpmaddubsw, vpmaddwd), inside relay_aot's gate: LLVM builds it,
    and it is exact while no pair of products leaves int16 (data below 128); relay_aot does not
    use it on full-range data (the test above)."""
    target = tvm.target.Target(f"llvm -mcpu={mcpu}")
    lanes = 16 if mcpu == "skylake-avx512" else 8
    rng = np.random.default_rng(4)
    x = rng.integers(0, 128, (1, 2, 8, 8, 4)).astype("uint8")  # NCHW4c
    w = extremes(rng, (2, 2, 3, 3, 1, lanes, 4), "int8")  # OIHW1i{lanes}o4i
    data = te.placeholder(x.shape, "uint8", name="data")
    weight = te.placeholder(w.shape, "int8", name="weight")
    with target, vnni.building():
        out = topi.x86.conv2d_NCHWc_int8(data, weight, (1, 1), (0, 0), (1, 1), "NCHW4c", f"NCHW{lanes}c", "int32")
        schedule = topi.x86.schedule_conv2d_NCHWc_int8([out])
        assert "pmadd" in str(tvm.lower(schedule, [data, weight, out]))
        built = tvm.build(schedule, [data, weight, out], target=target)
    if not all(cpu.host_features().get(f, False) for f in (["avx512bw"] if lanes == 16 else ["avx2"])):
        return
    result = tvm.nd.empty([int(d) for d in out.shape], "int32")
    built(tvm.nd.array(x), tvm.nd.array(w), result)
    nchw = x.transpose(0, 1, 4, 2, 3).reshape(1, 8, 8, 8)
    oihw = w.transpose(0, 5, 1, 4, 6, 2, 3).reshape(2 * lanes, 8, 3, 3)
    expected = conv2d_reference(nchw, oihw, (1, 1), (0, 0), (1, 1), 1)
    got = result.numpy().transpose(0, 1, 4, 2, 3).reshape(expected.shape)
    np.testing.assert_array_equal(got, expected)


def test_outside_relay_aot_tvms_intrinsic_is_unchanged():
    """relay.build and TVM's executors in the same process tensorize with TVM's own intrinsic."""
    from tvm.topi.x86 import conv2d_avx_common, tensor_intrin

    with vnni.building():
        pass  # installs the dispatcher
    with tvm.target.Target("llvm -mcpu=cascadelake"):
        outside = conv2d_avx_common.dot_16x1x16_uint8_int8_int32()
        with vnni.building():
            inside = conv2d_avx_common.dot_16x1x16_uint8_int8_int32()
        tvms = tensor_intrin.dot_16x1x16_uint8_int8_int32()
    assert str(outside.body) == str(tvms.body)
    assert "int8x64" in str(inside.body) and str(inside.body) != str(tvms.body)


# -- NHWC models -----------------------------------------------------------------------------


def _float_nhwc_net():
    """conv 3x3 (stride 2), max pool, depthwise 3x3, 1x1 conv, avg pool, global pool, dense: NHWC
    as TFLite's models are, weights constant."""
    rng = np.random.default_rng(5)
    x = relay.var("x", shape=(1, 64, 64, 3))
    params = {}

    def weight(name, shape):
        params[name] = rng.normal(0, 0.3, shape).astype("float32")
        return relay.var(name, shape=shape)

    y = relay.nn.conv2d(
        x,
        weight("c1", (3, 3, 3, 16)),
        strides=(2, 2),
        padding=(1, 1),
        channels=16,
        kernel_size=(3, 3),
        data_layout="NHWC",
        kernel_layout="HWIO",
    )
    y = relay.nn.relu(relay.nn.bias_add(y, weight("b1", (16,)), axis=3))
    y = relay.nn.max_pool2d(y, (2, 2), strides=(2, 2), layout="NHWC")
    y = relay.nn.conv2d(
        y,
        weight("dw", (3, 3, 16, 1)),
        padding=(1, 1),
        groups=16,
        channels=16,
        kernel_size=(3, 3),
        data_layout="NHWC",
        kernel_layout="HWOI",
    )
    y = relay.clip(y, 0.0, 6.0)
    y = relay.nn.conv2d(
        y, weight("pw", (1, 1, 16, 32)), channels=32, kernel_size=(1, 1), data_layout="NHWC", kernel_layout="HWIO"
    )
    y = relay.nn.avg_pool2d(y, (2, 2), strides=(2, 2), layout="NHWC")
    y = relay.reshape(relay.nn.global_avg_pool2d(y, layout="NHWC"), (1, 32))
    y = relay.nn.dense(y, weight("fc", (10, 32)))
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    return relay.transform.InferType()(mod), params


def _nhwc_kernels(kernels: dict[str, str]) -> list[str]:
    return [name for name in kernels if re.search(r"conv2d|pool", name)]


def test_float_nhwc_net_becomes_nchwc_kernels_and_agrees():
    mod, params = _float_nhwc_net()
    x = np.random.default_rng(6).normal(0, 1, (1, 64, 64, 3)).astype("float32")
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=HOST, params=params)
    graph = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    graph.run(x=x)
    expected = graph.get_output(0).numpy()
    got = relay_aot.compile(mod, params=params)(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    names = _nhwc_kernels(_lowered(mod, params=params))
    convolutions = [n for n in names if "conv2d" in n]
    assert len(convolutions) == 3 and all("NCHWc" in n for n in convolutions), names


def _int8_nhwc_net():
    """Two int8 x int8 convolutions (a 3x3 with padding, a depthwise 3x3) with the integer
    requantization between them, NHWC as the exact TFLite import writes them."""
    rng = np.random.default_rng(7)
    x = relay.var("x", shape=(1, 12, 10, 8), dtype="int8")
    w1 = extremes(rng, (3, 3, 8, 32), "int8")
    w2 = extremes(rng, (3, 3, 32, 1), "int8")
    y = relay.nn.conv2d(
        x,
        relay.const(w1),
        padding=(1, 1),
        channels=32,
        kernel_size=(3, 3),
        data_layout="NHWC",
        kernel_layout="HWIO",
        out_dtype="int32",
    )
    y = relay.annotation.stop_fusion(y)
    y = relay.right_shift(y, relay.const(10, "int32"))
    y = relay.cast(relay.clip(y, -128, 127), "int8")
    y = relay.nn.max_pool2d(y, (2, 2), strides=(2, 2), layout="NHWC")
    y = relay.nn.conv2d(
        y,
        relay.const(w2),
        padding=(1, 1),
        groups=32,
        channels=32,
        kernel_size=(3, 3),
        data_layout="NHWC",
        kernel_layout="HWOI",
        out_dtype="int32",
    )
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))

    def reference(xv):
        nchw = xv.transpose(0, 3, 1, 2)
        a = conv2d_reference(nchw, w1.transpose(3, 2, 0, 1), (1, 1), (1, 1), (1, 1), 1)
        a = np.clip(a >> 10, -128, 127)
        a = a.reshape(1, 32, 6, 2, 5, 2).max(axis=(3, 5))
        b = conv2d_reference(a, w2.transpose(2, 3, 0, 1), (1, 1), (1, 1), (1, 1), 32)
        return b.transpose(0, 2, 3, 1)

    return mod, reference


def test_int8_nhwc_net_becomes_nchwc_kernels_and_is_exact():
    mod, reference = _int8_nhwc_net()
    x = extremes(np.random.default_rng(8), (1, 12, 10, 8), "int8")
    names = _nhwc_kernels(_lowered(mod))
    convolutions = [n for n in names if "conv2d" in n]
    assert len(convolutions) == 2 and all("NCHWc" in n for n in convolutions), names
    np.testing.assert_array_equal(relay_aot.compile(mod)(x).numpy(), reference(x))


def test_nhwc_stays_for_other_targets_and_where_it_does_not_pay():
    """Not x86 (an AArch64 triple): TVM's ARM strategies have NHWC kernels of their own. And a
    convolution too small for its transforms' cost (one output channel of a 1x1 over a large
    image: as many elements moved as multiplied) keeps its layout."""
    from relay_aot.passes import nchw

    assert not nchw.is_x86(tvm.target.Target("llvm -mtriple=aarch64-linux-gnu"))
    assert nchw.is_x86(tvm.target.Target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"))
    x = relay.var("x", shape=(1, 64, 64, 4))
    y = relay.nn.conv2d(
        x,
        relay.const(np.ones((1, 1, 4, 1), "float32")),
        kernel_size=(1, 1),
        channels=1,
        data_layout="NHWC",
        kernel_layout="HWIO",
    )
    y = relay.sigmoid(relay.add(x, y))  # the NHWC input is needed again after the convolution
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    with tvm.transform.PassContext(opt_level=3), HOST:
        assert nchw.nchw_convolutions(mod).astext().count("NHWC") == mod.astext().count("NHWC")


def test_int8_convolution_of_eight_filters_is_not_padded_to_sixteen_and_is_exact():
    """An image's first layer (three channels, eight filters, stride 2) then a 3x3 layer, as the
    exact TFLite import writes them: the first computed with blocks of eight filters
    (int8_by_eight) where the host has eight-lane vpdpbusd, else in float32 (27 products per
    output: exact), rather than padded to TVM's blocks of sixteen filters and sliced through a
    transform to NCHW; its requantization then ends the convolution's kernel. Full-range
    values: the sums are the largest the float form must hold exactly."""
    rng = np.random.default_rng(9)
    x = relay.var("x", shape=(1, 33, 32, 3), dtype="int8")
    w1, w2 = extremes(rng, (3, 3, 3, 8), "int8"), extremes(rng, (3, 3, 8, 32), "int8")

    def layer(y, w, strides):
        y = relay.nn.conv2d(
            y,
            relay.const(w),
            strides=strides,
            channels=w.shape[3],
            kernel_size=(3, 3),
            data_layout="NHWC",
            kernel_layout="HWIO",
            out_dtype="int32",
        )
        y = relay.annotation.stop_fusion(y)
        return relay.cast(relay.clip(relay.right_shift(y, relay.const(9, "int32")), -128, 127), "int8")

    y = layer(layer(x, w1, (2, 2)), w2, (1, 1))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))

    def reference(xv):
        a = xv.transpose(0, 3, 1, 2)
        for w, strides in ((w1, (2, 2)), (w2, (1, 1))):
            a = conv2d_reference(a, w.transpose(3, 2, 0, 1), strides, (0, 0), (1, 1), 1)
            a = np.clip(a >> 9, -128, 127)
        return a.astype(np.int8).transpose(0, 2, 3, 1)

    xv = extremes(np.random.default_rng(10), (1, 33, 32, 3), "int8")
    np.testing.assert_array_equal(relay_aot.compile(mod)(xv).numpy(), reference(xv))
    if HOST_VNNI:
        names = list(_lowered(mod))
        assert not any("strided_slice" in n for n in names), names
        assert sum("conv2d_NCHWc" in n and "right_shi" in n for n in names) == 2, names  # (names are cut)


def test_int8_convolution_of_eight_filters_and_many_products_is_widened_and_exact():
    """Eight filters over 128 channels (1152 products per output: more than float32 holds
    exactly at the extremes): blocks of eight filters where the host has them, else widened to
    int16; exact on full-range values."""
    rng = np.random.default_rng(11)
    x = relay.var("x", shape=(1, 6, 6, 128), dtype="int8")
    w = extremes(rng, (3, 3, 128, 8), "int8")
    y = relay.nn.conv2d(
        x, relay.const(w), channels=8, kernel_size=(3, 3), data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32"
    )
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    xv = extremes(np.random.default_rng(12), (1, 6, 6, 128), "int8")
    expected = conv2d_reference(xv.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_array_equal(relay_aot.compile(mod)(xv).numpy(), expected.transpose(0, 2, 3, 1))

"""Winograd convolutions (passes/winograd.py, kernels/winograd.py): which convolutions become
Winograd's, and that their results equal TVM's direct convolution (the VM) within float32
rounding, fused with bias and activation or not, on tiles that do and do not divide the image;
with infinite, NaN and huge inputs, non-finite exactly where the direct convolution's are."""

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot import cpu, passes

WINOGRAD = "nn.contrib_conv2d_winograd_without_weight_transform"


def _avx512() -> bool:
    with tvm.target.Target(cpu.host_target()):
        return tvm.target.x86.get_simd_32bit_lanes() == 16


needs_avx512 = pytest.mark.skipif(not _avx512(), reason="Winograd convolutions are chosen on AVX-512 only")


def _conv_net(
    channels, filters, height, width, stride=1, fused=True, weight_param=False, seed=0, tail=None, weight_scale=1.0
):
    """A 3x3 convolution and, by ``tail``: "relu" (bias and relu, fused into it; ``fused``'s
    default), "bias" (a fused bias only), "pool" (a max pool, not fused; ``fused=False``)."""
    tail = tail or ("relu" if fused else "pool")
    rng = np.random.default_rng(seed)
    x = relay.var("x", shape=(1, channels, height, width))
    w_np = (weight_scale * rng.standard_normal((filters, channels, 3, 3)) / np.sqrt(9 * channels)).astype("float32")
    w = relay.var("w", shape=w_np.shape) if weight_param else relay.const(w_np)
    y = relay.nn.conv2d(x, w, strides=(stride, stride), padding=(1, 1), channels=filters, kernel_size=(3, 3))
    if tail == "pool":
        y = relay.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    else:
        y = relay.nn.bias_add(y, relay.const(rng.standard_normal(filters).astype("float32")))
        y = relay.nn.relu(y) if tail == "relu" else y
    params = [x, w] if weight_param else [x]
    args = [rng.standard_normal((1, channels, height, width)).astype("float32")]
    if weight_param:
        args.append(w_np)
    return tvm.IRModule.from_expr(relay.Function(params, y)), args


def _assert_matches_direct(got, expected):
    """``got`` non-finite exactly where ``expected`` is (inf, -inf and NaN alike), and within a
    few ulps of the largest finite output elsewhere."""
    for kind in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(kind(got), kind(expected), err_msg=kind.__name__)
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=0, atol=1e-5 * np.abs(expected[finite]).max())


def _winograd_calls(mod, target=None) -> int:
    prepared = passes.prepare(mod, target=target or tvm.target.Target(cpu.host_target()))
    return prepared.astext(show_meta_data=False).count(WINOGRAD + "(")


@needs_avx512
@pytest.mark.parametrize(
    "shape",
    [
        (16, 32, 13, 13, True),  # tiles of 2 (a 13-wide map: 7 tiles, the last partial)
        (32, 64, 27, 27, True),  # tiles of 4, the last partial
        (16, 32, 20, 23, False),  # not square; the convolution's own output stage (max_pool follows)
    ],
)
def test_winograd_convolution_equals_the_direct_one(shape):
    channels, filters, height, width, fused = shape
    mod, args = _conv_net(channels, filters, height, width, fused=fused)
    assert _winograd_calls(mod) == 1
    expected = relay.create_executor("vm", mod=mod, target="llvm").evaluate()(*args).numpy()
    got = relay_aot.compile(mod)(*args).numpy()
    # Winograd's transforms round differently: a few ulps of the largest output
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@needs_avx512
def test_convolutions_winograd_does_not_take_stay_direct(monkeypatch):
    strided, _ = _conv_net(16, 32, 27, 27, stride=2)
    assert _winograd_calls(strided) == 0
    weights_given, _ = _conv_net(16, 32, 27, 27, weight_param=True)  # weights not constant
    assert _winograd_calls(weights_given) == 0
    small, _ = _conv_net(16, 32, 7, 7)  # a tile would pad a 7x7 map by much
    assert _winograd_calls(small) == 0
    mod, _ = _conv_net(16, 32, 27, 27)
    assert _winograd_calls(mod, tvm.target.Target("llvm")) == 0  # SSE2: not measured there
    non_finite, _ = _conv_net(16, 32, 27, 27, weight_scale=np.inf)  # no finite bound on the inputs
    assert _winograd_calls(non_finite) == 0
    monkeypatch.setenv("RELAY_AOT_WINOGRAD", "0")
    request = relay_aot.request.Request.make(mod)
    program, kernels = request.lower()
    assert not any(WINOGRAD in kernel.ops for kernel in kernels.kernels)
    monkeypatch.delenv("RELAY_AOT_WINOGRAD")
    program, kernels = relay_aot.request.Request.make(mod).lower()
    assert any(WINOGRAD in kernel.ops for kernel in kernels.kernels)


#: A map of tiles of 2 (13 wide: the last tile partial), and of tiles of 4 (not square, partial).
TILE_SIZES = {2: (16, 32, 13, 13), 4: (16, 32, 20, 23)}


@needs_avx512
@pytest.mark.parametrize("tail", ["relu", "bias"])
@pytest.mark.parametrize("tile", sorted(TILE_SIZES))
def test_non_finite_inputs_give_the_direct_convolutions_non_finite_outputs(tile, tail):
    """One inf or NaN pixel makes inf or NaN the outputs whose window holds it, as a direct
    convolution does, and no other (Winograd's transforms spread it over the tiles around it;
    a fused relu would turn that NaN into wrong zeros)."""
    channels, filters, height, width = TILE_SIZES[tile]
    mod, (x,) = _conv_net(channels, filters, height, width, tail=tail)
    assert _winograd_calls(mod) == 1
    vm = relay.create_executor("vm", mod=mod, target="llvm").evaluate()
    compiled = relay_aot.compile(mod)
    corner = (height - 1, width - 1)  # in the last, partial tile
    cases = [
        {(5, 6): np.inf},
        {(5, 6): -np.inf},
        {(5, 6): np.nan},
        {(0, 0): np.inf},
        {corner: np.nan},
        {(5, 6): np.inf, (6, 7): -np.inf},  # windows holding both: inf - inf
        {(2, 3): np.inf, (height - 3, 4): np.nan},  # two rows of tiles
    ]
    for case in cases:
        data = x.copy()
        for (h, w), value in case.items():
            data[0, 3, h, w] = value
        expected = vm(data).numpy()
        assert tail == "relu" or not np.isfinite(expected).all()  # (a relu makes -inf zeros)
        _assert_matches_direct(compiled(data).numpy(), expected)


@needs_avx512
@pytest.mark.parametrize("tail", ["relu", "bias"])
@pytest.mark.parametrize("tile", sorted(TILE_SIZES))
def test_huge_finite_inputs_do_not_overflow(tile, tail):
    """Inputs of magnitude 5e37 to 1e38, weights small enough that the direct convolution stays
    finite: no output overflows (Winograd's input transform alone multiplies by up to 49, its
    output transform by up to 124; inputs near 1e37 of random signs rarely overflow here)."""
    channels, filters, height, width = TILE_SIZES[tile]
    mod, (x,) = _conv_net(channels, filters, height, width, tail=tail, weight_scale=1e-3)
    assert _winograd_calls(mod) == 1
    vm = relay.create_executor("vm", mod=mod, target="llvm").evaluate()
    compiled = relay_aot.compile(mod)
    huge = (np.sign(x) * (0.5 + 0.5 * np.abs(np.tanh(x))) * 1e38).astype("float32")
    one_row = x.copy()
    one_row[0, :, 7] = huge[0, :, 7]  # only the rows of tiles around row 7 are computed directly
    for data in (huge, one_row):
        expected = vm(data).numpy()
        assert np.isfinite(expected).all()
        _assert_matches_direct(compiled(data).numpy(), expected)

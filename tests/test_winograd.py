"""Winograd convolutions (passes/winograd.py, kernels/winograd.py): which convolutions become
Winograd's, and that their results equal TVM's direct convolution (the VM) within float32
rounding, fused with bias and activation or not, on tiles that do and do not divide the image."""

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


def _conv_net(channels, filters, height, width, stride=1, fused=True, weight_param=False, seed=0):
    rng = np.random.default_rng(seed)
    x = relay.var("x", shape=(1, channels, height, width))
    w_np = (rng.standard_normal((filters, channels, 3, 3)) / np.sqrt(9 * channels)).astype("float32")
    w = relay.var("w", shape=w_np.shape) if weight_param else relay.const(w_np)
    y = relay.nn.conv2d(x, w, strides=(stride, stride), padding=(1, 1), channels=filters, kernel_size=(3, 3))
    if fused:
        y = relay.nn.relu(relay.nn.bias_add(y, relay.const(rng.standard_normal(filters).astype("float32"))))
    else:
        y = relay.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    params = [x, w] if weight_param else [x]
    args = [rng.standard_normal((1, channels, height, width)).astype("float32")]
    if weight_param:
        args.append(w_np)
    return tvm.IRModule.from_expr(relay.Function(params, y)), args


def _winograd_calls(mod, target=None) -> int:
    prepared = passes.prepare(mod, target=target or tvm.target.Target(cpu.host_target()))
    return prepared.astext(show_meta_data=False).count(WINOGRAD + "(")


@needs_avx512
@pytest.mark.parametrize("shape", [
    (16, 32, 13, 13, True),    # tiles of 2 (a 13-wide map: 7 tiles, the last partial)
    (32, 64, 27, 27, True),    # tiles of 4, the last partial
    (16, 32, 20, 23, False),   # not square; the convolution's own output stage (max_pool follows)
])
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
    monkeypatch.setenv("RELAY_AOT_WINOGRAD", "0")
    request = relay_aot.request.Request.make(mod)
    program, kernels = request.lower()
    assert not any(WINOGRAD in kernel.ops for kernel in kernels.kernels)
    monkeypatch.delenv("RELAY_AOT_WINOGRAD")
    program, kernels = relay_aot.request.Request.make(mod).lower()
    assert any(WINOGRAD in kernel.ops for kernel in kernels.kernels)

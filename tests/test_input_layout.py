"""The input layout and padding kernels of int8 convolutional models (``kernels/input_layout.py``):
exact on the held-out networks (one and three input channels, padded all round or below and
right), rewritten in the code relay_aot builds for an x86 host; built alone, the rewritten
kernels' bytes against numpy's (one to three channels; packed tensors padded, shifted into uint8
or not); kernels computing anything else are left to TVM."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from test_tflite import _check_on_inputs, needs_litert
from tvm import te

import relay_aot
from relay_aot.kernels import input_layout
from relay_aot.passes.nchw import is_x86
from relay_aot.request import Request
from relay_aot.testing.tflite_models import HELD_OUT_FAMILIES

HOST = tvm.target.Target("llvm")


@needs_litert
# ResNet's first layer is of three channels, as VWW's: in -m slow (CI time)
@pytest.mark.parametrize("family", ["kws", pytest.param("resnet", marks=pytest.mark.slow), "vww"])
def test_held_out_networks_are_exact_with_their_input_layout_rewritten(family, tmp_path):
    """The held-out networks whose first convolution is NCHWc: one input channel padded 4 and 1
    (keyword spotting), three padded 1 all round (ResNet-8), three padded below and right only
    (visual wake words, stride 2)."""
    builder = HELD_OUT_FAMILIES[family]()
    path = tmp_path / f"{family}.tflite"
    builder.write(path)
    model = relay_aot.read_tflite(path)
    _check_on_inputs(path, builder, model, seed=5, count=10)
    _, table = Request.make(model.mod, None, model.params).lower()
    if is_x86(table.target):
        text = str(table.lowered()[0])
        assert "input_bytes" in text and "pad_word" in text, "the input's layout kernel was not rewritten"
        if family != "kws":  # the paddings of later convolutions (uint8) or depthwise ones (int8)
            assert "pad_byte" in text, "no padding kernel was rewritten"


def _layout_kernel(h=5, w=4, c=3, top=1, left=1, bottom=1, right=1, shift=128, fill=0, pad_from_zero_point=True):
    """A lowered kernel of the layout's form (TE, as TVM's fused kernel computes it), or a
    variant of it."""
    hp, wp = h + top + bottom, w + left + right
    x = te.placeholder((1, h, w, c), "int8", name="x")
    zp = te.placeholder((), "int8", name="zp")

    def value(n, cc, i, j, k):
        inside = tvm.tir.all(i >= top, i < top + h, j >= left, j < left + w)
        padded = zp[()] if pad_from_zero_point else tvm.tir.const(0, "int8")
        byte = tvm.tir.if_then_else(inside, x[0, i - top, j - left, k], padded)
        shifted = (byte.astype("int32") + shift).astype("uint8")
        return tvm.tir.if_then_else(k < c, shifted, tvm.tir.const(fill, "uint8"))

    out = te.compute((1, 1, hp, wp, 4), value, name="layout")
    s = te.create_schedule(out.op)
    s[out].fuse(*s[out].op.axis[:3])
    with tvm.transform.PassContext(config={"tir.disable_cse_tir": True}):  # as relay_aot lowers
        return tvm.lower(s, [x, zp, out], name="layout")["layout"]


def test_only_the_layouts_computation_is_rewritten():
    for kwargs in ({}, {"c": 1, "top": 0, "left": 0}, {"c": 2, "top": 0, "left": 1, "bottom": 2}):
        func = _layout_kernel(**kwargs)
        assert not input_layout._rewrite(func).same_as(func), kwargs
    for variant in ({"shift": 127}, {"fill": 1}, {"pad_from_zero_point": False}):
        func = _layout_kernel(**variant)
        assert input_layout._rewrite(func).same_as(func), variant


@pytest.mark.parametrize("kwargs", [{}, {"c": 1, "top": 0, "left": 0, "bottom": 3}, {"c": 2, "left": 2}])
def test_the_rewritten_kernel_computes_the_layout(kwargs):
    """Built and run: the rewritten kernel's bytes against numpy's padding, shift and fill."""
    func = _layout_kernel(h=6, w=5, **kwargs)
    rewritten = input_layout._rewrite(func)
    assert not rewritten.same_as(func)
    lib = tvm.build(tvm.IRModule({"layout": rewritten}), target=HOST)
    c = kwargs.get("c", 3)
    top, left, bottom = kwargs.get("top", 1), kwargs.get("left", 1), kwargs.get("bottom", 1)
    rng = np.random.default_rng(2)
    for zp in (-128, -3, 0, 77):
        x = rng.integers(-128, 128, size=(1, 6, 5, c)).astype(np.int8)
        out = tvm.nd.empty(tuple(int(d) for d in func.buffer_map[func.params[2]].shape), "uint8")
        lib(tvm.nd.array(x), tvm.nd.array(np.int8(zp)), out)
        padded = np.pad(x, ((0, 0), (top, bottom), (left, 1), (0, 0)), constant_values=zp)
        want = np.zeros(out.shape, np.uint8)
        want[0, 0, :, :, :c] = (padded[0].astype(np.int32) + 128).astype(np.uint8)
        np.testing.assert_array_equal(out.numpy(), want)


def _padding_kernel(c1=2, h=5, w=4, b=16, top=1, left=1, bottom=1, right=1, shifted=True, shift=128, zero_pad=False):
    """A lowered padding kernel of a packed tensor (TE, scheduled as TVM's x86 injective
    schedule does: rows fused, the channel block one vector), or a variant of it."""
    hp, wp = h + top + bottom, w + left + right
    x = te.placeholder((1, c1, h, w, b), "int8", name="x")
    zp = te.placeholder((), "int8", name="zp")

    def value(n, c, i, j, k):
        inside = tvm.tir.all(i >= top, i < top + h, j >= left, j < left + w)
        padded = tvm.tir.const(0, "int8") if zero_pad else zp[()]
        byte = tvm.tir.if_then_else(inside, x[0, c, i - top, j - left, k], padded)
        return (byte.astype("int32") + shift).astype("uint8") if shifted else byte

    out = te.compute((1, c1, hp, wp, b), value, name="padded")
    s = te.create_schedule(out.op)
    n, c, i, j, k = s[out].op.axis
    s[out].fuse(n, c, i)
    s[out].vectorize(k)
    with tvm.transform.PassContext(config={"tir.disable_cse_tir": True}):  # as relay_aot lowers
        return tvm.lower(s, [x, zp, out], name="padded")["padded"]


PADDINGS = [
    {},
    {"shifted": False},
    {"c1": 1, "top": 0, "left": 0, "bottom": 1, "right": 1, "b": 8},
    {"c1": 3, "top": 2, "left": 0, "bottom": 0, "right": 2, "shifted": False},
]


@pytest.mark.parametrize("kwargs", PADDINGS, ids=[str(i) for i in range(len(PADDINGS))])
def test_the_rewritten_padding_kernel_pads(kwargs):
    """Built and run: the rewritten padding's bytes against numpy's, shifted into uint8 or not."""
    func = _padding_kernel(h=6, w=5, **kwargs)
    rewritten = input_layout._rewrite_padding(func)
    assert not rewritten.same_as(func)
    lib = tvm.build(tvm.IRModule({"padded": rewritten}), target=HOST)
    c1, b = kwargs.get("c1", 2), kwargs.get("b", 16)
    pads = [kwargs.get(side, 1) for side in ("top", "bottom", "left", "right")]
    shifted = kwargs.get("shifted", True)
    rng = np.random.default_rng(4)
    for zp in (-128, -5, 0, 100):
        x = rng.integers(-128, 128, size=(1, c1, 6, 5, b)).astype(np.int8)
        out = tvm.nd.empty(tuple(int(d) for d in func.buffer_map[func.params[2]].shape), "uint8" if shifted else "int8")
        lib(tvm.nd.array(x), tvm.nd.array(np.int8(zp)), out)
        want = np.pad(x, ((0, 0), (0, 0), tuple(pads[:2]), tuple(pads[2:]), (0, 0)), constant_values=zp)
        if shifted:
            want = (want.astype(np.int32) + 128).astype(np.uint8)
        np.testing.assert_array_equal(out.numpy(), want)


def test_only_the_paddings_computation_is_rewritten():
    for variant in ({"shift": 127}, {"zero_pad": True}, {"zero_pad": True, "shifted": False}):
        func = _padding_kernel(**variant)
        assert input_layout._rewrite_padding(func).same_as(func), variant

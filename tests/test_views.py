"""Kernels that only reshape share their input's bytes (``kernels/copies.py``'s VIEW): which
kernels the generated C++ replaces with a view, and their results against numpy and the graph
executor, on both backends (the Python backend always runs the kernel)."""

import json
import re

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.contrib import graph_executor

import relay_aot
from relay_aot.compiler import generate_source
from relay_aot.cpu import host_target


def _viewed_shapes(source: str) -> set[str]:
    """The shapes of the tensors the generated C++ makes as views."""
    return set(re.findall(r"= view_of\(.*// (\([0-9, ]*\)): its input's bytes", source))


def _module(body, *params):
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(list(params), body)))


def _reshapes():
    """exp -> reshape -> exp, and a reshape of that returned too: the first reshape's result
    is a view; the returned one is a copy (a caller may hold it after the tensor it shares)."""
    x = relay.var("x", shape=(2, 3, 4))
    inner = relay.exp(relay.reshape(relay.exp(x), (6, 4)))
    module = _module(relay.Tuple([inner, relay.reshape(inner, (24,))]), x)
    return module, lambda a: [np.exp(np.exp(a).reshape(6, 4)), np.exp(np.exp(a).reshape(6, 4)).reshape(24)]


def _layout_transforms():
    """Two layout transforms: channels packed by 4 move every element; one packed by 16 over
    a single pixel moves none."""
    x = relay.var("x", shape=(1, 8, 3, 3))
    y = relay.var("y", shape=(1, 64, 1, 1))
    moved = relay.exp(relay.layout_transform(relay.exp(x), "NCHW", "NCHW4c"))
    kept = relay.exp(relay.layout_transform(relay.exp(y), "NCHW", "NCHW16c"))
    module = _module(relay.Tuple([moved, kept]), x, y)

    def expected(a, b):
        packed = np.exp(a).reshape(1, 2, 4, 3, 3).transpose(0, 1, 3, 4, 2)
        return [np.exp(packed), np.exp(np.exp(b).reshape(1, 4, 1, 1, 16))]

    return module, expected


def _zero_dimensional():
    """Reshapes to and from 0-d values, which the C++ code holds unboxed: copied, not viewed."""
    x = relay.var("x", shape=(1,))
    scalar = relay.exp(relay.reshape(relay.exp(x), ()))
    module = _module(relay.Tuple([scalar, relay.exp(relay.reshape(scalar, (1, 1)))]), x)
    return module, lambda a: [np.exp(np.exp(a[0])), np.exp(np.exp(np.exp(a[0]))).reshape(1, 1)]


CASES = {
    "reshapes": (_reshapes, {"(6, 4)"}),
    "layout_transforms": (_layout_transforms, {"(1, 4, 1, 1, 16)"}),
    "zero_dimensional": (_zero_dimensional, set()),
}


@pytest.mark.parametrize("case", CASES)
def test_which_kernels_become_views(case):
    make, views = CASES[case]
    module, _ = make()
    assert _viewed_shapes(generate_source(module, opt_level=0)) == views


@pytest.mark.parametrize("backend", ["cpp", "python"])
@pytest.mark.parametrize("case", CASES)
def test_results_equal_numpys(case, backend):
    module, expected = CASES[case][0]()
    rng = np.random.default_rng(0)
    args = [rng.normal(0, 1, [int(d) for d in p.checked_type.shape]).astype("float32") for p in module["main"].params]
    for _ in range(2):  # a view taken the first time must not change what the second call sees
        got = relay_aot.compile(module, backend=backend, opt_level=0)(*args)
        for value, want in zip(got, expected(*args)):
            np.testing.assert_allclose(value.numpy(), want, rtol=1e-6)


def _image_net():
    """An image's 3 channels into a convolution, then a dense layer."""
    rng = np.random.default_rng(1)
    data = relay.var("data", shape=(1, 3, 20, 20))
    weight = relay.const(rng.normal(0, 0.3, (16, 3, 3, 3)).astype("float32"))
    y = relay.nn.relu(relay.nn.conv2d(data, weight, channels=16, kernel_size=(3, 3)))
    dense = relay.const(rng.normal(0, 0.1, (10, 16 * 18 * 18)).astype("float32"))
    return _module(relay.nn.dense(relay.nn.batch_flatten(y), dense), data)


def test_an_image_enters_its_convolution_as_it_is():
    """x86 convolutions over fewer channels than a vector block them one channel per block
    (``kernels/schedule_rules.py``): ``NCHW1c`` holds the input's bytes, so no kernel moves
    them. The values are the graph executor's (which blocks all 3 channels together)."""
    module, target = _image_net(), host_target()
    assert "(1, 3, 20, 20, 1)" in _viewed_shapes(generate_source(module, target=target))
    image = np.random.default_rng(2).normal(0, 1, (1, 3, 20, 20)).astype("float32")
    with tvm.transform.PassContext(opt_level=3):
        graph = graph_executor.GraphModule(relay.build(module, target=target)["default"](tvm.cpu()))
    graph.run(data=image)
    got = relay_aot.compile(module, target=target)(image)
    np.testing.assert_allclose(got.numpy(), graph.get_output(0).numpy(), rtol=1e-5, atol=1e-5)


def test_a_profile_counts_no_tensor_memory_for_a_view():
    """A profiled build counts the tensors the code allocates (5 here, of 96 bytes, in blocks
    of 256 at most), not the view, which allocates none: counted as a tensor, it had its
    source's address read as its size."""
    module, _ = _reshapes()
    report = relay_aot.compile(module, opt_level=0).profile(np.ones((2, 3, 4), "float32"))
    device = json.loads(report.json())["device_metrics"]["cpu0"]
    assert device["Tensors allocated"]["count"] <= 5 and 0 < device["Tensor bytes"]["count"] <= 5 * 256, device

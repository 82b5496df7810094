"""Concatenations whose pieces their kernels write in place (``ir/in_place.py``): outputs
against the graph executor's, and which concatenations the generated C++ writes in place."""

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.contrib import graph_executor

import relay_aot
from relay_aot.compiler import generate_source
from relay_aot.cpu import host_target


def _conv(x, channels, filters, seed):
    """A 3x3 convolution + bias + relu: its own kernel, whose output nothing else reads."""
    rng = np.random.default_rng(seed)
    weight = relay.const(rng.normal(0, 0.3, (filters, channels, 3, 3)).astype("float32"))
    bias = relay.const(rng.normal(0, 0.3, (filters,)).astype("float32"))
    y = relay.nn.conv2d(x, weight, padding=(1, 1), channels=filters, kernel_size=(3, 3))
    return relay.nn.relu(relay.nn.bias_add(y, bias))


def _fire(case):
    """A SqueezeNet-like module: parallel layers concatenated along channels, read by a
    convolution (the layers' blocking agrees, so no layout transform fuses with the concat)."""
    data = relay.var("data", shape=(1, 16, 12, 12))
    a, b = _conv(data, 16, 64, 1), _conv(data, 16, 64, 2)
    pieces, channels, extra = [a, b], 128, []
    if case == "three_pieces":
        pieces, channels = [a, _conv(data, 16, 32, 3), b], 160
    if case == "input_piece":  # a parameter cannot be written
        pieces, channels = [a, data, b], 144
    if case == "piece_read_again":  # a piece another operator reads too: copied, not sliced
        extra = [relay.nn.max_pool2d(a, (2, 2), (2, 2))]
    body = _conv(relay.concatenate(pieces, axis=1), channels, 16, 4)
    if case in ("rows", "unaligned"):  # rows of 80 floats (320 bytes: 5 x 64), of 75 (300)
        width = 80 if case == "rows" else 75
        rows = relay.var("data", shape=(1, 5))
        weights = [relay.const(np.random.default_rng(i).normal(0, 1, (width, 5)).astype("float32")) for i in (5, 6)]
        body = relay.concatenate([relay.nn.dense(rows, w) for w in weights], axis=0)
    body = relay.Tuple([body] + extra) if extra else body
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(body), body))
    return relay.transform.InferType()(mod)


CASES = {
    "pieces_from_kernels": True,
    "three_pieces": True,
    "rows": True,
    "piece_read_again": False,
    "input_piece": False,
    "unaligned": False,
}


@pytest.mark.parametrize("case", CASES)
def test_results_equal_the_graph_executors(case):
    mod = _fire(case)
    rng = np.random.default_rng(0)
    args = {
        p.name_hint: rng.normal(0, 1, [int(d) for d in p.checked_type.shape]).astype("float32")
        for p in mod["main"].params
    }
    target = host_target()
    with tvm.transform.PassContext(opt_level=3):
        graph = graph_executor.GraphModule(relay.build(mod, target=target)["default"](tvm.cpu()))
    graph.run(**args)
    got = relay_aot.compile(mod, target=target)(*args.values())
    got = list(got) if isinstance(got, (list, tuple, tvm.runtime.container.ADT)) else [got]
    for i, value in enumerate(got):
        expected = graph.get_output(i).numpy()
        # relay_aot computes the 3x3 convolutions by Winograd's algorithm on AVX-512: a few ulps
        # of the largest output apart from the graph executor's direct ones (a misplaced piece
        # is off by whole values)
        np.testing.assert_allclose(value.numpy(), expected, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("case,in_place", CASES.items())
def test_which_concatenations_are_written_in_place(case, in_place):
    source = generate_source(_fire(case), target=host_target())
    assert ("view_tensor(" in source) == in_place
    assert ("its pieces' kernels wrote it in place" in source) == in_place

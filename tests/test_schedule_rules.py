"""relay_aot's schedule rules (kernels/schedule_rules.py): the register blocks they choose fit the
target's vector registers, tuning records still win over them, and the products built with
them agree with numpy on every shape class (one row, a few, a batch; columns that are and are
not a multiple of the vector width)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tvm
from tvm import autotvm, relay

import relay_aot
from relay_aot.kernels.schedule_rules import (
    ShapeRules,
    conv_channel_block,
    conv_register_block,
    dense_pack_blocking,
    pair_columns,
    row_columns,
)

AVX2 = (8, 16)  # float32 lanes, vector registers
AVX512 = (16, 32)


@pytest.mark.parametrize(
    "m, n, isa, expected",
    [
        (64, 512, AVX2, (4, 16)),  # TVM's fallback: 8 x 16, all 16 registers as accumulators
        (1, 512, AVX2, (1, 64)),  # a matrix-vector product: 8 independent accumulators
        (1, 1000, AVX2, (1, 40)),  # ResNet's classifier: 5 (TVM's fallback: 10 columns, 2)
        (64, 10, AVX2, (4, 10)),  # no multiple of the vector width divides 10
        (3, 40, AVX2, (1, 40)),  # 5 accumulators beat 3 rows of one
        (64, 512, AVX512, (8, 32)),  # TVM's fallback block, which fits AVX-512's 32 registers
        (1, 1000, AVX512, (1, 25)),
    ],
)
def test_register_block_fits_half_the_vector_registers(m, n, isa, expected):
    lanes, registers = isa
    rows, cols = dense_pack_blocking(m, n, lanes, registers)
    assert (rows, cols) == expected
    assert m % rows == 0 and n % cols == 0
    assert rows * -(-cols // lanes) <= registers // 2


def test_packed_weight_keeps_its_columns():
    """A weight packed already (the layout pass chose the columns) keeps them."""
    assert dense_pack_blocking(64, 512, 8, 16, columns=16) == (4, 16)


@pytest.mark.parametrize(
    "width, fallback, expected",
    [
        (27, 27, 9),  # TVM's 27 accumulators spill: 9 runs twice as fast (SqueezeNet)
        (56, 28, 8),  # ResNet-50's first stage
        (13, 13, 13),  # prime: 13 beats 1
        (55, 11, 11),
        (7, 7, 7),
        (5, 5, 5),  # narrower than any block: TVM's (the whole width)
        (17, 17, 9),  # no divisor from 6 to 16: a partial last block (18 columns computed), not 17 spilling
        (71, 1, 8),  # Inception-v3: 72 columns in 9 blocks of 8, not 71 of 1
        (111, 3, 8),  # SqueezeNet's first layer: 112 = 14 x 8 (7 wastes as little; 8 is nearer 8)
    ],
)
def test_convolution_columns(width, fallback, expected):
    assert conv_register_block(width, fallback) == expected


@pytest.mark.parametrize(
    "channels, fallback, expected",
    [
        (64, 8, 16),  # two AVX2 vectors
        (48, 8, 16),
        (1000, 8, 8),  # a classifier of 1000: 16 does not divide it, TVM's 8 does
        (24, 8, 8),
        (3, 3, 3),  # an image's channels
    ],
)
def test_channel_blocks(channels, fallback, expected):
    assert conv_channel_block(channels, 8, fallback) == expected


@pytest.mark.parametrize(
    "width, expected",
    [
        (56, 4),
        (28, 4),
        (7, 4),
        (27, 4),
        (17, 4),  # 4 computes as few columns as 5 (or fewer)
        (13, 5),
        (14, 5),
        (55, 5),
        (35, 5),  # 5 computes fewer
        (3, 3),
        (4, 4),
        (5, 5),  # narrow rows: one block
    ],
)
def test_columns_of_two_vector_blocks(width, expected):
    assert pair_columns(width) == expected


def _conv_workload(target, channels, filters, width, kernel, depthwise=False):
    with tvm.target.Target(target):
        data = tvm.te.placeholder((1, channels, width, width))
        if depthwise:
            weight = tvm.te.placeholder((channels, 1, kernel, kernel))
            return autotvm.task.get_workload(
                tvm.topi.x86.depthwise_conv2d_nchw(data, weight, (1, 1), (1, 1), (1, 1), "float32")
            )
        weight = tvm.te.placeholder((filters, channels, kernel, kernel))
        return autotvm.task.get_workload(tvm.topi.x86.conv2d_nchw(data, weight, (1, 1), (1, 1), (1, 1), "float32"))


@pytest.mark.parametrize(
    "target, depthwise, shape, blocks, columns",
    [
        ("llvm -mcpu=haswell", False, (16, 32, 27, 3), (16, 16), 4),  # two vectors: 4 columns (28 computed; 5: 30)
        ("llvm -mcpu=haswell", False, (16, 32, 13, 3), (16, 16), 5),  # 5 columns (15 computed; 4: 16)
        ("llvm -mcpu=haswell", False, (24, 8, 27, 3), (8, 8), 9),  # one vector: conv_register_block
        ("llvm -mcpu=haswell", True, (32, 32, 112, 3), (16, 16), 4),  # depthwise: a divisor up to 6 (TVM: 28)
        ("llvm -mcpu=haswell", True, (24, 24, 14, 3), (8, 8), 2),
    ],
)
def test_convolution_configurations(target, depthwise, shape, blocks, columns):
    workload = _conv_workload(target, *shape, depthwise=depthwise)
    with ShapeRules():
        ruled = autotvm.task.DispatchContext.current.query(tvm.target.Target(target), workload)
    assert not ruled.is_fallback, ruled
    assert (ruled["tile_ic"].size[-1], ruled["tile_oc"].size[-1]) == blocks
    assert ruled["tile_ow"].size[-1] == columns
    assert ruled["tile_ow"].size[0] * columns >= shape[2]


AVX512 = "llvm -mcpu=skylake-avx512"


def _ruled_on_avx512(workload):
    with ShapeRules():
        return autotvm.task.DispatchContext.current.query(tvm.target.Target(AVX512), workload)


@pytest.mark.parametrize(
    "channels, filters, width, kernel, depthwise",
    [
        (32, 32, 28, 3, True),  # depthwise
        (16, 64, 55, 3, False),  # 11 columns (55 = 5 x 11)
        (64, 256, 13, 3, False),  # the whole row
        (64, 256, 13, 1, False),  # pointwise, more than one row
    ],
)
def test_avx512_keeps_tvms_convolution_blocks(channels, filters, width, kernel, depthwise):
    """With 32 vector registers TVM's fallback blocks (one AVX-512 vector of 16 channels) fit."""
    assert _ruled_on_avx512(_conv_workload(AVX512, channels, filters, width, kernel, depthwise=depthwise)).is_fallback


@pytest.mark.parametrize(
    "width, columns",
    [
        (111, 14),  # SqueezeNet 1.1's first layer: TVM's 3 (111 = 3 x 37); 112 computed (16: as many)
        (71, 12),  # Inception-v3: TVM's 1; 72 computed
        (37, 13),  # prime, wider than 31: TVM's 1; 39 computed
    ],
)
def test_avx512_widths_without_a_wide_divisor_get_a_partial_last_block(width, columns):
    ruled = _ruled_on_avx512(_conv_workload(AVX512, 16, 32, width, 3))  # 3x3 with padding 1: as wide
    assert not ruled.is_fallback
    assert ruled["tile_ow"].size == [-(-width // columns), columns]
    assert (ruled["tile_ic"].size[-1], ruled["tile_oc"].size[-1]) == (16, 16)  # TVM's blocks


def _packed(workload, blocks):
    """``workload`` as the packed kernel's lowering asks for it, after the layout pass packed its
    channels to ``blocks`` (input, output)."""
    name, data, kernel, strides, padding, dilation, _, _, out_dtype = workload
    n, channels, height, width = data[1]
    filters, _, kh, kw = kernel[1]
    ic, oc = blocks
    return (
        name,
        ("TENSOR", (n, channels // ic, height, width, ic), data[2]),
        ("TENSOR", (filters // oc, channels // ic, kh, kw, ic, oc), kernel[2]),
        strides,
        padding,
        dilation,
        f"NCHW{ic}c",
        f"NCHW{oc}c",
        out_dtype,
    )


@pytest.mark.parametrize(
    "target, channels, filters, width, kernel, stride, padding",
    [
        (AVX512, 3, 64, 224, 3, 2, 0),  # SqueezeNet's first layer: an image, 111 wide, 14 columns
        (AVX512, 3, 64, 224, 7, 2, 3),  # ResNet's: an image, 112 wide, TVM's columns
        (AVX512, 16, 32, 113, 3, 1, 0),  # 111 wide: 14 columns, TVM's blocks
        ("llvm -mcpu=haswell", 3, 64, 224, 3, 2, 0),  # an image on AVX2
        ("llvm -mcpu=haswell", 16, 32, 29, 3, 1, 1),
    ],
)
def test_packed_kernel_gets_the_configuration_it_was_packed_to(
    target, channels, filters, width, kernel, stride, padding
):
    """The layout pass asks for a convolution's configuration to pick its packed layout; the
    packed kernel's lowering asks again, by the packed workload: both answers must be the same
    configuration (an image's kernel, blocked one channel per block, once got TVM's fallback
    there: 3 columns of SqueezeNet's 111, 593 against 313 us in the network)."""
    with tvm.target.Target(target):
        data = tvm.te.placeholder((1, channels, width, width))
        weight = tvm.te.placeholder((filters, channels, kernel, kernel))
        workload = autotvm.task.get_workload(
            tvm.topi.x86.conv2d_nchw(data, weight, (stride, stride), (padding, padding), (1, 1), "float32")
        )
    with ShapeRules():
        chosen = autotvm.task.DispatchContext.current.query(tvm.target.Target(target), workload)
        packed = _packed(workload, (chosen["tile_ic"].size[-1], chosen["tile_oc"].size[-1]))
        lowered = autotvm.task.DispatchContext.current.query(tvm.target.Target(target), packed)
    assert not chosen.is_fallback and not lowered.is_fallback
    assert {knob: str(lowered[knob]) for knob in chosen._entity_map} == {
        knob: str(chosen[knob]) for knob in chosen._entity_map
    }


def _row_workload(target, channels, filters, width):
    with tvm.target.Target(target):
        data = tvm.te.placeholder((1, channels, 1, width))
        weight = tvm.te.placeholder((filters, channels, 1, 1))
        return autotvm.task.get_workload(tvm.topi.x86.conv2d_nchw(data, weight, (1, 1), (0, 0), (1, 1), "float32"))


@pytest.mark.parametrize(
    "filters, width, blocks, columns",
    [
        (1024, 169, (16, 32), 13),  # SqueezeNet's classifier, padded (passes/pooled_pointwise)
        (2048, 49, (16, 32), 7),  # ResNet-50's last convolution
        (1000, 169, None, None),  # no multiple of two vectors: TVM's blocks
    ],
)
def test_avx512_pointwise_rows_block_two_vectors_of_filters(filters, width, blocks, columns):
    ruled = _ruled_on_avx512(_row_workload(AVX512, 512, filters, width))
    if blocks is None:
        assert ruled.is_fallback
        return
    assert (ruled["tile_ic"].size[-1], ruled["tile_oc"].size[-1]) == blocks
    assert ruled["tile_ow"].size[-1] == columns and ruled["tile_oh"].val == 1


@pytest.mark.parametrize(
    "width, most, expected",
    [
        (169, 14, 13),
        (49, 14, 7),
        (10, 14, 10),
        (53, 14, 9),  # 53: 54 computed; 14 would be 56
    ],
)
def test_row_columns(width, most, expected):
    assert row_columns(width, most) == expected


def _dense_pack_workload(m, n, k, target):
    with target:
        x = tvm.te.placeholder((m, k), name="x")
        w = tvm.te.placeholder((n, k), name="w")
        return autotvm.task.get_workload(tvm.topi.x86.dense_pack(x, w))


def test_tuning_record_wins_over_the_rule(tmp_path):
    target = tvm.target.Target("llvm -mcpu=haswell")
    workload = _dense_pack_workload(64, 512, 784, target)
    with ShapeRules():
        ruled = autotvm.task.DispatchContext.current.query(target, workload)
    assert not ruled.is_fallback and ruled["tile_y"].size[-1] == 4 and ruled["tile_x"].size[-1] == 16

    task = autotvm.task.create(workload[0], args=workload[1:], target=target)
    record = task.config_space.get(len(task.config_space) - 1)
    log = tmp_path / "records.json"
    log.write_text(
        autotvm.record.encode(
            autotvm.MeasureInput(target, task, record), autotvm.MeasureResult((1e-6,), 0, 0.0, time.time())
        )
        + "\n"
    )
    with autotvm.apply_history_best(str(log)), ShapeRules():
        tuned = autotvm.task.DispatchContext.current.query(target, workload)
    assert str(tuned) == str(record)


def test_products_built_with_the_rule_agree_with_numpy():
    """Constant weights (packed at compile time) of every shape class, in one module."""
    rng = np.random.default_rng(0)
    shapes = [(1, 512, 96), (3, 40, 24), (64, 10, 64), (64, 512, 48), (5, 7, 9)]
    inputs, weights, outputs = [], [], []
    for i, (m, n, k) in enumerate(shapes):
        x = relay.var(f"x{i}", shape=(m, k))
        w = rng.uniform(-1, 1, (n, k)).astype("float32")
        inputs.append(x)
        weights.append(w)
        outputs.append(relay.nn.dense(x, relay.const(w)))
    mod = tvm.IRModule.from_expr(relay.Function(inputs, relay.Tuple(outputs)))
    compiled = relay_aot.compile(mod)
    args = [rng.uniform(-1, 1, (m, k)).astype("float32") for m, _, k in shapes]
    for got, x, w in zip(compiled(*args), args, weights):
        np.testing.assert_allclose(got.numpy(), x @ w.T, rtol=1e-5, atol=1e-5)


def test_convolutions_built_with_the_rule_agree_with_the_graph_executor():
    """3x3, 1x1 and depthwise convolutions whose shapes take each branch of the rules (two
    vectors of channels by 4 columns, 27 and 13 wide: the last block partial; one vector: 27 ->
    9, 13 -> 13, 17 -> 9 and 71 -> 8; depthwise 16 and 8 channels, 112, 13 and 14 wide), chained
    so that blocked layouts meet, against the graph executor (TVM's fallback schedules), on an
    AVX2 target, where the rules apply."""
    target = "llvm -mcpu=haswell"
    rng = np.random.default_rng(0)
    inputs, outputs = [], []
    for i, (channels, filters, width, kernel) in enumerate(
        [
            (16, 32, 27, 3),
            (8, 16, 13, 1),
            (8, 8, 17, 3),
            (24, 16, 27, 1),
            (8, 16, 17, 1),
            (8, 8, 71, 3),
            (32, 48, 13, 1),
        ]
    ):
        x = relay.var(f"x{i}", shape=(1, channels, width, width))
        w = relay.const(rng.uniform(-1, 1, (filters, channels, kernel, kernel)).astype("float32"))
        inputs.append(x)
        outputs.append(
            relay.nn.relu(
                relay.nn.conv2d(x, w, padding=(kernel // 2,) * 2, channels=filters, kernel_size=(kernel, kernel))
            )
        )
    for i, (channels, width, stride) in enumerate([(32, 112, 1), (32, 13, 1), (24, 28, 2)]):
        x = relay.var(f"d{i}", shape=(1, channels, width, width))
        dw = relay.const(rng.uniform(-1, 1, (channels, 1, 3, 3)).astype("float32"))
        pw = relay.const(rng.uniform(-1, 1, (channels, channels, 1, 1)).astype("float32"))
        y = relay.nn.relu(
            relay.nn.conv2d(
                x, dw, strides=(stride, stride), padding=(1, 1), groups=channels, channels=channels, kernel_size=(3, 3)
            )
        )
        inputs.append(x)
        outputs.append(relay.nn.conv2d(y, pw, channels=channels, kernel_size=(1, 1)))
    mod = tvm.IRModule.from_expr(relay.Function(inputs, relay.Tuple(outputs)))
    args = [rng.uniform(-1, 1, [int(d) for d in x.type_annotation.shape]).astype("float32") for x in inputs]
    got = relay_aot.compile(mod, target=target)(*args)
    with tvm.transform.PassContext(opt_level=3):
        reference = relay.create_executor("graph", mod=mod, target=target).evaluate()(*args)
    for ours, theirs in zip(got, reference):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)

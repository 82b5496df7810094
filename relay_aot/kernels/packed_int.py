"""Packed integer convolutions blocked by output channels, tensorized with a given intrinsic.

TVM's ``conv2d_NCHWc_int8`` compute (groups of ``n_elems`` input channels, the weights'
last axis) and TVM's int8 schedule, as ``conv_epilogue`` writes it for a fused convolution (its
accumulators at the output's block of columns, one per column; TVM's own,
``topi.generic``'s ``schedule_conv_NCHWc_cpu_common_int8``, where nothing is fused), for a
block of output channels of the intrinsic's lanes and a configuration of the caller's (TVM's
template admits only its own blocks: AutoTVM's ``tile_oc`` of sixteen, asserted by its
fallback). Two kernels use it: ``int8_by_eight`` (uint8 x int8, four channels a group,
``vpdpbusd`` of eight lanes) and ``int16_pairs`` (int16 x int16, two, ``vpmaddwd``).
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import te, topi
from tvm.autotvm.task.space import OtherOptionEntity, SplitEntity
from tvm.topi.generic.conv2d import schedule_conv_NCHWc_cpu_common_int8
from tvm.topi.utils import get_const_tuple, traverse_inline

from . import conv_epilogue
from .schedule_rules import _divisors, _vector_registers


def run(width: int, target: tvm.target.Target, spare: int = 1) -> int:
    """Output columns a block computes: the most dividing ``width`` that leave ``spare`` vector
    registers to the weights and the input."""
    return max(_divisors(width, _vector_registers(target)[1] - spare))


def config(width: int, ic_bn: int, channels: int, filters: int, lanes: int, columns: int) -> dict:
    """The configuration TVM's int8 schedule reads of AutoTVM's, for blocks of ``lanes`` filters,
    ``ic_bn`` input channels and ``columns`` columns; kw not unrolled."""
    return {
        "tile_ow": SplitEntity([width // columns, columns]),
        "unroll_kw": OtherOptionEntity(False),
        "tile_ic": SplitEntity([channels // ic_bn, ic_bn]),
        "tile_oc": SplitEntity([filters // lanes, lanes]),
    }


def compute_packed(attrs, inputs, out_type):
    """TVM's ``conv2d_NCHWc_int8`` of a packed convolution, with as many input channels per
    product group as the 7-d weights' last axis holds (4 here; 2 for ``int16_pairs``)."""
    data, kernel = inputs
    return [
        topi.nn.conv2d_NCHWc_int8(
            data,
            kernel,
            get_const_tuple(attrs.strides),
            get_const_tuple(attrs.padding),
            get_const_tuple(attrs.dilation),
            attrs.data_layout,
            attrs.out_layout,
            out_type.dtype,
            n_elems=int(kernel.shape[6]),
        )
    ]


def schedule(outs, target, lanes: int, intrin: Callable[[], te.TensorIntrin], config_of: Callable):
    """TVM's int8 schedule of a packed convolution (``conv2d_NCHWc_int8``) with ``intrin()`` of
    ``lanes`` lanes and the configuration ``config_of(width, channels, filters, target)``; the
    accumulators as ``conv_epilogue`` computes them where operators are fused."""
    s = te.create_schedule([x.op for x in outs])

    def callback(op):
        if "conv2d_NCHWc_int8" not in op.tag:
            return
        conv_out = op.output(0)
        data_vec, kernel_vec = conv_out.op.input_tensors
        _, chunks, _, width, block = get_const_tuple(conv_out.shape)
        channels = int(data_vec.shape[1]) * int(data_vec.shape[4])
        config = config_of(width, channels, chunks * block, target)
        with target:
            intrin_ = intrin()
            if conv_epilogue.fused_int8(s, config, data_vec, kernel_vec, conv_out, outs[0], intrin_):
                return
            # TVM's schedule, where the fused operators (the NCHW form's unpacking) are not
            # inlined into the column loop: that computes one column's accumulator at a time,
            # each vpdpbusd waiting for the one before
            schedule_conv_NCHWc_cpu_common_int8(
                s, config, data_vec, kernel_vec, conv_out, outs[0], lanes, intrin=intrin_, inline_fused=False
            )

    traverse_inline(s, outs[0].op, callback)
    return s

"""The kernel of int8 convolutions blocked by eight output channels (``passes/int8_by_eight.py``).

``packed_int``'s convolution (TVM's ``conv2d_NCHWc_int8`` compute and int8 schedule, the
accumulators of a fused one as ``conv_epilogue`` writes them) with
:func:`~relay_aot.kernels.vnni.dot_uint8_int8_int32` of eight lanes: for each run of
output columns, eight output channels of the run in 256-bit accumulators, one ``vpdpbusd`` per
column and four input channels. TVM's fused form computes one column at a time, every
``vpdpbusd`` of a column waiting for the one before: the held-out ResNet-8 network's two 3x3
convolutions of eight filters took 1.5 us each (0.92 here), the network 8.3 against 6.9 us.

TVM's own template cannot be used as it is: its configuration (AutoTVM's ``tile_oc``) only
admits blocks of sixteen, and its fallback asserts them. The configuration here is TVM's
fallback otherwise: the run is the widest that divides the output row and leaves a register to
the weights (31 columns with 32 vector registers, 15 with 16), the kernel's columns not
unrolled.

While relay_aot lowers its kernels (:func:`building`), ``conv2d_NCHWc`` strategy for ``cpu``
targets gives this kernel to a uint8 x int8 ``NCHWc`` convolution whose output block is eight
channels (only the layout choice of ``passes/int8_by_eight.py`` makes one; TVM's strategy is one
native generic function, so the same dispatcher gives ``int16_pairs``' kernel the int16 ones of
that module's layout choice), and the ``conv2d`` strategy (``grouped_pointwise``'s dispatcher) to an ``NCHW`` one the pass legalized (a module
whose layout was not changed: ``opt_level`` below 3, or the layout choice dropped), packing its
operands in the kernel as TVM's ``conv2d_nchw_int8`` does.
"""

from __future__ import annotations

import tvm
from tvm import te, topi
from tvm.relay.op import op as _op
from tvm.relay.op.strategy import generic as _generic
from tvm.relay.op.strategy import x86 as _x86
from tvm.topi.utils import get_const_tuple
from tvm.topi.x86.conv2d_int8 import _pack_data

from ..gate import Gate
from ..passes import int8_by_eight as _pass
from . import int16_pairs, packed_int, vnni

#: int32 lanes of a block: eight output channels.
LANES = 8


def _config(width: int, channels: int, filters: int, target: tvm.target.Target) -> dict:
    """The schedule's configuration: blocks of eight filters."""
    return packed_int.config(
        width, _pass.input_block(channels), channels, filters, LANES, packed_int.run(width, target)
    )


def packed_applies(data: te.Tensor, kernel: te.Tensor, target: tvm.target.Target) -> bool:
    """Whether an ``NCHWc`` convolution of ``data`` and ``kernel`` is one this kernel computes:
    uint8 x int8, the 7-d int8 weights of blocks of eight filters, on a target with eight-lane
    ``vpdpbusd``."""
    return (
        data.dtype == "uint8"
        and kernel.dtype == "int8"
        and len(data.shape) == 5
        and len(kernel.shape) == 7
        and get_const_tuple(kernel.shape)[5:] == (LANES, 4)
        and _pass.eight_lanes(target)
    )


def nchw_applies(attrs, data: te.Tensor, kernel: te.Tensor, target: tvm.target.Target) -> bool:
    """Whether an ``NCHW`` ``conv2d`` is one the pass legalized for this kernel."""
    return _pass.legalized(attrs, data, kernel, target)


def _compute_nchw_for(target: tvm.target.Target):
    def compute(attrs, inputs, out_type):
        data, kernel = inputs
        _, channels, _, width = get_const_tuple(data.shape)
        config = _config(width, channels, int(kernel.shape[0]), target)
        data, kernel = _pack_data(config, data, kernel)
        packed = topi.nn.conv2d_NCHWc_int8(
            data,
            kernel,
            get_const_tuple(attrs.strides),
            get_const_tuple(attrs.padding),
            get_const_tuple(attrs.dilation),
            "NCHW",
            "NCHW",
            out_type.dtype,
        )
        return [topi.nn.unpack_NCHWc_to_nchw(packed, out_type.dtype)]

    return compute


def _schedule(attrs, outs, target):
    """TVM's int8 schedule with eight lanes."""
    return packed_int.schedule(outs, target, LANES, lambda: vnni.dot_uint8_int8_int32(LANES), _config)


def strategy(attrs, inputs, target, packed: bool) -> _op.OpStrategy:
    """The strategy of this kernel for an ``NCHWc`` (``packed``) or ``NCHW`` convolution."""
    compute = packed_int.compute_packed if packed else _compute_nchw_for(target)
    ours = _op.OpStrategy()
    ours.add_implementation(compute, _schedule, name="conv2d_NCHWc_int8_by_eight.relay_aot", plevel=20)
    return ours


_TVM_NCHWC_STRATEGY = _x86.conv2d_NCHWc_strategy_cpu


def _nchwc_strategy(attrs, inputs, out_type, target):
    if _GATE.active():
        if packed_applies(inputs[0], inputs[1], target):
            return strategy(attrs, inputs, target, packed=True)
        # TVM's strategy is a native generic function: one dispatcher serves both kernels
        if int16_pairs.packed_applies(inputs[0], inputs[1], target):
            return int16_pairs.strategy(attrs, inputs, target)
    return _TVM_NCHWC_STRATEGY(attrs, inputs, out_type, target)


def _install() -> None:
    _generic.conv2d_NCHWc_strategy.register("cpu", _nchwc_strategy, override=True)


_GATE = Gate(_install)
#: Within the block (on this thread), these convolutions get this kernel.
building = _GATE.building

"""The tensor intrinsic shape of TVM's x86 integer kernels: int32 lanes, each the sum of a group
of products of broadcast data and one lane's weights.

``data[group]`` (broadcast to every lane) times ``kernel[lanes][group]``, summed per lane into
int32 and added to the lanes (update), or not (body), or the lanes zeroed (reset): the
computation ``topi.x86`` tensorizes its uint8 x int8 kernels with, groups of four
(``vnni.dot_uint8_int8_int32``: one ``vpdpbusd``), and ``int16_pairs``' kernels, groups of two
(one ``vpmaddwd``). What differs is the instruction: :func:`lane_sums` takes it as a function.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import te, tir


def lane_sums(
    lanes: int, group: int, data_dtype: str, kernel_dtype: str, instruction: Callable[..., tir.PrimExpr]
) -> te.TensorIntrin:
    """The intrinsic of ``lanes`` int32 sums of ``group`` products each. ``instruction(data,
    kernel, lanes_now)`` returns the new lanes from the data and kernel buffers, ``lanes_now``
    the int32 vector to add to (None for the body: the sums alone)."""
    int32s = f"int32x{lanes}"
    data = te.placeholder((group,), dtype=data_dtype, name="data")
    kernel = te.placeholder((lanes, group), dtype=kernel_dtype, name="kernel")
    k = te.reduce_axis((0, group), name="k")
    out = te.compute(
        (lanes,), lambda i: te.sum(data[k].astype("int32") * kernel[i, k].astype("int32"), axis=k), name="C"
    )
    data_buffer = tir.decl_buffer(data.shape, dtype=data_dtype, name="a_buffer", offset_factor=1, strides=[1])
    kernel_buffer = tir.decl_buffer(
        kernel.shape, dtype=kernel_dtype, name="b_buffer", offset_factor=1, strides=[te.var("ldw"), 1]
    )

    def body(ins, outs) -> tuple[tir.Stmt, tir.Stmt, tir.Stmt]:
        sums = outs[0]
        reset = sums.vstore(0, tir.const(0, int32s))
        alone = sums.vstore(0, instruction(ins[0], ins[1], None))
        update = sums.vstore(0, instruction(ins[0], ins[1], sums.vload([0], int32s)))
        return alone, reset, update

    return te.decl_tensor_intrin(
        out.op,
        body,
        binds={data: data_buffer, kernel: kernel_buffer},
        default_buffer_params={"offset_factor": 1},
    )

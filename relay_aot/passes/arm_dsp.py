"""int8 convolutions in the forms relay_aot's kernels for Arm's DSP extension compute.

relay_aot's int8 kernels for M-profile cores with the DSP extension (``kernels/arm_dsp.py``)
multiply rows of int8 weights by int8 inputs, four int8 of each loaded as one word. TVM's own
path for an int8 ``NHWC`` convolution on a Cortex-M4 widens both operands to int16 (its
``arm_cpu`` layout choice for ``conv2d_nhwc_spatial_pack``), storing the filters as int16
constants (twice the flash) and every input as an int16 tensor (an extra kernel and twice the
RAM), then multiplies one pair at a time (7.5 instructions per multiply-add on MLPerf Tiny's
keyword-spotting model, where CMSIS-NN takes 2.1).

:func:`rewrite` (before the legalizations and the layout choice) gives an int8 by int8
convolution into int32 with constant ``HWIO`` weights, one group, no padding (relay_aot's TFLite
importer pads explicitly) and no width dilation the form of relay_aot's kernel:

* a 1x1 convolution with unit strides is a matrix product of the pixels (``N*H*W`` rows of
  ``C``) by the filters: ``reshape(dense(reshape(x, [N*H*W, C]), W^T), [N, H, W, O])``; the
  elementwise operators after it whose other operands are constant along the pixels (a bias,
  per-channel or per-tensor requantization constants, ``stop_fusion``) are moved inside the
  final reshape, so they fuse into the dense's kernel;
* any other one gets its weights as ``OHWI`` (each filter's window contiguous, the rows the
  micro-kernel reads), which only this pass makes: relay_aot's convolution strategy computes
  those while relay_aot compiles;
* a depthwise convolution (``HWOI`` weights of multiplier 1, as the importer writes it) stays
  as it is: relay_aot's depthwise kernel computes it.

In all three, the importer's ``stop_fusion`` between the int32 sums and the requantization is
dropped: it kept x86's convolution schedules from computing each stage of the requantization as
a loop of its own; relay_aot's DSP kernels apply the fused operators to each block of four
sums right after the micro-kernel, and the int32 tensor between them is not stored. The sums
are the same int32 sums, the requantization the same operators.

After FuseOps, :func:`pads_into_convolutions` merges the kernel of a pad (the importer's, with the
input's zero point) into the kernel of the one convolution of these forms that reads it: the
convolution then pads its input itself and no padded copy is stored.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relay

from .gradient_cleanup import static_shape
from .requantization import match as _requantization
from .walk import CallRewriter, calls_any, rewrite_functions
from .walk import op_name as _name

_STOP_FUSION = "annotation.stop_fusion"


def has_dsp(target: tvm.target.Target | None) -> bool:
    """Whether ``target`` has Arm's M-profile DSP extension (the kernel's instructions)."""
    return target is not None and target.kind.name in ("llvm", "c") and bool(target.features.has_dsp)


def _pointwise_weights(call: relay.Call) -> np.ndarray | None:
    """The filters (``O x C``, int8) of an int8 1x1 ``NHWC`` convolution into int32 with unit
    strides, no padding, one group and constant ``HWIO`` weights; else None."""
    attrs = call.attrs
    data, weight = call.args
    shape = static_shape(data)
    if (
        not isinstance(weight, relay.Constant)
        or shape is None
        or len(shape) != 4
        or attrs.data_layout != "NHWC"
        or attrs.kernel_layout != "HWIO"
        or str(attrs.out_layout) not in ("", "NHWC")
        or tuple(int(k) for k in weight.data.shape[:2]) != (1, 1)
        or any(int(s) != 1 for s in attrs.strides)
        or any(int(d) != 1 for d in attrs.dilation)
        or any(int(p) != 0 for p in attrs.padding)
        or int(attrs.groups) != 1
        or data.checked_type.dtype != "int8"
        or weight.data.dtype != "int8"
        or call.checked_type.dtype != "int32"
    ):
        return None
    return np.ascontiguousarray(weight.data.numpy().reshape(weight.data.shape[2:]).T)


def _ohwi(call: relay.Call, new: relay.Call) -> relay.Expr | None:
    """An int8 ``NHWC`` convolution with constant ``HWIO`` weights, one group, no padding and
    no width dilation, with its weights as ``OHWI``; else None."""
    attrs = call.attrs
    data, weight = call.args
    if (
        not isinstance(weight, relay.Constant)
        or static_shape(data) is None
        or attrs.data_layout != "NHWC"
        or attrs.kernel_layout != "HWIO"
        or str(attrs.out_layout) not in ("", "NHWC")
        or int(attrs.dilation[1]) != 1
        or any(int(p) != 0 for p in attrs.padding)
        or int(attrs.groups) != 1
        or data.checked_type.dtype != "int8"
        or weight.data.dtype != "int8"
        or call.checked_type.dtype != "int32"
    ):
        return None
    ohwi = np.ascontiguousarray(weight.data.numpy().transpose(3, 0, 1, 2))
    return relay.nn.conv2d(
        new.args[0],
        relay.const(ohwi),
        strides=attrs.strides,
        padding=(0, 0, 0, 0),
        dilation=attrs.dilation,
        groups=1,
        channels=ohwi.shape[0],
        kernel_size=ohwi.shape[1:3],
        data_layout="NHWC",
        kernel_layout="OHWI",
        out_dtype="int32",
    )


def _depthwise(call: relay.Call) -> bool:
    """Whether ``call`` is an int8 ``NHWC`` depthwise convolution into int32 that relay_aot's
    DSP kernel computes (``HWOI`` weights of multiplier 1, no padding, no dilation)."""
    attrs = call.attrs
    data, weight = call.args
    shape, kernel = static_shape(data), static_shape(weight)
    return (
        shape is not None
        and kernel is not None
        and len(shape) == 4
        and len(kernel) == 4
        and shape[3] > 1
        and attrs.data_layout == "NHWC"
        and attrs.kernel_layout == "HWOI"
        and str(attrs.out_layout) in ("", "NHWC")
        and int(attrs.groups) == shape[3] == kernel[2]
        and kernel[3] == 1
        and all(int(p) == 0 for p in attrs.padding)
        and all(int(d) == 1 for d in attrs.dilation)
        and data.checked_type.dtype == "int8"
        and weight.checked_type.dtype == "int8"
        and call.checked_type.dtype == "int32"
    )


def _along_channels(original: relay.Expr, arg: relay.Expr, channels: int) -> relay.Expr | None:
    """An operand beside the convolution's result (``original``, rewritten ``arg``) as an
    operand of its 2-D form: a scalar as it is, a tensor constant along every axis but the last
    (``[1, 1, 1, O]``) reshaped to ``[1, O]``; None for anything else."""
    shape = static_shape(original)
    if shape is None:
        return None
    if not shape:
        return arg
    if any(d != 1 for d in shape[:-1]) or shape[-1] not in (1, channels):
        return None
    return relay.reshape(arg, [1, shape[-1]])


class _Rewrite(CallRewriter):
    def __init__(self) -> None:
        super().__init__()
        #: a reshape made here -> its 2-D input, the channels, whether a stop_fusion may be dropped
        self.flat: dict[relay.Expr, tuple[relay.Expr, int, bool]] = {}
        #: those of them past a kept stop_fusion (the second after the dense)
        self.sealed: set[relay.Expr] = set()
        #: an OHWI convolution, and the elementwise operators of it up to its first stop_fusion
        self.open: set[relay.Expr] = set()

    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        if not isinstance(call.op, tvm.ir.Op):
            return None
        if call.op.name == "nn.conv2d":
            weights = _pointwise_weights(call)
            if weights is None:
                conv = _ohwi(call, new)
                if conv is not None:
                    self.open.add(conv)
                elif _depthwise(call):
                    self.open.add(new)
                return conv
            n, h, w, c = static_shape(call.args[0]) or []
            rows = relay.reshape(new.args[0], [n * h * w, c])
            product = relay.nn.dense(rows, relay.const(weights), out_dtype="int32")
            return self._flat(product, [n, h, w, weights.shape[0]], weights.shape[0], True)
        if call.op.name == "nn.pad" and new.args[0] in self.flat:
            # the reshape a kernel of its own (it moves nothing), the pad alone in its kernel,
            # which pads_into_convolutions can merge into the convolution reading it
            return relay.Call(new.op, [relay.annotation.stop_fusion(new.args[0]), *new.args[1:]], new.attrs)
        if any(arg in self.open for arg in new.args):
            return self._after_convolution(call, new)
        return self._sink(call, new)

    def _after_convolution(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        """The first ``stop_fusion`` after an OHWI convolution (the importer's, after the bias)
        dropped: the requantization then fuses into the convolution's kernel, which applies it
        to each block of sums (no int32 tensor in between)."""
        if call.op.name == _STOP_FUSION:
            self.open.discard(new.args[0])
            return new.args[0]
        pattern = call.op.get_attr("TOpPattern")
        if pattern is not None and int(pattern) <= 1:
            self.open.add(new)
        return None

    def _flat(self, inner: relay.Expr, shape: list[int], channels: int, open_: bool) -> relay.Expr:
        out = relay.reshape(inner, shape)
        self.flat[out] = (inner, channels, open_)
        return out

    def _sink(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        """An elementwise operator of one of our reshapes (and operands constant along the
        pixels) applied inside it instead; the first ``stop_fusion`` after the dense dropped (as
        after an OHWI convolution)."""
        pattern = call.op.get_attr("TOpPattern")
        if call.op.name != _STOP_FUSION and (pattern is None or int(pattern) > 1):
            return None
        shape = static_shape(call)
        found = [self.flat[arg] for arg in new.args if arg in self.flat]
        if not found or shape is None or len({channels for _, channels, _ in found}) != 1:
            return None
        channels, open_ = found[0][1], all(o for _, _, o in found)
        if all(arg in self.sealed for arg in new.args if arg in self.flat):
            # past the kept stop_fusion nothing fuses into a dense's kernel; moved inside the
            # reshape, a cast before a reduction (an average pool's sum) would fuse with the
            # reshape instead of the sum (FuseOps fuses no injective group into a reduction)
            # and store its int32 tensor
            return None
        if call.op.name == _STOP_FUSION and open_:
            return self._flat(found[0][0], shape, channels, False)
        args = []
        for original, arg in zip(call.args, new.args):
            if arg in self.flat:
                if static_shape(original) != shape:  # broadcast against a smaller tensor
                    return None
                args.append(self.flat[arg][0])
                continue
            operand = _along_channels(original, arg, channels)
            if operand is None:
                return None
            args.append(operand)
        out = self._flat(relay.Call(new.op, args, new.attrs), shape, channels, open_)
        if call.op.name == _STOP_FUSION:
            self.sealed.add(out)
        return out


def rewrite(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """``mod`` with its int8 convolutions in the forms of relay_aot's DSP kernels (module
    docstring), on targets with the DSP extension; ``mod`` elsewhere."""
    if not has_dsp(target):
        return mod
    mod = rewrite_functions(mod, lambda func: _Rewrite() if calls_any(func, {"nn.conv2d"}) else None)
    return requantizations(mod, target)


#: relay_aot's requantization operator: ``requantize(x, params)`` of int32 ``x`` (channels on the
#: last axis) and int32 ``params`` (``C x 4``: multiplier, left shift, right shift, the right
#: shift's mask ``2^right - 1``) is TFLite's ``MultiplyByQuantizedMultiplier`` per channel
#: (``kernels/arm_dsp.py`` computes it with a C function; only this module makes calls of it).
REQUANTIZE = "relay_aot.requantize"


def _requantize_type(arg_types, attrs):
    return relay.TensorType(arg_types[0].shape, "int32")


def _register_requantize() -> tvm.ir.Op:
    try:
        return tvm.ir.Op.get(REQUANTIZE)
    except tvm.TVMError:
        pass
    from tvm.relay.op import op as _op

    _op.register(REQUANTIZE, "TFLite's MultiplyByQuantizedMultiplier per channel (relay_aot)")
    op = tvm.ir.Op.get(REQUANTIZE)
    op.set_num_inputs(2)
    op.add_argument("data", "Tensor", "int32 values, channels on the last axis")
    op.add_argument("params", "Tensor", "int32 C x 4: multiplier, left shift, right shift, 2^right - 1")
    op.set_support_level(10)
    op.add_type_rel("RelayAotRequantize", _requantize_type)
    _op.register_pattern(REQUANTIZE, _op.OpPattern.BROADCAST)
    return op


_REQUANTIZE_OP = _register_requantize()


def _sums_of_ours(x: relay.Expr) -> bool:
    """Whether ``x`` is the bias added to the sums of a convolution or dense this module gave
    relay_aot's kernels (in their kernel, after the dropped ``stop_fusion``)."""
    if _name(x) != "add":
        return False
    anchor = x.args[0]
    if _name(anchor) == "nn.dense":
        return True
    if _name(anchor) != "nn.conv2d":
        return False
    return anchor.attrs.kernel_layout == "OHWI" or _depthwise(anchor)


class _Requantize(CallRewriter):
    """The importer's requantization of our kernels' sums as one :data:`REQUANTIZE` call."""

    def rewrite_call(self, call: relay.Call, new: relay.Call) -> relay.Expr | None:
        if _name(call) not in ("cast", "right_shift", "add"):
            return None
        found = _requantization(call)  # the typed original; its sums as rewritten are visit(x)
        if found is None:
            return None
        x, multipliers, left, right = found
        shape = static_shape(x)
        if shape is None or not shape or not _sums_of_ours(x):
            return None
        x = self.visit(x)
        channels = shape[-1]
        columns = [np.broadcast_to(v.astype(np.int64), (channels,)) for v in (multipliers, left, right)]
        mask = (np.int64(1) << columns[2]) - 1
        params = np.stack([*columns, mask], axis=1).astype(np.int32)
        return relay.Call(_REQUANTIZE_OP, [x, relay.const(params)])


def requantizations(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """``mod`` with the importer's requantizations of relay_aot's DSP kernels' sums (after
    :func:`rewrite`) as :data:`REQUANTIZE` calls, which those kernels compute with one C
    function (on targets with the DSP extension; ``mod`` elsewhere).

    The importer writes TFLite's ``MultiplyByQuantizedMultiplier`` with Relay's integer
    operators: an int64 product and shift, then a rounding division by a power of two, per
    channel as an int64 product and shift again; GCC's code for it and the clamps after it took
    30 to 40 instructions per output on the Cortex-M4. The C function is gemmlowp's arithmetic:
    one ``smull``, the rounding, an arithmetic shift and a comparison with the channel's mask.
    """
    if not has_dsp(target):
        return mod
    return rewrite_functions(mod, lambda func: _Requantize() if calls_any(func, {"right_shift"}) else None)


def _primitive(expr: relay.Expr) -> relay.Function | None:
    """The fused function ``expr`` calls, if it is a call of one."""
    if isinstance(expr, relay.Call) and isinstance(expr.op, relay.Function):
        attrs = expr.op.attrs
        if attrs is not None and "Primitive" in attrs and int(attrs["Primitive"]) == 1:
            return expr.op
    return None


def _takes_padding(conv: relay.Call) -> bool:
    """Whether ``conv`` is a convolution relay_aot's DSP kernels compute and can pad the input
    of: int8 ``NHWC`` data of a batch of one, into int32, no padding of its own, no dilation,
    ``OHWI`` weights (:func:`_ohwi`'s) or depthwise ``HWOI`` ones of multiplier 1."""
    attrs = conv.attrs
    data, weight = conv.args
    shape, kernel = static_shape(data), static_shape(weight)
    if shape is None or kernel is None or len(shape) != 4 or shape[0] != 1 or len(kernel) != 4:
        return False
    if (
        attrs.data_layout != "NHWC"
        or str(attrs.out_layout) not in ("", "NHWC")
        or any(int(p) != 0 for p in attrs.padding)
        or any(int(d) != 1 for d in attrs.dilation)
        or data.checked_type.dtype != "int8"
        or weight.checked_type.dtype != "int8"
        or conv.checked_type.dtype != "int32"
    ):
        return False
    if attrs.kernel_layout == "OHWI":
        return int(attrs.groups) == 1
    return attrs.kernel_layout == "HWOI" and int(attrs.groups) == shape[3] == kernel[2] > 1 and kernel[3] == 1


def _only_pad(call: relay.Expr) -> relay.Call | None:
    """The pad of a fused function that only pads (``fn (x, v) { nn.pad(x, v) }``), called with a
    constant value, on the rows and columns of an ``NHWC`` image; else None."""
    func = _primitive(call)
    if func is None or len(func.params) != 2 or _name(func.body) != "nn.pad":
        return None
    pad = func.body
    if not (pad.args[0].same_as(func.params[0]) and pad.args[1].same_as(func.params[1])):
        return None
    widths = [[int(v) for v in w] for w in pad.attrs.pad_width]
    if pad.attrs.pad_mode != "constant" or len(widths) != 4 or any(widths[0] + widths[3]):
        return None
    if not isinstance(call.args[1], relay.Constant):
        return None
    return pad


class _PadsIntoConvolutions(relay.ExprMutator):
    def __init__(self, uses: dict) -> None:
        super().__init__()
        self.uses = uses
        self.changed = False

    def visit_call(self, call: relay.Call) -> relay.Expr:
        new = super().visit_call(call)
        func = _primitive(new)
        if func is None:
            return new
        convs = [n for n in _calls(func.body) if _name(n) == "nn.conv2d"]
        if len(convs) != 1 or not _takes_padding(convs[0]):
            return new
        data = convs[0].args[0]
        index = next((i for i, p in enumerate(func.params) if p.same_as(data)), None)
        if index is None or self.uses.get(call.args[index], 0) != 1:
            return new
        pad = _only_pad(new.args[index])
        if pad is None:
            return new
        image, value = new.args[index].args
        param = relay.var(func.params[index].name_hint, new.args[index].op.params[0].type_annotation)
        padded = relay.Call(pad.op, [param, value], pad.attrs)
        body = relay.bind(func.body, {func.params[index]: padded})
        params = [*func.params[:index], param, *func.params[index + 1 :]]
        merged = relay.Function(params, body, func.ret_type, func.type_params, func.attrs)
        self.changed = True
        return relay.Call(merged, [*new.args[:index], image, *new.args[index + 1 :]], new.attrs, new.type_args)


def _calls(expr: relay.Expr) -> list:
    found: list = []
    relay.analysis.post_order_visit(expr, lambda n: found.append(n) if isinstance(n, relay.Call) else None)
    return found


def _use_counts(func: relay.Function) -> dict:
    """How many times each call of ``func`` (a dataflow graph) is an argument of another."""
    counts: dict = {}
    for call in _calls(func):
        for arg in call.args:
            counts[arg] = counts.get(arg, 0) + 1
    if isinstance(func.body, relay.Call):
        counts[func.body] = counts.get(func.body, 0) + 1
    return counts


def pads_into_convolutions(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """``mod`` (after FuseOps, type-checked) with each kernel that only pads the input of one convolution
    relay_aot's DSP kernels compute merged into that convolution's kernel (on targets with the
    DSP extension; ``mod`` elsewhere).

    The importer pads a convolution's input explicitly, with the input's zero point, which its
    sums skip (the zero point is folded into the bias); a kernel of its own, the pad wrote a
    padded copy of every such activation, which the convolution then read: the copy's bytes
    beside the activation's (VWW: 38 KB of its 94 KB) and the instructions to write it. Merged,
    the convolution's kernel reads the activation itself and the pad value where a window
    leaves the image (``kernels/arm_dsp.py``'s ``_border`` functions), as CMSIS-NN's do.
    """
    if not has_dsp(target):
        return mod
    return rewrite_functions(mod, lambda func: _PadsIntoConvolutions(_use_counts(func)))

"""Global pools as pools of one window the size of the image.

TVM's x86 schedule for ``nn.global_avg_pool2d`` and ``nn.global_max_pool2d`` (the adaptive
pool's) sums each output channel on its own: in a packed ``NCHW16c`` layout, a scalar loop
over the pixels 16 floats apart. Its schedule for ``nn.avg_pool2d`` and ``nn.max_pool2d``
puts the channel block innermost and vectorizes it. SqueezeNet's pool of 1008 channels over
169 pixels, one thread, Zen 3: 144 us global, 12 us as a 1x169 window (onnxruntime: 23 us).
Over a static image and without padding the window's pool is the same sum (or maximum) of the
same pixels, divided by the same count; only for floats (an integer average rounds, and the
two computes need not round alike).
"""

from __future__ import annotations

import tvm
from tvm import relay

from .gradient_cleanup import static_tensor
from .walk import CallRewriter, calls_any, op_name, rewrite_functions

_WINDOWED = {"nn.global_avg_pool2d": relay.nn.avg_pool2d, "nn.global_max_pool2d": relay.nn.max_pool2d}


class _Windowed(CallRewriter):
    def rewrite_call(self, call, new):
        name = op_name(call)
        if name not in _WINDOWED:
            return None
        layout = str(call.attrs.layout)
        ty = call.args[0].checked_type
        if layout not in ("NCHW", "NHWC") or not static_tensor(ty) or call.attrs.out_layout not in ("", layout):
            return None
        if not str(ty.dtype).startswith("float"):
            return None  # integer averages round: the two schedules' divisions need not agree
        shape = [int(d) for d in ty.shape]
        window = (shape[layout.index("H")], shape[layout.index("W")])
        return _WINDOWED[name](new.args[0], pool_size=window, strides=window, layout=layout)


def rewrite(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every static global pool as a pool of one window (see the module)."""
    return rewrite_functions(mod, lambda func: _Windowed() if calls_any(func, set(_WINDOWED)) else None)

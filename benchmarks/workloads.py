"""The benchmark workloads: Relay programs with their inputs, shared by the harness and the tests.

Every workload is Relay text (parsed into a module that holds TVM's Prelude when it uses
``List``, ``Tree``, ``@map`` or ``@foldl``), numpy arguments for ``@main``, and named weights
that are bound into ``@main`` as constants before any executor sees the module -- so every
executor runs exactly the same program, as a deployed model would (weights known at build).

Sizes come from issue 8. The programs build their own data structures (lists, trees) from
tensor inputs, so the arguments are plain tensors every executor accepts. ``depth`` is the
deepest chain of nested Relay calls a run makes, for executors that recurse on the C stack.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import string
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relay
from tvm.relay.prelude import Prelude

#: Inputs are drawn from this generator's seed so that every run computes the same values.
SEED = 0


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark program.

    ``static`` workloads have no ADTs, closures, references or global functions besides
    ``@main``, so TVM's graph and AOT executors can run them too.
    """

    name: str
    description: str
    source: str
    make_inputs: Callable[[np.random.Generator], tuple[tuple, Mapping[str, np.ndarray]]]
    prelude: bool = False
    static: bool = False
    depth: int = 0
    rtol: float = 1e-5
    atol: float = 1e-6
    #: Instead of ``source``: a function making the module (Relay built in Python, or imported
    #: by TVM's ONNX frontend from ``onnx_model``).
    build: Callable[[], tvm.IRModule] | None = None
    #: For an ONNX workload: the model (onnxruntime runs it too) and its input names in order.
    onnx_model: Callable[[], Any] | None = None
    #: For a TFLite workload: the model file (relay_aot.read_tflite imports it; LiteRT runs it).
    tflite_model: Path | None = None
    dynamic: bool = False
    #: The program creates, reads or writes references (Relay's gradients do): the Relay VM
    #: cannot run it, and the interpreter is the reference and the baseline.
    references: bool = False
    #: A real network (TVM's testing zoo, an ONNX model-zoo graph): static and kernel-bound,
    #: measured against the executors made for such models (graph, AOT, VM, onnxruntime).
    model_zoo: bool = False
    #: A tuned row: the workload of this name, compiled with its AutoTVM records
    #: (``benchmarks/tuning.py``).
    tuned_from: str | None = None

    def module(self) -> tvm.IRModule:
        """The parsed, type-checked module with the weights bound as constants."""
        init = None
        if self.prelude:
            init = tvm.IRModule()
            Prelude(init)
        if self.onnx_model is not None:
            mod, onnx_params = relay.frontend.from_onnx(self.onnx_model(), freeze_params=True)
            assert not onnx_params
        elif self.tflite_model is not None:
            import relay_aot

            imported = relay_aot.read_tflite(self.tflite_model)
            arrays = {k: tvm.nd.array(v) for k, v in imported.params.items()}
            mod = tvm.IRModule.from_expr(relay.build_module.bind_params_by_name(imported.mod["main"], arrays))
        elif self.build is not None:
            mod = self.build()
        else:
            mod = tvm.relay.parse(self.source, source_name=f"benchmarks/{self.name}", init_module=init)
        _, params = self.inputs()
        if params:
            arrays = {k: tvm.nd.array(v) for k, v in params.items()}
            mod["main"] = relay.build_module.bind_params_by_name(mod["main"], arrays)
        return relay.transform.InferType()(mod)

    def inputs(self) -> tuple[tuple, Mapping[str, np.ndarray]]:
        """(arguments of ``@main``, weights bound as constants), the same on every call."""
        return self.make_inputs(np.random.default_rng(SEED))

    def args(self) -> tuple:
        """The arguments of ``@main`` (numpy arrays)."""
        return self.inputs()[0]


def _relay(template: str, **values) -> str:
    return '#[version = "0.0.5"]\n' + string.Template(template).substitute(values)


def _uniform(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return rng.uniform(-scale, scale, size=shape).astype("float32")


# -- recursion on scalars ---------------------------------------------------------------------

_FIB = """
def @fib(%n: int32) -> int32 {
  if (less(%n, 2)) { %n } else { add(@fib(subtract(%n, 1)), @fib(subtract(%n, 2))) }
}
def @main(%n: int32) -> int32 { @fib(%n) }
"""


def fib(n: int) -> Workload:
    """Doubly recursive Fibonacci on 0-d int32 tensors: calls and scalar kernels only."""
    return Workload(
        name=f"fib{n}",
        description=f"recursive fib({n}) on 0-d int32",
        source=_relay(_FIB),
        make_inputs=lambda rng: ((np.array(n, dtype="int32"),), {}),
        depth=n,
    )


# -- lists built recursively, mapped and folded with the Prelude ------------------------------

_LIST_SCALARS = """
def @build(%i: int32) -> List[int32] {
  if (equal(%i, 0)) { Nil } else { Cons(%i, @build(subtract(%i, 1))) }
}
def @main(%n: int32) -> int32 {
  let %xs = @build(%n);
  let %ys = @map(fn (%x: int32) -> int32 { add(multiply(%x, 3), 1) }, %xs);
  @foldl(fn (%acc: int32, %y: int32) -> int32 { add(%acc, %y) }, 0, %ys)
}
"""


def list_of_scalars(n: int = 1000) -> Workload:
    """A list of ``n`` 0-d int32 built by recursion, mapped and folded with the Prelude."""
    return Workload(
        name="list_scalars",
        description=f"{n}-element list of int32 scalars: build, map, foldl",
        source=_relay(_LIST_SCALARS),
        make_inputs=lambda rng: ((np.array(n, dtype="int32"),), {}),
        prelude=True,
        depth=n,
    )


_LIST_TENSORS = """
def @build(%x: Tensor[($size), float32], %i: int32) -> List[Tensor[($size), float32]] {
  if (equal(%i, 0)) {
    Nil
  } else {
    Cons(multiply(%x, cast(%i, dtype="float32")), @build(%x, subtract(%i, 1)))
  }
}
def @main(%x: Tensor[($size), float32], %n: int32) -> Tensor[($size), float32] {
  let %xs = @build(%x, %n);
  let %ys = @map(fn (%t: Tensor[($size), float32]) -> Tensor[($size), float32] {
    add(tanh(%t), multiply(%t, 0.5f))
  }, %xs);
  @foldl(fn (%acc: Tensor[($size), float32], %y: Tensor[($size), float32]) -> Tensor[($size), float32] {
    add(%acc, %y)
  }, zeros(shape=[$size], dtype="float32"), %ys)
}
"""


def list_of_tensors(n: int = 1000, size: int = 16) -> Workload:
    """The list workload with ``size``-element float32 tensors instead of scalars."""
    return Workload(
        name="list_tensors",
        description=f"{n}-element list of {size}-element float32 tensors: build, map, foldl",
        source=_relay(_LIST_TENSORS, size=size),
        make_inputs=lambda rng: ((_uniform(rng, size, scale=1e-3), np.array(n, dtype="int32")), {}),
        prelude=True,
        depth=n,
        rtol=1e-4,
    )


# -- closures ---------------------------------------------------------------------------------

_CLOSURES = """
def @twice(%f: fn (int32) -> int32, %x: int32) -> int32 { %f(%f(%x)) }
def @loop(%i: int32, %n: int32, %acc: int32) -> int32 {
  if (greater_equal(%i, %n)) {
    %acc
  } else {
    let %add_i = fn (%x: int32) -> int32 { add(%x, %i) };
    let %scaled = fn (%x: int32) -> int32 { %add_i(subtract(%x, %i)) };
    @loop(add(%i, 1), %n, @twice(%add_i, %scaled(%acc)))
  }
}
def @main(%n: int32) -> int32 { @loop(0, %n, 0) }
"""


def closures_loop(n: int = 1000) -> Workload:
    """A self-recursive loop that builds two capturing closures per step and applies them."""
    return Workload(
        name="closures",
        description=f"loop of {n} steps building and applying closures",
        source=_relay(_CLOSURES),
        make_inputs=lambda rng: ((np.array(n, dtype="int32"),), {}),
        depth=n,
    )


# -- LSTM folded over a list ------------------------------------------------------------------

_LSTM = """
def @steps(%xs: Tensor[($steps, 1, $hidden), float32], %i: int32) -> List[Tensor[(1, $hidden), float32]] {
  if (greater_equal(%i, $steps)) {
    Nil
  } else {
    Cons(take(%xs, %i, axis=0), @steps(%xs, add(%i, 1)))
  }
}
def @main(%xs: Tensor[($steps, 1, $hidden), float32], %w_ih: Tensor[($gates, $hidden), float32],
          %w_hh: Tensor[($gates, $hidden), float32], %bias: Tensor[($gates), float32])
          -> (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]) {
  let %cell = fn (%state: (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]),
                  %x: Tensor[(1, $hidden), float32]) -> (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]) {
    let %h = %state.0;
    let %c = %state.1;
    let %gates = add(add(nn.dense(%x, %w_ih, units=$gates), nn.dense(%h, %w_hh, units=$gates)), %bias);
    let %g = split(%gates, indices_or_sections=4, axis=1);
    let %next_c = add(multiply(sigmoid(%g.1), %c), multiply(sigmoid(%g.0), tanh(%g.2)));
    let %next_h = multiply(sigmoid(%g.3), tanh(%next_c));
    (%next_h, %next_c)
  };
  let %zero = zeros(shape=[1, $hidden], dtype="float32");
  @foldl(%cell, (%zero, %zero), @steps(%xs, 0))
}
"""


def lstm(hidden: int, steps: int = 50) -> Workload:
    """An LSTM cell (a closure over the weights) folded over a List of ``steps`` inputs."""

    def make_inputs(rng):
        scale = 1.0 / np.sqrt(hidden)
        xs = _uniform(rng, steps, 1, hidden)
        params = {
            "w_ih": _uniform(rng, 4 * hidden, hidden, scale=scale),
            "w_hh": _uniform(rng, 4 * hidden, hidden, scale=scale),
            "bias": _uniform(rng, 4 * hidden, scale=scale),
        }
        return (xs,), params

    return Workload(
        name=f"lstm_h{hidden}",
        description=f"LSTM cell folded over a List of {steps} inputs, hidden {hidden}",
        source=_relay(_LSTM, steps=steps, hidden=hidden, gates=4 * hidden),
        make_inputs=make_inputs,
        prelude=True,
        depth=steps,
        rtol=1e-4,
        atol=1e-5,
    )


# -- TreeLSTM over a Rose tree ----------------------------------------------------------------

_TREE_LSTM = """
// Node %i of a complete binary tree of $nodes nodes has children 2i+1 and 2i+2.
def @tree(%xs: Tensor[($nodes, 1, $hidden), float32], %i: int32) -> Tree[Tensor[(1, $hidden), float32]] {
  let %left = add(multiply(%i, 2), 1);
  let %children = if (less(%left, $nodes)) {
    Cons(@tree(%xs, %left), Cons(@tree(%xs, add(%left, 1)), Nil))
  } else {
    Nil
  };
  Rose(take(%xs, %i, axis=0), %children)
}
// Child-sum TreeLSTM (Tai et al. 2015). A global rather than a recursive closure: the VM's
// compiler fails on this function written as a let-bound recursive closure.
def @node(%t: Tree[Tensor[(1, $hidden), float32]],
          %w_iou: Tensor[($iou, $hidden), float32], %u_iou: Tensor[($iou, $hidden), float32],
          %b_iou: Tensor[($iou), float32], %w_f: Tensor[($hidden, $hidden), float32],
          %u_f: Tensor[($hidden, $hidden), float32], %b_f: Tensor[($hidden), float32])
          -> (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]) {
  match (%t) {
    Rose(%x, %children) => {
      let %zero = zeros(shape=[1, $hidden], dtype="float32");
      let %states = @map(fn (%child: Tree[Tensor[(1, $hidden), float32]]) {
        @node(%child, %w_iou, %u_iou, %b_iou, %w_f, %u_f, %b_f)
      }, %children);
      let %h_sum = @foldl(fn (%acc: Tensor[(1, $hidden), float32],
                              %s: (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32])) {
        add(%acc, %s.0)
      }, %zero, %states);
      let %iou = add(add(nn.dense(%x, %w_iou, units=$iou), nn.dense(%h_sum, %u_iou, units=$iou)), %b_iou);
      let %g = split(%iou, indices_or_sections=3, axis=1);
      let %wfx = add(nn.dense(%x, %w_f, units=$hidden), %b_f);
      let %fc = @foldl(fn (%acc: Tensor[(1, $hidden), float32],
                           %s: (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32])) {
        add(%acc, multiply(sigmoid(add(%wfx, nn.dense(%s.0, %u_f, units=$hidden))), %s.1))
      }, %zero, %states);
      let %c = add(multiply(sigmoid(%g.0), tanh(%g.2)), %fc);
      (multiply(sigmoid(%g.1), tanh(%c)), %c)
    },
  }
}
def @main(%xs: Tensor[($nodes, 1, $hidden), float32],
          %w_iou: Tensor[($iou, $hidden), float32], %u_iou: Tensor[($iou, $hidden), float32],
          %b_iou: Tensor[($iou), float32], %w_f: Tensor[($hidden, $hidden), float32],
          %u_f: Tensor[($hidden, $hidden), float32], %b_f: Tensor[($hidden), float32])
          -> (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]) {
  @node(@tree(%xs, 0), %w_iou, %u_iou, %b_iou, %w_f, %u_f, %b_f)
}
"""


def tree_lstm(hidden: int = 16, depth: int = 7) -> Workload:
    """A child-sum TreeLSTM over a complete binary ``Tree`` of ``2**depth - 1`` nodes."""
    nodes = 2**depth - 1

    def make_inputs(rng):
        scale = 1.0 / np.sqrt(hidden)
        params = {
            "w_iou": _uniform(rng, 3 * hidden, hidden, scale=scale),
            "u_iou": _uniform(rng, 3 * hidden, hidden, scale=scale),
            "b_iou": _uniform(rng, 3 * hidden, scale=scale),
            "w_f": _uniform(rng, hidden, hidden, scale=scale),
            "u_f": _uniform(rng, hidden, hidden, scale=scale),
            "b_f": _uniform(rng, hidden, scale=scale),
        }
        return (_uniform(rng, nodes, 1, hidden),), params

    return Workload(
        name=f"treelstm_h{hidden}",
        description=f"child-sum TreeLSTM over a Tree of {nodes} nodes, hidden {hidden}",
        source=_relay(_TREE_LSTM, nodes=nodes, hidden=hidden, iou=3 * hidden),
        make_inputs=make_inputs,
        prelude=True,
        depth=4 * depth,
        rtol=1e-4,
        atol=1e-5,
    )


# -- a static MLP -----------------------------------------------------------------------------

_MLP = """
def @main(%x: Tensor[($batch, 784), float32],
          %w1: Tensor[(256, 784), float32], %b1: Tensor[(256), float32],
          %w2: Tensor[(256, 256), float32], %b2: Tensor[(256), float32],
          %w3: Tensor[(10, 256), float32], %b3: Tensor[(10), float32]) -> Tensor[($batch, 10), float32] {
  let %h1 = nn.relu(nn.bias_add(nn.dense(%x, %w1, units=256), %b1));
  let %h2 = nn.relu(nn.bias_add(nn.dense(%h1, %w2, units=256), %b2));
  nn.bias_add(nn.dense(%h2, %w3, units=10), %b3)
}
"""


def mlp(batch: int) -> Workload:
    """An MLP 784-256-256-10 (static: the graph and AOT executors run it too)."""

    def make_inputs(rng):
        params = {}
        for i, (n_out, n_in) in enumerate([(256, 784), (256, 256), (10, 256)], start=1):
            params[f"w{i}"] = _uniform(rng, n_out, n_in, scale=1.0 / np.sqrt(n_in))
            params[f"b{i}"] = _uniform(rng, n_out, scale=0.1)
        return (_uniform(rng, batch, 784),), params

    return Workload(
        name=f"mlp_b{batch}",
        description=f"MLP 784-256-256-10, batch {batch}",
        source=_relay(_MLP, batch=batch),
        make_inputs=make_inputs,
        static=True,
        rtol=1e-4,
        atol=1e-5,
    )


def _onnx_static(name: str, description: str, input_shape: tuple, model: Callable[[], Any], **options) -> Workload:
    """A static ONNX model of one float32 input, drawn uniformly: TVM's ONNX frontend imports
    it, onnxruntime runs the model itself."""
    return Workload(
        name=name,
        description=description,
        source="",
        make_inputs=lambda rng: ((_uniform(rng, *input_shape),), {}),
        onnx_model=model,
        static=True,
        **options,
    )


def onnx_mlp(batch: int) -> Workload:
    """An MLP 784-512-512-10 written as ONNX ``Gemm``/``Relu`` (what an exporter produces)."""
    from relay_aot.testing import onnx_models

    return _onnx_static(
        f"onnx_mlp_b{batch}",
        f"ONNX MLP 784-512-512-10 (Gemm, Relu), batch {batch}",
        (batch, 784),
        lambda: onnx_models.mlp(batch)[0],
        rtol=1e-4,
        atol=1e-5,
    )


def onnx_quantized_conv_net() -> Workload:
    """A small quantized conv net in ONNX's operator form (QLinearConv, QLinearMatMul; uint8
    activations, int8 weights): QNN operators, lowered as ``relay.build`` lowers them."""
    from relay_aot.testing import onnx_models

    # atol: one quantization step of the logits, where rounding may differ from onnxruntime's
    return _onnx_static(
        "onnx_qconv_net",
        "ONNX quantized conv net (QLinearConv x2, QLinearMatMul), 1x3x16x16",
        (1, 3, 16, 16),
        lambda: onnx_models.quantized_conv_net()[0],
        rtol=0.0,
        atol=0.1 + 1e-6,
    )


#: The MLPerf Tiny v1.0 int8 reference models (tests/data/tinyml, Apache-2.0), by workload name.
TINYML = {
    "tflite_kws": ("kws_ref_model", "keyword spotting, DS-CNN"),
    "tflite_resnet8": ("pretrainedResnet_quant", "image classification, ResNet-8"),
    "tflite_vww": ("vww_96_int8", "visual wake words, MobileNetV1 0.25"),
    "tflite_ad": ("ad01_int8", "anomaly detection, dense autoencoder"),
}
TINYML_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "tinyml"


def _tflite_workload(name: str, description: str, path: Path, rtol: float = 0.0, atol: float = 24.0) -> Workload:
    """A TFLite model file as a workload (relay_aot.read_tflite imports it; LiteRT, with
    XNNPACK, runs the file itself): int8 inputs in [-40, 40] (full-range inputs saturate KWS's
    output), float inputs standard normal. ``atol``: LiteRT's XNNPACK kernels differ from
    TFLite's reference kernels (which relay_aot equals) by up to 17 int8 steps on KWS;
    exactness is tests/test_tflite.py's."""

    def make_inputs(rng):
        import relay_aot

        (spec,) = relay_aot.read_tflite(path).inputs
        if spec.dtype == "int8":
            return (rng.integers(-40, 41, spec.shape).astype(spec.dtype),), {}
        return (rng.standard_normal(spec.shape).astype(spec.dtype),), {}

    return Workload(
        name=name,
        description=description,
        source="",
        make_inputs=make_inputs,
        tflite_model=path,
        static=True,
        model_zoo=True,
        rtol=rtol,
        atol=atol,
    )


def tflite_tinyml(name: str) -> Workload:
    """An MLPerf Tiny int8 TFLite model (:func:`_tflite_workload`)."""
    file_name, description = TINYML[name]
    return _tflite_workload(name, f"MLPerf Tiny {description}, int8 TFLite", TINYML_DIR / f"{file_name}.tflite")


#: Held-out TFLite networks (relay_aot.testing.tflite_models; issue 48's acceptance list beside the
#: MLPerf Tiny models): int8 networks of the four families, a float32 one, and one with float in
#: and out around QUANTIZE, int8 operators and DEQUANTIZE; by workload name, with their builder's
#: key and description.
HELD_OUT = {
    "tflite_kws_held_out": ("kws", "int8 network of the keyword spotting (DS-CNN) family"),
    "tflite_resnet8_held_out": ("resnet", "int8 network of the ResNet-8 family"),
    "tflite_vww_held_out": ("vww", "int8 network of the visual wake words (MobileNetV1) family"),
    "tflite_ad_held_out": ("ad", "int8 network of the anomaly detection (dense autoencoder) family"),
    "tflite_float_held_out": ("float", "float32 convolutional network"),
    "tflite_island_held_out": ("island", "float in and out around QUANTIZE, int8 operators, DEQUANTIZE"),
}


def _held_out_file(name: str, key: str) -> Path:
    """The held-out network ``key`` written where LiteRT can read it (rewritten only when its
    bytes change: the builders are deterministic)."""
    from relay_aot.testing.tflite_models import HELD_OUT_FAMILIES, HELD_OUT_FLOAT

    data = {**HELD_OUT_FAMILIES, **HELD_OUT_FLOAT}[key]().write()
    directory = Path(tempfile.gettempdir()) / f"relay_aot_benchmarks_{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"{name}.tflite"
    if not path.is_file() or path.read_bytes() != data:
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(data)
        partial.replace(path)
    return path


def tflite_held_out(name: str) -> Workload:
    """A held-out TFLite network (:data:`HELD_OUT`, :func:`_tflite_workload`)."""
    key, description = HELD_OUT[name]
    # on the island's float output LiteRT's XNNPACK kernels differ by up to 10 of 640
    rtol, atol = {"float": (1e-4, 1e-5), "island": (0.0, 32.0)}.get(key, (0.0, 24.0))
    path = _held_out_file(name, key)
    return _tflite_workload(name, f"held-out TFLite {description}, random weights", path, rtol, atol)


# -- dynamic shapes -----------------------------------------------------------------------------


def onnx_loop_rnn(hidden: int = 16, steps: int = 50) -> Workload:
    """An ONNX ``Loop`` RNN emitting its hidden states as a scan output: TVM imports the scan
    output as ``Tensor[(?, ?, ?), float32]``, grown by ``concatenate`` at every step."""
    from relay_aot.testing import onnx_models

    def make_inputs(rng):
        _, inputs = onnx_models.loop_rnn(hidden)
        values = inputs(steps)
        return (values["M"], values["cond"], values["h0"]), {}

    return Workload(
        name=f"onnx_loop_rnn_h{hidden}",
        description=f"ONNX Loop RNN with scan outputs, {steps} steps, hidden {hidden}",
        source="",
        make_inputs=make_inputs,
        onnx_model=lambda: onnx_models.loop_rnn(hidden)[0],
        dynamic=True,
        depth=steps,
        rtol=1e-4,
        atol=1e-5,
    )


_DECODER = """
def @decode(%h: Tensor[(1, $hidden), float32], %out: Tensor[(?, 1), int32], %i: int32,
            %w: Tensor[($hidden, $hidden), float32], %emb: Tensor[($vocab, $hidden), float32],
            %proj: Tensor[($vocab, $hidden), float32]) -> Tensor[(?, 1), int32] {
  if (greater_equal(%i, $steps)) {
    %out
  } else {
    let %token = argmax(nn.dense(%h, %proj, units=$vocab), axis=[1], keepdims=True);
    let %x = reshape(take(%emb, reshape(%token, newshape=[1]), axis=0), newshape=[1, $hidden]);
    let %next = tanh(add(nn.dense(%h, %w, units=$hidden), %x));
    @decode(%next, concatenate((%out, %token)), add(%i, 1), %w, %emb, %proj)
  }
}
def @main(%h0: Tensor[(1, $hidden), float32], %w: Tensor[($hidden, $hidden), float32],
          %emb: Tensor[($vocab, $hidden), float32], %proj: Tensor[($vocab, $hidden), float32]) -> Tensor[(?, 1), int32] {
  @decode(%h0, zeros(shape=[0, 1], dtype="int32"), 0, %w, %emb, %proj)
}
"""


def greedy_decoder(hidden: int = 16, vocab: int = 32, steps: int = 50) -> Workload:
    """A greedy decoder that grows its output tokens by ``concatenate`` for ``steps`` steps."""

    def make_inputs(rng):
        scale = 1.0 / np.sqrt(hidden)
        params = {
            "w": _uniform(rng, hidden, hidden, scale=scale),
            "emb": _uniform(rng, vocab, hidden),
            "proj": _uniform(rng, vocab, hidden, scale=scale),
        }
        return (_uniform(rng, 1, hidden),), params

    return Workload(
        name=f"greedy_decoder_{steps}",
        description=f"greedy decoder growing its output by concatenate, {steps} steps, hidden {hidden}",
        source=_relay(_DECODER, hidden=hidden, vocab=vocab, steps=steps),
        make_inputs=make_inputs,
        dynamic=True,
        depth=steps,
    )


def _tensor_array_lstm_module(hidden: int, steps: int) -> tvm.IRModule:
    """An LSTM over ``steps`` inputs writing each hidden state into a Prelude tensor array,
    then stacking it (what TVM's TF and PyTorch frontends emit for such loops)."""
    mod = tvm.IRModule()
    p = Prelude(mod)
    array = p.get_global_var("tensor_array", "float32")
    write = p.get_global_var("tensor_array_write", "float32")
    stack = p.get_global_var("tensor_array_stack", "float32")
    tensor2 = p.get_tensor_ctor("tensor2", "float32")
    gates = 4 * hidden
    f32 = "float32"

    def weights():
        return [
            relay.var("w_ih", shape=(gates, hidden), dtype=f32),
            relay.var("w_hh", shape=(gates, hidden), dtype=f32),
            relay.var("bias", shape=(gates,), dtype=f32),
        ]

    loop = relay.GlobalVar("loop")
    xs = relay.var("xs", shape=(steps, 1, hidden), dtype=f32)
    i = relay.var("i", shape=(), dtype="int32")
    h = relay.var("h", shape=(1, hidden), dtype=f32)
    c = relay.var("c", shape=(1, hidden), dtype=f32)
    ta = relay.var("ta")
    w_ih, w_hh, bias = weights()
    x = relay.take(xs, i, axis=0)
    g = relay.split(relay.add(relay.add(relay.nn.dense(x, w_ih), relay.nn.dense(h, w_hh)), bias), 4, axis=1)
    next_c = relay.add(relay.multiply(relay.sigmoid(g[1]), c), relay.multiply(relay.sigmoid(g[0]), relay.tanh(g[2])))
    next_h = relay.multiply(relay.sigmoid(g[3]), relay.tanh(next_c))
    next_h_var, next_c_var = relay.var("next_h"), relay.var("next_c")
    step = loop(
        xs, relay.add(i, relay.const(1)), next_h_var, next_c_var, write(ta, i, tensor2(next_h_var)), w_ih, w_hh, bias
    )
    body = relay.If(
        relay.less(i, relay.const(steps)), relay.Let(next_c_var, next_c, relay.Let(next_h_var, next_h, step)), ta
    )
    mod[loop] = relay.Function([xs, i, h, c, ta, w_ih, w_hh, bias], body)
    xs = relay.var("xs", shape=(steps, 1, hidden), dtype=f32)
    w_ih, w_hh, bias = weights()
    zero = relay.zeros((1, hidden), f32)
    mod["main"] = relay.Function(
        [xs, w_ih, w_hh, bias], stack(loop(xs, relay.const(0), zero, zero, array(relay.const(steps)), w_ih, w_hh, bias))
    )
    return relay.transform.InferType()(mod)


def tensor_array_lstm(hidden: int = 16, steps: int = 50) -> Workload:
    """An LSTM writing its hidden states into a tensor array, then stacking it."""

    def make_inputs(rng):
        scale = 1.0 / np.sqrt(hidden)
        params = {
            "w_ih": _uniform(rng, 4 * hidden, hidden, scale=scale),
            "w_hh": _uniform(rng, 4 * hidden, hidden, scale=scale),
            "bias": _uniform(rng, 4 * hidden, scale=scale),
        }
        return (_uniform(rng, steps, 1, hidden),), params

    return Workload(
        name=f"tensor_array_lstm_h{hidden}",
        description=f"LSTM over {steps} steps writing a tensor array, then stacking it, hidden {hidden}",
        source="",
        make_inputs=make_inputs,
        build=lambda: _tensor_array_lstm_module(hidden, steps),
        dynamic=True,
        depth=steps,
        rtol=1e-4,
        atol=1e-5,
    )


def mlp_dynamic_batch(batch: int) -> Workload:
    """The MLP with a ``?`` batch dimension (one library for every batch), run at ``batch``."""
    static = mlp(batch)
    return dataclasses.replace(
        static,
        name=f"mlp_dyn_b{batch}",
        description=f"MLP 784-256-256-10, batch ? (dynamic), run at batch {batch}",
        source=static.source.replace(f"Tensor[({batch}, ", "Tensor[(?, "),
        static=False,
        dynamic=True,
    )


# -- gradients (Relay's higher-order reverse mode: references and closures) ---------------------

_GRAD_LSTM = """
type List[A] {
  Cons(A, List[A]),
  Nil,
}
// Relay's gradient does not differentiate through global functions (relay_aot.passes.gradient
// binds monomorphic ones inside @main, but the Prelude's @foldl is polymorphic), so the list is
// built and folded by let-bound recursive closures; split and greater_equal have no registered
// gradient, so the gates are strided_slices and the loop test is less_equal.
def @main(%xs: Tensor[($steps, 1, $hidden), float32], %w_ih: Tensor[($gates, $hidden), float32],
          %w_hh: Tensor[($gates, $hidden), float32], %bias: Tensor[($gates), float32]) -> Tensor[(1, $hidden), float32] {
  let %steps = fn (%i: int32) -> List[Tensor[(1, $hidden), float32]] {
    if (less_equal($steps, %i)) { Nil } else { Cons(take(%xs, %i, axis=0), %steps(add(%i, 1))) }
  };
  let %cell = fn (%state: (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]),
                  %x: Tensor[(1, $hidden), float32]) -> (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]) {
    let %h = %state.0;
    let %c = %state.1;
    let %gates = add(add(nn.dense(%x, %w_ih, units=$gates), nn.dense(%h, %w_hh, units=$gates)), %bias);
    let %g0 = strided_slice(%gates, begin=[0, 0], end=[1, $hidden], strides=[1, 1], axes=None);
    let %g1 = strided_slice(%gates, begin=[0, $hidden], end=[1, $h2], strides=[1, 1], axes=None);
    let %g2 = strided_slice(%gates, begin=[0, $h2], end=[1, $h3], strides=[1, 1], axes=None);
    let %g3 = strided_slice(%gates, begin=[0, $h3], end=[1, $gates], strides=[1, 1], axes=None);
    let %next_c = add(multiply(sigmoid(%g1), %c), multiply(sigmoid(%g0), tanh(%g2)));
    let %next_h = multiply(sigmoid(%g3), tanh(%next_c));
    (%next_h, %next_c)
  };
  let %fold = fn (%state: (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]),
                  %l: List[Tensor[(1, $hidden), float32]]) -> (Tensor[(1, $hidden), float32], Tensor[(1, $hidden), float32]) {
    match (%l) {
      Cons(%x, %rest) => %fold(%cell(%state, %x), %rest),
      Nil => %state,
    }
  };
  let %zero = zeros(shape=[1, $hidden], dtype="float32");
  let %final = %fold((%zero, %zero), %steps(0));
  %final.0
}
"""


def _gradient_of(source: str, data: Mapping[str, np.ndarray]) -> tvm.IRModule:
    from relay_aot.passes import gradient

    return gradient(tvm.relay.parse(source), params=data)


def grad_lstm(hidden: int = 16, steps: int = 20) -> Workload:
    """The higher-order gradient of an LSTM cell folded over a ``List`` of ``steps`` inputs (the
    inputs bound as constants): ``@main(w_ih, w_hh, bias)`` returns the final hidden state and the
    gradient of its sum with respect to each weight."""

    def data_and_weights(rng):
        scale = 1.0 / np.sqrt(hidden)
        xs = _uniform(rng, steps, 1, hidden)
        weights = (
            _uniform(rng, 4 * hidden, hidden, scale=scale),
            _uniform(rng, 4 * hidden, hidden, scale=scale),
            _uniform(rng, 4 * hidden, scale=scale),
        )
        return xs, weights

    source = _relay(_GRAD_LSTM, steps=steps, hidden=hidden, h2=2 * hidden, h3=3 * hidden, gates=4 * hidden)
    return Workload(
        name=f"grad_lstm_h{hidden}",
        description=f"gradient of an LSTM folded over a List of {steps} inputs w.r.t. its weights, hidden {hidden}",
        source=source,
        make_inputs=lambda rng: (data_and_weights(rng)[1], {}),
        build=lambda: _gradient_of(source, {"xs": data_and_weights(np.random.default_rng(SEED))[0]}),
        references=True,
        # the backpropagator chain: one closure call per operator call of the forward pass
        depth=steps * 20,
        rtol=1e-4,
        atol=1e-5,
    )


def grad_mlp(batch: int) -> Workload:
    """The higher-order gradient of the MLP with respect to its weights and biases (passed as
    arguments; the input batch is bound as a constant)."""
    static = mlp(batch)

    def make_inputs(rng):
        (x,), params = static.make_inputs(rng)
        return tuple(params[k] for k in ("w1", "b1", "w2", "b2", "w3", "b3")), {"x": x}

    def build():
        _, data = make_inputs(np.random.default_rng(SEED))
        return _gradient_of(static.source, data)

    return Workload(
        name=f"grad_mlp_b{batch}",
        description=f"gradient of the MLP 784-256-256-10 w.r.t. its weights, batch {batch}",
        source=static.source,
        make_inputs=lambda rng: (make_inputs(rng)[0], {}),
        build=build,
        references=True,
        rtol=1e-4,
        atol=1e-5,
    )


# -- vision models ------------------------------------------------------------------------------

#: ``tvm.relay.testing`` networks at batch 1: name -> (getter name, keyword arguments).
_ZOO = {
    "resnet18": ("resnet", {"num_layers": 18}),
    "mobilenet": ("mobilenet", {}),
    "squeezenet": ("squeezenet", {}),
    "dcgan": ("dcgan", {}),
    "inception_v3": ("inception_v3", {}),
}


def _zoo_workload(name: str) -> tuple[tvm.IRModule, Mapping[str, np.ndarray]]:
    """``tvm.relay.testing.<net>.get_workload(batch_size=1)``, weights drawn from :data:`SEED`.

    TVM's initializers draw from numpy's global generator; it is seeded for the call and
    restored after, so every process builds the same weights. Each call returns a module of
    its own: binding weights replaces ``main`` in the module it is given.
    """
    mod, params = _zoo_weights(name)
    return tvm.IRModule.from_expr(mod["main"]), params


@functools.cache
def _zoo_weights(name: str) -> tuple[tvm.IRModule, Mapping[str, np.ndarray]]:
    import importlib

    getter, kwargs = _ZOO[name]
    state = np.random.get_state()
    np.random.seed(SEED)
    try:
        mod, params = importlib.import_module(f"tvm.relay.testing.{getter}").get_workload(batch_size=1, **kwargs)
    finally:
        np.random.set_state(state)
    return mod, {key: value.numpy() for key, value in params.items()}


def vision_model(name: str) -> Workload:
    """A ``tvm.relay.testing`` network at batch 1 with its weights bound (as ``relay.build``'s
    ``params=`` would), on a random image."""

    def make_inputs(rng):
        mod, params = _zoo_workload(name)
        image = mod["main"].params[0].checked_type
        return (_uniform(rng, *[int(d) for d in image.shape]),), params

    return Workload(
        name=name,
        description=f"{name} (tvm.relay.testing), batch 1",
        source="",
        build=lambda: _zoo_workload(name)[0],
        make_inputs=make_inputs,
        static=True,
        model_zoo=True,
        rtol=1e-4,
        atol=1e-6,
    )


def onnx_vision_model(name: str) -> Workload:
    """An ONNX model-zoo graph (the onnx package's light copy, random weights) at batch 1."""
    from relay_aot.testing.onnx_models import model_zoo_graph

    return _onnx_static(
        f"onnx_{name}",
        f"ONNX model-zoo {name}, random weights, batch 1",
        (1, 3, 224, 224),
        lambda: model_zoo_graph(name, SEED),
        model_zoo=True,
        rtol=1e-4,
        atol=1e-6,
    )


def onnx_qdq_model(name: str) -> Workload:
    """An ONNX model-zoo graph (:func:`onnx_vision_model`'s) quantized by onnxruntime's
    ``quantize_static``: QDQ, int8 weights per channel, uint8 activations, softmax float
    (``relay_aot.testing.onnx_models.model_zoo_qdq``)."""
    from relay_aot.testing.onnx_models import model_zoo_qdq

    # rtol: the executors compute the quantized operators differently (the VM in float between
    # the conversions; relay_aot and onnxruntime on the integers, rounding their own way): a
    # few quantization steps of the logits, which the softmax turns into a few percent
    return _onnx_static(
        f"onnx_qdq_{name}",
        f"ONNX model-zoo {name} quantized by onnxruntime (QDQ int8), random weights, batch 1",
        (1, 3, 224, 224),
        lambda: model_zoo_qdq(name, SEED),
        model_zoo=True,
        rtol=0.05,
        atol=1e-5,
    )


#: The ONNX models quantized to QDQ int8 in the suite (issue 48): the two named, one held out.
QDQ_ZOO = ("squeezenet", "resnet50", "inception_v1")


#: The workloads that also have a tuned row (``<name>_tuned``; ``benchmarks/tuning.py``).
TUNED = ("onnx_squeezenet",)


def tuned(workload: Workload) -> Workload:
    """``workload``'s tuned row: the same module and inputs, compiled with its tuning records."""
    return dataclasses.replace(
        workload,
        name=f"{workload.name}_tuned",
        description=f"{workload.description}, tuned (AutoTVM, graph tuner)",
        tuned_from=workload.name,
    )


def all_workloads() -> list[Workload]:
    """Every workload of the suite, in report order (a tuned row after its untuned one)."""
    untuned = [
        fib(15),
        fib(20),
        list_of_scalars(),
        list_of_tensors(),
        closures_loop(),
        lstm(16),
        lstm(128),
        tree_lstm(16),
        mlp(1),
        mlp(64),
        onnx_loop_rnn(16),
        onnx_loop_rnn(256),
        onnx_loop_rnn(512),
        onnx_mlp(64),
        onnx_quantized_conv_net(),
        greedy_decoder(),
        tensor_array_lstm(16),
        mlp_dynamic_batch(1),
        mlp_dynamic_batch(64),
        grad_lstm(16),
        grad_mlp(1),
        *[vision_model(name) for name in _ZOO],
        onnx_vision_model("squeezenet"),
        onnx_vision_model("shufflenet"),
        onnx_vision_model("resnet50"),
        *[onnx_qdq_model(name) for name in QDQ_ZOO],
        *[tflite_tinyml(name) for name in TINYML],
        *[tflite_held_out(name) for name in HELD_OUT],
    ]
    return [row for w in untuned for row in ([w, tuned(w)] if w.name in TUNED else [w])]


def by_name() -> dict[str, Workload]:
    """The workloads keyed by name."""
    return {w.name: w for w in all_workloads()}

"""The executors the suite compares, each behind one small adapter.

An adapter's ``prepare`` does everything that happens once per program (compiling, building,
converting the inputs to the executor's own values) and returns a function that makes one
call of ``@main`` on the prepared inputs through the executor's ordinary public API. The
harness times ``prepare`` as the preparation cost and the returned function as the per-call
cost. ``unsupported`` names why an executor cannot run a workload at all (graph and AOT
executors reject anything but a static dataflow ``@main``); an executor that raises while
preparing or on its first call is reported "n/a" with the error, so an executor that does
not exist yet (relay_aot's Python backend on an old checkout) shows up as such.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tvm
from tvm import relay

from .workloads import Workload

#: Executors that other executors' results are checked against, in order of preference.
REFERENCES = ("vm", "interpreter")

Call = Callable[[], Any]

#: Why the VM (and the kernel floor, which replays the VM's kernel calls) cannot run a workload.
NO_REFERENCES = "the Relay VM does not support references (RefCreate, RefRead, RefWrite)"
#: Executors for control flow leave the vision models to the executors made for them: their
#: time would go to per-operator dispatch the graph executor never pays, and to minutes of the
#: suite's run.
NOT_FOR_MODEL_ZOO = "a vision model: measured on the executors for static models (graph executor, VM)"


def _not_for_model_zoo(workload: Workload) -> str | None:
    return NOT_FOR_MODEL_ZOO if workload.model_zoo else None


def _device() -> tvm.runtime.Device:
    return tvm.cpu(0)


def _nd_args(args: Sequence[np.ndarray]) -> list[tvm.nd.NDArray]:
    return [tvm.nd.array(np.asarray(a), device=_device()) for a in args]


class Executor:
    """Base adapter: a key (used on the command line and in the JSON) and a label."""

    key = ""
    label = ""
    #: At most / at least this many timed runs (for executors too slow to repeat much).
    max_runs: int | None = None
    min_runs: int | None = None

    def unsupported(self, workload: Workload) -> str | None:
        """Why this executor cannot run ``workload``, or None."""
        return None

    def prepare(self, mod: tvm.IRModule, args: Sequence[np.ndarray], target: str) -> Call:
        """Compile ``mod`` and convert ``args``; return one call of ``@main``."""
        raise NotImplementedError

    def prepare_workload(self, workload: Workload, mod: tvm.IRModule, args: Sequence[np.ndarray], target: str) -> Call:
        """:meth:`prepare` for ``workload`` (an executor that runs the source model overrides it)."""
        return self.prepare(mod, args, target)


class Interpreter(Executor):
    """TVM's Relay interpreter (``create_executor("debug")``); kernels are compiled on first use."""

    key = "interpreter"
    label = "Relay interpreter"

    def unsupported(self, workload):
        return _not_for_model_zoo(workload)

    def prepare(self, mod, args, target):
        with tvm.transform.PassContext(opt_level=3):
            func = relay.create_executor("debug", mod=mod, device=_device(), target=target).evaluate()
        inputs = _nd_args(args)
        return lambda: func(*inputs)


class VirtualMachine(Executor):
    """TVM's Relay VM: ``relay.vm.compile`` then ``VirtualMachine.invoke``."""

    key = "vm"
    label = "Relay VM"

    def unsupported(self, workload):
        return NO_REFERENCES if workload.references else None

    def prepare(self, mod, args, target):
        with tvm.transform.PassContext(opt_level=3):
            exe = relay.vm.compile(mod, target=target)
        vm = tvm.runtime.vm.VirtualMachine(exe, _device())
        inputs = _nd_args(args)
        return lambda: vm.invoke("main", *inputs)


def _static_only(workload: Workload) -> str | None:
    if workload.static:
        return None
    return "graph and AOT executors run only static dataflow programs (no ADTs, closures or global functions)"


class _FactoryExecutor(Executor):
    """Shared by the graph and AOT executors: ``relay.build``, then set inputs, run, get outputs."""

    def unsupported(self, workload):
        return _static_only(workload)

    def build_options(self) -> dict[str, Any]:
        """Extra keyword arguments of ``relay.build``."""
        return {}

    def module(self, factory) -> Any:
        """The runtime module that ``set_input``/``run``/``get_output``."""
        raise NotImplementedError

    def prepare(self, mod, args, target):
        with tvm.transform.PassContext(opt_level=3):
            factory = relay.build(mod, target=target, **self.build_options())
        module = self.module(factory)
        names = [p.name_hint for p in mod["main"].params]
        inputs = dict(zip(names, _nd_args(args)))
        outputs = range(module.get_num_outputs())

        def call():
            for name, value in inputs.items():
                module.set_input(name, value)
            module.run()
            results = tuple(module.get_output(i) for i in outputs)
            return results[0] if len(results) == 1 else results

        return call


class GraphExecutor(_FactoryExecutor):
    """TVM's graph executor (static programs only)."""

    key = "graph"
    label = "graph executor"

    def module(self, factory):
        return tvm.contrib.graph_executor.GraphModule(factory["default"](_device()))


class AotExecutor(_FactoryExecutor):
    """TVM's AOT executor with the packed C++ interface (static programs only)."""

    key = "aot"
    label = "AOT executor"

    def unsupported(self, workload):
        if workload.model_zoo:
            # The graph executor runs the same kernels; AOT's build of a vision model takes
            # about four times as long (minutes per model and thread setting).
            return (
                "a vision model: the graph executor stands for relay.build (same kernels, a quarter of the build time)"
            )
        return super().unsupported(workload)

    def build_options(self):
        from tvm.relay.backend import Executor as ExecutorConfig

        return {"executor": ExecutorConfig("aot", {"interface-api": "packed", "unpacked-api": False})}

    def module(self, factory):
        return tvm.runtime.executor.AotModule(factory["default"](_device()))


class PyConverter(Executor):
    """``tvm.relay.testing.py_converter``: Relay to Python source calling TVM kernels.

    It converts every global of a module, so the module is pruned to what ``@main`` reaches
    first. Every Relay call goes through TVM's global function registry and Python, which is
    why it is slow; its runs are capped. Recursion runs on Python's stack, so the recursion
    limit is raised (the harness runs executors on a thread with a large stack).
    """

    key = "py_converter"
    label = "TVM py_converter"
    max_runs = 3
    min_runs = 1

    def unsupported(self, workload):
        if workload.references:
            # Its gradients of the MLP were wrong (zeros), and since the gradient cleanup its
            # run of the LSTM's gradient had not finished after 15 minutes.
            return "py_converter mishandles references: wrong gradients, or no end"
        return _not_for_model_zoo(workload)

    def prepare(self, mod, args, target):
        from tvm.relay.testing import py_converter

        sys.setrecursionlimit(max(sys.getrecursionlimit(), 200_000))
        pruned = relay.transform.RemoveUnusedFunctions(["main"])(mod)
        with tvm.transform.PassContext(opt_level=3):
            tree = py_converter.to_python(pruned.get_global_var("main"), pruned, tvm.target.Target(target))
        namespace: dict[str, Any] = {}
        exec(compile(tree, "<py_converter>", "exec"), namespace, namespace)  # noqa: S102 - TVM's own output
        main = namespace[py_converter.OUTPUT_VAR_NAME]
        inputs = _nd_args(args)
        return lambda: main(*inputs)


class RelayAot(Executor):
    """relay_aot's ``compile(mod, backend=...)`` called like ``mod["main"]``."""

    def __init__(self, backend: str, key: str, label: str):
        self.backend = backend
        self.key = key
        self.label = label

    def unsupported(self, workload):
        return _not_for_model_zoo(workload) if self.backend == "python" else None

    def prepare(self, mod, args, target):
        import relay_aot

        compiled = relay_aot.compile(mod, target=target, backend=self.backend)
        inputs = _nd_args(args)
        return lambda: compiled(*inputs)


class HandCpp(Executor):
    """The workload written by hand in C++ over the same values and kernels (``hand_cpp/``):
    the floor of relay_aot's value representation, for fib, list_scalars and list_tensors."""

    key = "hand_cpp"
    label = "hand-written C++"

    def unsupported(self, workload):
        from . import hand_cpp

        if hand_cpp.program(workload.name) is None:
            return "written by hand only for fib, list_scalars and list_tensors"
        return None

    def prepare_workload(self, workload, mod, args, target):
        from . import hand_cpp

        func = hand_cpp.prepare(workload.name, mod, target)
        inputs = _nd_args(args)
        return lambda: func(*inputs)


class OnnxRuntime(Executor):
    """onnxruntime on the ONNX model of an ONNX workload (an optional peer: ``pip install
    onnxruntime``), with the threads of the setting: one thread where ``TVM_NUM_THREADS=1``,
    onnxruntime's own default (every core) where TVM's default pool runs."""

    key = "onnxruntime"
    label = "onnxruntime"

    def unsupported(self, workload):
        if workload.onnx_model is None:
            return "not an ONNX model"
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return "onnxruntime is not installed (pip install onnxruntime)"
        return None

    def prepare_workload(self, workload, mod, args, target):
        import onnxruntime

        model = workload.onnx_model()
        options = onnxruntime.SessionOptions()
        if os.environ.get("TVM_NUM_THREADS") == "1":
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        inputs = {i.name: np.asarray(a) for i, a in zip(model.graph.input, args)}
        if len(model.graph.output) == 1:  # one output: a tensor, as Relay returns it
            return lambda: session.run(None, inputs)[0]
        return lambda: tuple(session.run(None, inputs))


class LiteRT(Executor):
    """LiteRT (``ai-edge-litert``, the TFLite interpreter, with XNNPACK) on a TFLite workload's
    model file: one thread where ``TVM_NUM_THREADS=1``, its own default elsewhere."""

    key = "litert"
    label = "LiteRT"

    def unsupported(self, workload):
        if workload.tflite_model is None:
            return "not a TFLite model"
        try:
            import ai_edge_litert  # noqa: F401
        except ImportError:
            return "LiteRT is not installed (pip install ai-edge-litert)"
        return None

    def prepare_workload(self, workload, mod, args, target):
        from ai_edge_litert.interpreter import Interpreter

        threads = 1 if os.environ.get("TVM_NUM_THREADS") == "1" else None
        interpreter = Interpreter(model_path=str(workload.tflite_model), num_threads=threads)
        interpreter.allocate_tensors()
        (given,), outputs = interpreter.get_input_details(), interpreter.get_output_details()
        data = np.asarray(args[0])
        if len(outputs) == 1:  # one output: a tensor, as Relay returns it
            (output,) = outputs

            def call():
                interpreter.set_tensor(given["index"], data)
                interpreter.invoke()
                return interpreter.get_tensor(output["index"])

            return call

        def call_tuple():
            interpreter.set_tensor(given["index"], data)
            interpreter.invoke()
            return tuple(interpreter.get_tensor(o["index"]) for o in outputs)

        return call_tuple


def all_executors() -> list[Executor]:
    """Every executor, in report order."""
    return [
        Interpreter(),
        VirtualMachine(),
        GraphExecutor(),
        AotExecutor(),
        PyConverter(),
        RelayAot("python", "relay_aot_python", "relay_aot Python backend"),
        RelayAot("cpp", "relay_aot_cpp", "relay_aot C++ backend"),
        HandCpp(),
        OnnxRuntime(),
        LiteRT(),
    ]


def by_key() -> dict[str, Executor]:
    """The executors keyed by ``key``."""
    return {e.key: e for e in all_executors()}

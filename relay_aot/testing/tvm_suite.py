"""TVM's own Relay test files, run with relay_aot behind every executor they use.

TVM's tests (``tests/python/relay`` of a TVM checkout, which this project does not ship: the
directory is an argument) call Relay's executors in a handful of ways. As a pytest plugin
(``-p relay_aot.testing.tvm_suite`` with ``RELAY_AOT_TVM_SUITE=aot``), this module replaces each
of them with relay_aot, returning values of the types the tests expect:

* ``relay.create_executor(kind, ...)`` for every kind (``debug``, ``graph``, ``vm``, ``aot``)
  and its ``evaluate(expr, binds)``; for ``debug`` (the interpreter), ADT values come back as
  the interpreter's ``ConstructorValue`` and references as its ``RefValue``;
* ``relay.build`` with the graph executor, then ``graph_executor.GraphModule`` or
  ``graph_executor.create`` (``set_input``/``run``/``get_output``); anything else asked of the
  built factory (its graph JSON, ``export_library``) comes from TVM's real build;
* ``relay.vm.compile`` then ``tvm.runtime.vm.VirtualMachine`` (``run``/``invoke``/
  ``set_input``/``invoke_stateful``/``get_outputs``); the executable's other methods (``save``,
  ``bytecode``) are TVM's real ones;
* the helpers that call these (``tvm.relay.testing.check_grad``, ...), whichever module
  imported them by name.

A program for a target other than a CPU one, or a device other than the CPU, is skipped, as
TVM's own tests skip targets that are not enabled. With ``RELAY_AOT_TVM_SUITE=tvm`` nothing is
replaced and the plugin only records. Either way it writes one JSON line per test to the file
``RELAY_AOT_TVM_SUITE_RECORD`` names: outcome, first error line, and whether the test reached
relay_aot. Each test has a time limit (``RELAY_AOT_TVM_SUITE_TIMEOUT`` seconds).

``python -m relay_aot.testing.tvm_suite --tests DIR FILE...`` runs each file twice (plain TVM,
then relay_aot) with pytest-xdist (a crash ends a worker, not the run) and writes the summary
that ``tests/data/tvm_suite.json`` records (docs/testing.md, "TVM's own test files").
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import tvm
from tvm import relay

from ..request import instrumented

#: Environment variables the plugin reads.
MODE_ENV = "RELAY_AOT_TVM_SUITE"
RECORD_ENV = "RELAY_AOT_TVM_SUITE_RECORD"
TIMEOUT_ENV = "RELAY_AOT_TVM_SUITE_TIMEOUT"

#: Seconds one test may take (compiling a vision model with relay_aot and TVM takes minutes).
DEFAULT_TIMEOUT = 600

#: How many tests reached relay_aot during the current one (reset per test).
_REACHED = [0]

#: Each test's outcome so far, and whether this process is an xdist worker (which only reports).
_RESULTS: dict = {}
_ON_WORKER = [False]


def _skip(reason: str) -> NoReturn:
    import pytest

    pytest.skip(f"relay_aot suite: {reason}")


# -- targets and compiling ---------------------------------------------------------------------


def _cpu_target(target) -> str | None:
    """The llvm target string relay_aot builds for, or None for relay_aot's default; skips the
    test for a target that is not a CPU (TVM's own tests skip targets not enabled)."""
    if target is None:
        return None
    if isinstance(target, dict):
        targets = list(target.values())
        if len(targets) != 1:
            _skip(f"heterogeneous targets {target}")
        target = targets[0]
    if isinstance(target, (list, tuple)):
        if len(target) != 1:
            _skip(f"heterogeneous targets {target}")
        target = target[0]
    target = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    if target.kind.name == "llvm":
        return str(target)
    if target.kind.name == "c":
        return None
    _skip(f"target {target.kind.name}")


def _check_device(device) -> None:
    if device is not None and device.device_type != tvm.cpu().device_type:
        _skip(f"device {device}")


def _compile(mod: tvm.IRModule, target=None, params=None):
    """relay_aot's compiled ``mod["main"]`` (counted as reaching relay_aot)."""
    from ..compiler import compile as aot_compile

    _REACHED[0] += 1
    return aot_compile(mod, target=_cpu_target(target), params=params)


def _module_with_main(mod: tvm.IRModule | None, main) -> tvm.IRModule:
    """A copy of ``mod`` (its globals and type definitions) whose ``main`` is ``main``."""
    mod = mod if mod is not None else tvm.IRModule()
    if len(mod.functions):
        # TVM's type inference fails on a new main calling a global not yet inferred.
        mod = relay.transform.InferType()(mod)
    new = tvm.IRModule(mod.functions, mod.type_definitions)
    if isinstance(main, relay.GlobalVar):
        main = mod[main]
    new["main"] = main
    return new


# -- values as the interpreter returns them ----------------------------------------------------


def _interpreter_value(value: Any, ty, mod: tvm.IRModule) -> Any:
    """A relay_aot result as TVM's interpreter returns it: constructors as ``ConstructorValue``,
    references as ``RefValue``, tuples as runtime ADTs (as relay_aot's), tensors as NDArrays."""
    from tvm.relay.backend.interpreter import ConstructorValue, RefValue
    from tvm.runtime.container import ADT

    from ..runtime.values import Ref

    if isinstance(value, Ref):
        inner = ty.value if isinstance(ty, relay.RefType) else None
        return RefValue(_interpreter_value(value.value, inner, mod))
    if isinstance(value, ADT) and not isinstance(ty, relay.TupleType):
        # A constructor's tag names it across the module (TVM derives tags from the type's
        # name), so a value whose static type is a type variable converts too.
        ctor = _constructor(mod, value.tag)
        if ctor is not None:
            data = mod[ctor.belong_to]
            subst = list(zip(data.type_vars, ty.args)) if isinstance(ty, relay.TypeCall) else []
            fields = [_interpreter_value(f, _substitute(t, subst), mod) for f, t in zip(value, ctor.inputs)]
            return ConstructorValue(value.tag, fields, ctor)
    if isinstance(value, ADT) and isinstance(ty, relay.TupleType):
        return tvm.runtime.container.tuple_object([_interpreter_value(f, t, mod) for f, t in zip(value, ty.fields)])
    return value


def _constructor(mod: tvm.IRModule, tag: int):
    for gtv in mod.type_definitions.keys():
        for ctor in mod[gtv].constructors:
            if ctor.tag == tag:
                return ctor
    return None


def _substitute(ty, subst: list):
    """``ty`` with the type variables of ``subst`` (pairs) replaced (fields of a generic constructor)."""
    if not subst:
        return ty
    if isinstance(ty, relay.TypeVar):
        # Type.same_as recurses forever in TVM 0.19: compare as objects.
        return next((new for var, new in subst if tvm.runtime.Object.same_as(var, ty)), ty)
    if isinstance(ty, relay.TypeCall):
        return relay.TypeCall(ty.func, [_substitute(a, subst) for a in ty.args])
    if isinstance(ty, relay.TupleType):
        return relay.TupleType([_substitute(f, subst) for f in ty.fields])
    if isinstance(ty, relay.RefType):
        return relay.RefType(_substitute(ty.value, subst))
    return ty


# -- create_executor ---------------------------------------------------------------------------


class AotExecutor(tvm.relay.backend.interpreter.Executor):
    """What ``relay.create_executor(kind, ...)`` returns under the suite: ``evaluate`` (TVM's,
    with its ``binds`` and non-function expressions) compiles with relay_aot."""

    def __init__(self, kind: str, mod, device, target):
        self.kind = kind
        self.mod = mod if mod is not None else tvm.IRModule()
        self.device = device
        self.target = target

    def _make_executor(self, expr=None):
        mod = self.mod if expr is None else _module_with_main(self.mod, expr)
        mod = relay.transform.InferType()(mod)
        main = mod["main"]
        compiled = _compile(mod, self.target)

        def run(*args, **kwargs):
            args = [_plain_arg(a) for a in self._convert_args(main, args, kwargs)]
            result = compiled(*args)
            if self.kind == "debug":
                return _interpreter_value(result, main.checked_type.ret_type, mod)
            return result

        return run


def _plain_arg(arg):
    """An argument as relay_aot takes it: the interpreter also takes Relay constants (and
    tuples of them) as arguments."""
    if isinstance(arg, relay.Constant):
        return arg.data
    if isinstance(arg, relay.Tuple):
        return tuple(_plain_arg(f) for f in arg.fields)
    if isinstance(arg, tuple):
        return tuple(_plain_arg(f) for f in arg)
    return arg


def create_executor(kind="debug", mod=None, device=None, target="llvm", params=None):
    """``relay.create_executor`` with relay_aot behind every kind."""
    if kind not in ("debug", "graph", "vm", "aot"):
        raise RuntimeError(f"unknown execution strategy: {kind}")
    _check_device(device)
    _cpu_target(target)
    if params is not None:
        from tvm.relay.build_module import bind_params_by_name

        mod = tvm.IRModule.from_expr(bind_params_by_name(mod["main"], params))
    return AotExecutor(kind, mod, device, target)


# -- relay.build and the graph executor --------------------------------------------------------


class BuiltGraph:
    """What ``relay.build`` returns under the suite: ``["default"](dev)`` makes relay_aot's graph
    module; every other attribute comes from TVM's real build (made when first asked for)."""

    def __init__(self, mod: tvm.IRModule, target, params, build_args: tuple, build_kwargs: dict):
        self.ir_mod = mod
        self.target = target
        self.build_params = params or {}
        self._args = build_args
        self._kwargs = build_kwargs
        self._real = None
        self._iter = None
        self.compiled = None  # relay_aot's compile, made by the first graph module (or by build)

    def real(self):
        """TVM's own build of the same module."""
        if self._real is None:
            self._real = _ORIGINALS["build"](*self._args, **self._kwargs)
        return self._real

    def __getitem__(self, name):
        if name == "default":
            return lambda *devices: GraphModule(self, devices)
        return self.real()[name]

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.real(), name)

    @property
    def lib(self):
        """The kernels' library, for ``graph_executor.create(built.graph_json, built.lib, dev)``."""
        return _BuiltLib(self)

    def __iter__(self):  # the legacy ``graph, lib, params = relay.build(...)``: ``lib`` is the
        # kernels' library there (tests read its assembly), which graph_executor.create takes
        real = self.real()
        return iter([real.get_graph_json(), _BuiltLib(self), real.get_params()])


class _BuiltLib:
    """``BuiltGraph.lib``: TVM's real library for everything but making a graph module."""

    def __init__(self, built: BuiltGraph):
        self.built = built

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.built.real().lib, name)


class GraphModule:
    """relay_aot behind ``graph_executor.GraphModule``: inputs by name or index, then ``run``,
    then ``get_output(i)`` (tuple results flattened, as the graph executor's outputs)."""

    def __init__(self, built: BuiltGraph, devices=()):
        for device in devices:
            _check_device(device)
        self.built = built
        if built.compiled is None:
            built.compiled = _compile(built.ir_mod, built.target, built.build_params)
        self.compiled = built.compiled
        self.names = [p.name_hint for p in built.ir_mod["main"].params if p.name_hint not in built.build_params]
        self.inputs: dict = {}
        self.outputs: list = []

    def set_input(self, key=None, value=None, **params):
        if key is not None:
            self.inputs[self._name(key)] = value
        for name, value in params.items():
            if name in self.names:  # others are the real build's folded constants
                self.inputs[name] = value

    def _name(self, key) -> str:
        return self.names[key] if isinstance(key, int) else key

    def run(self, **inputs):
        self.set_input(**inputs)
        self._set_unset_inputs()
        self.outputs = _flatten(self.compiled(*[self.inputs[n] for n in self.names]))

    def _set_unset_inputs(self):
        for param in self._typed_params:
            # The graph executor runs on the uninitialized buffers of inputs never set.
            if param.name_hint in self.names and param.name_hint not in self.inputs:
                ty = param.checked_type
                if not isinstance(ty, relay.TensorType) or not all(isinstance(d, tvm.tir.IntImm) for d in ty.shape):
                    raise tvm.error.TVMError(f"relay_aot suite: input {param.name_hint} was not set")
                self.inputs[param.name_hint] = tvm.nd.empty([int(d) for d in ty.shape], ty.dtype)

    @functools.cached_property
    def _typed_params(self):
        """main's parameters with their types (inferred once: run() reads them on every call)."""
        return relay.transform.InferType()(self.built.ir_mod)["main"].params

    def get_input_info(self):
        """``(shape_dict, dtype_dict)`` of the inputs, as ``tvm.container.Map``s."""
        shapes, dtypes = {}, {}
        for param in self._typed_params:
            if param.name_hint in self.names:
                ty = param.checked_type
                shapes[param.name_hint] = tvm.runtime.ShapeTuple([int(d) for d in ty.shape])
                dtypes[param.name_hint] = ty.dtype
        return tvm.runtime.convert(shapes), tvm.runtime.convert(dtypes)

    def benchmark(
        self,
        device,
        func_name="run",
        repeat=5,
        number=5,
        min_repeat_ms=None,
        limit_zero_time_iterations=100,
        end_to_end=False,
        cooldown_interval_ms=0,
        repeats_to_cooldown=1,
        **kwargs,
    ):
        """The graph executor's benchmark: TVM's ``time_evaluator`` of ``func_name`` on the
        library's executor module (``lib["default"](dev)``), holding this module's inputs."""
        if kwargs:
            self.set_input(**kwargs)
        self._set_unset_inputs()
        executor = _executor(self.compiled, device, [self.inputs[n] for n in self.names])
        timer = executor.time_evaluator(
            "run_from_inputs" if end_to_end else func_name,
            device,
            repeat=repeat,
            number=number,
            min_repeat_ms=min_repeat_ms or 0,
            limit_zero_time_iterations=limit_zero_time_iterations,
            cooldown_interval_ms=cooldown_interval_ms,
            repeats_to_cooldown=repeats_to_cooldown,
        )
        if end_to_end:
            pairs = [item for name in self.names for item in (name, _ndarray(self.inputs[name]))]
            return timer(device.device_type, device.device_id, *pairs)
        return timer()

    @property
    def module(self):
        """The graph executor's functions by name (``module["set_input_zero_copy"](i, array)``)."""
        return {
            "set_input": self.set_input,
            "set_input_zero_copy": self.set_input,
            "run": self.run,
            "get_output": self.get_output,
            "get_input": self.get_input,
            "get_num_outputs": self.get_num_outputs,
            "get_num_inputs": self.get_num_inputs,
            "get_input_index": self.get_input_index,
        }

    def get_output(self, index, out=None):
        value = self.outputs[index]
        if out is not None:
            value.copyto(out)
            return out
        return value

    def get_num_outputs(self):
        return len(self.outputs) if self.outputs else len(_flatten_type(self.built.ir_mod))

    def get_num_inputs(self):
        return len(self.names)

    def get_input_index(self, name):
        return self.names.index(name) if name in self.names else -1

    def get_input(self, key, out=None):
        value = self.inputs[self._name(key)]
        value = value if isinstance(value, tvm.nd.NDArray) else tvm.nd.array(np.asarray(value))
        if out is not None:
            value.copyto(out)
            return out
        return value

    def __getitem__(self, name):
        return getattr(self, name)


def _ndarray(value):
    return value if isinstance(value, (tvm.runtime.Object, tvm.nd.NDArray)) else tvm.nd.array(np.asarray(value))


def _executor(compiled, device, inputs: list) -> tvm.runtime.Module:
    """The executor module of a compiled library (``lib[name](device)``: TVM's graph/AOT
    executor interface) with ``inputs`` set."""
    executor = compiled.module[compiled.name](device)
    for i, value in enumerate(inputs):
        executor["set_input_zero_copy"](i, _ndarray(value))
    return executor


def _flatten(value) -> list:
    from tvm.runtime.container import ADT

    if isinstance(value, (ADT, tuple, list)):
        return [leaf for field in value for leaf in _flatten(field)]
    return [value]


def _flatten_type(mod: tvm.IRModule) -> list:
    ret = relay.transform.InferType()(mod)["main"].checked_type.ret_type
    leaves, work = [], [ret]
    while work:
        ty = work.pop()
        if isinstance(ty, relay.TupleType):
            work.extend(reversed(ty.fields))
        else:
            leaves.append(ty)
    return leaves


def build(ir_mod, target=None, target_host=None, executor=None, runtime=None, *args, **kwargs):
    """``relay.build``: relay_aot behind the graph executor; TVM's own build for other executors
    and runtimes (the AOT executor's C interface, the CRT)."""
    call = (ir_mod, target, target_host) + args
    # by keyword: either may be given without the other
    kwargs = dict(
        kwargs,
        **({"executor": executor} if executor is not None else {}),
        **({"runtime": runtime} if runtime is not None else {}),
    )
    graph = executor is None or executor.name == "graph"
    if not graph or (runtime is not None and runtime.name != "cpp"):
        return _ORIGINALS["build"](*call, **kwargs)
    if isinstance(ir_mod, relay.Function):
        ir_mod = tvm.IRModule.from_expr(ir_mod)
    if target is None:
        target = tvm.target.Target.current()
    _cpu_target(target)
    # relay.build ignores params that name no parameter of main (a module whose weights a
    # helper already bound: auto_scheduler.extract_tasks binds them in place); relay_aot refuses.
    names = {p.name_hint for p in ir_mod["main"].params}
    params = {k: v for k, v in (kwargs.get("params") or {}).items() if k in names}
    built = BuiltGraph(ir_mod, target, params, call, kwargs)
    if instrumented():
        # relay.build runs its passes under the caller's instruments, which tests count: the
        # compile happens here then, not when a graph module is made.
        built.compiled = _compile(ir_mod, target, params)
    return built


class _GraphModuleFactory:
    """Replaces ``graph_executor.GraphModule``: relay_aot's for a :class:`BuiltGraph`'s module."""

    def __new__(cls, module, *args, **kwargs):
        if isinstance(module, GraphModule):
            return module
        return _ORIGINALS["GraphModule"](module, *args, **kwargs)


def graph_executor_create(graph_json_str, libmod, device):
    """``graph_executor.create`` for a :class:`BuiltGraph` (the legacy three-value form)."""
    if isinstance(libmod, _BuiltLib):
        libmod = libmod.built
    if isinstance(libmod, BuiltGraph):
        devices = device if isinstance(device, (list, tuple)) else [device]
        return GraphModule(libmod, devices)
    return _ORIGINALS["create"](graph_json_str, libmod, device)


# -- the VM ------------------------------------------------------------------------------------


class VMExecutable:
    """What ``relay.vm.compile`` returns under the suite; anything but running it (``save``,
    ``bytecode``, ...) is TVM's real executable's."""

    def __init__(self, mod, target, params, call_args, call_kwargs):
        self.ir_mod = mod
        self.target = target
        self.params = params
        self._call = (call_args, call_kwargs)
        self._real = None

    def real(self):
        if self._real is None:
            self._real = _ORIGINALS["vm_compile"](*self._call[0], **self._call[1])
        return self._real

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.real(), name)


def vm_compile(mod, target=None, target_host=None, params=None, *args, **kwargs):
    """``relay.vm.compile`` under the suite (compiled by relay_aot when a VM runs it)."""
    if isinstance(mod, relay.Function):
        mod = tvm.IRModule.from_expr(mod)
    _cpu_target(target)
    return VMExecutable(mod, target, params, (mod, target, target_host, params) + args, kwargs)


class VirtualMachine:
    """relay_aot behind ``tvm.runtime.vm.VirtualMachine`` for a :class:`VMExecutable`."""

    # The real class's allocator kinds (tests pass them as memory_cfg).
    NAIVE_ALLOCATOR = tvm.runtime.vm.VirtualMachine.NAIVE_ALLOCATOR
    POOLED_ALLOCATOR = tvm.runtime.vm.VirtualMachine.POOLED_ALLOCATOR

    def __new__(cls, exe, device=None, memory_cfg=None):
        if not isinstance(exe, VMExecutable):
            return _ORIGINALS["VirtualMachine"](exe, device, memory_cfg)
        return super().__new__(cls)

    def __init__(self, exe, device=None, memory_cfg=None):
        for dev in device if isinstance(device, (list, tuple)) else [device]:
            _check_device(dev)
        self.exe = exe
        self._compiled: dict = {}
        self._inputs: dict = {}
        self._outputs = None

    def _function(self, name: str):
        if name not in self._compiled:
            mod = (
                self.exe.ir_mod
                if name == "main"
                else _module_with_main(self.exe.ir_mod, self.exe.ir_mod.get_global_var(name))
            )
            self._compiled[name] = (mod, _compile(mod, self.exe.target, self.exe.params))
        return self._compiled[name]

    def _params(self, name) -> list:
        mod, _ = self._function(name)
        return [p.name_hint for p in mod["main"].params if not self.exe.params or p.name_hint not in self.exe.params]

    def _args(self, name, args, kwargs):
        if not kwargs:
            return list(args)
        given = list(args)
        return [kwargs[p] if p in kwargs else given.pop(0) for p in self._params(name)]

    def set_input(self, func_name, *args, **kwargs):
        self._inputs[func_name] = self._args(func_name, args, kwargs)

    def set_one_input(self, func_name, *args, **kwargs):
        """One input, by index or name (``set_one_input("main", 0, x)``, ``(..., d0=x)``)."""
        key, value = next(iter(kwargs.items())) if kwargs else args
        params = self._params(func_name)
        inputs = self._inputs.get(func_name) or [None] * len(params)
        inputs[key if isinstance(key, int) else params.index(key)] = value
        self._inputs[func_name] = inputs

    def get_input_index(self, input_name, func_name="main"):
        params = self._params(func_name)
        return params.index(input_name) if input_name in params else -1

    def invoke_with_outputs(self, func_name, input_args, output_args):
        """``invoke`` writing the results into ``output_args``."""
        if input_args:
            self.set_input(func_name, **input_args)
        for value, out in zip(_flatten(self.invoke(func_name)), output_args):
            value.copyto(out)

    def invoke(self, func_name, *args, **kwargs):
        if args or kwargs:
            self.set_input(func_name, *args, **kwargs)
        _, compiled = self._function(func_name)
        return compiled(*self._inputs.get(func_name, []))

    def run(self, *args, **kwargs):
        return self.invoke("main", *args, **kwargs)

    def invoke_stateful(self, func_name, *args, **kwargs):
        self._outputs = self.invoke(func_name, *args, **kwargs)

    def get_outputs(self):
        return _flatten(self._outputs)

    def benchmark(
        self,
        device,
        *args,
        func_name="main",
        repeat=5,
        number=5,
        min_repeat_ms=None,
        limit_zero_time_iterations=100,
        end_to_end=False,
        cooldown_interval_ms=0,
        repeats_to_cooldown=1,
        **kwargs,
    ):
        """The VM's benchmark: TVM's ``time_evaluator`` of ``invoke`` on the executor module of
        ``func_name``'s library (compiled as its ``@main``)."""
        if args or kwargs:
            self.set_input(func_name, *args, **kwargs)
        _, compiled = self._function(func_name)
        executor = _executor(compiled, device, self._inputs.get(func_name, []))
        return executor.time_evaluator(
            "invoke",
            device,
            repeat=repeat,
            number=number,
            min_repeat_ms=min_repeat_ms or 0,
            limit_zero_time_iterations=limit_zero_time_iterations,
            cooldown_interval_ms=cooldown_interval_ms,
            repeats_to_cooldown=repeats_to_cooldown,
        )("main")


# -- installing --------------------------------------------------------------------------------

_ORIGINALS: dict = {}


def install() -> None:
    """Put relay_aot behind TVM's executors (every module that imported them by name too)."""
    import tvm.relay.testing  # noqa: F401 - its helpers import create_executor by name
    from tvm.contrib import graph_executor
    from tvm.relay import build_module
    from tvm.relay.backend import vm as relay_vm
    from tvm.runtime import vm as runtime_vm

    if _ORIGINALS:
        return
    replacements = {
        "create_executor": (build_module.create_executor, create_executor),
        "build": (build_module.build, build),
        "GraphModule": (graph_executor.GraphModule, _GraphModuleFactory),
        "create": (graph_executor.create, graph_executor_create),
        "vm_compile": (relay_vm.compile, vm_compile),
        "VirtualMachine": (runtime_vm.VirtualMachine, VirtualMachine),
    }
    for key, (original, _) in replacements.items():
        _ORIGINALS[key] = original
    by_identity = {id(original): new for original, new in replacements.values()}
    for module in list(sys.modules.values()):
        if module is None or not getattr(module, "__name__", "").startswith("tvm"):
            continue
        for attr, value in list(vars(module).items()):
            new = by_identity.get(id(value))
            if new is not None and value is not new:
                setattr(module, attr, new)


# -- the pytest plugin -------------------------------------------------------------------------


def pytest_configure(config):
    if os.environ.get(MODE_ENV) == "aot":
        install()
    _ON_WORKER[0] = hasattr(config, "workerinput")
    if _ON_WORKER[0]:
        # Collection can hang too (before any test's clock starts).
        faulthandler.dump_traceback_later(_timeout() + 120, exit=True)


def pytest_collection_modifyitems(session, config, items):
    # Test modules import executors by name at import time: replace those names too.
    if os.environ.get(MODE_ENV) == "aot":
        by_identity = {
            id(_ORIGINALS[k]): new
            for k, new in (
                ("create_executor", create_executor),
                ("build", build),
                ("GraphModule", _GraphModuleFactory),
                ("create", graph_executor_create),
                ("vm_compile", vm_compile),
                ("VirtualMachine", VirtualMachine),
            )
        }
        for item in items:
            module = getattr(item, "module", None)
            if module is None:
                continue
            for attr, value in list(vars(module).items()):
                if id(value) in by_identity:
                    setattr(module, attr, by_identity[id(value)])


def _timeout() -> int:
    return int(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))


def _on_alarm(signum, frame):
    raise TimeoutError(f"relay_aot suite: the test took more than {_timeout()} s")


def pytest_runtest_logstart(nodeid, location):
    _REACHED[0] = 0


def pytest_runtest_setup(item):
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(_timeout())
    # A hang inside C code never returns to Python: end the worker (xdist reports the crash).
    faulthandler.dump_traceback_later(_timeout() + 120, exit=True)


def pytest_runtest_teardown(item, nextitem):
    # The teardown report carries it to the controller (a crashed test's is lost: 0).
    item.user_properties.append(("relay_aot_reached", _REACHED[0]))


def _first_line(report) -> str:
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])[:300]
    text = str(report.longrepr) if report.longrepr is not None else ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    if errors:
        return errors[0][:300]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:300]


def pytest_runtest_logreport(report):
    """Stop the test's clocks (on a worker); record its outcome (on the controller, or without
    xdist), from its setup, call and teardown reports."""
    if report.when == "teardown":
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
    entry = _RESULTS.setdefault(report.nodeid, {"outcome": "passed", "error": "", "reached": 0})
    entry["reached"] = max(entry["reached"], dict(report.user_properties).get("relay_aot_reached", 0))
    if report.skipped and hasattr(report, "wasxfail"):
        entry["outcome"] = "xfailed"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"], entry["error"] = "skipped", _first_line(report)
    elif report.failed and entry["outcome"] != "failed":
        entry["outcome"], entry["error"] = "failed", _first_line(report)
    path = os.environ.get(RECORD_ENV)
    if path and not _ON_WORKER[0]:
        # One line per report, the last one per test counts: a run cut short keeps what it saw.
        with open(path, "a") as out:
            out.write(json.dumps({"test": report.nodeid, **entry}) + "\n")


# -- the driver --------------------------------------------------------------------------------


def run_file(
    tests_dir: Path, test_file: str, mode: str, workers: int, timeout: int, file_timeout: int | None = None
) -> dict:
    """Run one of TVM's test files under ``mode`` (``"tvm"`` or ``"aot"``): {test: record}.
    A run still going after ``file_timeout`` seconds is ended, with the tests it reported."""
    with tempfile.TemporaryDirectory(prefix="relay_aot-tvm-suite-") as scratch:
        record = Path(scratch) / "record.jsonl"
        ini = Path(scratch) / "pytest.ini"
        ini.write_text("[pytest]\n")
        env = dict(os.environ, **{MODE_ENV: mode, RECORD_ENV: str(record), TIMEOUT_ENV: str(timeout)})
        env.setdefault("TOPHUB_LOCATION", "NONE")
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(ini),
            "--rootdir",
            str(tests_dir),
            "--noconftest",
            "-p",
            "tvm.testing.plugin",
            "-p",
            "relay_aot.testing.tvm_suite",
            "-n",
            str(workers),
            "--no-header",
            "-rN",
            str(tests_dir / test_file),
        ]
        started = time.monotonic()
        try:
            proc = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=file_timeout)
        except subprocess.TimeoutExpired as stopped:
            proc = subprocess.CompletedProcess(command, -1, _output_text(stopped.stdout), _output_text(stopped.stderr))
        results = {}
        if record.exists():
            for line in record.read_text().splitlines():
                entry = json.loads(line)
                results[entry.pop("test")] = entry
        if not results and proc.returncode not in (0, 5):
            tail = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()][-3:]
            results[f"{test_file}::<collection>"] = {"outcome": "failed", "error": " | ".join(tail)[:300], "reached": 0}
        print(f"{test_file} [{mode}]: {_counts(results)} in {time.monotonic() - started:.0f} s", flush=True)
        return results


def _output_text(output: bytes | str | None) -> str:
    """A stream of a run its timeout ended: subprocess keeps it as bytes even with text=True
    (None when nothing came), each stream on its own, and may cut it inside a character."""
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


def _counts(results: dict) -> dict:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for entry in results.values():
        key = entry["outcome"] if entry["outcome"] in counts else "skipped"
        counts[key] += 1
    return counts


#: Which group a test file belongs to (issue 31 counts the two apart).
OPERATOR_FILES = ("test_op_level", "test_op_grad_level", "test_op_qnn_", "dyn/test_dynamic_op_level")


def group(test_file: str) -> str:
    """``"operators"`` for TVM's operator test files, ``"relay"`` for the other Relay ones."""
    return "operators" if test_file.startswith(OPERATOR_FILES) else "relay"


def summarize(runs: dict, reasons: dict | None = None) -> dict:
    """The summary of ``{file: {"tvm": results, "aot": results}}``: per file, both runs' counts
    and how many tests reached relay_aot (of those, how many passed on TVM, and on both); per
    group, the totals; and every test failing only under relay_aot, with the ``reasons``
    (``{test: why}``) recorded for it."""
    files: dict[str, dict[str, Any]] = {}
    only_aot: list[dict] = []
    totals = {
        g: {
            "files": 0,
            "reached_and_tvm_passed": 0,
            "reached_and_both_passed": 0,
            "tvm_passed": 0,
            "failing_only_with_relay_aot": 0,
        }
        for g in ("relay", "operators")
    }
    for name, both in sorted(runs.items()):
        tvm_res, aot_res = both["tvm"], both["aot"]
        reached = [t for t, e in aot_res.items() if e["reached"]]
        tvm_passed = {t for t, e in tvm_res.items() if e["outcome"] == "passed"}
        failing = sorted(t for t, e in aot_res.items() if e["outcome"] == "failed" and t in tvm_passed)
        files[name] = {
            "group": group(name),
            "tvm": _counts(tvm_res),
            "relay_aot": _counts(aot_res),
            "reached_relay_aot": len(reached),
            "reached_and_tvm_passed": sum(1 for t in reached if t in tvm_passed),
            "reached_and_both_passed": sum(1 for t in reached if t in tvm_passed and aot_res[t]["outcome"] == "passed"),
        }
        total = totals[group(name)]
        total["files"] += 1
        total["tvm_passed"] += len(tvm_passed)
        total["failing_only_with_relay_aot"] += len(failing)
        for key in ("reached_and_tvm_passed", "reached_and_both_passed"):
            total[key] += files[name][key]
        for test in failing:
            entry = aot_res[test]
            only_aot.append(
                {
                    "test": test,
                    "error": entry["error"],
                    "reached": entry["reached"],
                    "reason": (reasons or {}).get(test, ""),
                }
            )
    return {"files": files, "totals": totals, "failing_only_with_relay_aot": only_aot}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tests", type=Path, help="TVM's tests/python/relay directory (of a TVM checkout of the installed version)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the JSON summary to write (raw results beside it, .raw.json); reasons "
        "recorded in an existing summary are kept",
    )
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers per run")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help="seconds per test")
    parser.add_argument("--file-timeout", type=int, default=3600, help="seconds per file and run")
    parser.add_argument("--modes", default="tvm,aot", help="which runs: tvm, aot or both")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="*",
        default=[],
        help="raw results of earlier runs (.raw.json) to summarize with these",
    )
    parser.add_argument("files", nargs="*", help="test files, relative to --tests")
    options = parser.parse_args(argv)
    if options.files and options.tests is None:
        parser.error("running test files needs --tests")
    raw_path = options.out.with_suffix(".raw.json")
    runs = json.loads(raw_path.read_text()) if raw_path.exists() else {}
    for merged in options.merge:
        runs.update(json.loads(merged.read_text()))
    for test_file in options.files:
        for mode in options.modes.split(","):
            runs.setdefault(test_file, {})[mode] = run_file(
                options.tests, test_file, mode, options.workers, options.timeout, options.file_timeout
            )
            raw_path.write_text(json.dumps(runs, indent=1, sort_keys=True))
    reasons = {}
    if options.out.exists():
        old = json.loads(options.out.read_text())
        reasons = {e["test"]: e["reason"] for e in old.get("failing_only_with_relay_aot", []) if e.get("reason")}
    complete = {f: r for f, r in runs.items() if "tvm" in r and "aot" in r}
    summary = {"tvm_version": tvm.__version__, "date": time.strftime("%Y-%m-%d"), **summarize(complete, reasons)}
    options.out.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A sample in the form of TVM's own Relay tests, for tests/test_tvm_suite.py (not collected by
this suite: it runs under relay_aot.testing.tvm_suite's plugin, in a pytest of its own)."""

import numpy as np
import tvm
from tvm import relay
from tvm.contrib import graph_executor
from tvm.relay.backend import Runtime
from tvm.relay.backend.interpreter import ConstructorValue
from tvm.relay.prelude import Prelude
from tvm.runtime.vm import VirtualMachine


def _add_mod():
    x = relay.var("x", shape=(3,), dtype="float32")
    return tvm.IRModule.from_expr(relay.Function([x], relay.add(x, relay.const(1.0))))


def test_every_kind():
    data = np.arange(3, dtype="float32")
    for kind in ("debug", "graph", "vm", "aot"):
        out = relay.create_executor(kind, mod=_add_mod(), device=tvm.cpu(), target="llvm").evaluate()(data)
        np.testing.assert_allclose(out.numpy(), data + 1)


def test_build_and_graph_module():
    # relay.build ignores params naming no parameter (a helper may have bound them already)
    lib = relay.build(_add_mod(), target="llvm", params={"bound_before": np.zeros(1, "float32")})
    module = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    module.set_input("x", np.ones(3, "float32"))
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), 2 * np.ones(3))


def test_legacy_build_tuple():
    """``graph, lib, params = relay.build(...)``: ``lib`` is the kernels' library (TVM's tests
    read its assembly), and ``graph_executor.create`` runs relay_aot."""
    graph, lib, params = relay.build(_add_mod(), target="llvm", runtime=Runtime("cpp"))  # no executor=
    assert "add" in lib.get_source("asm")
    module = graph_executor.create(graph, lib, tvm.cpu())
    module.set_input("x", np.ones(3, "float32"))
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), 2 * np.ones(3))


def test_graph_and_vm_module_apis():
    """What TVM's test_backend_graph_executor, test_set_input_zero_copy and test_vm_serialization
    use besides running: input info, the functions by name, benchmark, allocator kinds, and a
    run whose input was never set (the graph executor reads its uninitialized buffer)."""
    module = graph_executor.GraphModule(relay.build(_add_mod(), target="llvm")["default"](tvm.cpu()))
    shapes, dtypes = module.get_input_info()
    assert tuple(shapes["x"]) == (3,) and dtypes["x"] == "float32"
    module.run()
    assert module.get_output(0).shape == (3,)
    assert len(module.benchmark(tvm.cpu(), repeat=2, number=1).results) == 2
    fresh = graph_executor.GraphModule(relay.build(_add_mod(), target="llvm")["default"](tvm.cpu()))
    ones = tvm.nd.array(np.ones(3, "float32"))  # zero copy: the executor keeps only a pointer
    fresh.module["set_input_zero_copy"](0, ones)
    fresh.run()
    np.testing.assert_allclose(fresh.get_output(0).numpy(), 2 * np.ones(3))
    vm = VirtualMachine(relay.vm.compile(_add_mod(), target="llvm"), tvm.cpu(), memory_cfg="pooled")
    assert VirtualMachine.POOLED_ALLOCATOR != VirtualMachine.NAIVE_ALLOCATOR
    assert vm.benchmark(tvm.cpu(), np.zeros(3, "float32"), func_name="main", repeat=3, number=1).mean > 0
    assert vm.get_input_index("x") == 0 and vm.get_input_index("y") == -1
    vm.set_one_input("main", "x", tvm.nd.array(np.full(3, 2, "float32")))
    np.testing.assert_allclose(vm.invoke("main").numpy(), np.full(3, 3))
    out = tvm.nd.empty((3,), "float32")
    vm.invoke_with_outputs("main", input_args={"x": tvm.nd.array(np.ones(3, "float32"))}, output_args=[out])
    np.testing.assert_allclose(out.numpy(), np.full(3, 2))


def test_vm_compile():
    exe = relay.vm.compile(_add_mod(), target="llvm")
    out = VirtualMachine(exe, tvm.cpu()).run(np.zeros(3, "float32"))
    np.testing.assert_allclose(out.numpy(), np.ones(3))


def test_interpreter_constructor_values():
    mod = tvm.IRModule()
    p = Prelude(mod)
    _, cons, nil = p.mod.get_type("List")
    value = relay.create_executor("debug", mod=p.mod).evaluate(cons(relay.const(1.0), nil()))
    assert isinstance(value, ConstructorValue) and value.constructor.name_hint == "Cons"


def test_fails_only_under_relay_aot():
    import os

    assert os.environ.get("RELAY_AOT_TVM_SUITE") != "aot"

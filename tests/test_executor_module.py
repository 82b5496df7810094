"""A library's executor module: ``lib[name](dev)`` speaks TVM's graph and AOT executor interface.

Code written for ``relay.build`` (``GraphModule(lib["default"](dev))``, ``AotModule``,
``Module.time_evaluator("run", dev)``, the VM's ``invoke``) runs a relay_aot library unchanged;
results are checked against numpy, and every misuse raises relay_aot's error naming it.
"""

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.contrib import graph_executor
from tvm.runtime.executor import AotModule

import relay_aot
from relay_aot.errors import ArgumentValueError


@pytest.fixture(scope="module")
def library():
    """``(x: (2, 3), y: (3,)) -> (x + y, (x * y, sum(x)))``: a nested tuple of three tensors."""
    x, y = relay.var("x", shape=(2, 3)), relay.var("y", shape=(3,))
    body = relay.Tuple([x + y, relay.Tuple([x * y, relay.sum(x)])])
    return relay_aot.compile(tvm.IRModule.from_expr(relay.Function([x, y], body))).module


def _inputs():
    rng = np.random.default_rng(0)
    return rng.random((2, 3), dtype="float32"), rng.random(3, dtype="float32")


def _check(outputs, a, b):
    np.testing.assert_allclose(outputs[0], a + b, rtol=1e-6)
    np.testing.assert_allclose(outputs[1], a * b, rtol=1e-6)
    np.testing.assert_allclose(outputs[2], a.sum(), rtol=1e-5)


def test_graph_module(library):
    a, b = _inputs()
    module = graph_executor.GraphModule(library["default"](tvm.cpu()))
    assert (module.get_num_inputs(), module.get_num_outputs()) == (2, 3)
    assert (module.get_input_index("y"), module.get_input_index("z")) == (1, -1)
    shapes, dtypes = module.get_input_info()
    assert ({k: tuple(v) for k, v in shapes.items()}, dict(dtypes)) == (
        {"x": (2, 3), "y": (3,)},
        {"x": "float32", "y": "float32"},
    )
    module.set_input("x", a)
    module.set_input(1, b)
    module.run()
    _check([module.get_output(i).numpy() for i in range(3)], a, b)
    out = tvm.nd.empty((2, 3))
    module.get_output(0, out)
    np.testing.assert_allclose(out.numpy(), a + b, rtol=1e-6)
    # set_input copies, as the graph executor's: the caller's array can change afterwards.
    c = a.copy()
    module.set_input(x=c)
    c[:] = 0
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), a + b, rtol=1e-6)


def test_aot_module_and_saved_params(library):
    a, b = _inputs()
    module = AotModule(library["default"](tvm.cpu()))
    assert [module.get_input_name(i) for i in range(2)] == ["x", "y"]
    module.set_input(x=a, y=b)
    module.run()
    _check([module.get_output(i).numpy() for i in range(3)], a, b)
    # Saved parameters set the inputs they name (others are ignored, as by the graph executor).
    executor = library["default"](tvm.cpu())
    saved = tvm.runtime.save_param_dict({"x": tvm.nd.array(a), "y": tvm.nd.array(b), "w": tvm.nd.array(b)})
    executor["load_params"](saved)
    executor["run"]()
    _check([executor["get_output"](i).numpy() for i in range(3)], a, b)


def test_time_evaluator_and_invoke(library):
    a, b = _inputs()
    executor = library["default"](tvm.cpu())
    executor["set_input_zero_copy"]("x", tvm.nd.array(a))
    executor["set_input_zero_copy"]("y", tvm.nd.array(b))
    result = executor.time_evaluator("run", tvm.cpu(), number=3, repeat=2)()
    assert len(result.results) == 2 and result.mean > 0
    # The VM's benchmark times invoke("main"); run_from_inputs is the graph executor's end to end.
    executor.time_evaluator("invoke", tvm.cpu(), number=2, repeat=1)("main")
    _check([v.numpy() for v in executor["run_from_inputs"](1, 0, "x", tvm.nd.array(a), "y", tvm.nd.array(b))], a, b)
    value = executor["invoke"]("main")
    np.testing.assert_allclose(value[0].numpy(), a + b, rtol=1e-6)
    # The program's own entry is unchanged: called with its arguments, it runs.
    np.testing.assert_allclose(library["default"](tvm.nd.array(a), tvm.nd.array(b))[0].numpy(), a + b, rtol=1e-6)


def test_dynamic_and_structured_values():
    """A ``?`` input has no buffer of its own (set it through the module); a list result is one output."""
    prelude_mod = tvm.IRModule()
    p = relay.prelude.Prelude(prelude_mod)
    x = relay.var("x", shape=(relay.Any(),))
    _, cons, nil = p.mod.get_type("List")
    prelude_mod["main"] = relay.Function([x], relay.Tuple([x * x, cons(x, nil())]))
    library = relay_aot.compile(prelude_mod).module
    executor = library["default"](tvm.cpu())
    assert executor["get_input"]("x") is None
    data = np.arange(4, dtype="float32")
    executor["set_input"]("x", tvm.nd.array(data))
    executor["run"]()
    assert executor["get_num_outputs"]() == 2
    np.testing.assert_allclose(executor["get_output"](0).numpy(), data * data)
    cell = executor["get_output"](1)
    np.testing.assert_allclose(cell[0].numpy(), data)


@pytest.mark.parametrize(
    "misuse, error, message",
    [
        (
            lambda lib, e: e["set_input"]("z", tvm.nd.array(np.zeros(3, "float32"))),
            ArgumentValueError,
            "no input named 'z' (its inputs: %x, %y)",
        ),
        (lambda lib, e: e["get_output"](0), ArgumentValueError, "has not run yet"),
        (lambda lib, e: e["run"](), ArgumentValueError, "argument 0 (%x) was never set"),
        (lambda lib, e: e["get_input_name"](2), ArgumentValueError, "there is no input 2 (the program has 2)"),
        (lambda lib, e: e["invoke"]("f"), ArgumentValueError, 'invoke("main")'),
        (lambda lib, e: lib["default"](tvm.cuda(1)), ArgumentValueError, "runs on the CPU, not on cuda(1)"),
        (lambda lib, e: e["share_params"](e, b""), ArgumentValueError, "share_params"),
    ],
)
def test_misuse_is_named(library, misuse, error, message):
    with pytest.raises(error) as caught:
        misuse(library, library["default"](tvm.cpu()))
    assert message in str(caught.value)


def test_wrong_input_is_refused_at_run(library):
    executor = library["default"](tvm.cpu())
    executor["set_input"]("x", tvm.nd.array(np.zeros((3, 3), "float32")))
    executor["set_input"]("y", tvm.nd.array(np.zeros(3, "float32")))
    with pytest.raises(ArgumentValueError, match=r"argument 0 \(%x\): expected Tensor\[\(2, 3\), float32\]"):
        executor["run"]()


@pytest.mark.parametrize("out", [None, 5, "x"])
def test_get_output_into_a_non_tensor_is_a_type_error(library, out):
    """``get_output(0, None)`` copied into a null DLTensor and killed the process."""
    a, b = _inputs()
    executor = library["default"](tvm.cpu())
    executor["set_input"]("x", tvm.nd.array(a))
    executor["set_input"]("y", tvm.nd.array(b))
    executor["run"]()
    with pytest.raises(TypeError):
        executor["get_output"](0, out)


def test_one_module_shared_between_threads():
    """A run racing get_output on one executor module: every output read is a whole, finished
    run's (the module serialises its callers), never "there is no output 63" (run clears the
    outputs, then fills them again: 64 of them widen that window)."""
    import threading
    import time

    x = relay.var("x", shape=(4,))
    outputs = [x + relay.const(float(i)) for i in range(64)]
    library = relay_aot.compile(tvm.IRModule.from_expr(relay.Function([x], relay.Tuple(outputs)))).module
    data = np.arange(4, dtype="float32")
    executor = library["default"](tvm.cpu())
    executor["set_input"]("x", tvm.nd.array(data))
    executor["run"]()
    errors, stop = [], threading.Event()

    def runner():
        while not stop.is_set():
            executor["run"]()

    def reader():
        deadline = time.monotonic() + 3
        try:
            while time.monotonic() < deadline:
                np.testing.assert_allclose(executor["get_output"](63).numpy(), data + 63)
        except Exception as error:  # noqa: BLE001 - collected for the assertion below
            errors.append(error)
        finally:
            stop.set()

    threads = [threading.Thread(target=runner), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

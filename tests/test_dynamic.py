"""Dynamic shapes: ``?`` dimensions, data-dependent operators, tensor arrays, ONNX loops.

Each program is compiled once per backend and run on several argument shapes (a zero-length
dimension among them), against TVM's Relay VM -- the reference for dynamic shapes -- and, for the
ONNX models, onnxruntime as well. (Programs written as Relay text are in
``tests/programs/dyn_*.relay``.)
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.relay.prelude import Prelude

import relay_aot
from relay_aot import testing
from relay_aot.compiler import generate_source
from relay_aot.errors import ArgumentValueError

BACKENDS = ["cpp", "python"]
A = relay.Any()


def _module(func: relay.Function, prelude: bool = False) -> tvm.IRModule:
    mod = tvm.IRModule()
    if prelude:
        Prelude(mod)
    mod["main"] = func
    return relay.transform.InferType()(mod)


def _agree(mod: tvm.IRModule, cases, backend: str, references=("vm",), **options):
    """One compile; each case checked against the references."""
    compiled = relay_aot.compile(mod, backend=backend)
    for args in cases:
        testing.check_equivalence(mod, args, backends=[(backend, compiled)], references=references, **options)
    return compiled


# -- data-dependent output shapes ----------------------------------------------------------------


def _data_dependent() -> tvm.IRModule:
    n = relay.var("n", shape=(), dtype="int32")
    x = relay.var("x", shape=(2, 3), dtype="float32")
    s = relay.var("s", shape=(2,), dtype="int64")
    v = relay.var("v", shape=(A,), dtype="float32")
    k = relay.var("k", shape=(), dtype="int32")
    begin = relay.var("begin", shape=(1,), dtype="int64")
    end = relay.var("end", shape=(1,), dtype="int64")
    body = relay.Tuple(
        [
            relay.arange(relay.const(0, "int32"), n, relay.const(1, "int32"), dtype="int32"),
            relay.argwhere(x),
            relay.reshape(x, s),
            relay.topk(v, k, ret_type="values"),
            relay.strided_slice(v, begin, end, relay.const(np.array([1], "int64"))),
            relay.shape_of(v),
            relay.ndarray_size(v, dtype="int32"),
        ]
    )
    return _module(relay.Function([n, x, s, v, k, begin, end], body))


DATA_DEPENDENT_CASES = [
    (
        np.int32(5),
        np.array([[1, 0, 2], [0, 3, 0]], "float32"),
        np.array([3, 2], "int64"),
        np.array([4, 1, 3, 2, 5], "float32"),
        np.int32(3),
        np.array([1], "int64"),
        np.array([4], "int64"),
    ),
    (
        np.int32(0),
        np.zeros((2, 3), "float32"),
        np.array([1, 6], "int64"),
        np.array([2, 1], "float32"),
        np.int32(1),
        np.array([0], "int64"),
        np.array([0], "int64"),
    ),
    (
        np.int32(2),
        np.ones((2, 3), "float32"),
        np.array([6, 1], "int64"),
        np.zeros(0, "float32"),
        np.int32(0),
        np.array([0], "int64"),
        np.array([0], "int64"),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_dependent_shapes(backend):
    """arange, argwhere, dyn.reshape, topk with a run-time k, dynamic strided_slice, shape_of,
    ndarray_size: one compile, three argument sets."""
    _agree(_data_dependent(), DATA_DEPENDENT_CASES, backend)


# -- tensor arrays ----------------------------------------------------------------------------


def _tensor_array_loop() -> tvm.IRModule:
    """Write x[i] * i into a tensor array for i < n, then stack it: Tensor[(?, ?), float32]."""
    mod = tvm.IRModule()
    p = Prelude(mod)
    array = p.get_global_var("tensor_array", "float32")
    write = p.get_global_var("tensor_array_write", "float32")
    stack = p.get_global_var("tensor_array_stack", "float32")
    tensor1 = p.get_tensor_ctor("tensor1", "float32")
    loop = relay.GlobalVar("loop")
    x = relay.var("x", shape=(A, A), dtype="float32")
    i = relay.var("i", shape=(), dtype="int32")
    ta = relay.var("ta")
    rows = relay.take(relay.shape_of(x, "int32"), relay.const(0))
    row = relay.take(x, i, axis=0) * relay.cast(i, "float32")
    body = relay.If(relay.less(i, rows), loop(x, relay.add(i, relay.const(1)), write(ta, i, tensor1(row))), ta)
    mod[loop] = relay.Function([x, i, ta], body)
    x = relay.var("x", shape=(A, A), dtype="float32")
    rows = relay.take(relay.shape_of(x, "int32"), relay.const(0))
    mod["main"] = relay.Function([x], stack(loop(x, relay.const(0), array(rows))))
    return relay.transform.InferType()(mod)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_array_written_in_a_loop_then_stacked(backend):
    cases = [
        (np.arange(12, dtype="float32").reshape(4, 3),),
        (np.ones((1, 5), "float32"),),
        (np.arange(14, dtype="float32").reshape(7, 2),),
    ]
    _agree(_tensor_array_loop(), cases, backend)


# -- run-time shape errors --------------------------------------------------------------------


def _two_inputs(op, shape=(A, 4)) -> tvm.IRModule:
    x = relay.var("x", shape=shape, dtype="float32")
    y = relay.var("y", shape=shape, dtype="float32")
    return _module(relay.Function([x, y], op(x, y)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_incompatible_shapes_raise_naming_the_operator_and_shapes(backend):
    compiled = relay_aot.compile(_two_inputs(relay.add), backend=backend)
    with pytest.raises(relay_aot.KernelError, match=r"fused_add.*\(3, 4\), \(5, 4\).*[Ii]ncompatible"):
        compiled(np.ones((3, 4), "float32"), np.ones((5, 4), "float32"))
    # the process goes on, and a good call works
    np.testing.assert_array_equal(
        compiled(np.ones((2, 4), "float32"), np.ones((1, 4), "float32")).numpy(), np.full((2, 4), 2, "float32")
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_entry_checks_rank_dtype_and_static_dimensions(backend):
    compiled = relay_aot.compile(_two_inputs(relay.subtract), backend=backend)
    good = np.ones((3, 4), "float32")
    for bad, error in [
        (np.ones((3, 5), "float32"), ValueError),
        (np.ones((3, 4, 1), "float32"), ValueError),
        (np.full((3, 4), 2**24 + 1, "int32"), TypeError),
    ]:
        with pytest.raises(error, match=r"Tensor\[\(\?, 4\), float32\]|float32 does not hold exactly"):
            compiled(good, bad)
    # an int32 tensor whose values float32 holds exactly is converted (docs/guarantees.md)
    np.testing.assert_array_equal(compiled(good, np.ones((3, 4), "int32")).numpy(), np.zeros((3, 4), "float32"))
    assert compiled(np.ones((0, 4), "float32"), np.ones((0, 4), "float32")).numpy().shape == (0, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_to_a_wrong_element_count_raises(backend):
    x = relay.var("x", shape=(A,), dtype="float32")
    s = relay.var("s", shape=(2,), dtype="int64")
    compiled = relay_aot.compile(_module(relay.Function([x, s], relay.reshape(x, s))), backend=backend)
    np.testing.assert_array_equal(
        compiled(np.arange(6, dtype="float32"), np.array([2, 3], "int64")).numpy(),
        np.arange(6, dtype="float32").reshape(2, 3),
    )
    with pytest.raises((relay_aot.KernelError, ValueError), match="reshape"):
        compiled(np.arange(6, dtype="float32"), np.array([4, 2], "int64"))


def test_1x1_convolution_over_unknown_height_and_width():
    """TVM's x86 layout choice raises a TypeError on a 1x1 convolution whose height and width
    are ``?`` (TVM's test_any::test_any_conv2d); relay_aot keeps the NCHW layout; against the VM."""
    data = relay.var("data", shape=(A, 8, A, A))
    kernel = relay.var("kernel", shape=(8, 8, 1, 1))
    mod = _module(relay.Function([data, kernel], relay.nn.conv2d(data, kernel, padding=(1, 1), kernel_size=(1, 1))))
    rng = np.random.default_rng(0)
    testing.check_equivalence(
        mod,
        [rng.random((1, 8, 5, 7), dtype="float32"), rng.random((8, 8, 1, 1), dtype="float32")],
        references=("vm",),
        atol=1e-5,
    )


def test_reshape_of_a_scalar_inside_a_loop_with_a_growing_result():
    """TVM's test_to_mixed_precision::test_loop: ``reshape`` of a 0-d counter to (1, 1) fused
    where shapes are ``?`` needs a shape function over a 0-d input (TVM's hybrid parser refused
    relay_aot's general one); against the VM."""
    i = relay.var("i", shape=(), dtype="int32")
    st = relay.var("st", shape=(A, 1), dtype="int32")
    loop = relay.loops.while_loop(
        lambda i, st: relay.op.min(relay.op.less(i, relay.const(10))),
        [i, st],
        lambda i, st: (i + relay.const(1), relay.op.concatenate([st, relay.op.reshape(i, (1, 1))], axis=0)),
    )
    start = relay.var("start", shape=(), dtype="int32")
    mod = tvm.IRModule()
    mod["main"] = relay.Function([start], relay.TupleGetItem(loop(start, relay.reshape(relay.const(0), (1, 1))), 1))
    for first in (7, 10):
        expected = np.array([0, *range(first, 10)], "int32").reshape(-1, 1)
        testing.check_equivalence(mod, [np.array(first, "int32")], references=("vm",), expected=expected)


@pytest.mark.parametrize("mode", ["clip", "fast"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_take_out_of_range_at_dynamic_shapes(backend, mode):
    """take with mode clip clamps, as TVM defines it; mode fast (no bounds check in TVM's
    kernel, which would read out of bounds) clamps too."""
    x = relay.var("x", shape=(A,), dtype="float32")
    i = relay.var("i", shape=(A,), dtype="int32")
    mod = _module(relay.Function([x, i], relay.take(x, i, mode=mode)))
    compiled = relay_aot.compile(mod, backend=backend)
    data, inside = np.arange(5, dtype="float32"), np.array([0, 4, 2], "int32")
    np.testing.assert_array_equal(compiled(data, inside).numpy(), data[inside])
    outside = np.array([1, 7, -9], "int32")
    np.testing.assert_array_equal(compiled(data, outside).numpy(), data[np.clip(outside, 0, 4)])


# -- kernels that only move data ----------------------------------------------------------------


def _broadcast(escaping: bool) -> tvm.IRModule:
    x = relay.var("x", shape=(A, 3), dtype="float32")
    s = relay.var("s", shape=(2,), dtype="int64")
    b = relay.broadcast_to(x, s)  # a shape given as a tensor: dyn.broadcast_to
    grown = relay.concatenate([b, relay.ones((1, 3), "float32")], axis=0)
    body = relay.Tuple([b, grown]) if escaping else grown
    return _module(relay.Function([x, s], body))


BROADCAST_CASES = [
    (np.arange(6, dtype="float32").reshape(2, 3), np.array([2, 3], "int64")),  # its own shape
    (np.arange(3, dtype="float32").reshape(1, 3), np.array([4, 3], "int64")),  # broadcasts
    (np.zeros((0, 3), "float32"), np.array([0, 3], "int64")),
]


@pytest.mark.parametrize("escaping", [False, True], ids=["internal", "returned"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_to_its_own_shape(backend, escaping):
    """A broadcast to the input's own shape (an ONNX scan output at every step) is the input
    itself in C++ when no caller sees the result, and a copy when one does: writing into the
    returned tensor leaves the argument alone."""
    mod = _broadcast(escaping)
    compiled = _agree(mod, BROADCAST_CASES, backend)
    if backend == "cpp":
        assert ("nothing to broadcast" in generate_source(mod)) == (not escaping)
    if escaping:
        x = tvm.nd.array(np.arange(6, dtype="float32").reshape(2, 3))
        returned, _ = compiled(x, np.array([2, 3], "int64"))
        returned.copyfrom(np.full((2, 3), 7, "float32"))
        np.testing.assert_array_equal(x.numpy(), np.arange(6, dtype="float32").reshape(2, 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_concatenate_of_growing_rows(backend):
    """concatenate along an axis after 1-extent dimensions is a memcpy of its pieces in C++;
    along other axes, or with 0-row pieces, the results are the kernel's."""
    x = relay.var("x", shape=(1, A, 2), dtype="float32")
    y = relay.var("y", shape=(1, A, 2), dtype="float32")
    body = relay.Tuple(
        [relay.concatenate([x, relay.expand_dims(relay.squeeze(y, [0]), 0)], axis=1), relay.concatenate([x, y], axis=2)]
    )
    mod = _module(relay.Function([x, y], body))
    rng = np.random.default_rng(0)
    _agree(mod, [(rng.random((1, n, 2), "float32"), rng.random((1, n, 2), "float32")) for n in (3, 0, 1)], backend)
    if backend == "cpp":
        assert "concat_flat(" in generate_source(mod)


def test_kernels_over_unknown_extents_choose_serial_or_parallel_at_run_time():
    """A kernel over ``?`` dimensions runs serially when its work is small and in TVM's thread
    pool otherwise, deciding at run time; both bodies compute the same."""
    from tvm import te

    from relay_aot.kernels import serialize_if_small

    n = te.var("n")
    a = te.placeholder((n, 8), name="a")
    b = te.compute((n, 8), lambda i, j: a[i, j] * 2.0, name="b")
    schedule = te.create_schedule(b.op)
    schedule[b].parallel(b.op.axis[0])
    func = tvm.lower(schedule, [a, b], name="double")["double"]
    chosen = serialize_if_small(func, threshold=64)
    assert isinstance(chosen.body, tvm.tir.IfThenElse)
    kinds = []
    tvm.tir.stmt_functor.post_order_visit(
        chosen.body, lambda s: kinds.append(s.kind) if isinstance(s, tvm.tir.For) else None
    )
    assert tvm.tir.ForKind.PARALLEL in kinds and tvm.tir.ForKind.SERIAL in kinds
    built = tvm.build(chosen, target="llvm")
    for rows in (0, 3, 100):  # serial, serial, parallel
        x = np.random.default_rng(rows).random((rows, 8), dtype="float32")
        out = tvm.nd.empty((rows, 8), "float32")
        built(tvm.nd.array(x), out)
        np.testing.assert_array_equal(out.numpy(), x * 2)


# -- ONNX control flow ------------------------------------------------------------------------

onnx_models = pytest.importorskip("relay_aot.testing.onnx_models")
pytest.importorskip("onnx")


def _onnx_agree(model, make_inputs, cases, backend, compare_onnxruntime=lambda case: True):
    """Import with TVM's frontend, compile once, check each case against the VM and (where TVM's
    importer and ONNX agree on the result's shape) onnxruntime."""
    mod, params = relay.frontend.from_onnx(model, freeze_params=True)
    compiled = relay_aot.compile(mod, params=params, backend=backend)
    session = None
    try:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except ImportError:
        pass
    names = [i.name for i in model.graph.input]
    for case in cases:
        inputs = make_inputs(*case)
        args = [inputs[n] for n in names]
        testing.check_equivalence(mod, args, backends=[(backend, compiled)], references=("vm",), atol=1e-5)
        if session is not None and compare_onnxruntime(case):
            got = compiled(*args)
            got = list(got) if isinstance(got, (list, tuple, tvm.runtime.container.ADT)) else [got]
            for ours, theirs in zip(got, session.run(None, inputs)):
                np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_onnx_loop_with_scan_outputs(backend):
    """Zero steps: TVM's importer gives the scan output the shape (0, 1, 1) where ONNX says
    (0, 1, H); the VM agrees with us, onnxruntime is compared from one step on."""
    model, inputs = onnx_models.loop_rnn(hidden=4)
    _onnx_agree(model, inputs, [(5,), (0,), (1,), (12, -0.7)], backend, lambda case: case[0] > 0)


def test_a_scan_output_grows_in_place():
    """The scan output of an ONNX Loop grows by a row per step: the C++ code appends the row in
    the tensor's own block (runtime append_in_place) instead of copying the whole tensor at every
    step. Called again and again, the blocks it grew come back from the thread's cache with room
    to spare; the results stay the VM's. (tests/programs/dyn_append_in_place.relay has the cases
    where the tensor must be copied.)"""
    model, inputs = onnx_models.loop_rnn(hidden=8)
    mod, params = relay.frontend.from_onnx(model, freeze_params=True)
    assert "append_in_place(" in generate_source(mod, params=params)
    compiled = relay_aot.compile(mod, params=params)
    names = [i.name for i in model.graph.input]
    for steps in (40, 3, 90, 40, 1, 90):
        args = [inputs(steps)[n] for n in names]
        testing.check_equivalence(mod, args, backends=[("cpp", compiled)], references=("vm",), atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_onnx_scan(backend):
    model, inputs = onnx_models.scan_cumulative(rows=5, width=3)
    _onnx_agree(model, inputs, [(1.0,), (-0.5,)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_onnx_if(backend):
    model, inputs = onnx_models.if_branches(width=4)
    _onnx_agree(model, inputs, [(1.0,), (-1.0,)], backend)


# -- named symbolic dimensions (tir.Var, SizeVar) ------------------------------------------------


def _named(n) -> tvm.IRModule:
    """dense, add and concatenate over two parameters typed ``(n, 16)``."""
    x = relay.var("x", shape=(n, 16), dtype="float32")
    y = relay.var("y", shape=(n, 16), dtype="float32")
    w = relay.var("w", shape=(8, 16), dtype="float32")
    body = relay.Tuple([relay.nn.dense(relay.add(x, y), w), relay.concatenate([x, y], 0)])
    return _module(relay.Function([x, y, w], body))


def _named_cases(rng):
    w = rng.standard_normal((8, 16)).astype("float32")
    return [[rng.standard_normal((rows, 16)).astype("float32") for _ in range(2)] + [w] for rows in (3, 1, 0)]


def _named_expected(x, y, w):
    return ((x + y) @ w.T, np.concatenate([x, y]))


_DIMENSIONS = {
    "var": lambda: tvm.tir.Var("n", "int32"),
    "size_var": lambda: tvm.tir.SizeVar("n", "int32"),
    "var_int64": lambda: tvm.tir.Var("n", "int64"),
    "size_var_int64": lambda: tvm.tir.SizeVar("n", "int64"),
}


@pytest.mark.parametrize("dimension", list(_DIMENSIONS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_named_dimensions_are_run_time_extents(backend, dimension):
    """A ``tir.Var``/``SizeVar`` in a parameter's type is an extent known at run time, like ``?``;
    results typed with it come back with the actual extent. TVM's VM runs int32 variables (it
    fails to build the kernels of int64 ones): numpy is the reference for all."""
    mod = _named(_DIMENSIONS[dimension]())
    references = ("vm",) if "int64" not in dimension else ()
    compiled = relay_aot.compile(mod, backend=backend)
    for args in _named_cases(np.random.default_rng(0)):
        testing.check_equivalence(
            mod,
            args,
            backends=[(backend, compiled)],
            references=references,
            expected=_named_expected(*args),
            rtol=1e-4,
            atol=1e-4,
        )
        assert compiled(*args)[1].shape == (2 * args[0].shape[0], 16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameters_sharing_a_named_dimension_must_agree(backend, tmp_path):
    """Two parameters typed ``(n, 16)`` must have the same first extent: the entry refuses others
    with ArgumentValueError naming both axes and extents (the VM would add by broadcasting, or
    concatenate, what the types say cannot be passed). The library checks it itself, so a raw
    PackedFunc call (and a library loaded in another process) is checked too."""
    compiled = relay_aot.compile(_named(tvm.tir.Var("n", "int64")), backend=backend)
    x, y, w = np.ones((3, 16), "float32"), np.ones((1, 16), "float32"), np.ones((8, 16), "float32")
    message = (
        r"argument 0 \(%x\) axis 0 and argument 1 \(%y\) axis 0 are both the dimension n of the "
        r"program's types, but have the extents 3 and 1"
    )
    for args in [(x, y, w), (tvm.nd.array(x), tvm.nd.array(y), tvm.nd.array(w))]:
        with pytest.raises(ArgumentValueError, match=message):
            compiled(*args)
    if backend == "cpp":
        with pytest.raises(tvm.error.TVMError, match=message):
            compiled.module[compiled.name](tvm.nd.array(x), tvm.nd.array(y), tvm.nd.array(w))
        loaded = relay_aot.load(compiled.export_library(tmp_path / "named.so"))
        assert loaded.signature.shared_extents == compiled.signature.shared_extents
        with pytest.raises(ArgumentValueError, match=message):
            loaded(x, y, w)
        # no C API: a named dimension has no size for the header, as a ? has none
        with pytest.raises(relay_aot.UnsupportedError, match=r"parameter %x has the dynamic type Tensor\[\(\?, 16\)"):
            compiled.c_header()
    np.testing.assert_allclose(compiled(x, x, w)[0].numpy(), np.full((3, 8), 32, "float32"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_named_dimension_on_two_axes_and_inside_a_tuple(backend):
    """``n`` twice in one parameter (a square matrix) and in a tuple parameter's field: each
    axis is named by its path in the message."""
    n = tvm.tir.SizeVar("n", "int32")
    m = relay.var("m", shape=(n, n), dtype="float32")
    p = relay.var("p", relay.TupleType([relay.TensorType((4,), "float32"), relay.TensorType((n,), "float32")]))
    body = relay.add(relay.sum(m, axis=[1]), relay.TupleGetItem(p, 1))
    mod = _module(relay.Function([m, p], body))
    compiled = relay_aot.compile(mod, backend=backend)
    square, row = np.arange(9, dtype="float32").reshape(3, 3), np.ones(3, "float32")
    np.testing.assert_allclose(compiled(square, (np.ones(4, "float32"), row)).numpy(), square.sum(1) + 1)
    with pytest.raises(
        ArgumentValueError, match=r"argument 0 \(%m\) axis 0 and argument 0 \(%m\) axis 1 .* extents 3 and 2"
    ):
        compiled(np.ones((3, 2), "float32"), (np.ones(4, "float32"), row))
    with pytest.raises(
        ArgumentValueError, match=r"argument 0 \(%m\) axis 0 and argument 1 \(%p\)\[1\] axis 0 .* extents 3 and 5"
    ):
        compiled(square, (np.ones(4, "float32"), np.ones(5, "float32")))


@pytest.mark.parametrize("backend", BACKENDS)
def test_types_mentioning_expressions_of_named_dimensions(backend):
    """A global typed ``(n, 4) -> (n + n, 4)`` and a ``@main`` whose result type mentions ``n``
    and another variable: expressions of variables are run-time extents too (TVM's VM fails to
    build this program; numpy is the reference)."""
    n, k = tvm.tir.SizeVar("n", "int32"), tvm.tir.Var("k", "int64")
    mod = tvm.IRModule()
    twice = relay.GlobalVar("twice")
    a = relay.var("a", shape=(n, 4), dtype="float32")
    mod[twice] = relay.Function([a], relay.concatenate([a, a], 0), ret_type=relay.TensorType((n + n, 4), "float32"))
    p, q = relay.var("p", shape=(n, 4), dtype="float32"), relay.var("q", shape=(4, k), dtype="float32")
    ret = relay.TupleType([relay.TensorType((n + n, k), "float32"), relay.TensorType((n, 4), "float32")])
    mod["main"] = relay.Function([p, q], relay.Tuple([relay.nn.matmul(twice(p), q), p]), ret_type=ret)
    mod = relay.transform.InferType()(mod)
    compiled = relay_aot.compile(mod, backend=backend)
    rng = np.random.default_rng(1)
    for rows, cols in [(3, 5), (0, 2)]:
        x, y = rng.standard_normal((rows, 4)).astype("float32"), rng.standard_normal((4, cols)).astype("float32")
        product, same = compiled(x, y)
        np.testing.assert_allclose(product.numpy(), np.concatenate([x, x]) @ y, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(same.numpy(), x)


@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_layout_transform_of_unknown_extents(backend, opt_level):
    """``layout_transform`` from NCHW16c to NCHW2c of a ``?`` channel dimension has the type
    ``?*8``; unfused (opt_level 0) it is the input of the next kernel."""
    x = relay.var("x", shape=(A, A, 2, 2, 16), dtype="float32")
    body = relay.add(relay.layout_transform(x, "NCHW16c", "NCHW2c"), relay.const(1.0))
    mod = _module(relay.Function([x], body))
    compiled = relay_aot.compile(mod, backend=backend, opt_level=opt_level)
    for shape in [(1, 2, 2, 2, 16), (2, 1, 2, 2, 16)]:
        data = np.random.default_rng(2).standard_normal(shape).astype("float32")
        testing.check_equivalence(mod, [data], backends=[(backend, compiled)], references=("vm",))


@pytest.mark.parametrize("dtype", ["float64", "int32", "float32"])
@pytest.mark.parametrize("dynamic", ["data", "both"])
def test_one_row_dense_over_a_run_time_extent_in_every_dtype(dtype, dynamic):
    """TVM's x86 matrix-vector kernel for a ``?`` extent (``dense_dynamic``) starts its sums at
    a float32 0.0 and fails to build for other dtypes; such products are matmuls (the dynamic
    campaign, fresh seed 57012: a float64 dense of a recursion's (1, ?) result)."""
    x = relay.var("x", shape=(1, relay.Any()), dtype=dtype)
    w = relay.var("w", shape=(3, relay.Any() if dynamic == "both" else 5), dtype=dtype)
    mod = _module(relay.Function([x, w], relay.nn.dense(x, w)))
    rng = np.random.default_rng(5)
    compiled = relay_aot.compile(mod)
    for width in (5,) if dynamic == "data" else (5, 1, 0):
        xv = rng.integers(-9, 10, (1, width)).astype(dtype)
        wv = rng.integers(-9, 10, (3, width)).astype(dtype)
        np.testing.assert_array_equal(compiled(xv, wv).numpy(), xv @ wv.T)

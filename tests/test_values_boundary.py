"""Values crossing the boundary: long lists, shared parts, returned constants, callbacks that
fail, the interpreter's values, argument kinds, and exported files (issue: reliability, 2nd wave).

Each test runs on both backends, through ``CompiledModule`` and (for the C++ backend) through the
raw PackedFunc. Tests whose failure is a crash run in a fresh process (``run_isolated``).
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import tvm
from isolated import run_isolated
from tvm import relay
from tvm.relay.backend.interpreter import RefValue

import relay_aot
from relay_aot import testing

LONG_LISTS = """
#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @build(%i: int64, %acc: List[int64]) -> List[int64] {
  if (equal(%i, 0i64)) { %acc } else { @build(subtract(%i, 1i64), Cons(%i, %acc)) }
}
def @sum(%l: List[int64], %s: int64) -> int64 {
  match (%l) { Cons(%h, %t) => @sum(%t, add(%s, %h)), Nil => %s }
}
def @main(%n: int64, %l: List[int64]) -> (List[int64], int64) { (@build(%n, Nil), @sum(%l, 0i64)) }
"""


# the Python backend's conversions of long lists: test_python_backend's (-m slow: CI time)
@pytest.mark.parametrize("backend", ["cpp", pytest.param("python", marks=pytest.mark.slow)])
def test_long_lists_made_in_python_are_freed_without_recursion(backend):
    """Returned by the program, passed back in, passed in as the interpreter's values: each list
    of 100,000 cells is dropped without overflowing a 2 MiB C stack (TVM's recursive deleters
    overflow an 8 MiB stack at about 200,000 cells, so a 2 MiB one at about 50,000)."""
    result = run_isolated(
        f"""
        import json, threading, numpy as np, tvm, relay_aot
        from tvm.relay.backend.interpreter import ConstructorValue
        mod = tvm.relay.parse({LONG_LISTS!r})
        compiled = relay_aot.compile(mod, backend={backend!r})
        _, cons, nil = mod.get_type("List")
        n = 100_000
        empty = tvm.runtime.container.ADT(nil.tag, [])
        made, _ = compiled(np.int64(n), empty)
        _, total = compiled(np.int64(0), made)  # the program's own list, passed back in
        out = {{"returned": int(total.numpy())}}
        del made
        values = ConstructorValue(nil.tag, [], nil)
        for i in range(n, 0, -1):
            values = ConstructorValue(cons.tag, [tvm.nd.array(np.int64(i)), values], cons)
        _, total = compiled(np.int64(0), values)  # converted in Python into runtime ADTs
        out["interpreter values"] = int(total.numpy())
        # The interpreter's own list is TVM's to free (recursively): drop it on a big stack.
        holder = [values]
        del values
        threading.stack_size(1 << 30)
        dropper = threading.Thread(target=holder.clear)
        dropper.start()
        dropper.join()
        print(json.dumps(out))
        """,
        timeout=600,
        stack_bytes=2 << 20,
    )
    expected = 100_000 * 100_001 // 2
    assert result == {"returned": expected, "interpreter values": expected}


SHARED = """
#[version = "0.0.5"]
type Tree { Leaf(int32), Node(Tree, Tree) }
def @build(%d: int32) -> Tree {
  if (equal(%d, 0)) { Leaf(%d) } else { let %t = @build(subtract(%d, 1)); Node(%t, %t) }
}
def @depth(%t: Tree) -> int32 { match (%t) { Leaf(_) => 0, Node(%l, _) => add(@depth(%l), 1) } }
def @main(%d: int32, %t: Tree) -> (Tree, int32) { (@build(%d), @depth(%t)) }
"""


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_a_value_with_shared_parts_is_checked_once_per_object(backend):
    """A tree of depth 60 whose two children are one object has 60 objects and 2**60 paths."""
    result = run_isolated(
        f"""
        import json, time, numpy as np, tvm, relay_aot
        mod = tvm.relay.parse({SHARED!r})
        compiled = relay_aot.compile(mod, backend={backend!r})
        leaf = tvm.runtime.container.ADT(mod.get_type("Tree")[1].tag, [tvm.nd.array(np.int32(0))])
        tree, _ = compiled(np.int32(60), leaf)
        times = {{}}
        for how, call in (("CompiledModule", compiled), ("PackedFunc", compiled.entry)):
            start = time.perf_counter()
            depth = call(np.int32(0) if how == "CompiledModule" else tvm.nd.array(np.int32(0)), tree)[1]
            times[how] = (int(depth.numpy()), time.perf_counter() - start)
        print(json.dumps(times))
        """,
        timeout=120,
    )
    for how, (depth, seconds) in result.items():
        assert depth == 60, how
        assert seconds < 1.0, f"{how}: {seconds:.2f} s for 60 objects"


RETURNS_CONSTANTS = """
#[version = "0.0.5"]
def @same(%c: Tensor[(3), float32]) -> Tensor[(3), float32] { %c }
def @main(%x: Tensor[(3), float32]) {
  let %k = meta[relay.Constant][0];
  let %r = ref(meta[relay.Constant][0]);
  (%k, @same(%k), add(%x, %k), fn () { %k }, %r, %x)
}
"""


def _constants_module(values=(1, 2, 3)) -> tvm.IRModule:
    const = relay.const(np.array(values, "float32"))
    return tvm.relay.parse(RETURNS_CONSTANTS, init_meta_table={"relay.Constant": [const]})


@pytest.mark.parametrize("backend", ["cpp", "python"])
@pytest.mark.parametrize("how", ["CompiledModule", "PackedFunc"])
@pytest.mark.parametrize("values", [(1, 2, 3), (0, 0, 0)], ids=["constant", "zero-constant"])
def test_writing_into_a_result_never_changes_a_later_call(backend, how, values):
    """A zero constant's fresh copies are zero-filled tensors (``zero_tensor``), not copies."""
    compiled = relay_aot.compile(_constants_module(values), backend=backend)
    call = compiled if how == "CompiledModule" else compiled.entry
    x = tvm.nd.array(np.zeros(3, "float32"))
    first = call(x)
    for tensor in (first[0], first[1], first[2], first[3](), first[4][0]):
        tensor.copyfrom(np.full(3, 99, "float32"))
    second = call(x)
    for tensor in (second[0], second[1], second[2], second[3](), second[4][0]):
        np.testing.assert_array_equal(tensor.numpy(), values)


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_a_passed_through_argument_is_the_same_tensor(backend):
    """Like a Python function returning its argument (docs/guarantees.md)."""
    compiled = relay_aot.compile(_constants_module(), backend=backend)
    x = tvm.nd.array(np.zeros(3, "float32"))
    assert compiled(x)[5].same_as(x)


CALLBACK = """
#[version = "0.0.5"]
def @main(%f: fn (Tensor[(2), float32]) -> Tensor[(2), float32], %x: Tensor[(2), float32]) {
  let %g = fn (%y: Tensor[(2), float32]) -> Tensor[(2), float32] { %f(add(%y, %y)) };
  (%f(%x), %g)
}
"""


class Boom(ValueError):
    pass


def _raises(value):
    raise Boom("boom from the callback")


def _returns_a_string(value):
    return "not a tensor"


@pytest.mark.parametrize("backend", ["cpp", "python"])
@pytest.mark.parametrize("how", ["CompiledModule", "PackedFunc"])
def test_errors_in_python_callbacks_keep_their_type_and_message(backend, how):
    compiled = relay_aot.compile(tvm.relay.parse(CALLBACK), backend=backend)
    call = compiled if how == "CompiledModule" else compiled.entry
    wrap = (lambda f: f) if how == "CompiledModule" else tvm.runtime.convert
    x = tvm.nd.array(np.ones(2, "float32"))
    with pytest.raises(Boom, match="boom from the callback"):
        call(wrap(_raises), x)
    with pytest.raises(TypeError, match="str|type code"):
        call(wrap(_returns_a_string), x)

    # through a closure the program returned, called later from Python
    def raises_on_twos(value):
        if value.numpy()[0] > 1:
            raise Boom("boom from the callback")
        return value

    _, closure = call(wrap(raises_on_twos), x)
    with pytest.raises(Boom, match="boom from the callback"):
        closure(x)


POLYMORPHIC = """
#[version = "0.0.5"]
def @main[A](%x: A) -> A { %x }
"""


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_interpreter_reference_values_where_the_interpreter_takes_them(backend):
    """TVM's test_backend_interpreter passes RefValue to a polymorphic @main."""
    mod = tvm.relay.parse(POLYMORPHIC)
    ref = RefValue(tvm.nd.array(np.arange(3, dtype="float32")))
    for arg in (ref, (np.int32(1), ref)):
        testing.check_equivalence(mod, [arg], backends=[backend], references=["interpreter"])
    # ... and gets a reference value back, as the interpreter's test reads it (res.value)
    result = relay_aot.compile(mod, backend=backend)(ref)
    assert isinstance(result, relay_aot.runtime.Ref)
    np.testing.assert_array_equal(result.value.numpy(), np.arange(3, dtype="float32"))


def _no_element_type(body) -> tvm.IRModule:
    """``@main(%opt: Tensor[(4), ], %y: Tensor[(4), float32])``: a parameter whose tensor type
    has no element type, as TVM's ONNX importer makes of an ONNX optional input."""
    opt = relay.var("opt", relay.TensorType((4,), ""))
    y = relay.var("y", shape=(4,), dtype="float32")
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([opt, y], body(opt, y))))


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_a_parameter_with_no_element_type_takes_any_value_where_nothing_computes_on_it(backend):
    """Unused, or passed along, it takes any value (None too), as TVM's VM does; a kernel given
    it is refused at compile time, naming it (the VM fails to build that kernel)."""
    y = np.arange(4, dtype="float32")
    unused = _no_element_type(lambda opt, y: relay.add(y, y))
    returned = _no_element_type(lambda opt, y: relay.Tuple([opt, relay.add(y, y)]))
    for mod in (unused, returned):
        compiled = relay_aot.compile(mod, backend=backend)
        for arg in (np.ones(4, "float32"), np.zeros(3, "int64"), (y, y)):
            testing.check_equivalence(mod, [arg, y], backends=[(backend, compiled)], references=["vm"])
        result = compiled(None, y)
        np.testing.assert_array_equal((result if mod is unused else result[1]).numpy(), y + y)
        if mod is returned:
            assert result[0] is None
            passed = tvm.nd.array(np.ones(4, "float32"))
            assert compiled(passed, y)[0].same_as(passed)
    computed = _no_element_type(lambda opt, y: relay.add(opt, opt))
    with pytest.raises(
        relay_aot.UnsupportedError,
        match=r"%opt has the type Tensor\[\(4\), \], a tensor with no "
        r"element type .* reaches a kernel in @main",
    ):
        relay_aot.compile(computed, backend=backend)


KINDS = """
#[version = "0.0.5"]
def @main(%i: int32, %f: float32, %b: bool, %l: int64) { (%i, %f, %b, %l) }
"""

#: (description, arguments, expected error class or None): one rule on both backends.
ARGUMENT_KINDS = [
    ("ints and floats", (1, 2.5, True, 2**62), None),
    ("an int for a float", (1, 2, True, 1), None),
    ("True for an int32", (True, 2.5, True, 1), TypeError),
    ("True for a float32", (1, True, True, 1), TypeError),
    ("1 for a bool", (1, 2.5, 1, 1), TypeError),
    ("a float for an int32", (1.5, 2.5, True, 1), TypeError),
    ("np.bool_ for an int32", (np.bool_(True), 2.5, True, 1), TypeError),
    ("np.int64 holding an int32", (np.int64(1), 2.5, True, 1), None),
    ("np.int64 beyond an int32", (np.int64(2**40), 2.5, True, 1), TypeError),
    ("np.float64 holding a float32", (1, np.float64(2.5), True, 1), None),
    ("np.float64 beyond a float32's precision", (1, np.float64(0.1), True, 1), TypeError),
    ("a whole float for an int32", (7.0, 2.5, True, 1), None),
    ("a whole float beyond an int32", (2.0**40, 2.5, True, 1), ValueError),
    ("a whole float beyond an int64", (1, 2.5, True, 2.0**70), ValueError),
    ("NaN for an int32", (float("nan"), 2.5, True, 1), TypeError),
    ("2**31 for an int32", (2**31, 2.5, True, 1), ValueError),
    ("2**64 for an int64", (1, 2.5, True, 2**64), ValueError),
    ("1e39 for a float32", (1, 1e39, True, 1), ValueError),
]


@pytest.mark.parametrize("backend", ["cpp", "python"])
@pytest.mark.parametrize("what,args,error", ARGUMENT_KINDS, ids=[k[0] for k in ARGUMENT_KINDS])
def test_one_rule_for_the_kinds_of_numbers(backend, what, args, error):
    compiled = relay_aot.compile(tvm.relay.parse(KINDS), backend=backend)
    if error is None:
        out = compiled(*args)
        assert [v.numpy().item() for v in out] == [np.int32(args[0]), np.float32(args[1]), bool(args[2]), args[3]]
        return
    with pytest.raises(error):
        compiled(*args)


ARRAYS = """
#[version = "0.0.5"]
def @main(%u: Tensor[(3), uint8], %f: Tensor[(2), float32]) { (%u, %f) }
"""

#: (description, uint8 argument, float32 argument, expected error or None).
ARRAY_DTYPES = [
    ("int64 array of bytes", np.array([0, 7, 255]), np.ones(2, "float32"), None),
    ("int64 NDArray of bytes", tvm.nd.array(np.array([1, 2, 3])), np.ones(2, "float32"), None),
    # the same bits and lanes as uint8, another type code: converted, not passed as it is
    ("int8 NDArray of bytes", tvm.nd.array(np.array([0, 7, 127], "int8")), np.ones(2, "float32"), None),
    (
        "int8 NDArray with a negative value",
        tvm.nd.array(np.array([0, -1, 2], "int8")),
        np.ones(2, "float32"),
        TypeError,
    ),
    ("float16 for float32", np.zeros(3, "uint8"), np.array([0.5, np.inf], "float16"), None),
    ("float64 holding float32 values, NaN included", np.zeros(3, "uint8"), np.array([0.25, np.nan]), None),
    ("int64 array beyond a byte", np.array([0, 7, 256]), np.ones(2, "float32"), TypeError),
    ("int8 array with a negative value", np.array([0, -1, 2], "int8"), np.ones(2, "float32"), TypeError),
    ("negative int32 for uint8", np.array([0, -1, 2], "int32"), np.ones(2, "float32"), TypeError),
    ("float64 beyond float32's precision", np.zeros(3, "uint8"), np.array([0.1, 1.0]), TypeError),
    ("bool array for uint8", np.array([True, False, True]), np.ones(2, "float32"), TypeError),
]


@pytest.mark.parametrize("backend", ["cpp", "python"])
@pytest.mark.parametrize("what,u,f,error", ARRAY_DTYPES, ids=[k[0] for k in ARRAY_DTYPES])
def test_arrays_of_another_dtype_are_taken_when_every_value_is_kept(backend, what, u, f, error):
    """As TVM's executors take them (their tests pass int64 arrays for uint8 parameters); a
    conversion that would change a value is refused, naming both dtypes (docs/guarantees.md)."""
    compiled = relay_aot.compile(tvm.relay.parse(ARRAYS), backend=backend)
    if error is not None:
        with pytest.raises(error, match="does not hold exactly"):
            compiled(u, f)
        return
    out_u, out_f = compiled(u, f)
    expect_u = u.numpy() if isinstance(u, tvm.nd.NDArray) else u
    assert out_u.dtype == "uint8" and out_f.dtype == "float32"
    np.testing.assert_array_equal(out_u.numpy(), expect_u.astype("uint8"))
    np.testing.assert_array_equal(out_f.numpy(), f.astype("float32"))


def test_the_raw_packed_func_follows_the_rule_where_tvm_passes_the_kind():
    """Through the raw PackedFunc, TVM's ctypes FFI passes Python numbers by kind, and the
    library applies the same rule -- except that it wraps ints beyond 64 bits itself, before
    the library sees them (docs/guarantees.md)."""
    compiled = relay_aot.compile(tvm.relay.parse(KINDS))
    with pytest.raises(TypeError):
        compiled.entry(True, 2.5, True, 1)
    with pytest.raises(TypeError):
        compiled.entry(1, 2.5, 1, 1)
    assert compiled.entry(1, 2.5, True, 2**64 + 5)[3].numpy() == 5  # TVM's FFI wrapped it


def _special_files(tmp_path):
    target = tmp_path / "target.so"
    target.write_bytes(b"keep me")
    link = tmp_path / "link.so"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    directory = tmp_path / "dir.so"
    directory.mkdir()
    files = {"symbolic link": link, "FIFO": fifo, "directory": directory}
    device = tmp_path / "null.so"
    try:
        os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        files["character device"] = device
    except PermissionError:
        pass  # not root: no device node to test with
    return target, files


def test_export_library_refuses_anything_but_a_regular_file(tmp_path):
    compiled = relay_aot.compile(tvm.relay.parse(KINDS))
    target, files = _special_files(tmp_path)
    for kind, path in files.items():
        before = path.lstat()
        with pytest.raises(ValueError, match=f"is a {kind}, not a regular file"):
            compiled.export_library(path)
        after = path.lstat()
        assert (before.st_mode, before.st_ino) == (after.st_mode, after.st_ino), kind
    assert target.read_bytes() == b"keep me"
    compiled.export_library(target)  # a regular file is replaced
    assert relay_aot.load(target)(1, 2.5, True, 3)[3].numpy() == 3


MANY_CELLS = """
#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @build(%i: int32, %n: int32, %acc: List[fn () -> int32]) -> List[fn () -> int32] {
  if (greater_equal(%i, %n)) { %acc } else {
    let %c = ref(%i);
    let %bump = fn () -> int32 { let %u = ref_write(%c, add(ref_read(%c), 1)); ref_read(%c) };
    @build(add(%i, 1), %n, Cons(%bump, %acc))
  }
}
def @sum(%l: List[fn () -> int32], %s: int32) -> int32 {
  match (%l) {
    Cons(%f, %t) => @sum(%t, add(%s, %f())),
    Nil => %s,
  }
}
def @main(%n: int32) {
  let %l = @build(0, %n, Nil);
  (@sum(%l, 0), ref(%n))
}
"""


def test_reference_cells_are_reused_without_sharing_contents():
    """The C++ runtime recycles dead reference cells per thread (ref.h). A list of 5,000 cells
    dies at the end of each call, more than the cache keeps; the next call's cells come from it,
    and a cell returned to Python keeps its own contents while later calls reuse others."""
    mod = tvm.relay.parse(MANY_CELLS)
    testing.check_equivalence(mod, [np.int32(300)], backends=["cpp"], references=["interpreter"])
    compiled = relay_aot.compile(mod)
    kept = []
    for n in (5000, 5000, 20, 4999):
        total, cell = compiled(np.int32(n))
        assert total.numpy() == n * (n + 1) // 2
        kept.append((n, cell))
    assert [cell[0].numpy().item() for _, cell in kept] == [n for n, _ in kept]


HIERARCHY = """
#[version = "0.0.5"]
type T { A, B }
def @pick(%t: T) -> int32 { match? (%t) { A => 1 } }
"""


def _hierarchy_module() -> tvm.IRModule:
    mod = tvm.relay.parse(HIERARCHY)
    t_type = relay.TypeCall(mod.get_global_type_var("T"), [])
    x, n, t = relay.var("x", shape=(relay.Any(),)), relay.var("n", shape=(), dtype="int32"), relay.var("t", t_type)
    s = relay.var("s", shape=(2,), dtype="int64")
    body = relay.Tuple(
        [
            relay.add(x, relay.ones((1,), "float32")),
            n,
            relay.Call(mod.get_global_var("pick"), [t]),
            relay.reshape(x, [2, -1]),
            relay.zeros(s, "float32"),
        ]
    )
    mod["main"] = relay.Function([x, n, t, s], body)
    return relay.transform.InferType()(mod)


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_every_error_of_a_call_is_a_tvm_error_and_the_builtin_one(backend):
    """Code written for TVM's executors catches tvm.error.TVMError; relay_aot's classes are that
    and the builtin exception they stand for (relay_aot/errors.py, docs/guarantees.md)."""
    from relay_aot import errors

    mod = _hierarchy_module()
    compiled = relay_aot.compile(mod, backend=backend)
    a, b = mod.get_type("T")[1:]
    good = [np.ones(6, "float32"), 1, tvm.runtime.container.ADT(a.tag, []), np.array([1, 1])]
    cases = [
        (0, np.ones(3, "float64") + 0.1, errors.ArgumentTypeError, TypeError),
        (0, np.ones((3, 1), "float32"), errors.ArgumentValueError, ValueError),
        (1, 2**40, errors.ArgumentValueError, ValueError),
        (0, np.ones(5, "float32"), errors.KernelError, RuntimeError),
        (2, tvm.runtime.container.ADT(b.tag, []), errors.MatchError, RuntimeError),
        (3, np.array([-2, 3]), errors.ShapeError, ValueError),  # zeros of a negative extent
    ]
    compiled(*good)
    for index, value, cls, builtin in cases:
        args = list(good)
        args[index] = value
        with pytest.raises(tvm.error.TVMError) as info:
            compiled(*args)
        assert isinstance(info.value, cls) and isinstance(info.value, builtin), (index, info.value)


@pytest.mark.parametrize(
    "dims,expected,message",
    [
        ([2, 3], None, None),
        ([2, 3], [2, 3], None),
        ([0, 2**62, 2**62], None, None),  # no elements: any other extent is representable
        ([2, -1], None, "kernel k9 would make a tensor of shape (2, -1)"),
        ([2, 3], [2, 4], "kernel k9 would make a tensor of shape (2, 3) where its type says (2, 4)"),
        ([2**40, 2**40], None, "(1099511627776, 1099511627776), whose number of elements does not fit in 64 bits"),
    ],
)
def test_shapes_computed_at_run_time_are_checked_with_a_message_naming_the_kernel(dims, expected, message):
    """Every shape a shape function computes goes through one check (both backends), at every
    step of a loop: its message is made only when it fails."""
    from relay_aot import errors
    from relay_aot.runtime import fastcall

    if message is None:
        fastcall.check_computed_shape("k9", dims, expected)
        return
    with pytest.raises(errors.ShapeError) as info:
        fastcall.check_computed_shape("k9", dims, expected)
    assert message in str(info.value)

"""The Python backend: generated source, values crossing the boundary, errors, deep data.

The whole program suite (test_programs.py) already runs on this backend; these tests cover what
is specific to it, comparing with the C++ backend, the interpreter or numpy.
"""

import ast

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.relay.backend.interpreter import ConstructorValue

import relay_aot
from relay_aot import testing
from relay_aot.backends.python import runtime as pyruntime

F2 = relay.TensorType((2,), "float32")


def parse(text):
    return tvm.relay.parse('#[version = "0.0.5"]\n' + text)


def test_source_is_python_and_names_the_relay_constructs():
    mod = parse("""
    type Opt { Some(Tensor[(2), float32]), Nothing }
    def @main(%x: Tensor[(2), float32]) {
      let %o = Some(add(%x, %x));
      match (%o) { Some(%v) => multiply(%v, %v), Nothing => %x }
    }
    """)
    compiled = relay_aot.compile(mod, backend="python")
    source = compiled.source
    ast.parse(source)
    assert "def main(*args):" in source
    assert "# %o = Some" in source  # comments name the Relay construct
    assert "call_kernel(k0, " in source
    x = np.array([1, -2], dtype="float32")
    np.testing.assert_array_equal(compiled(x).numpy(), (x + x) ** 2)


def test_user_names_are_escaped_in_source_and_kept_in_messages():
    """A global named with quotes, a newline and a comment terminator cannot break the source."""
    evil = 'bad"\n*/ import os #'
    gvar = relay.GlobalVar(evil)
    gtv = relay.GlobalTypeVar("Opt")
    some = relay.Constructor("Some\nx", [F2], gtv)
    nothing = relay.Constructor("Nothing", [], gtv)
    mod = tvm.IRModule()
    mod[gtv] = relay.TypeData(gtv, [], [some, nothing])
    o = relay.Var("o\n'", relay.TypeCall(gtv, []))
    v = relay.Var("v", F2)
    mod[gvar] = relay.Function(
        [o],
        relay.Match(o, [relay.Clause(relay.PatternConstructor(some, [relay.PatternVar(v)]), v)], complete=False),
        F2,
    )
    i = relay.Var("i", relay.TensorType((), "int32"))
    x = relay.Var("x", F2)
    pick = relay.If(relay.equal(i, relay.const(0)), some(x), nothing())
    mod["main"] = relay.Function([i, x], relay.Call(gvar, [pick]))
    mod = relay.transform.InferType()(mod)
    compiled = relay_aot.compile(mod, backend="python")
    tree = ast.parse(compiled.source)
    assert not any(
        isinstance(node, (ast.Import, ast.ImportFrom)) and node.names[0].name == "os" for node in ast.walk(tree)
    )
    assert evil not in compiled.source
    x_value = np.array([3, 4], dtype="float32")
    np.testing.assert_array_equal(compiled(np.int32(0), x_value).numpy(), x_value)
    with pytest.raises(relay_aot.MatchError) as info:
        compiled(np.int32(1), x_value)
    assert str(info.value) == f"no clause matched the value in @{evil}"


@pytest.mark.parametrize("backend", ["python", "cpp"])
def test_python_callables_as_arguments(backend):
    mod = parse("""
    def @main(%f: fn (Tensor[(2), float32]) -> Tensor[(2), float32], %x: Tensor[(2), float32]) {
      (%f(%f(%x)), %f)
    }
    """)
    compiled = relay_aot.compile(mod, backend=backend)
    x = np.array([1, 2], dtype="float32")
    result = compiled(lambda t: tvm.nd.array(t.numpy() * 3), x)
    np.testing.assert_array_equal(result[0].numpy(), x * 9)
    np.testing.assert_array_equal(result[1](tvm.nd.array(x)).numpy(), x * 3)  # the callable came back out


def test_closures_and_references_cross_the_boundary_like_cpp():
    mod = parse("""
    def @main(%x: Tensor[(2), float32]) {
      let %r = ref(%x);
      let %bump = fn (%by: Tensor[(2), float32]) -> Tensor[(2), float32] {
        let %u = ref_write(%r, add(ref_read(%r), %by));
        ref_read(%r)
      };
      (%bump, %r, (%r, %bump))
    }
    """)
    x = np.array([1, 2], dtype="float32")
    t = tvm.nd.array(x)
    for backend in ("cpp", "python"):
        # Inside a returned tuple, closures are PackedFuncs and references one-element cells.
        bump, ref, nested = relay_aot.compile(mod, backend=backend)(x)
        assert isinstance(nested, tvm.runtime.container.ADT)
        np.testing.assert_array_equal(nested[0][0].numpy(), x)
        np.testing.assert_array_equal(ref[0].numpy(), x)
        np.testing.assert_array_equal(bump(t).numpy(), 2 * x)
        np.testing.assert_array_equal(nested[1](t).numpy(), 3 * x)
        np.testing.assert_array_equal(ref[0].numpy(), x if backend == "python" else 3 * x)


def test_returned_reference_is_live():
    mod = parse("""
    def @main(%x: Tensor[(2), float32]) {
      let %r = ref(%x);
      let %u = ref_write(%r, add(ref_read(%r), %x));
      %r
    }
    """)
    x = np.array([1, 2], dtype="float32")
    for backend in ("cpp", "python"):
        ref = relay_aot.compile(mod, backend=backend)(x)
        assert isinstance(ref, relay_aot.runtime.values.Ref)
        np.testing.assert_array_equal(ref.value.numpy(), 2 * x)


@pytest.mark.parametrize("backend", ["cpp", "python"])
def test_long_lists_convert_without_deep_recursion(backend):
    """A 20000-element list is built by a tail loop, returned, passed back in and summed.

    The list crosses the Python boundary both as the runtime's ADT and as the interpreter's
    ``ConstructorValue``; the argument checks must not recurse on its depth.
    """
    mod = parse("""
    type L { Cons(int32, L), Nil }
    def @build(%n: int32, %acc: L) -> L {
      if (equal(%n, 0)) { %acc } else { @build(subtract(%n, 1), Cons(%n, %acc)) }
    }
    def @sum(%l: L, %acc: int32) -> int32 {
      match (%l) { Cons(%h, %t) => @sum(%t, add(%acc, %h)), Nil => %acc }
    }
    def @main(%n: int32, %l: L) { (@build(%n, Nil), @sum(%l, 0)) }
    """)
    compiled = relay_aot.compile(mod, backend=backend)
    n = 20000
    nil = tvm.runtime.container.ADT(_tag(mod, "Nil"), [])
    built, _ = compiled(np.int32(n), nil)
    _, total = compiled.entry(*compiled.convert_args((0, built)))
    assert int(total.numpy()) == n * (n + 1) // 2
    length, node = 0, built
    while len(node):
        length, node = length + 1, node[1]
    assert length == n

    ctors = {c.name_hint: c for gtv in mod.get_global_type_vars() for c in mod[gtv].constructors}
    as_interpreter = ConstructorValue(ctors["Nil"].tag, [], ctors["Nil"])
    for i in range(n, 0, -1):
        as_interpreter = ConstructorValue(ctors["Cons"].tag, [tvm.nd.array(np.int32(i)), as_interpreter], ctors["Cons"])
    _, total = compiled(0, as_interpreter)
    assert int(total.numpy()) == n * (n + 1) // 2


def _tag(mod, name):
    for gtv in mod.get_global_type_vars():
        for ctor in mod[gtv].constructors:
            if ctor.name_hint == name:
                return int(ctor.tag)
    raise KeyError(name)


def test_deep_recursion_raises_a_python_exception():
    mod = parse("""
    def @down(%n: int32) -> int32 {
      if (equal(%n, 0)) { 0 } else { add(@down(subtract(%n, 1)), 1) }
    }
    def @main(%n: int32) { @down(%n) }
    """)
    compiled = relay_aot.compile(mod, backend="python")
    assert int(compiled(np.int32(100)).numpy()) == 100
    with pytest.raises(relay_aot.RecursionDepthError, match="recursed deeper than the python backend allows"):
        compiled(np.int32(1_000_000))
    assert int(compiled(np.int32(10)).numpy()) == 10  # the module still works afterwards


def test_kernel_failure_is_a_kernel_error():
    mod = parse("def @main(%x: Tensor[(2), float32]) { add(%x, %x) }")
    compiled = relay_aot.compile(mod, backend="python")
    symbol = compiled.source.split("kernel_module['")[1].split("'")[0]
    kernel = compiled.module[symbol]
    wrong = tvm.nd.array(np.zeros(3, dtype="float32"))  # the kernel asserts its static shapes
    with pytest.raises(relay_aot.KernelError, match=f"kernel {symbol} failed on arguments of shapes "):
        pyruntime.call_kernel(kernel, symbol, wrong, wrong)


def test_no_kernels_and_constants():
    mod = parse("def @main(%x: Tensor[(2), float32]) { (%x, (1f, 2i64)) }")
    compiled = relay_aot.compile(mod, backend="python")
    x = np.array([5, 6], dtype="float32")
    expected = (x, (np.float32(1), np.int64(2)))
    testing.assert_same(testing.normalize(compiled(x)), testing.normalize(expected))

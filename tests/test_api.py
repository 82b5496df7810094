"""The public API: argument and result conversion, params, constants, and compile-time errors."""

import re

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.relay.prelude import Prelude
from tvm.runtime.container import ADT

import relay_aot
from relay_aot import testing

FIB_TEXT = """
#[version = "0.0.5"]
def @fib(%n: int32) -> int32 {
  if (less(%n, 2)) {
    %n
  } else {
    add(@fib(subtract(%n, 1)), @fib(subtract(%n, 2)))
  }
}
def @main(%n: int32) -> int32 {
  @fib(%n)
}
"""


def fib_in_python() -> tvm.IRModule:
    """The program of FIB_TEXT, built with the Python API."""
    mod = tvm.IRModule()
    fib = relay.GlobalVar("fib")
    n = relay.var("n", shape=(), dtype="int32")
    body = relay.If(
        relay.less(n, relay.const(2)),
        n,
        relay.add(fib(relay.subtract(n, relay.const(1))), fib(relay.subtract(n, relay.const(2)))),
    )
    mod[fib] = relay.Function([n], body, relay.scalar_type("int32"))
    m = relay.var("n", shape=(), dtype="int32")
    mod["main"] = relay.Function([m], fib(m), relay.scalar_type("int32"))
    return mod


def test_text_and_python_programs_compile_alike(backend):
    from_text = relay_aot.compile(tvm.relay.parse(FIB_TEXT), backend=backend)
    from_python = relay_aot.compile(fib_in_python(), backend=backend)
    assert from_text.source == from_python.source
    assert from_text(np.int32(15)).numpy() == from_python(15).numpy() == 610


def test_generated_cpp_is_readable():
    source = relay_aot.compile(tvm.relay.parse(FIB_TEXT)).source
    assert "// Compiled with: g++" in source or "// Compiled with: c++" in source
    assert "// @fib(%n: Tensor[(), int32]) -> Tensor[(), int32]" in source
    assert "// @main(%n: Tensor[(), int32]) -> Tensor[(), int32]" in source
    # one C++ function per Relay function, each commented with what it computes
    assert source.count("int32_t f0(int32_t v0) {") == 1
    assert "kernel: less" in source and "@fib(...)" in source
    # 0-d arithmetic runs natively on unboxed scalars
    assert re.search(r"bool v\d+ = \(v\d+ < int32_t\(2LL\)\);", source)


def test_argument_kinds(backend):
    mod = tvm.relay.parse(
        """
        #[version = "0.0.5"]
        type Opt { Some(Tensor[(2), float32]), Nothing }
        def @main(%t: (Tensor[(2), float32], int64), %o: Opt, %s: float64) {
          let %v = (match (%o) { Some(%x) => add(%x, %t.0), Nothing => %t.0 });
          (%v, add(%t.1, 1i64), multiply(%s, 2f64))
        }
        """
    )
    compiled = relay_aot.compile(mod, backend=backend)
    x = np.array([1, 2], "float32")
    some_tag = mod.get_type("Opt")[1].tag
    as_adt = ADT(some_tag, [tvm.nd.array(x)])
    interpreter_value = testing.run_reference(
        tvm.relay.parse(
            """
            #[version = "0.0.5"]
            type Opt { Some(Tensor[(2), float32]), Nothing }
            def @main(%x: Tensor[(2), float32]) -> Opt { Some(%x) }
            """
        ),
        [x],
    )
    for opt in (as_adt, interpreter_value):
        for tup in ((x, np.int64(4)), (tvm.nd.array(x), 4), ADT(0, [tvm.nd.array(x), tvm.nd.array(np.int64(4))])):
            for scalar in (1.5, np.float64(1.5), tvm.nd.array(np.float64(1.5))):
                result = compiled(tup, opt, scalar)
                assert isinstance(result, ADT) and result.tag == 0
                np.testing.assert_array_equal(result[0].numpy(), x + x)
                assert result[1].numpy() == 5 and result[1].dtype == "int64"
                assert result[2].numpy() == 3.0


def test_results_and_returned_closures(backend):
    mod = tvm.relay.parse(
        """
        #[version = "0.0.5"]
        type Opt { Some(int32), Nothing }
        def @main(%k: int32) {
          let %f = fn (%x: int32) -> int32 { multiply(%x, %k) };
          let %g = fn (%h: fn (int32) -> int32) -> int32 { %h(%k) };
          (%f, %g, Some(%k), Nothing, ())
        }
        """
    )
    compiled = relay_aot.compile(mod, backend=backend)
    f, g, some, nothing, unit = compiled(np.int32(3))
    # closures inside a tuple are plain PackedFuncs over TVM runtime values
    five = tvm.nd.array(np.int32(5))
    assert f(five).numpy() == 15
    assert g(f).numpy() == 9
    # a Python function where the program expects a function value
    assert g(lambda x: tvm.nd.array(x.numpy() * 7)).numpy() == 21
    # a closure returned on its own converts its arguments and results like the program does
    alone = relay_aot.compile(
        tvm.relay.parse(
            """
        #[version = "0.0.5"]
        def @main(%k: int32) -> fn (fn (int32) -> int32) -> int32 {
          fn (%h: fn (int32) -> int32) -> int32 { %h(%k) }
        }
        """
        ),
        backend=backend,
    )(4)
    assert isinstance(alone, relay_aot.Closure)
    assert alone(lambda x: x.numpy() * 2).numpy() == 8
    assert isinstance(some, ADT) and some.tag == mod.get_type("Opt")[1].tag and some[0].numpy() == 3
    assert isinstance(nothing, ADT) and nothing.tag == mod.get_type("Opt")[2].tag and len(nothing) == 0
    assert isinstance(unit, ADT) and unit.tag == 0 and len(unit) == 0


def test_params_bind_weights_as_constants(backend):
    x = relay.var("x", shape=(1, 4), dtype="float32")
    w = relay.var("w", shape=(3, 4), dtype="float32")
    b = relay.var("b", shape=(3,), dtype="float32")
    mod = tvm.IRModule.from_expr(relay.Function([x, w, b], relay.nn.bias_add(relay.nn.dense(x, w), b)))
    weights = {"w": np.arange(12, dtype="float32").reshape(3, 4), "b": np.array([1, -1, 0.5], "float32")}
    compiled = relay_aot.compile(mod, params=weights, backend=backend)
    assert [p.name for p in compiled.signature.params] == ["x"]
    data = np.array([[1, 0, -1, 2]], "float32")
    np.testing.assert_allclose(compiled(data).numpy(), data @ weights["w"].T + weights["b"], rtol=1e-6)
    with pytest.raises(relay_aot.RelayAotError, match="nope"):
        relay_aot.compile(mod, params={"nope": weights["w"]}, backend=backend)


def test_non_scalar_constants_of_every_dtype(backend):
    values = {
        "float32": np.array([1.5, -2], "float32"),
        "float64": np.array([[0.25], [4]], "float64"),
        "int32": np.array([7, -8, 9], "int32"),
        "int64": np.array([2**40, -1], "int64"),
        "int8": np.array([-128, 127], "int8"),
        "bool": np.array([True, False, True]),
    }
    xs = [relay.var(f"x_{k}", shape=v.shape, dtype=k) for k, v in values.items()]
    consts = [relay.const(v, dtype=str(v.dtype)) for v in values.values()]
    outs = [
        relay.logical_xor(x, c) if x.type_annotation.dtype == "bool" else relay.add(x, c) for x, c in zip(xs, consts)
    ]
    # constants also flow through control code untouched (a tuple of them)
    mod = tvm.IRModule.from_expr(relay.Function(xs, relay.Tuple(outs + [relay.Tuple(consts)])))
    args = [v[::-1].copy() for v in values.values()]
    testing.check_equivalence(mod, args, backends=[backend])


def test_compile_errors_name_the_problem():
    # (named symbolic dimensions compile now: tests/test_dynamic.py::test_named_*)
    fib = tvm.relay.parse(FIB_TEXT)
    with pytest.raises(relay_aot.UnsupportedError, match="cuda"):
        relay_aot.compile(fib, target="cuda")
    with pytest.raises(ValueError, match="backend"):
        relay_aot.compile(fib, backend="rust")
    for bad in ("", "9lives", "a-b", "x" * 65, "a b"):
        with pytest.raises(ValueError, match="model name"):
            relay_aot.compile(fib, name=bad)
    # The entry is exported under the model name: "memcpy" crashed the compiling process, and
    # "malloc" replaced libc's in a C program linking the library.
    for taken, owner in (
        ("memcpy", "libc"),
        ("malloc", "libc"),
        ("strlen", "libc"),
        ("expf", "libm"),
        ("TVMFuncCall", "libtvm"),
        ("_sbrk", "C implementation"),
    ):
        with pytest.raises(ValueError, match=f"model name '{taken}' is a symbol of .*{owner}"):
            relay_aot.compile(fib, name=taken)
    no_main = tvm.IRModule({relay.GlobalVar("f"): fib["fib"]})
    with pytest.raises(relay_aot.RelayAotError, match="no @main"):
        relay_aot.compile(no_main)
    with pytest.raises(TypeError, match="IRModule"):
        relay_aot.compile(fib["main"])
    y = relay.var("y", shape=(2,), dtype="float32")
    ill_typed = tvm.IRModule({relay.GlobalVar("main"): relay.Function([y], relay.add(y, relay.const(1, "int32")))})
    with pytest.raises(relay_aot.RelayAotError, match="type-check"):
        relay_aot.compile(ill_typed)
    # also TVM's DiagnosticError, as relay.build raises (TVM's test_any_broadcast_fail catches TVMError)
    with pytest.raises(tvm.error.DiagnosticError, match="type-check") as caught:
        relay_aot.compile(ill_typed)
    assert isinstance(caught.value, relay_aot.TypeCheckError)


def test_argument_errors_are_clean(backend):
    compiled = relay_aot.compile(tvm.relay.parse(FIB_TEXT), backend=backend)
    with pytest.raises(TypeError, match="takes 1 arguments, got 0"):
        compiled()
    with pytest.raises(TypeError, match=r"%n.*int32.*float32.*does not hold exactly"):
        compiled(np.float32(3.5))
    assert int(compiled(np.float32(10)).numpy()) == int(compiled(np.int32(10)).numpy())  # held exactly
    with pytest.raises(TypeError, match=r"%n.*int32"):
        compiled(3.5)
    with pytest.raises(ValueError, match=r"%n.*\(\).*\(2,\)"):
        compiled(np.array([1, 2], "int32"))
    with pytest.raises(TypeError, match="expected Tensor"):
        compiled("three")


def test_prelude_module_compiles_only_what_main_reaches(backend):
    mod = tvm.IRModule()
    Prelude(mod)
    mod = tvm.relay.parse(
        """
        #[version = "0.0.5"]
        def @main(%x: int32) -> int32 { @length(Cons(%x, Cons(%x, Nil))) }
        """,
        init_module=mod,
    )
    assert len(mod.get_global_vars()) > 200
    compiled = relay_aot.compile(mod, backend=backend)
    assert compiled(np.int32(4)).numpy() == 2
    if backend == "cpp":
        # @main, @length (+ wrappers); not the 240 Prelude globals
        assert compiled.source.count("// @") < 10


def test_results_outlive_their_compiled_module():
    """Objects made by a library (closures, ADTs, cells) survive dropping its CompiledModule."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import gc, numpy as np, tvm, relay_aot
        mod = tvm.relay.parse('''
        #[version = "0.0.5"]
        type Box { Box(fn (int32) -> int32) }
        def @main(%k: int32) {
          let %f = fn (%x: int32) -> int32 { add(%x, %k) };
          (Box(%f), %f, ref(%k))
        }
        ''')
        compiled = relay_aot.compile(mod)
        result = compiled(np.int32(2))
        del compiled
        gc.collect()
        assert result[1](tvm.nd.array(np.int32(3))).numpy() == 5
        del result
        gc.collect()
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_scalar_fast_path_agrees_with_kernels(monkeypatch):
    """Native scalar arithmetic gives what TVM's kernels give, on every operator and dtype."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from program_files import PROGRAM_DIR, read

    program = read(PROGRAM_DIR / "scalar_ops.relay")
    fast = relay_aot.compile(program.module())
    monkeypatch.setenv("RELAY_AOT_SCALAR_FAST_PATH", "0")
    slow = relay_aot.compile(program.module())
    # every kernel of this program is scalar arithmetic: no kernel call is left in the fast path
    assert "call_kernel(" not in fast.source and "call_kernel(" in slow.source
    for case in program.cases:
        args = program.args(case)
        testing.assert_same(
            testing.normalize(fast(*args)), testing.normalize(slow(*args)), names=("scalar fast path", "TVM kernels")
        )


def test_fast_call_path_matches_the_ffi_path():
    """relay_aot._fastcall (pybind11) passes arguments straight to the library; results and errors
    are those of TVM's ctypes FFI path."""

    mod = tvm.relay.parse(
        """
        #[version = "0.0.5"]
        def @main(%x: Tensor[(4), float32], %k: int32, %b: bool, %t: (float32, int64)) {
          (multiply(%x, cast(%k, dtype="float32")), logical_not(%b), %t.1)
        }
        """
    )
    compiled = relay_aot.compile(mod)
    assert compiled._address is not None
    x = np.arange(4, dtype="float32")
    via_fast = compiled(x, 3, True, (np.float32(1), np.int64(7)))  # the tuple falls back to Python
    via_fast_nd = compiled(
        tvm.nd.array(x), np.int32(3), np.bool_(True), ADT(0, [tvm.nd.array(np.float32(1)), tvm.nd.array(np.int64(7))])
    )
    via_ffi = compiled.entry(
        tvm.nd.array(x),
        tvm.nd.array(np.int32(3)),
        tvm.nd.array(np.bool_(True)),
        ADT(0, [tvm.nd.array(np.float32(1)), tvm.nd.array(np.int64(7))]),
    )
    for result in (via_fast, via_fast_nd):
        testing.assert_same(testing.normalize(result), testing.normalize(via_ffi))
    # non-contiguous arrays fall back to Python (which copies them); errors are the library's
    testing.assert_same(
        testing.normalize(compiled(np.arange(8, dtype="float32")[::2], 3, True, (1.0, 7))),
        testing.normalize(compiled(np.arange(0, 8, 2, dtype="float32"), 3, True, (1.0, 7))),
    )
    for t in ((1.0, 7), ADT(0, [tvm.nd.array(np.float32(1)), tvm.nd.array(np.int64(7))])):  # both paths
        with pytest.raises(ValueError, match=r"%k.*does not fit in.*int32"):
            compiled(x, 2**40, True, t)
        with pytest.raises(TypeError, match=r"%k.*int32"):
            compiled(x, 3.5, True, t)


def test_fast_call_results_are_the_ffis_ndarrays(monkeypatch):
    """A tensor result is made without asking the runtime its type index (in the extension):
    a plain NDArray owning its data, as TVM's converter makes it; with a subclass of NDArray
    registered, TVM's converter makes it."""
    from tvm._ffi._ctypes import ndarray as ctypes_ndarray
    from tvm._ffi._ctypes import packed_func

    x = relay.var("x", shape=(3,), dtype="int8")
    compiled = relay_aot.compile(tvm.IRModule.from_expr(relay.Function([x], relay.add(x, relay.const(1, "int8")))))
    arg = tvm.nd.array(np.arange(3, dtype="int8"))
    results = [compiled(arg) for _ in range(1000)]  # and freed below: no double free, no leak
    assert type(results[0]) is tvm.nd.NDArray and not results[0].is_view
    np.testing.assert_array_equal(results[-1].numpy(), [1, 2, 3])
    del results

    class Tagged(tvm.nd.NDArray):
        pass

    made = []
    original = packed_func._make_array
    monkeypatch.setattr(packed_func, "_make_array", lambda *a: made.append(a) or original(*a))  # RETURN_SWITCH's
    monkeypatch.setitem(ctypes_ndarray._TVM_ND_CLS, 12345, Tagged)
    np.testing.assert_array_equal(compiled(arg).numpy(), [1, 2, 3])
    assert made, "with a subclass registered, TVM's converter makes the result"


def test_small_results_are_reused_only_when_nothing_sees_them():
    """The extension keeps the objects of the last small results and gives one back as a later
    result once nothing else holds it (no reference to it or its handle, no weak reference, no
    attribute set, no DLPack export left holding its tensor); results held, in any of these ways,
    keep their values. Large results are not kept."""
    import ctypes
    import weakref

    x = relay.var("x", shape=(3,), dtype="int8")
    compiled = relay_aot.compile(tvm.IRModule.from_expr(relay.Function([x], relay.add(x, relay.const(1, "int8")))))

    def arg(i):
        return tvm.nd.array(np.arange(i, i + 3, dtype="int8"))

    held = [compiled(arg(i)) for i in range(12)]  # held: never reused
    assert len({id(r) for r in held}) == 12
    for i, result in enumerate(held):
        np.testing.assert_array_equal(result.numpy(), np.arange(i + 1, i + 4))
    del held, result
    ids = set()
    for i in range(50):  # dropped at once: reused
        result = compiled(arg(i))
        np.testing.assert_array_equal(result.numpy(), np.arange(i + 1, i + 4))
        ids.add(id(result))
        del result
    assert len(ids) <= 5, "dropped results' objects are not being reused"
    np.testing.assert_array_equal(compiled(compiled(arg(5))).numpy(), np.arange(7, 10))

    def held_in_some_way():
        kept = []
        for i in range(8):
            result = compiled(arg(10 * i))
            if i % 4 == 0:
                kept.append(("handle", ctypes.cast(result.handle, ctypes.c_void_p).value, result.handle))
            elif i % 4 == 1:
                kept.append(("weak", i, weakref.ref(result)))
            elif i % 4 == 2:
                result.tag = i  # dropped: no later result may carry it
            else:
                kept.append(("dlpack", i, result.to_dlpack()))
            del result
        return kept

    kept = held_in_some_way()
    for _ in range(20):  # recycle whatever may be recycled
        assert not hasattr(compiled(arg(100)), "tag")
    for way, i, what in kept:
        expected = np.arange(10 * i + 1, 10 * i + 4)
        if way == "handle":  # its tensor is freed with the result (TVM's NDArray), but never repointed
            assert ctypes.cast(what, ctypes.c_void_p).value == i
        elif way == "weak":
            if what() is not None:
                np.testing.assert_array_equal(what().numpy(), expected)
        else:
            np.testing.assert_array_equal(tvm.nd.from_dlpack(what).numpy(), expected)

    y = relay.var("y", shape=(32768,), dtype="float32")  # 128 KiB: not kept
    large = relay_aot.compile(tvm.IRModule.from_expr(relay.Function([y], relay.negative(y))))
    result = large(np.ones(32768, "float32"))
    dropped = weakref.ref(result)
    del result
    assert dropped() is None


def test_adt_results_read_their_fields_in_the_extension(monkeypatch):
    """Tuples and constructor values come back as fastcall.ADTResult, TVM's ADT whose tag, length
    and fields the extension reads: the same values as TVM's own methods give, nested ADTs
    alike; while another class is registered for runtime ADTs, TVM's converter makes the result."""
    import tvm._ffi._ctypes.object as ctypes_object

    from relay_aot.runtime.fastcall import ADTResult

    mod = tvm.relay.parse(
        """
        #[version = "0.0.5"]
        type Opt { Some(Tensor[(2), float32]), Nothing }
        def @main(%x: Tensor[(2), float32]) {
          (%x, add(%x, %x), (Some(%x), Nothing), 7)
        }
        """
    )
    for backend in ("cpp", "python"):
        compiled = relay_aot.compile(mod, backend=backend)
        x = np.array([1.5, -2.0], "float32")
        result = compiled(x)
        assert type(result) is ADTResult and isinstance(result, ADT)
        assert result.tag == ADT.tag.fget(result) == 0 and len(result) == ADT.__len__(result) == 4
        for i in range(-4, 4):  # TVM's own __getitem__ beside the extension's
            mine, theirs = result[i], ADT.__getitem__(result, i)
            if isinstance(theirs, ADT):
                assert type(mine) is ADTResult and mine.same_as(theirs)
            else:
                testing.assert_same(testing.normalize(mine), testing.normalize(theirs))
        for i in (4, -5):
            with pytest.raises(IndexError):
                result[i]
        first, doubled, (some, nothing), seven = result
        np.testing.assert_array_equal(doubled.numpy(), 2 * x)
        assert some.tag == mod.get_type("Opt")[1].tag and len(some) == 1 and some[0].numpy().tolist() == x.tolist()
        assert nothing.tag == mod.get_type("Opt")[2].tag and len(nothing) == 0 and list(nothing) == []
        assert [f.numpy().tolist() for f in result[:2]] == [x.tolist(), (2 * x).tolist()]
        assert seven.numpy() == 7

    class Registered(ADT):
        pass

    (index,) = [k for k, v in ctypes_object.OBJECT_TYPE.items() if v is ADT]  # runtime.ADT's type index
    monkeypatch.setitem(ctypes_object.OBJECT_TYPE, index, Registered)
    assert type(relay_aot.compile(mod)(np.ones(2, "float32"))) is Registered


def test_pass_instruments_see_the_pipeline_as_one_pass(tmp_path, monkeypatch):
    """Under a PassContext with instruments, the passes run (the module index, which skips
    them, is not consulted) as one pass in the caller's context, whose hooks are not re-entered."""
    from tvm.ir.instrument import PassTimingInstrument, pass_instrument

    @pass_instrument
    class Recorder:
        def __init__(self):
            self.events = []

        def enter_pass_ctx(self):
            self.events.append("enter")

        def exit_pass_ctx(self):
            self.events.append("exit")

        def run_before_pass(self, mod, info):
            self.events.append(("before", info.name, "main" in [g.name_hint for g in mod.get_global_vars()]))

        def run_after_pass(self, mod, info):
            self.events.append(("after", info.name))

    monkeypatch.setenv("RELAY_AOT_CACHE_DIR", str(tmp_path))
    x = relay.var("x", shape=(3,))
    mod = tvm.IRModule.from_expr(relay.Function([x], x * relay.const(2.0)))
    assert not relay_aot.compile(mod).build_result.cached
    recorder = Recorder()
    with tvm.transform.PassContext(instruments=[recorder]):
        compiled = relay_aot.compile(mod)
        assert recorder.events == ["enter", ("before", "relay_aot.lower", True), ("after", "relay_aot.lower")]
    np.testing.assert_allclose(compiled(np.ones(3, "float32")).numpy(), [2, 2, 2])
    timing = PassTimingInstrument()
    with tvm.transform.PassContext(instruments=[timing]):
        relay_aot.compile(mod)
        assert "relay_aot.lower" in timing.render()
    # relay_aot's errors keep their class through the pass.
    without_main = tvm.IRModule()
    without_main[relay.GlobalVar("f")] = relay.Function([x], x)
    with tvm.transform.PassContext(instruments=[Recorder()]):
        with pytest.raises(relay_aot.RelayAotError, match="no @main function"):
            relay_aot.compile(without_main)


def test_the_fast_path_reads_an_arrays_dtype_from_its_handle():
    """An NDArray or numpy array of the parameter's dtype goes straight to the library; one of the
    same bits and lanes but another type code (int8 for uint8), or of another width, is converted
    in Python first: the extension compares the handle's dtype (NDArray.dtype, a string made
    through TVM's FFI, costs 0.6 us an argument)."""
    mod = tvm.relay.parse('#[version = "0.0.5"]\ndef @main(%u: Tensor[(3), uint8]) { %u }')
    compiled = relay_aot.compile(mod)

    def direct(arg):
        return compiled._bound((arg,)) is not NotImplemented

    assert compiled._checks_in_extension
    assert direct(tvm.nd.array(np.array([1, 2, 3], "uint8"))) and direct(np.array([1, 2, 3], "uint8"))
    for dtype in ("int8", "uint16", "int64"):
        for arg in (tvm.nd.array(np.array([1, 2, 3], dtype)), np.array([1, 2, 3], dtype)):
            assert not direct(arg), dtype
            np.testing.assert_array_equal(compiled(arg).numpy(), [1, 2, 3])

"""Bad input never crashes the process: malformed calls, kernel failures, hostile names."""

import os
import re

import pytest
from isolated import run_isolated

SIGNATURE_PROGRAM = """
#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @main(%x: Tensor[(2, 3), float32], %t: (int32, Tensor[(2), int64]), %l: List[Tensor[(2), float32]],
          %f: fn (Tensor[(2), float32]) -> Tensor[(2), float32], %b: bool) {
  let %s = (match (%l) { Cons(%h, _) => %f(%h), Nil => %f(ones(shape=[2], dtype="float32")) });
  (sum(%x), %t.0, %s, %b)
}
"""

# Each entry: (description, python expression for the argument list). Names available:
# np, tvm, ADT, good (a dict of well-formed arguments), cons(head, tail), nil(), lst(n).
MALFORMED = [
    ("no arguments", "[]"),
    ("too many arguments", "[good['x'], good['t'], good['l'], good['f'], good['b'], good['b']]"),
    ("None for a tensor", "[None, good['t'], good['l'], good['f'], good['b']]"),
    ("a string for a tensor", "['x', good['t'], good['l'], good['f'], good['b']]"),
    ("a Python list for a tensor", "[[[1.0] * 3] * 2, good['t'], good['l'], good['f'], good['b']]"),
    ("wrong dtype", "[np.full((2, 3), 0.1), good['t'], good['l'], good['f'], good['b']]"),
    ("wrong rank", "[np.zeros((6,), 'float32'), good['t'], good['l'], good['f'], good['b']]"),
    ("wrong shape", "[np.zeros((3, 2), 'float32'), good['t'], good['l'], good['f'], good['b']]"),
    ("tuple of the wrong arity", "[good['x'], (np.int32(1),), good['l'], good['f'], good['b']]"),
    ("tuple with a wrong field", "[good['x'], (np.int32(1), np.array([0.5, 1.0])), good['l'], good['f'], good['b']]"),
    ("nested tuple for a tensor", "[((good['x'],),), good['t'], good['l'], good['f'], good['b']]"),
    ("a tensor for a tuple", "[good['x'], good['x'], good['l'], good['f'], good['b']]"),
    ("ADT with a foreign tag", "[good['x'], good['t'], ADT(12345, []), good['f'], good['b']]"),
    (
        "ADT with too few fields",
        "[good['x'], good['t'], ADT(cons_tag, [tvm.nd.array(np.ones(2, 'float32'))]), good['f'], good['b']]",
    ),
    (
        "ADT with a wrong field deep inside",
        "[good['x'], good['t'], cons(np.ones(2, 'float32'), cons(np.ones(2, 'float32'), cons(np.ones(3, 'float32'), nil()))), good['f'], good['b']]",
    ),
    ("a tuple for an ADT", "[good['x'], good['t'], (1, 2), good['f'], good['b']]"),
    ("a tensor for a function", "[good['x'], good['t'], good['l'], good['x'], good['b']]"),
    ("None for a function", "[good['x'], good['t'], good['l'], None, good['b']]"),
    ("an int array for a bool", "[good['x'], good['t'], good['l'], good['f'], np.array(1, 'int32')]"),
    ("a float for an int32 scalar", "[good['x'], (1.5, np.zeros(2, 'int64')), good['l'], good['f'], good['b']]"),
    ("an int32 overflow", "[good['x'], (2**40, np.zeros(2, 'int64')), good['l'], good['f'], good['b']]"),
    ("a dict for a tuple", "[good['x'], {'a': 1}, good['l'], good['f'], good['b']]"),
    (
        "a function returning the wrong shape",
        "[good['x'], good['t'], good['l'], lambda v: tvm.nd.array(np.ones(3, 'float32')), good['b']]",
    ),
    ("a function returning None", "[good['x'], good['t'], good['l'], lambda v: None, good['b']]"),
]

DRIVER = '''
import json, numpy as np, tvm, relay_aot
from tvm.runtime.container import ADT
mod = tvm.relay.parse({program!r})
compiled = relay_aot.compile(mod, backend={backend!r})
cons_tag = mod.get_type("List")[1].tag
nil_tag = mod.get_type("List")[2].tag
def nil(): return ADT(nil_tag, [])
def cons(h, t): return ADT(cons_tag, [tvm.nd.array(h) if isinstance(h, np.ndarray) else h, t])
good = dict(x=np.ones((2, 3), "float32"), t=(np.int32(4), np.arange(2, dtype="int64")),
            l=cons(np.ones(2, "float32"), nil()), f=lambda v: tvm.nd.array(v.numpy() * 2), b=True)
assert compiled(*[good[k] for k in "xtlfb"])[2].numpy().tolist() == [2.0, 2.0]
def to_tvm(value):
    """What a C++ or raw-FFI caller would pass: TVM objects only."""
    if callable(value):
        return tvm.runtime.convert(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return tvm.nd.array(np.asarray(value))
    if isinstance(value, tuple):
        return tvm.runtime.container.tuple_object([to_tvm(v) for v in value])
    return value
results = []
for name, expr in {cases!r}:
    args = eval(expr)
    outcomes = []
    for how, call in (("CompiledModule", compiled), ("raw PackedFunc", compiled.entry)):
        try:
            if how == "raw PackedFunc":
                args = [to_tvm(a) for a in args]
            call(*args)
            outcomes.append((how, "no error"))
        except Exception as err:
            outcomes.append((how, type(err).__name__ + ": " + str(err).strip().splitlines()[-1][:300]))
    results.append((name, outcomes))
print(json.dumps(results))
'''


@pytest.mark.parametrize("backend", ["cpp"])
def test_malformed_calls_raise_clean_exceptions(backend):
    results = run_isolated(DRIVER.format(program=SIGNATURE_PROGRAM, backend=backend, cases=MALFORMED))
    assert len(results) == len(MALFORMED) >= 20
    problems = []
    for name, outcomes in results:
        for how, outcome in outcomes:
            if outcome == "no error" or not outcome.split(":")[0].endswith("Error"):
                problems.append(f"{name} via {how}: {outcome}")
    assert not problems, "\n".join(problems)


def test_malformed_call_messages_name_the_parameter():
    results = dict(run_isolated(DRIVER.format(program=SIGNATURE_PROGRAM, backend="cpp", cases=MALFORMED)))
    via_python = {name: dict(outcomes)["CompiledModule"] for name, outcomes in results.items()}
    via_packed = {name: dict(outcomes)["raw PackedFunc"] for name, outcomes in results.items()}
    assert "%x" in via_python["wrong shape"] and "(3, 2)" in via_python["wrong shape"]
    assert "%x" in via_packed["wrong shape"] and "(3, 2)" in via_packed["wrong shape"]
    assert via_packed["ADT with a wrong field deep inside"].startswith("ArgumentValueError")
    assert ".Cons[1].Cons[1].Cons[0]" in via_packed["ADT with a wrong field deep inside"]
    assert "%l" in via_python["ADT with a foreign tag"]
    assert "ArgumentTypeError" in via_packed["a function returning None"]


def test_kernel_failures_surface_as_kernel_error():
    outcome = run_isolated(
        '''
        import json, numpy as np, tvm, relay_aot
        mod = tvm.relay.parse("""
        #[version = "0.0.5"]
        def @main(%x: Tensor[(2, 3), float32]) { tanh(%x) }
        """)
        compiled = relay_aot.compile(mod)
        # a view with a byte offset: TVM's kernels assert that offsets are zero
        view = tvm.nd.array(np.arange(12, dtype="float32"))._create_view((2, 3), relative_byte_offset=8)
        try:
            compiled(view)
            print(json.dumps("no error"))
        except relay_aot.KernelError as err:
            print(json.dumps(str(err).strip().splitlines()[-1]))
        '''
    )
    # the message names the kernel and its arguments' shapes, without TVM's "KernelError: " prefix
    assert outcome.startswith("kernel default_k0_fused_fast_tanh failed on arguments of shapes (2, 3), (2, 3)")
    assert "byte_offset" in outcome


DEEP_PROGRAM = """
#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @range(%i: int64, %n: int64) -> List[int64] {
  if (greater_equal(%i, %n)) { Nil } else { Cons(%i, @range(add(%i, 1i64), %n)) }
}
def @sum(%l: List[int64]) -> int64 {
  match (%l) { Cons(%h, %t) => add(%h, @sum(%t)), Nil => 0i64 }
}
def @main(%n: int64) -> (int64, List[int64]) { let %l = @range(0i64, %n); (@sum(%l), %l) }
"""


def test_deep_non_tail_recursion_and_deep_data():
    """200,000 nested calls building and summing a list; the list is freed without recursion."""
    result = run_isolated(
        f"""
        import json, threading, numpy as np, tvm, relay_aot
        compiled = relay_aot.compile(tvm.relay.parse({DEEP_PROGRAM!r}))
        n = 200_000
        total, lst = compiled(np.int64(n))
        out = {{"main": int(total.numpy())}}
        del lst  # 200,000 nested ADTs, freed from Python
        # a thread with a small stack (256 KiB) recurses just as deep
        threading.stack_size(256 * 1024)
        def work():
            out["thread"] = int(compiled(np.int64(n))[0].numpy())
        t = threading.Thread(target=work)
        t.start(); t.join()
        print(json.dumps(out))
        """
    )
    assert result == {"main": 200_000 * 199_999 // 2, "thread": 200_000 * 199_999 // 2}


def test_deep_recursion_after_the_first_calling_thread_exits():
    """The first thread to call a library gives its stack checks the fast path (stack.h's
    safe_range); when it exits, threads whose stacks take its place still recurse safely."""
    result = run_isolated(
        f"""
        import json, threading, numpy as np, tvm, relay_aot
        compiled = relay_aot.compile(tvm.relay.parse({DEEP_PROGRAM!r}))
        out = []
        def work(n):
            out.append(int(compiled(np.int64(n))[0].numpy()) == n * (n - 1) // 2)
        for size, n in ((8 << 20, 10), (256 * 1024, 200_000), (8 << 20, 200_000), (64 << 20, 200_000)):
            threading.stack_size(size)
            t = threading.Thread(target=work, args=(n,))
            t.start(); t.join()
        work(200_000)
        print(json.dumps(out))
        """
    )
    assert result == [True] * 5


def test_concurrent_calls_allocate_and_free_across_threads():
    """Threads call one library at once (the GIL is released during a call), each building and
    dropping lists; the first caller, which owns the process-wide block and cell caches
    (memory.h's per_thread), exits midway, and lists made on one thread die on another."""
    result = run_isolated(
        f"""
        import json, threading, numpy as np, tvm, relay_aot
        compiled = relay_aot.compile(tvm.relay.parse({DEEP_PROGRAM!r}))
        ok, kept = [], []
        def work(rounds, n):
            for i in range(rounds):
                total, lst = compiled(np.int64(n + i))
                ok.append(int(total.numpy()) == (n + i) * (n + i - 1) // 2)
                kept.append(lst)  # freed later, by another thread
        first = threading.Thread(target=work, args=(20, 3000))
        first.start(); first.join()  # the owner of the process-wide caches exits
        threads = [threading.Thread(target=work, args=(30, 2000 + 500 * k)) for k in range(4)]
        for t in threads: t.start()
        kept.clear()
        work(30, 1000)
        for t in threads: t.join()
        kept.clear()
        print(json.dumps([len(ok), all(ok)]))
        """
    )
    assert result == [170, True]


def test_recursion_beyond_the_limit_raises():
    result = run_isolated(
        f"""
        import json, numpy as np, tvm, relay_aot
        compiled = relay_aot.compile(tvm.relay.parse({DEEP_PROGRAM!r}))
        try:
            compiled(np.int64(1_000_000))
            print(json.dumps("no error"))
        except relay_aot.RecursionDepthError as err:
            print(json.dumps(str(err).strip().splitlines()[-1]))
        """,
        env={"RELAY_AOT_MAX_STACK_MB": "64"},
    )
    assert result.startswith("the program recursed deeper than relay_aot's limit of 64 MiB")


def test_concurrent_calls_from_many_threads():
    result = run_isolated(
        f"""
        import json, numpy as np, tvm, relay_aot
        from concurrent.futures import ThreadPoolExecutor
        compiled = relay_aot.compile(tvm.relay.parse({DEEP_PROGRAM!r}))
        def job(n):
            return int(compiled(np.int64(n))[0].numpy()) == n * (n - 1) // 2
        with ThreadPoolExecutor(8) as pool:
            ok = list(pool.map(job, [1000 + 37 * i for i in range(200)]))
        print(json.dumps(all(ok) and len(ok) == 200))
        """
    )
    assert result is True


MEMORY_PROGRAM = """
#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @main(%x: Tensor[(4), float32]) {
  let %r = ref(%x);
  let %build = fn (%i: int32, %acc: List[Tensor[(4), float32]]) -> List[Tensor[(4), float32]] {
    if (equal(%i, 0)) { %acc } else { %build(subtract(%i, 1), Cons(add(ref_read(%r), %x), %acc)) }
  };
  let %total = fn (%l: List[Tensor[(4), float32]]) -> Tensor[(4), float32] {
    match (%l) { Cons(%h, %t) => add(%h, %total(%t)), Nil => %x }
  };
  let %u = ref_write(%r, %total(%build(5, Nil)));
  let %scale = fn (%y: Tensor[(4), float32]) -> Tensor[(4), float32] { multiply(%y, ref_read(%r)) };
  (%scale, %build, ref_read(%r), %build(3, Nil), %r)
}
"""


def test_memory_stays_flat_over_many_calls():
    """ADTs, closures, recursive closures and references are all freed: RSS does not grow."""
    grown_mb = run_isolated(
        f"""
        import gc, json, numpy as np, psutil, tvm, relay_aot
        compiled = relay_aot.compile(tvm.relay.parse({MEMORY_PROGRAM!r}))
        x = tvm.nd.array(np.ones(4, "float32"))
        entry = compiled.entry  # the raw PackedFunc: measure the library, not Python wrappers
        for _ in range(2000):
            entry(x)
        gc.collect()
        before = psutil.Process().memory_info().rss
        for _ in range(100_000):
            result = entry(x)
            result[0](x)
        del result
        gc.collect()
        print(json.dumps((psutil.Process().memory_info().rss - before) / 2**20))
        """
    )
    assert grown_mb < 20, f"RSS grew by {grown_mb:.1f} MB over 100,000 calls"


def test_hostile_names_never_reach_generated_source_unescaped(backend):
    """Names with quotes, backslashes, newlines, comment markers, keywords, unicode, empty and
    duplicate names compile, run, and appear in the source only escaped."""
    import numpy as np
    import tvm
    from tvm import relay

    import relay_aot
    from relay_aot import testing

    hostile = [
        'a"b',
        "back\\slash",
        "new\nline",
        "*/ x = 1; /*",
        "int",
        "class",
        "ünïcödé",
        "",
        "x",
        "x",
        "tri??/graph",
        "end\\",
        "#include <x>",
        "}",
        "%%",
    ]
    mod = tvm.IRModule()
    adt = relay.GlobalTypeVar('T"ype */\n')
    ctor_a = relay.Constructor('Mk"A\\', [relay.TensorType((2,), "float32")], adt)
    ctor_b = relay.Constructor("*/B\n", [], adt)
    mod[adt] = relay.TypeData(adt, [], [ctor_a, ctor_b])
    params = [relay.var(n, shape=(2,), dtype="float32") for n in hostile]
    total = params[0]
    for p in params[1:]:
        total = relay.add(total, p)
    inner = relay.var('in"ner\n', shape=(2,), dtype="float32")
    helper = relay.GlobalVar('he"lp\\er */\n')
    mod[helper] = relay.Function([inner], relay.multiply(inner, relay.const(2.0)))
    bound = relay.var('l"et\n', shape=(2,), dtype="float32")
    pattern_var = relay.var("p*/at\\", shape=(2,), dtype="float32")
    match = relay.Match(
        ctor_a(bound),
        [
            relay.Clause(relay.PatternConstructor(ctor_a, [relay.PatternVar(pattern_var)]), helper(pattern_var)),
            relay.Clause(relay.PatternConstructor(ctor_b, []), bound),
        ],
    )
    mod["main"] = relay.Function(params, relay.Let(bound, total, relay.Tuple([match, ctor_b()])))
    args = [np.full(2, i, "float32") for i in range(len(hostile))]
    compiled = relay_aot.compile(mod, backend=backend)
    testing.check_equivalence(mod, args, backends=[backend])
    import re

    # escape sequences the emitters write (\xNN in comments, \ooo in C++ strings, repr in Python)
    source = re.sub(r"\\x[0-9a-f]{2}|\\[0-7]{3}|\\[\\'\"nt]", "~", compiled.source)
    for name in hostile + ['T"ype */\n', 'Mk"A\\', "*/B\n", 'he"lp\\er */\n', 'in"ner\n', "p*/at\\"]:
        unsafe = any(c in name for c in '"\\\n') or "*/" in name or "??" in name
        if unsafe:
            assert name not in source, f"{name!r} reached the generated source unescaped"


def test_integer_division_by_zero_is_an_exception():
    result = run_isolated(
        '''
        import json, numpy as np, tvm, relay_aot
        compiled = relay_aot.compile(tvm.relay.parse("""
        #[version = "0.0.5"]
        def @main(%a: int32, %b: int32) { (divide(%a, %b), floor_mod(%a, %b)) }
        """))
        out = [int(v.numpy()) for v in compiled(np.int32(-7), np.int32(2))]
        try:
            compiled(np.int32(1), np.int32(0))
        except ZeroDivisionError as err:
            out.append(str(err).strip().splitlines()[-1])
        print(json.dumps(out))
        '''
    )
    assert result[:2] == [-3, 1] and result[2].endswith("integer division by zero")


KERNEL_BUILD_DRIVER = """
import json, os, signal, threading, tvm, relay_aot
from tvm import relay
from relay_aot import kernels
from relay_aot.kernels import isolated
x = relay.var("x", shape=(3,), dtype="float32")
h = relay.var("h", shape=(10, 4), dtype="float16")
mod = tvm.IRModule.from_expr(relay.Function([x, h], relay.Tuple([relay.exp(x), relay.erf(h)])))
real_build = kernels._build_lowered  # the kernel build's call into TVM
def build_with(fail):
    def build(mod, *args, **kwargs):
        if any("erf" in gvar.name_hint for gvar in mod.get_global_vars()):
            fail()
        return real_build(mod, *args, **kwargs)
    return build
seen = []  # what a setup records
{setup}
out = []
for backend in ("cpp", "python"):
    try:
        relay_aot.compile(mod, backend=backend, opt_level={opt_level}, cache=False)
        out.append("compiled")
    except relay_aot.CompileError as err:
        out.append(str(err).splitlines()[0].split("; the sources and build.ninja are kept in")[0])
print(json.dumps(out + seen))
"""


def _kernel_build(setup: str = "", opt_level: int = 3) -> list[str]:
    """The CompileError of each backend (or "compiled"), its first line without the C++
    backend's note on the kept sources, in a fresh process (run_isolated fails the test if that
    process does not exit normally)."""
    return run_isolated(KERNEL_BUILD_DRIVER.format(setup=setup, opt_level=opt_level))


def test_a_kernel_build_that_aborts_is_a_compile_error_naming_the_kernel():
    # float16 erf without Legalize (opt_level 0): TVM's LLVM code generator fails on it halfway
    # through, and LLVM, built with assertions, aborts the process that built it.
    for message in _kernel_build(opt_level=0):
        assert message.startswith("TVM "), message
        assert (
            "building the fused kernel of erf (default_k1_fused_erf)" in message
            or "failed to build the fused kernel of erf (default_k1_fused_erf)" in message
        ), message


def test_a_kernel_build_that_crashes_is_a_compile_error_naming_the_kernel():
    messages = _kernel_build("kernels._build_lowered = build_with(lambda: os.kill(os.getpid(), signal.SIGSEGV))")
    for message in messages:
        assert message.startswith(
            "TVM crashed (SIGSEGV) building the fused kernel of cast, erf (default_k1_fused_cast_erf"
        ), message


def test_a_kernel_build_that_raises_is_a_compile_error_with_its_message():
    messages = _kernel_build(
        "def fail(): raise tvm.error.TVMError('no lowering for this intrinsic')\nkernels._build_lowered = build_with(fail)"
    )
    for message in messages:
        assert message.startswith("TVM failed to build the fused kernel of cast, erf"), message
        assert message.endswith("TVMError: no lowering for this intrinsic"), message


#: A setup: the module gets more kernels, two of them worth a process of their own here, and
#: the parts' builds are recorded (how many children each build ran in).
IN_PARTS = """
os.environ["RELAY_AOT_JOBS"] = "2"
kernels.SHARE_COST = 2
mod = tvm.IRModule.from_expr(relay.Function([x, h], relay.Tuple(
    [relay.exp(x), relay.erf(h), relay.tanh(relay.const(2.0) * x), relay.sigmoid(relay.sqrt(x))])))
real_run_all = isolated.run_all
def run_all(builds, *args):
    seen.append(len(builds))
    return real_run_all(builds, *args)
isolated.run_all = run_all
"""


def test_kernels_are_built_in_parts_at_once():
    # Config.jobs children, each lowering and building a share of the kernels (the C++ backend's
    # object file; the Python backend builds its kernels into memory, in one piece)
    out = _kernel_build(IN_PARTS)
    assert out[:2] == ["compiled", "compiled"], out
    assert 2 in out[2:], out


def test_a_part_that_fails_is_built_again_in_one_piece_naming_the_kernel():
    out = _kernel_build(IN_PARTS + "kernels._build_lowered = build_with(lambda: os.kill(os.getpid(), signal.SIGSEGV))")
    for message in out[:2]:
        assert message.startswith("TVM crashed (SIGSEGV) building the fused kernel of cast, erf"), message
    assert 2 in out[2:], out  # the parts were tried first


def test_a_kernel_build_that_hangs_is_stopped():
    # A deadlocked child uses no CPU time: it is killed after isolated.STALL_SECONDS.
    messages = _kernel_build("isolated.STALL_SECONDS = 2\nkernels._build_lowered = build_with(threading.Event().wait)")
    assert messages == ["TVM made no progress (no CPU time for 2 s, killed) building the kernels"] * 2


def _adds(k: float, name: str):
    import tvm
    from tvm import relay

    import relay_aot

    x = relay.var("x", shape=(3,))
    return relay_aot.compile(tvm.IRModule.from_expr(relay.Function([x], relay.add(x, relay.const(k)))), name=name)


def test_reloading_a_replaced_library_says_why_and_never_runs_the_old_code(tmp_path, monkeypatch):
    """dlopen returns the library it loaded first for a path: a library exported over one this
    process loaded is refused by relay_aot.load, with another model name or the same."""
    import shutil

    import numpy as np

    import relay_aot

    zeros = np.zeros(3, "float32")
    path = tmp_path / "m.so"
    _adds(1.0, "a").export_library(path)
    assert relay_aot.load(path)(zeros).numpy().tolist() == [1.0] * 3
    for k, name in ((2.0, "b"), (3.0, "a")):
        with pytest.warns(RuntimeWarning, match="replaces a library this process has loaded"):
            _adds(k, name).export_library(path)
        with pytest.raises(
            ValueError,
            match=r"m\.so: this process already loaded a library from this path( \(.*\))?, and the "
            r"file has been replaced since: .* Load the new file from another path",
        ):
            relay_aot.load(path)
        # through a relative path or a symbolic link: the same file for the loader
        monkeypatch.chdir(tmp_path)
        (tmp_path / f"link-{name}.so").symlink_to(path)
        for other in ("m.so", f"link-{name}.so"):
            with pytest.raises(ValueError, match=rf"this path \({re.escape(os.path.realpath(path))}\)"):
                relay_aot.load(other)
        copy = shutil.copy(path, tmp_path / f"copy-{name}.so")
        assert relay_aot.load(copy)(zeros).numpy().tolist() == [k] * 3


def test_a_library_loaded_by_tvm_is_known_too(tmp_path):
    """The loader is asked, not a list relay_aot keeps: a load by tvm.runtime.load_module counts."""
    import tvm

    import relay_aot

    path = tmp_path / "t.so"
    _adds(1.0, "t").export_library(path)
    tvm.runtime.load_module(str(path))
    assert relay_aot.runtime.module.stale_load(path) is None  # loaded, but the file is the same
    with pytest.warns(RuntimeWarning, match="replaces a library this process has loaded"):
        _adds(2.0, "t").export_library(path)
    with pytest.raises(ValueError, match="already loaded a library from this path"):
        relay_aot.load(path)


def test_a_division_by_an_extent_is_checked_where_it_runs():
    """A kernel dividing by an extent known on entry fails with the check, instead of SIGFPE,
    when the division runs; inside loops that run zero times it never runs, and is no error."""
    import numpy as np
    import tvm

    from relay_aot.kernels.divisions import MESSAGE, guard_divisions

    n, m = tvm.te.var("n"), tvm.te.var("m")
    data = tvm.te.placeholder((m,), name="data")
    out = tvm.te.compute((n,), lambda i: data[tvm.tir.indexmod(i, m)], name="out")
    func = guard_divisions(tvm.te.create_prim_func([data, out]).with_attr("global_symbol", "wrap"))
    assert MESSAGE in str(func.script())
    kernel = tvm.build(func, target="llvm")
    dev = tvm.cpu()
    filled = tvm.nd.empty((5,), "float32", dev)
    kernel(tvm.nd.array(np.arange(2, dtype="float32")), filled)
    assert filled.numpy().tolist() == [0, 1, 0, 1, 0]
    kernel(tvm.nd.empty((0,), "float32", dev), tvm.nd.empty((0,), "float32", dev))  # no loop, no division
    with pytest.raises(tvm.TVMError, match="division by zero"):
        kernel(tvm.nd.empty((0,), "float32", dev), tvm.nd.empty((3,), "float32", dev))

"""The kernel cache: a new library whose kernels were built before lowers and builds none.

Kernel builds are counted through ``builder.stats`` and, where it matters, by making TVM's
lowering fail if it is reached. Each test gets its own empty cache; the precompiled header is
off and units compile at ``-O0`` (see tests/test_build.py for why).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot import builder, kernels
from relay_aot.request import Request

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_AOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RELAY_AOT_PCH", "0")
    monkeypatch.setenv("RELAY_AOT_CXXFLAGS", "-O0")
    monkeypatch.delenv("RELAY_AOT_PROGRESS", raising=False)
    return tmp_path / "cache"


def module(constant, limit: int) -> tvm.IRModule:
    """``if n < limit: x else (x + constant) * 2``: one kernel; ``limit`` is control code only
    (0-d arithmetic is native C++)."""
    x = relay.var("x", shape=(4,), dtype="float32")
    n = relay.var("n", shape=(), dtype="int32")
    kernel = relay.multiply(relay.add(x, relay.const(np.float32(constant))), relay.const(np.float32(2)))
    body = relay.If(relay.less(n, relay.const(limit, "int32")), x, kernel)
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, n], body)))


X = np.arange(4, dtype="float32")


def run(mod: tvm.IRModule, **options) -> tuple[list, relay_aot.CompiledModule]:
    compiled = relay_aot.compile(mod, **options)
    return compiled(X, np.int32(9)).numpy().tolist(), compiled


def expected(constant) -> list:
    return ((X + np.float32(constant)) * np.float32(2)).tolist()


def counts() -> tuple[int, int]:
    return builder.stats.kernel_builds, builder.stats.kernel_hits


def no_lowering(monkeypatch) -> None:
    def fail(self, progress=None):
        raise AssertionError("kernels were lowered again")

    monkeypatch.setattr(kernels.KernelTable, "lower_all", fail)


def test_a_module_differing_only_in_control_code_lowers_no_kernel(monkeypatch):
    out, first = run(module(1.5, 1))
    assert out == expected(1.5) and not first.build_result.cached
    builds, hits = counts()
    no_lowering(monkeypatch)
    out, second = run(module(1.5, 3))  # another library: its C++ differs
    assert not second.build_result.cached and second.build_result.key != first.build_result.key
    assert counts() == (builds, hits + 1)
    assert out == expected(1.5)
    assert second(X, np.int32(2)).numpy().tolist() == X.tolist()  # its own control code


def test_kernels_differing_only_in_a_constant_share_nothing():
    a, b = np.float32(1.0000001), np.float32(1.0000002)
    assert a != b and module(a, 1).astext() == module(b, 1).astext()  # text rounds them alike
    out_a, _ = run(module(a, 1))
    builds, hits = counts()
    out_b, _ = run(module(b, 1))
    assert counts() == (builds + 1, hits)
    assert out_a == expected(a) and out_b == expected(b) and out_a != out_b


def test_a_kernel_key_collision_is_caught_by_comparing_the_functions(monkeypatch):
    """Even if two kernel sets had the same digest (64-bit structural hashes colliding), the
    cached object is checked against the functions it was built from, not trusted."""
    monkeypatch.setattr(kernels.KernelTable, "digest", lambda self: "one digest for every kernel set")
    a, b = np.float32(1.0000001), np.float32(1.0000002)
    out_a, _ = run(module(a, 1))
    builds, hits = counts()
    out_b, _ = run(module(b, 2))  # other control code too: the library key differs
    assert counts() == (builds + 1, hits)
    assert out_a == expected(a) and out_b == expected(b)
    no_lowering(monkeypatch)
    out_b, _ = run(module(b, 3))  # the entry now holds b's kernels
    assert counts() == (builds + 1, hits + 1) and out_b == expected(b)


def test_a_damaged_kernel_object_is_rebuilt_not_linked(private_cache):
    run(module(2.5, 1))
    (obj,) = (private_cache / "kernels").glob("*/*.o")
    obj.write_bytes(obj.read_bytes()[:1000])
    builds, hits = counts()
    out, _ = run(module(2.5, 2))
    assert counts() == (builds + 1, hits) and out == expected(2.5)
    run(module(2.5, 3))  # the rebuilt entry is used again
    assert counts() == (builds + 1, hits + 1)


def test_cache_false_neither_reads_nor_fills_the_kernel_cache(private_cache):
    run(module(3.5, 1), cache=False)
    assert not list((private_cache / "kernels").glob("*/*.o"))
    run(module(3.5, 2))
    builds, hits = counts()
    out, _ = run(module(3.5, 3), cache=False)
    assert counts() == (builds + 1, hits) and out == expected(3.5)
    relay_aot.clear_cache()
    assert not (private_cache / "kernels").exists()


def test_identity_matches_structurally_equal_kernels_only():
    def table(constant, limit):
        _, kernel_table = Request.make(module(constant, limit)).lower()
        return kernel_table

    a = table(np.float32(1.0000001), 1)
    assert a.matches(a.identity())
    assert a.matches(table(np.float32(1.0000001), 5).identity())  # control code is not in it
    assert not a.matches(table(np.float32(1.0000002), 1).identity())
    assert not a.matches("not json") and not a.matches(tvm.ir.save_json(tvm.runtime.convert([])))


def test_the_lstm_with_new_control_code_reuses_its_kernels(monkeypatch):
    from benchmarks.compile_time import with_new_control_code

    mod = tvm.relay.parse((ROOT / "examples" / "lstm.relay").read_text())
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, shape).astype("float32") for shape in [(10, 1, 8), (64, 8), (64, 16), (64,)]]
    first = relay_aot.compile(mod)
    builds, hits = counts()
    no_lowering(monkeypatch)
    second = relay_aot.compile(with_new_control_code(mod))
    assert counts() == (builds, hits + 1) and not second.build_result.cached
    for x, y in zip(first(*args), second(*args)):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    vm = relay.create_executor("vm", mod=mod, target="llvm").evaluate()(*args)
    for x, y in zip(second(*args), vm):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-5, atol=1e-6)

"""float32 ``tanh``, ``exp`` and ``sigmoid`` run in vector registers (passes/vector_math.py,
kernels/vector_exp.py): their kernels call no C library function; against float64, at least as
accurate as TVM's scalar ones (within a fraction of an ulp), with the same results at the edges
(overflow, denormals, NaN, infinities); other dtypes are left alone, and so is TVM's own build
in the same process."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot.compiler import generate_source

FLOAT32_ULP = 2.0**-23
LIBM = {"expf", "exp", "tanhf", "tanh"}


def _libm_calls(library) -> set:
    """The C library's exponential functions a shared library calls."""
    listed = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1].split("@")[0] for line in listed.stdout.splitlines()} & LIBM


def _module(op, dtype: str, n: int) -> tvm.IRModule:
    x = relay.var("x", shape=(n,), dtype=dtype)
    return tvm.IRModule.from_expr(relay.Function([x], op(x)))


def _tvm_scalar(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    """TVM's own kernels for ``mod`` (its interpreter, no relay_aot pass)."""
    with tvm.transform.PassContext(opt_level=0):
        return relay.create_executor("debug", mod=mod, target="llvm").evaluate()(x).numpy().astype("float64")


EDGES = [
    np.nan,
    np.inf,
    -np.inf,
    0.0,
    -0.0,
    1e-30,
    -1e-7,
    3e-4,
    5e-4,
    8.99,
    9.01,
    -50.0,
    1e30,
    88.72,
    88.73,
    89.0,
    -87.5,
    -103.9,
    -104.0,
    -120.0,
]

# op, reference in float64, largest relative error allowed (in float32 ulps) over the normal range
CASES = {
    "tanh": (relay.tanh, np.tanh, 4.6),
    "exp": (relay.exp, np.exp, 1.5),
    "sigmoid": (relay.sigmoid, lambda x: 1 / (1 + np.exp(-x)), 2.5),
}


@pytest.mark.parametrize("name", list(CASES))
def test_float32_functions_are_vectorized_and_accurate(name):
    op, reference, ulps = CASES[name]
    x = np.concatenate([np.linspace(-110, 95, 40001), np.linspace(-1, 1, 20001), EDGES]).astype("float32")
    mod = _module(op, "float32", x.size)
    compiled = relay_aot.compile(mod)
    assert not _libm_calls(compiled.library_path), "the C library is still called"
    got = compiled(x).numpy().astype("float64")
    with np.errstate(over="ignore"):
        ref = reference(x.astype("float64"))
        theirs = _tvm_scalar(mod, x)
    # the edges are TVM's: NaN, +-inf, 0 and denormals where its kernels give them
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(theirs))
    normal = np.isfinite(ref) & (np.abs(ref) > 1.2e-38) & (np.abs(ref) < 3.4e38)
    relative = np.abs(got - ref)[normal] / np.abs(ref)[normal]
    assert relative.max() <= ulps * FLOAT32_ULP, (relative.max() / FLOAT32_ULP, x[normal][relative.argmax()])
    # denormal results: the exact value's, or TVM's (whose sigmoid divides 1 by an exp that
    # overflowed, giving 0)
    tiny = np.isfinite(ref) & (np.abs(ref) <= 1.2e-38)
    close = (np.abs(got - ref) <= 2e-45) | (got == theirs)
    assert close[tiny].all(), list(
        zip(x[tiny][~close[tiny]][:5], got[tiny][~close[tiny]][:5], theirs[tiny][~close[tiny]][:5])
    )


def test_tanh_is_more_accurate_than_tvms_near_zero():
    # 1 - exp(-2x) cancels: TVM's tanh keeps few digits of small values, fast_tanh keeps them
    x = np.linspace(-1e-2, 1e-2, 2001).astype("float32")
    x = x[x != 0]
    mod = _module(relay.tanh, "float32", x.size)
    ref = np.tanh(x.astype("float64"))
    ours = np.abs(relay_aot.compile(mod)(x).numpy() - ref) / np.abs(ref)
    theirs = np.abs(_tvm_scalar(mod, x) - ref) / np.abs(ref)
    assert ours.max() < 4 * FLOAT32_ULP < theirs.max()


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_other_dtypes_keep_tvms_tanh(dtype):
    assert "fused_tanh" in generate_source(_module(relay.tanh, dtype, 8), name="t")


@pytest.mark.parametrize("name", list(CASES))
def test_float64_calls_the_c_library(name):
    assert _libm_calls(relay_aot.compile(_module(CASES[name][0], "float64", 8)).library_path) == {"exp"}


def test_tvms_own_build_in_the_same_process_is_unchanged():
    """The vector exp is a lowering rule in force only while relay_aot builds kernels."""
    mod = _module(relay.exp, "float32", 64)
    relay_aot.compile(mod)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    assert "expf" in lib.get_lib().get_source("asm")

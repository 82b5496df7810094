"""Failures the program generator found that a ``tests/programs`` file cannot pin (they need
compile options or a sequence of compiles)."""

import numpy as np
import pytest
import tvm

import relay_aot

CONSTANT_CAST = tvm.relay.parse("""
#[version = "0.0.5"]
def @main(%a: float64) -> Tensor[(2), bool] { cast(broadcast_to(3i64, shape=[2]), dtype="bool") }
""")

SCALAR_CAST = tvm.relay.parse("""
#[version = "0.0.5"]
def @main(%a: float64) -> bool { cast(3i64, dtype="bool") }
""")


def test_a_kernel_tvm_cannot_lower_is_reported_every_time(backend):
    """Without FoldConstant (opt_level 1) TVM cannot lower ``cast(<3i64 tensor>, dtype="bool")``. The
    failure is an UnsupportedError naming TVM's check, and it stays one: TVM's TE compiler
    caches the failed function, which once made the next compile produce an empty kernel
    module ("Expected a non-empty IRModule")."""
    for _ in range(2):
        with pytest.raises(
            relay_aot.UnsupportedError, match=r"could not lower the fused kernel of broadcast_to, cast: .*Check failed"
        ):
            relay_aot.compile(CONSTANT_CAST, backend=backend, opt_level=1)
    folded = relay_aot.compile(CONSTANT_CAST, backend=backend)  # FoldConstant computes it instead
    assert folded(np.float64(0)).numpy().tolist() == [True, True]
    # 0-d, the same cast is native arithmetic and never reaches TVM's TE compiler
    assert bool(relay_aot.compile(SCALAR_CAST, backend=backend, opt_level=1)(np.float64(0)).numpy()) is True


GRID_SAMPLE_LINEAR = tvm.relay.parse("""
#[version = "0.0.5"]
def @main(%d: Tensor[(1, 1, 3, 2), float32], %g: Tensor[(1, 2, 2, 4), float32]) { image.grid_sample(%d, %g, method="linear") }
""")


def test_a_python_exception_inside_tvms_lowering_is_what_the_error_names(backend):
    """TOPI's grid_sample asserts its method. The error names that exception (as the VM's does),
    not the last line of the failing function's text, where TVM's message ends."""
    with pytest.raises(
        relay_aot.UnsupportedError,
        match=r"could not lower the fused kernel of image.grid_sample: "
        r"AssertionError: linear is not supported$",
    ):
        relay_aot.compile(GRID_SAMPLE_LINEAR, backend=backend)


@pytest.mark.parametrize("op", ["divide", "floor_divide", "trunc_divide", "floor_mod", "mod", "trunc_mod"])
@pytest.mark.parametrize("shape", [(4,), ()], ids=["tensor", "scalar"])
def test_a_float_division_by_a_constant_zero_is_ieees(op, shape, backend):
    """The dynamic campaign (seed 10532) found ``divide(x, 0f)`` failing to compile from
    ``opt_level`` 2: the zero, a constant by then, became an immediate of the kernel, and TVM's
    constant folding refuses a division by an immediate 0. Infinities and NaN, as at
    ``opt_level`` 0 and as numpy computes them."""
    values = np.array([1.0, -1.0, 0.0, np.nan], "float32").reshape(-1)[: int(np.prod(shape, dtype=int))]
    values = values.reshape(shape)
    x = tvm.relay.var("x", shape=shape, dtype="float32")
    y = getattr(tvm.relay, op)(x, tvm.relay.const(0.0, "float32"))
    mod = tvm.IRModule.from_expr(tvm.relay.Function([x], y))
    expected = {"divide": np.divide, "floor_divide": np.floor_divide, "trunc_divide": np.divide}.get(op)
    with np.errstate(all="ignore"):
        want = expected(values, np.float32(0)) if expected else np.full(shape, np.nan, "float32")
    for opt_level in (0, 3):
        got = relay_aot.compile(mod, backend=backend, opt_level=opt_level)(values).numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("divisor", [1e-45, -1e-45, 2e-39])
def test_a_float_division_by_a_denormal_constant_is_ieees(divisor, backend):
    """The same campaign, on: TVM rewrites a division by a constant into a product by its
    reciprocal, which for these denormals is past float32's largest value, and the kernel did
    not build ("Literal value 7.13624e+44 exceeds maximum of float32")."""
    values = np.array([1.0, -1.0, 0.0, 1e-40], "float32")
    x = tvm.relay.var("x", shape=(4,), dtype="float32")
    mod = tvm.IRModule.from_expr(tvm.relay.Function([x], tvm.relay.divide(x, tvm.relay.const(np.float32(divisor)))))
    with np.errstate(all="ignore"):
        want = values / np.float32(divisor)
    for opt_level in (0, 3):
        got = relay_aot.compile(mod, backend=backend, opt_level=opt_level)(values).numpy()
        np.testing.assert_array_equal(got, want)

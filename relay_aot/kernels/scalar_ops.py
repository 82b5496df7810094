"""The scalar operators: one row each, from which every table that mentions them comes.

A primitive function whose parameters and result are 0-d tensors and whose operators are all in
:data:`SCALAR_OPS` is computed natively instead of calling a kernel (``scalars.py`` recognises
it). Each row says everything about one operator:

* ``name`` and ``arity``: the Relay operator it translates;
* ``operands``: which dtypes it accepts -- ``"arith"`` (numbers, not bool), ``"integer"``
  (integers only), ``"logic"`` (bool only) or ``"any"``;
* ``cpp`` and ``python``: how the C++ backend (on C++ scalars) and the Python backend (on numpy
  scalars) spell it. A spelling is a template, or a dict of templates by dtype class (see
  :func:`spelling`). Templates fill ``{0}``, ``{1}``, ``{2}`` with the operands, ``{T}`` with
  the result type and ``{t}`` with the operand type, each in the backend's own language;
* ``kernel_only``: dtypes on which TVM's kernels compute something else than the native
  spelling would; those stay kernel calls, so that both backends agree with TVM.

Semantics follow TVM's LLVM code generator (``src/target/llvm/codegen_llvm.cc``): integers wrap,
``divide``/``mod`` truncate and ``floor_divide``/``floor_mod`` floor, floats are IEEE of the
operand's width. Integer division and modulo are defined once, in C++ (``int_div`` and friends in
``runtime_cpp/relay_aot/scalar.h``: zero divisors raise ``ZeroDivisionError``, where TVM's kernels
would trap); the Python backend calls those same functions through the ``_fastcall`` extension
(``integer(op, a, b)``).

Adding an operator is adding its row (and a test that runs it on both backends against TVM's
kernels, see ``tests/test_scalar_ops.py``)::

    ScalarOpSpec("bitwise_and", 2, "integer", cpp="static_cast<{T}>({0} & {1})", python="({0} & {1})"),
"""

from __future__ import annotations

import dataclasses

#: A template, or templates by dtype class (see :func:`spelling`).
Spelling = str | dict


@dataclasses.dataclass(frozen=True)
class ScalarOpSpec:
    """One scalar operator: its arity, the dtypes it takes, and its spelling in each backend."""

    name: str
    arity: int
    operands: str
    cpp: Spelling
    python: Spelling
    kernel_only: tuple[str, ...] = ()


def _integer_helper(op: str) -> dict:
    """Spellings of an integer operation defined in scalar.h (and reached from Python through it)."""
    return {"cpp": f"int_{op}<{{t}}>({{0}}, {{1}})", "python": f"integer('{op}', {{0}}, {{1}})"}


def _division(name: str, helper: str, cpp_float: str, python_float: str) -> ScalarOpSpec:
    integer = _integer_helper(helper)
    return ScalarOpSpec(
        name,
        2,
        "arith",
        cpp={"float": cpp_float, "*": integer["cpp"]},
        python={"float": python_float, "*": integer["python"]},
    )


def _compare(name: str, symbol: str) -> ScalarOpSpec:
    return ScalarOpSpec(name, 2, "any", cpp=f"({{0}} {symbol} {{1}})", python=f"({{0}} {symbol} {{1}})")


SCALAR_OPS: dict[str, ScalarOpSpec] = {
    op.name: op
    for op in [
        ScalarOpSpec("add", 2, "arith", cpp="static_cast<{T}>({0} + {1})", python="({0} + {1})"),
        ScalarOpSpec("subtract", 2, "arith", cpp="static_cast<{T}>({0} - {1})", python="({0} - {1})"),
        ScalarOpSpec("multiply", 2, "arith", cpp="static_cast<{T}>({0} * {1})", python="({0} * {1})"),
        _division("divide", "div", "({0} / {1})", "({0} / {1})"),
        _division("floor_divide", "floor_div", "std::floor({0} / {1})", "np.floor({0} / {1})"),
        _division("mod", "mod", "std::fmod({0}, {1})", "np.fmod({0}, {1})"),
        _division("floor_mod", "floor_mod", "({0} - std::floor({0} / {1}) * {1})", "({0} - np.floor({0} / {1}) * {1})"),
        # std::max on integers: the ternary repeats its operands, whole expressions when nested
        ScalarOpSpec(
            "maximum",
            2,
            "any",
            cpp={"float": "({0} > {1} ? {0} : {1})", "*": "std::max<{T}>({0}, {1})"},
            python="({0} if {0} > {1} else {1})",
        ),
        ScalarOpSpec(
            "minimum",
            2,
            "any",
            cpp={"float": "({0} < {1} ? {0} : {1})", "*": "std::min<{T}>({0}, {1})"},
            python="({0} if {0} < {1} else {1})",
        ),
        _compare("equal", "=="),
        # LLVM's ordered not-equal for floats: false when either side is NaN
        ScalarOpSpec(
            "not_equal",
            2,
            "any",
            cpp={"float": "({0} < {1} || {0} > {1})", "*": "({0} != {1})"},
            python={"float": "np.bool_({0} < {1} or {0} > {1})", "*": "({0} != {1})"},
        ),
        _compare("less", "<"),
        _compare("less_equal", "<="),
        _compare("greater", ">"),
        _compare("greater_equal", ">="),
        ScalarOpSpec("logical_and", 2, "logic", cpp="({0} && {1})", python="np.bool_({0} and {1})"),
        ScalarOpSpec("logical_or", 2, "logic", cpp="({0} || {1})", python="np.bool_({0} or {1})"),
        ScalarOpSpec("logical_not", 1, "logic", cpp="(!{0})", python="np.bool_(not {0})"),
        # TVM's kernels negate uint32 and uint64 to 0 (uint8 and uint16 wrap, as C++ and numpy do)
        ScalarOpSpec(
            "negative", 1, "arith", cpp="static_cast<{T}>(-{0})", python="(-{0})", kernel_only=("uint32", "uint64")
        ),
        ScalarOpSpec(
            "abs",
            1,
            "arith",
            cpp={"float": "std::fabs({0})", "signed": "static_cast<{T}>({0} < 0 ? -{0} : {0})", "unsigned": "{0}"},
            python="abs({0})",
        ),
        ScalarOpSpec("copy", 1, "any", cpp="{0}", python="{0}"),
        ScalarOpSpec(
            "cast",
            1,
            "any",
            cpp={"float->bool": "({0} < 0 || {0} > 0)", "*->bool": "({0} != 0)", "*": "static_cast<{T}>({0})"},
            python={"float->bool": "np.bool_({0} < 0 or {0} > 0)", "*->bool": "np.bool_({0} != 0)", "*": "np.{T}({0})"},
        ),
        ScalarOpSpec("where", 3, "any", cpp="({0} ? {1} : {2})", python="({1} if {0} else {2})"),
        # Shifts by amounts within the operand's width (beyond it, TVM's kernels compute LLVM's
        # poison value: no result to agree with). Right shifts of signed values are arithmetic,
        # as LLVM's ashr; left shifts wrap, shifted as unsigned (C++17's signed << is undefined
        # for negative values).
        ScalarOpSpec(
            "left_shift",
            2,
            "integer",
            cpp="static_cast<{T}>(static_cast<std::make_unsigned_t<{t}>>({0}) << {1})",
            python="({0} << {1})",
        ),
        ScalarOpSpec("right_shift", 2, "integer", cpp="static_cast<{T}>({0} >> {1})", python="({0} >> {1})"),
    ]
}

#: The integer operations ``integer(op, a, b)`` reaches in scalar.h, by the name the templates use.
INTEGER_HELPERS = ("div", "mod", "floor_div", "floor_mod")


def dtype_class(dtype: str) -> str:
    """``"bool"``, ``"float"``, ``"signed"`` or ``"unsigned"``."""
    if dtype == "bool":
        return "bool"
    if dtype.startswith("float"):
        return "float"
    return "unsigned" if dtype.startswith("uint") else "signed"


def spelling(op: ScalarOpSpec, language: str, operand_dtype: str, result_dtype: str) -> str:
    """The template of ``op`` in ``language`` (``"cpp"`` or ``"python"``) for these dtypes.

    A dict of templates is searched for ``"<operand class>-><result class>"``, then
    ``"*-><result class>"``, the operand's class, ``"int"`` (signed or unsigned), and ``"*"``.
    """
    choices = getattr(op, language)
    if isinstance(choices, str):
        return choices
    operand, result = dtype_class(operand_dtype), dtype_class(result_dtype)
    keys = [f"{operand}->{result}", f"*->{result}", operand, "int" if operand in ("signed", "unsigned") else "", "*"]
    return next(choices[k] for k in keys if k in choices)


def accepts(op: ScalarOpSpec, operand_dtypes: list[str], result_dtype: str) -> bool:
    """Whether ``op`` translates for these dtypes (``operands``: see the module docstring)."""
    dtypes = operand_dtypes + [result_dtype]
    if any(d in op.kernel_only for d in dtypes):
        return False
    if op.operands == "arith":
        return "bool" not in dtypes
    if op.operands == "integer":
        return all(dtype_class(d) in ("signed", "unsigned") for d in dtypes)
    if op.operands == "logic":
        return all(d == "bool" for d in operand_dtypes)
    return True

"""C spellings of the TIR intrinsics TVM's ``c`` target has no rule for, and of what it prints wrong.

TVM lowers a math intrinsic through its target's ``FLowerIntrinsic`` rule, falling back on
``default.FLowerIntrinsic``. LLVM has a rule (or an instruction) for each intrinsic TOPI's
kernels use; the default rules, which TVM's C code generator relies on, miss ``tir.fabs``,
``tir.trunc``, ``tir.exp2``, ``tir.exp10``, ``tir.popcount`` and ``tir.clz``, so a
kernel using one built for the host and aarch64 (LLVM) but not for the Cortex-M4, whose kernels
are TVM's C (``Unresolved call Op(tir.fabs)`` for a float ``abs``). The rules here print them
as C99 ``<math.h>`` functions and GCC builtins (every standalone toolchain is GCC-compatible).
``tir.fma`` has none on purpose: with a rule for it, TVM's ``LowerIntrin`` turns every float
``a * b + c`` into ``fma`` (and a rule printing ``a * b + c`` back recursed until the stack ran out).

They are in force only while relay_aot builds C kernels (:func:`building`, a :class:`.gate.Gate`):
elsewhere TVM's ``c`` target behaves as it did.

:func:`portable` then mends three things in the C TVM prints: it declares every extern function it
calls (``TVM_DLL double log2(double);``) after including ``<math.h>``, where newlib defines
``log2`` as a macro (a syntax error); it prints infinities and NaNs as ``inff``, ``inf``,
``nanf`` (``isinf`` and ``isfinite`` compare with one): undeclared identifiers; and its Cortex-M
DSP micro-kernels include ``<tvm/runtime/crt/error_codes.h>`` for the one code they return
(``kTvmErrorFunctionCallInvalidArg``), a header of TVM's C runtime that neither the TVM wheel
nor a package ships: an int8 package for the Cortex-M4 did not build.
"""

from __future__ import annotations

import re

import tvm
from tvm import tir

from ..gate import Gate


def _math(name: str):
    """``name`` of ``<math.h>``, its float32 form for float32 (``fabsf``); other dtypes are left
    as they are (TVM then reports the call it cannot print)."""

    def lower(call: tir.Call) -> tir.PrimExpr:
        dtype = str(call.dtype)
        if not _GATE.active() or dtype not in ("float32", "float64"):
            return call
        return tir.call_pure_extern(dtype, name + ("f" if dtype == "float32" else ""), *call.args)

    return lower


def _exp10(call: tir.Call) -> tir.PrimExpr:
    """``exp10`` is a GNU extension newlib lacks: ``pow(10, x)``."""
    dtype = str(call.dtype)
    if not _GATE.active() or dtype not in ("float32", "float64"):
        return call
    return tir.call_pure_extern(dtype, "powf" if dtype == "float32" else "pow", tir.const(10.0, dtype), call.args[0])


def _bits(builtin: str, zero_is_width: bool = False):
    """A GCC builtin on 32- or 64-bit integers (``__builtin_popcount``/``__builtin_popcountll``);
    ``zero_is_width``: the builtin is undefined at 0 (``clz``), where LLVM's rule gives the width."""

    def lower(call: tir.Call) -> tir.PrimExpr:
        x = call.args[0]
        dtype = str(x.dtype)
        if not _GATE.active() or dtype not in ("int32", "uint32", "int64", "uint64"):
            return call
        wide = dtype.endswith("64")
        unsigned = tir.Cast("uint64" if wide else "uint32", x)
        result = tir.call_pure_extern("int32", builtin + ("ll" if wide else ""), unsigned)
        if zero_is_width:
            result = tir.Select(x == tir.const(0, dtype), tir.const(64 if wide else 32, "int32"), result)
        return tir.Cast(str(call.dtype), result)

    return lower


RULES = {
    "tir.fabs": _math("fabs"),
    "tir.trunc": _math("trunc"),
    "tir.exp2": _math("exp2"),
    "tir.exp10": _exp10,
    "tir.popcount": _bits("__builtin_popcount"),
    "tir.clz": _bits("__builtin_clz", zero_is_width=True),
}


def _register() -> None:
    for op, rule in RULES.items():
        tvm.ir.register_intrin_lowering(op, target="c", f=rule, level=99)


_GATE = Gate(_register)
#: Within the block (on this thread), TVM's ``c`` target prints the intrinsics of :data:`RULES`.
building = _GATE.building


#: TVM's forward declaration of a function, as its C code generator prints each one.
_DECLARATION = re.compile(r'#ifdef __cplusplus\nextern "C"\n#endif\nTVM_DLL [^\n(]*?\b(\w+)\([^\n]*\);\n')
#: TVM's spelling of a non-finite float constant (``-inff`` keeps its sign outside).
_NON_FINITE = re.compile(r"(?<![\w.])(inff|inf|nanf|nan)(?![\w.])")
_C_NON_FINITE = {
    "inff": "__builtin_inff()",
    "inf": "__builtin_inf()",
    "nanf": '__builtin_nanf("")',
    "nan": '__builtin_nan("")',
}


#: TVM's C runtime header its Cortex-M DSP micro-kernels include, for one error code.
_CRT_ERROR_CODES = "#include <tvm/runtime/crt/error_codes.h>"
#: What stands in for it: the code's value in TVM's header (category 8, function calls; code 3).
_CRT_ERROR_CODE = """#ifndef kTvmErrorFunctionCallInvalidArg
/* TVM's C runtime error code for an invalid argument (tvm/runtime/crt/error_codes.h, not shipped) */
#define kTvmErrorFunctionCallInvalidArg 0x0803
#endif"""


def portable(source: str) -> str:
    """TVM's C ``source`` without its declarations of functions it does not define (``<math.h>``
    and the compiler declare them), with its non-finite constants spelled as GCC builtins, and
    without TVM's C runtime error-code header (module docstring)."""
    defined = set(re.findall(r"^TVM_DLL [^\n(]*?\b(\w+)\([^\n;]*\)\s*{", source, re.MULTILINE))
    source = _DECLARATION.sub(lambda m: m.group(0) if m.group(1) in defined else "", source)
    source = source.replace(_CRT_ERROR_CODES, _CRT_ERROR_CODE)
    return _NON_FINITE.sub(lambda m: _C_NON_FINITE[m.group(1)], source)

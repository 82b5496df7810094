"""Exceptions raised by relay_aot.

Compile-time problems derive from :class:`RelayAotError`. Everything a *call* of a compiled
program raises derives from ``tvm.error.TVMError``, as what TVM's executors raise does, so code
written for them catches it; each is also the builtin exception it stands for:

* :class:`ArgumentTypeError` (a ``TypeError``), :class:`ArgumentValueError` (a ``ValueError``):
  a value from outside does not fit the program's types;
* :class:`ShapeError` (a ``ValueError``): a shape computed at run time is invalid;
* :class:`KernelError`: a TVM kernel or shape function reported an error;
* :class:`MatchError`, :class:`RecursionDepthError`;
* :class:`IntegerDivisionByZero` (a ``ZeroDivisionError``), :class:`OutOfMemoryError` (a
  ``MemoryError``);
* :class:`CpuFeatureError`: the library was compiled for a CPU with features this one lacks
  (also raised by ``relay_aot.load``).

Native code reports an error as ``"<Kind>: <message>"``; TVM's FFI maps the kind to the class
registered under it with ``tvm.error.register_error``. (An exception raised by a Python function
the program called keeps its own class.)
"""

import tvm


class RelayAotError(Exception):
    """Base class of relay_aot's compile-time errors."""


class TypeCheckError(RelayAotError, tvm.error.DiagnosticError):
    """The Relay program does not type-check. Also TVM's ``DiagnosticError`` (a ``TVMError``),
    which ``relay.build`` raises for the same program, so code written for TVM catches it."""


class UnsupportedError(RelayAotError):
    """The program uses a Relay construct, type or operator relay_aot cannot compile."""


class CompileError(RelayAotError):
    """The host C++ compiler (or TVM's kernel compiler) failed.

    ``output`` holds the compiler's messages and ``source_dir`` the kept generated sources.
    """

    def __init__(self, message, output="", source_dir=None):
        super().__init__(message + (f"\n{output}" if output else ""))
        self.output = output
        self.source_dir = source_dir


@tvm.error.register_error
class MatchError(tvm.error.TVMError):
    """No clause of a Relay ``match`` accepted the value (an incomplete ``match?``)."""


@tvm.error.register_error
class KernelError(tvm.error.TVMError):
    """A compiled TVM kernel reported an error at run time."""


@tvm.error.register_error
class RecursionDepthError(tvm.error.TVMError):
    """The program recursed deeper than relay_aot's documented limit."""


@tvm.error.register_error("ZeroDivisionError")
class IntegerDivisionByZero(tvm.error.TVMError, ZeroDivisionError):
    """Integer ``divide``/``mod`` by zero in 0-d arithmetic (TVM's kernels would trap instead)."""


@tvm.error.register_error("MemoryError")
class OutOfMemoryError(tvm.error.TVMError, MemoryError):
    """A tensor could not be allocated (the message names its shape, dtype and size in bytes)."""


@tvm.error.register_error
class ArgumentTypeError(tvm.error.TVMError, TypeError):
    """A value from outside (an argument, a callback's result) has the wrong kind or dtype."""


@tvm.error.register_error
class ArgumentValueError(tvm.error.TVMError, ValueError):
    """A value from outside has the wrong shape, arity or tag, or a number does not fit its dtype."""


@tvm.error.register_error
class ShapeError(tvm.error.TVMError, ValueError):
    """A shape computed at run time is negative, disagrees with the static type, or is too big."""


@tvm.error.register_error
class CpuFeatureError(tvm.error.TVMError):
    """A library's kernels need CPU features this machine lacks (they would die of an illegal
    instruction): raised when it is loaded with ``relay_aot.load`` or called, naming them."""

"""Exceptions raised by relay_aot.

Compile-time problems derive from :class:`RelayAotError`. Run-time failures of compiled code
surface as :class:`MatchError` (no match clause fitted), :class:`KernelError` (a TVM kernel
reported an error) and :class:`CpuFeatureError` (a library compiled for another CPU); TVM's FFI maps the error kind at the start of a message from native code
to these classes, which is why they are registered with ``tvm.error.register_error``.
"""

import tvm


class RelayAotError(Exception):
    """Base class of relay_aot's compile-time errors."""


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
class CpuFeatureError(tvm.error.TVMError):
    """A library's kernels need CPU features this machine lacks (they would die of an illegal
    instruction): raised when it is loaded with ``relay_aot.load`` or called, naming them."""

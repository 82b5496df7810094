"""What a profiled program calls its functions and kernels: one numbering for both backends.

A library built for profiling (``compile(..., profile=True)``) reports each call by a number;
this table gives the numbers and the names the report shows. Function 0 is the entry itself
(argument checks and conversions at the boundary), function ``i + 1`` the program's function
``i`` (a Relay global such as ``@main``, or a closure such as ``%cell in @main``); kernel ``i``
is entry ``i`` of the kernel table (by its symbol), and the shape functions of kernels with
``?`` dimensions come after the kernels. Scalar kernels the emitters compute natively are
never called, so they never appear in a report.
"""

from __future__ import annotations

import dataclasses

from .. import names
from .nodes import Program


@dataclasses.dataclass
class ProfileTable:
    """Names by profile id, and the ids of a program's functions, kernels and shape functions."""

    functions: list[str]
    kernels: list[str]
    function_ids: dict[str, int]  #: by ``Function.id``
    kernel_ids: dict[int, int]  #: by ``Kernel.index``
    shape_ids: dict[int, int]  #: by ``Kernel.index``, for kernels with a shape function

    @classmethod
    def of_program(cls, program: Program) -> ProfileTable:
        """The table of ``program``."""
        functions = [names.PROFILE_ENTRY] + [f.hint for f in program.functions]
        function_ids = {f.id: i + 1 for i, f in enumerate(program.functions)}
        kernels = [k.symbol for k in program.kernels]
        kernel_ids = {k.index: i for i, k in enumerate(program.kernels)}
        shape_ids = {}
        for k in program.kernels:
            if k.shape_func is not None:
                shape_ids[k.index] = len(kernels)
                kernels.append(k.shape_func)
        return cls(functions, kernels, function_ids, kernel_ids, shape_ids)

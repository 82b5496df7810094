"""The targets standalone packages are built, run and tested for: one row of data each.

A row names a TVM target (the kernels' code generator) and how a program using the package is
built and run there: the toolchain's prefix, its flags, and the command that runs an executable
(an emulator for the cross targets). Adding a target is adding a row; nothing else changes.
``resolve`` also accepts any other little-endian CPU target of TVM's ``llvm`` kind, as a row
of defaults with no known toolchain.
"""

from __future__ import annotations

import dataclasses

import tvm

from ...request import target_of


@dataclasses.dataclass(frozen=True)
class StandaloneTarget:
    """One target of standalone packages."""

    name: str  #: the short name (``relay-aot compile --target NAME``)
    tvm_target: str  #: TVM's target string for the kernels
    prefix: str = ""  #: the GCC toolchain's prefix (``aarch64-linux-gnu-``)
    cflags: tuple[str, ...] = ()  #: flags for every compile and link of a program using the package
    ldflags: tuple[str, ...] = ()  #: flags for linking a program (after its objects)
    run: tuple[str, ...] = ()  #: the command prefix that runs an executable built for it
    alignment: int = 64  #: bytes every tensor's data is aligned to
    stack_budget: int = 256 * 1024  #: bytes of stack a run may use before it fails (recursion)
    bare_metal: bool = False  #: no operating system: needs start-up code and a linker script
    #: dtypes TVM's kernels cannot compute there (refused at compile time, by name)
    unsupported_dtypes: tuple[str, ...] = ()
    #: TVM's ``c`` target printing the kernels as C for the package's toolchain (as TVM's
    #: microcontroller path does); empty: LLVM builds them into an object file for ``tvm_target``
    kernel_c_target: str = ""

    def tool(self, name: str) -> str:
        """The toolchain's ``gcc``, ``g++``, ``ar``... for this target."""
        return self.prefix + name


#: The targets built, run and checked in CI (tests/test_standalone*.py).
TARGETS: dict[str, StandaloneTarget] = {
    t.name: t
    for t in (
        StandaloneTarget("host", "llvm", cflags=("-O2",)),
        StandaloneTarget(
            "aarch64-linux",
            "llvm -mtriple=aarch64-linux-gnu",
            prefix="aarch64-linux-gnu-",
            cflags=("-O2",),
            ldflags=("-static",),
            run=("qemu-aarch64",),
        ),
        StandaloneTarget(
            "cortex-m4",
            "llvm -mtriple=thumbv7em-none-eabihf -mcpu=cortex-m4 -mfloat-abi=hard",
            prefix="arm-none-eabi-",
            cflags=("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2"),
            run=(
                "qemu-system-arm",
                "-M",
                "mps2-an386",
                "-nographic",
                "-semihosting-config",
                "enable=on,target=native",
                "-kernel",
            ),
            alignment=16,
            stack_budget=16 * 1024,
            bare_metal=True,
            # GCC's code for TVM's C kernels is a third of the size of LLVM's unrolled code for them;
            # and on this single-precision FPU GCC computes float64 in software (libgcc's
            # __aeabi_d*), exactly, where LLVM's double-precision kernel code computed wrong values
            kernel_c_target="c -keys=arm_cpu -mcpu=cortex-m4",
        ),
    )
}

#: The default size of a package's arena (``--workspace-size``), for programs that allocate.
DEFAULT_WORKSPACE_SIZE = 64 * 1024


def resolve(target: str) -> StandaloneTarget:
    """The row of ``target``: a name of :data:`TARGETS`, one of their TVM target strings, or
    another TVM ``llvm`` target (a row of defaults, with no toolchain known).

    :raises ValueError: not a TVM target. :raises UnsupportedError: not a CPU (``llvm``) one.
    """
    if target in TARGETS:
        return TARGETS[target]
    parsed = target_of(target)
    for row in TARGETS.values():
        if str(tvm.target.Target(row.tvm_target)) == str(parsed):
            return row
    return StandaloneTarget(str(parsed), str(parsed))


def known(name: str) -> StandaloneTarget | None:
    """The row named ``name``, if any."""
    return TARGETS.get(name)

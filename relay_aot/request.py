"""What one compile is asked to do, and the part every backend shares: running the passes and
lowering the module into the control IR (stages 1-3)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import warnings
from collections.abc import Mapping

import numpy as np
import tvm

from . import cpu, ir, names, passes
from .config import Config
from .errors import UnsupportedError
from .kernels import KernelTable, arm_dsp, tuning
from .lower import lower_program


def output_names(mod: tvm.IRModule) -> tuple[str, ...]:
    """``@main``'s ``output_tensor_names`` (TVM's importers set them to the model's output
    tensors' names), or () without them."""
    attrs = mod["main"].attrs
    if attrs is None or "output_tensor_names" not in attrs:
        return ()
    return tuple(str(name) for name in attrs["output_tensor_names"])


def target_of(target) -> tvm.target.Target:
    """``target`` as a TVM target; ``"host"`` is this machine's CPU, named explicitly
    (:func:`relay_aot.cpu.host_target`). ``ValueError`` if it is not a target,
    ``UnsupportedError`` if not a CPU."""
    if isinstance(target, str) and target.strip() == cpu.HOST:
        target = cpu.host_target()
    try:
        target = tvm.target.Target(target)
    except (tvm.error.TVMError, ValueError) as err:
        raise ValueError(f"invalid target {target!r}: {err}") from None
    if target.kind.name != "llvm":
        raise UnsupportedError(f"target {target.kind.name!r} is not supported; relay_aot targets the CPU (llvm)")
    return target


#: The pass a caller's pass instruments see: relay_aot's whole pipeline, from the module given
#: to the module lowered (``run_before_pass``/``run_after_pass`` receive those two).
OBSERVED_PASS = "relay_aot.lower"


def instrumented() -> bool:
    """Whether the caller's PassContext has pass instruments."""
    return bool(tvm.transform.PassContext.current().instruments)


@dataclasses.dataclass
class Request:
    """A module to compile, with its parameters, options and settings (read once, at its start)."""

    mod: tvm.IRModule
    params: Mapping[str, object] | None
    target: tvm.target.Target
    name: str
    opt_level: int
    config: Config

    @classmethod
    def make(
        cls, mod, target=None, params=None, name: str = "default", opt_level: int = 3, profile: bool = False
    ) -> Request:
        """A checked request; the settings are read from the environment now (``target``: None
        is ``RELAY_AOT_TARGET``'s, by default this machine's CPU; ``profile``: build the variant
        instrumented for profiling, whatever ``RELAY_AOT_PROFILE`` says)."""
        names.check_model_name(name)
        if tvm.transform.PassContext.current().config.get("relay.backend.use_meta_schedule"):
            warnings.warn(
                "relay_aot does not read MetaSchedule databases: kernels use AutoTVM records in scope "
                "(autotvm.apply_history_best) or TVM's default schedules",
                stacklevel=3,
            )
        config = Config.from_environment()
        request = cls(mod, params, target_of(config.target if target is None else target), name, opt_level, config)
        return request.profiled() if profile else request

    def profiled(self) -> Request:
        """The same compile, instrumented for profiling. ``profile`` is an output setting of the
        config, so the profiled library has its own cache keys by construction."""
        return dataclasses.replace(self, config=dataclasses.replace(self.config, profile=True))

    def standalone(self, c_kernels: bool = False) -> Request:
        """The same compile for a standalone package (an output setting, hashed like ``profile``);
        ``c_kernels``: its kernels are printed as C (``Config.c_kernels``, hashed too)."""
        config = dataclasses.replace(self.config, standalone=True, c_kernels=self.config.c_kernels or c_kernels)
        return dataclasses.replace(self, config=config)

    def lower(self, layouts: bool = True) -> tuple[ir.Program, KernelTable]:
        """Run the passes and lower the result into the control IR and its kernel table
        (``layouts=False``: without the layout choice, for AutoTVM's task extraction)."""
        lowered = []

        def run(mod: tvm.IRModule) -> tvm.IRModule:
            # Layout passes ask AutoTVM for schedules too: its raw messages are held back here;
            # the build reports untuned kernels once (kernels/tuning.py).
            # C kernels: relay_aot's DSP strategies in force, as the layout choice asks for the
            # convolutions' strategies too (TVM's would widen int8 to int16, or have none for OHWI)
            dsp = arm_dsp.building() if self.config.c_kernels else contextlib.nullcontext()
            with tvm.transform.PassContext(opt_level=self.opt_level), tuning.watch(), dsp:
                # a standalone package keeps direct convolutions: their scratch is small, and planned
                winograd = self.config.winograd and not self.config.standalone
                prepared, extents = passes.prepare_with_extents(
                    mod,
                    self.params,
                    self.opt_level,
                    self.target,
                    layouts,
                    winograd=winograd,
                    dsp_kernels=self.config.c_kernels,
                )
                lowered.append(lower_program(prepared, self.name, self.target, self.config, extents))
            return prepared

        if instrumented():
            # The caller's pass instruments see the pipeline as one pass, in their own context:
            # entering a context of relay_aot's (its opt level) with them would call their
            # enter/exit hooks again, which reset what they hold (TVM's PassTimingInstrument).
            tvm.transform.module_pass(lambda mod, ctx: run(mod), opt_level=0, name=OBSERVED_PASS)(self.mod)
        else:
            run(self.mod)
        program, kernels = lowered[0]
        program.output_names = output_names(self.mod)
        return program, kernels

    def fingerprint(self) -> list[str] | None:
        """The exact identity of the module, parameters and options, as text for a cache key;
        None when the input cannot be keyed (then the pipeline runs and reports what is wrong),
        or when the caller's PassContext has instruments: they observe passes that run, so the
        module index, which skips the passes, is not consulted (the build's caches still are)."""
        if not isinstance(self.mod, tvm.IRModule) or instrumented():
            return None
        params = _params_digest(self.params)
        try:
            module = passes.module_fingerprint(self.mod)
        except (tvm.error.TVMError, ValueError):
            return None
        if params is None:
            return None
        return [module, params, str(self.target), self.name, str(self.opt_level), tuning.fingerprint()]


def _params_digest(params: Mapping[str, object] | None) -> str | None:
    """A digest of ``params`` (None if a value is not plain tensor data)."""
    if not params:
        return ""
    digest = hashlib.sha256()
    try:
        for key in sorted(params):
            value = params[key]
            array = value.numpy() if isinstance(value, tvm.nd.NDArray) else np.asarray(value)
            if array.dtype == object:
                return None
            digest.update(f"{key}\0{array.dtype}\0{array.shape}\0".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    except (TypeError, ValueError, tvm.error.TVMError):
        return None
    return digest.hexdigest()

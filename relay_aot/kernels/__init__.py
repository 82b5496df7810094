"""Stage 2: lower fused primitive functions to kernels and build them in one LLVM module.

Each ``Primitive=1`` Relay function becomes one kernel; structurally equal functions share
one. Kernels get deterministic symbols (``<model>_k<index>_<fused ops>``) so that the generated
control code -- and therefore the build cache key -- does not depend on how many functions
TVM's process-wide TE compiler has named before, and so every symbol carries the model prefix.

Lowering through TVM's TE compiler (operator strategies, schedules, TIR) and the single
``tvm.build`` of all kernels into one object file happen only when a library is actually built:
on a cache hit they are skipped, and so they are when only the library is new but its kernels
were built before (the build cache keeps kernel object files by :meth:`KernelTable.digest`,
checked against :meth:`KernelTable.identity` on a hit).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable

import tvm
from tvm import relay
from tvm.relay.backend import te_compiler

from .. import cpu, ir, names
from ..config import Config
from ..errors import CompileError, UnsupportedError
from ..passes.nchw import is_x86
from ..passes.te_compiler_speed import faster_te_compiler
from . import (  # noqa: F401 (winograd: its strategy)
    arm_dsp,
    c_intrinsics,
    conv_epilogue,
    dense_int8,
    extents,
    grouped_pointwise,
    input_layout,
    int8_by_eight,
    int16_pairs,
    isolated,
    paired_lanes,
    scratch,
    tuning,
    vnni,
    winograd,
)
from .copies import copy_form
from .divisions import explicit_asserts, guard_divisions
from .llvm_debug_info import for_llvm
from .scalars import is_native_scalar, scalar_kernel
from .shape_funcs import ShapeFunc, make_shape_func

TypeLowerer = Callable[[relay.Type], ir.Type]

#: ``Config.c_kernels`` of the last lowering in this process (:meth:`KernelTable.lower_all`).
_lowered_with_c_kernels: bool | None = None


def flatten_tensor_types(ty: ir.Type, what: str) -> list[ir.TensorType]:
    """The tensors of a kernel parameter or result type, depth-first (tuples are flattened)."""
    if isinstance(ty, ir.TensorType):
        return [ty]
    if isinstance(ty, ir.TupleType):
        return [t for f in ty.fields for t in flatten_tensor_types(f, what)]
    if isinstance(ty, ir.AnyType):
        raise UnsupportedError(
            f"a fused kernel's {what} has no static type (a tensor with no element type, "
            "which TVM's ONNX importer makes of an ONNX optional input?): no kernel can compute on it"
        )
    raise UnsupportedError(f"a fused kernel's {what} has type {ty}, which is not a tensor or tuple")


def _work(stmt: tvm.tir.Stmt, extent: Callable):
    """Iterations of the innermost statements of ``stmt``: loop extents (as ``extent`` gives
    them: ints or TIR expressions, which add and multiply alike) multiplied, sequences added."""
    kind = type(stmt)
    if kind is tvm.tir.For:
        return extent(stmt.extent) * _work(stmt.body, extent)
    if kind is tvm.tir.SeqStmt:
        return sum((_work(s, extent) for s in stmt.seq), 0)
    if kind is tvm.tir.IfThenElse:
        work = _work(stmt.then_case, extent)
        return work + _work(stmt.else_case, extent) if stmt.else_case is not None else work
    body = getattr(stmt, "body", None)
    return _work(body, extent) if isinstance(body, tvm.tir.Stmt) else 1


def loop_work(stmt: tvm.tir.Stmt) -> int:
    """Total iterations of the innermost statements of ``stmt`` (a ``?`` extent counts 2^40)."""
    return _work(stmt, lambda e: e.value if isinstance(e, tvm.tir.IntImm) else 1 << 40)


def symbolic_work(stmt: tvm.tir.Stmt) -> tvm.tir.PrimExpr:
    """:func:`loop_work` as an int64 expression of the loop extents (some symbolic)."""
    return tvm.tir.Cast("int64", _work(stmt, lambda e: tvm.tir.Cast("int64", e)))


def _serial(body: tvm.tir.Stmt) -> tvm.tir.Stmt:
    def serial(node):
        if node.kind == tvm.tir.ForKind.PARALLEL:
            return tvm.tir.For(
                node.loop_var,
                node.min,
                node.extent,
                tvm.tir.ForKind.SERIAL,
                node.body,
                node.thread_binding,
                node.annotations,
            )
        return None

    return tvm.tir.stmt_functor.ir_transform(body, None, serial, ["tir.For"])


def _has_parallel_loop(body: tvm.tir.Stmt) -> bool:
    found = []
    tvm.tir.stmt_functor.post_order_visit(
        body, lambda n: found.append(n) if isinstance(n, tvm.tir.For) and n.kind == tvm.tir.ForKind.PARALLEL else None
    )
    return bool(found)


def serialize_if_small(func: tvm.tir.PrimFunc, threshold: int) -> tvm.tir.PrimFunc:
    """Turn the parallel loops of ``func`` into serial ones when its total work is below
    ``threshold`` iterations (``Config.parallel_threshold``).

    Launching TVM's thread pool costs microseconds -- far more than the work of a small kernel
    (a 1x16 by 16x64 dense takes 9.3 us threaded and 0.16 us serial on a 2-core machine). A
    kernel over ``?`` dimensions gets both bodies and chooses by its work at run time, when the
    extents are known: growing sequences are small for most of their life.
    """
    work = loop_work(func.body)
    if work < threshold:
        return func.with_body(_serial(func.body))
    if work < 1 << 40 or not _has_parallel_loop(func.body):  # static extents (loop_work counts a ? as 2^40)
        return func
    expr = symbolic_work(func.body)
    # The test sits before the body: it may only read the shape variables bound on entry.
    bound = [
        v
        for buf in func.buffer_map.values()
        for d in list(buf.shape) + list(buf.strides)
        for v in [d]
        if isinstance(d, tvm.tir.Var)
    ] + list(func.params)
    if tvm.tir.analysis.undefined_vars(expr, bound):
        return func
    small = tvm.tir.LT(expr, tvm.tir.const(threshold, "int64"))
    return func.with_body(tvm.tir.IfThenElse(small, _serial(func.body), func.body))


def _op_names(func: relay.Function) -> tuple[str, ...]:
    ops: list[str] = []

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op):
            ops.append(node.op.name)

    relay.analysis.post_order_visit(func.body, visit)
    return tuple(ops)


class KernelTable:
    """The kernels of one program, deduplicated, in the order they were first used."""

    def __init__(self, model: str, target: tvm.target.Target, lower_type: TypeLowerer, config: Config):
        self.model = model
        self.target = target
        self.config = config
        self.lower_type = lower_type
        self.kernels: list[ir.Kernel] = []
        self._funcs: list[relay.Function] = []
        self._shape_funcs: dict[int, ShapeFunc] = {}  # by kernel index
        self._by_hash: dict[int, list[tuple[relay.Function, ir.Kernel]]] = {}
        #: the AutoTVM records in scope now, while the program is lowered: they pick schedules
        self.tuning = tuning.fingerprint()
        #: the workloads the last lowering found no tuning records for (:meth:`lower_all`)
        self.untuned_workloads: set[str] = set()

    def add(self, func: relay.Function) -> ir.Kernel:
        """The kernel computing primitive function ``func``, lowering it on first sight."""
        key = tvm.ir.structural_hash(func)
        for seen, kernel in self._by_hash.get(key, []):
            if tvm.ir.structural_equal(seen, func):
                return kernel
        kernel = self._lower(func)
        self._by_hash.setdefault(key, []).append((func, kernel))
        return kernel

    def _lower(self, func: relay.Function) -> ir.Kernel:
        ops = _op_names(func)
        param_types = [self.lower_type(p.checked_type) for p in func.params]
        result = self.lower_type(func.ret_type if func.ret_type is not None else func.body.checked_type)
        inputs = [t for ty in param_types for t in flatten_tensor_types(ty, "parameter")]
        outputs = flatten_tensor_types(result, "result")
        index = len(self.kernels)
        fused = "fused_" + "_".join(dict.fromkeys(op.replace(".", "_") for op in ops))
        symbol = names.kernel_symbol(self.model, index, fused)
        scalar = scalar_kernel(func) if self.config.scalar_fast_path and is_native_scalar(result) else None
        shape_func: str | None = None
        states: tuple[int, ...] = ()
        if not all(t.is_static for t in inputs + outputs):
            try:
                made = make_shape_func(func, symbol + "_shape")
            except (ValueError, tvm.TVMError) as err:
                # Outputs of static shape can be allocated without one (shape_of, reductions);
                # dynamic ones cannot.
                if not all(t.is_static for t in outputs):
                    raise UnsupportedError(
                        f"no shape function for the {_fused_kernel(ops)}: {_first_line(err)}"
                    ) from None
            else:
                self._shape_funcs[index] = made
                shape_func, states = symbol + "_shape", made.states
        copy = copy_form(func, result, dynamic=shape_func is not None)
        kernel = ir.Kernel(
            index,
            symbol,
            tuple(param_types),
            tuple(inputs),
            tuple(outputs),
            result,
            ops,
            scalar,
            shape_func,
            states,
            copy,
        )
        self.kernels.append(kernel)
        self._funcs.append(func)
        return kernel

    def digest(self) -> str:
        """Identifies the built kernels (structure of each primitive function, symbols, target):
        their object file. Scalar kernels are left out: they are generated C++, in the sources.

        Structural hashes cover constants' bytes, but are 64 bits: a kernel object found by
        this digest is used only once :meth:`matches` has compared the functions themselves.
        """
        parts = [str(self.target), self.config.output_key(), self.tuning]
        for kernel, func in zip(self.kernels, self._funcs):
            if kernel.scalar is None:
                parts.append(f"{kernel.symbol}:{tvm.ir.structural_hash(func)}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def _built(self) -> list[relay.Function]:
        """The primitive functions of the kernels that are built (not computed natively)."""
        return [func for kernel, func in zip(self.kernels, self._funcs) if kernel.scalar is None]

    def identity(self) -> str:
        """The primitive functions of the built kernels, exactly (constants' bytes included), as
        TVM's JSON: stored beside a cached kernel object and checked by :meth:`matches` on a hit."""
        return tvm.ir.save_json(tvm.runtime.convert(self._built()))

    def matches(self, identity: str) -> bool:
        """Whether ``identity`` (an earlier :meth:`identity`) has structurally equal functions.

        Never compares printed text: it rounds constants, and spans (source lines) differ
        between modules with the same kernels.
        """
        try:
            saved = tvm.ir.load_json(identity)
        except (tvm.error.TVMError, ValueError):
            return False
        funcs = self._built()
        if not isinstance(saved, tvm.ir.container.Array) or len(saved) != len(funcs):
            return False
        return all(tvm.ir.structural_equal(a, b) for a, b in zip(saved, funcs))

    def lower_all(
        self,
        progress: Callable[[int, int], None] | None = None,
        report: bool = True,
        only: frozenset[int] | None = None,
    ) -> tvm.IRModule:
        """TE-lower every kernel (or those whose index is in ``only``) into one module of
        PrimFuncs named by kernel symbols.

        ``progress(done, total)`` is called after each kernel (builds show it on a terminal);
        ``report``: say in one line how many kernels have no tuning records (the workloads are
        left in :attr:`untuned_workloads` either way).
        """
        global _lowered_with_c_kernels
        if _lowered_with_c_kernels not in (None, self.config.c_kernels):
            # TVM's TE compiler caches kernels by function and target alone: a kernel lowered
            # with relay_aot's C micro-kernels would be served to a build whose kernels LLVM
            # compiles, which cannot link them (and the other way round)
            te_compiler.get().clear()
        _lowered_with_c_kernels = self.config.c_kernels
        with (
            tuning.watch(str(self.target), lowering=True) as untuned,
            faster_te_compiler(),
            conv_epilogue.building(),
            vnni.building(),
            dense_int8.building(),
            grouped_pointwise.building(),
            int8_by_eight.building(),
            int16_pairs.building(),
            arm_dsp.building() if self.config.c_kernels else contextlib.nullcontext(),
        ):
            merged = self._lower_all(progress, untuned, only)
        self.untuned_workloads = set(untuned.workloads)
        if report:
            untuned.report()
        return merged

    def _lower_all(
        self, progress: Callable[[int, int], None] | None, untuned: tuning.Untuned, only: frozenset[int] | None
    ) -> tvm.IRModule:
        merged = tvm.IRModule()
        for done, (kernel, func) in enumerate(zip(self.kernels, self._funcs), 1):
            if kernel.scalar is not None:  # computed natively by both emitters: never called
                continue
            if only is not None and kernel.index not in only:
                continue
            what = _fused_kernel(kernel.ops)
            try:
                with (
                    arm_dsp.partitioning(kernel.ops, self.target) if self.config.c_kernels else contextlib.nullcontext()
                ):
                    cached = te_compiler.get().lower(func, self.target, names.TE_MOD_NAME)
            except RuntimeError as err:  # TVMError, or the TE compiler's own RuntimeError
                # TVM's TE compiler caches the failed function as well: lowering it again would
                # quietly produce no kernel at all.
                te_compiler.get().clear()
                raise UnsupportedError(f"TVM could not lower the {what}: {_lowering_error(err)}") from None
            untuned.kernel_lowered(tvm.ir.structural_hash(func))
            dynamic = not all(t.is_static for t in kernel.inputs + kernel.outputs)
            for gvar, prim in cached.funcs.functions.items():
                name = kernel.symbol if gvar.same_as(cached.prim_fn_var) else f"{kernel.symbol}_{gvar.name_hint}"
                if dynamic:  # it divides by extents only known at run time
                    prim = guard_divisions(prim)
                if not self.config.standalone:
                    prim = scratch.on_stack(prim)
                merged[tvm.ir.GlobalVar(name)] = serialize_if_small(prim, self._parallel_threshold()).with_attr(
                    "global_symbol", name
                )
            if kernel.shape_func is not None:
                prim = self._shape_funcs[kernel.index].prim_func
                merged[tvm.ir.GlobalVar(kernel.shape_func)] = prim.with_attr("global_symbol", kernel.shape_func)
            if progress is not None:
                progress(done, len(self.kernels))
        return merged

    def _parallel_threshold(self) -> int:
        """Kernels with fewer iterations run serially: all of them in a standalone package, which
        has no thread pool (its ``TVMBackendParallelLaunch`` would be one more hook to serve)."""
        return 1 << 62 if self.config.standalone else self.config.parallel_threshold

    @property
    def needs_build(self) -> bool:
        """Whether any kernel must be built (scalar kernels are computed natively instead)."""
        return any(k.scalar is None for k in self.kernels)

    def build(
        self, progress: Callable[[int, int], None] | None = None, scratch_params: bool = False
    ) -> tvm.runtime.Module | None:
        """Build every kernel into one LLVM module in memory (None when there are none to build).

        TVM generates the code in a child process (see :meth:`write_object`), which writes the
        module as LLVM bitcode; this process loads it (``runtime.module.loadfile_ll`` parses
        bitcode as well as text) and LLVM's JIT compiles it when a kernel is first looked up, as
        it would the module ``tvm.build`` returns.

        A standalone package's kernels (``Config.standalone``) get TVM's unpacked signature, as
        the AOT executor's ``unpacked-api`` gives them: one ``void*`` per buffer, no TVMValues;
        with ``scratch_params``, their scratch buffers are parameters too (:meth:`scratch`).
        """
        if not self.needs_build:
            return None
        with tempfile.TemporaryDirectory(prefix="relay_aot-kernels-") as tmp:
            path = os.path.join(tmp, "kernels.bc")
            self._build_file(path, progress, scratch_params)
            return tvm.get_global_func("runtime.module.loadfile_ll")(path, "ll")

    def write_object(self, path, progress: Callable[[int, int], None] | None = None) -> bool:
        """Build the kernels into the object file ``path``; False when there are none.

        ``tvm.build`` and the writing of the file run in a forked child (``isolated.py``): a
        failure inside TVM or LLVM, even one that aborts or crashes, raises
        :class:`CompileError` here, naming the first kernel that fails when built alone.
        """
        if not self.needs_build:
            return False
        self._build_file(str(path), progress)
        return True

    def _build_file(self, path: str, progress: Callable[[int, int], None] | None, scratch_params: bool = False) -> None:
        """Lower the kernels here, build them into ``path`` in a child (its suffix picks the
        format: ``.o`` an object file, ``.bc`` LLVM bitcode) -- or, for an object file of
        several kernels, lower and build them in parts at once (:meth:`_build_in_parts`)."""
        if path.endswith(".o") and not scratch_params and not self.config.standalone:
            if self._build_in_parts(path, progress):
                return
        merged = for_llvm(self.lowered(None, progress, scratch_params)[0], self.target)
        if self.config.standalone:
            merged = merged.with_attr("executor", _UNPACKED)
        self._build_isolated(merged, path, self.target)

    def _build_in_parts(self, path: str, progress: Callable[[int, int], None] | None) -> bool:
        """Lower and build the kernels in up to ``Config.jobs`` forked children at once, each a
        share of them into an object file of its own, joined into ``path`` by ``ld -r``; False
        (nothing written) where that cannot be done here or any part fails: the build in one
        piece then says which kernel fails, and how.

        Lowering and LLVM's code generation take one CPU each, and most of a conv net's first
        compile (relay.testing's SqueezeNet: 8.5 s of 10.3 on a Zen 5, its Winograd kernels most
        of it). The shares are balanced by :func:`_cost`. The children lower with this process's
        tuning records and rules in scope (forked, they see its state); the workloads they find
        untuned are reported here, in one line as a lowering here would."""
        built = [k for k in self.kernels if k.scalar is None]
        shares = _shares(built, self.config.jobs)
        linker = shutil.which("ld")
        if len(shares) < 2 or linker is None or not isolated.available() or not _host_objects(self.target):
            return False
        with tempfile.TemporaryDirectory(prefix="relay_aot-kernels-") as tmp:
            parts = [os.path.join(tmp, f"part{i}.o") for i in range(len(shares))]
            found = [os.path.join(tmp, f"untuned{i}.json") for i in range(len(shares))]
            try:
                isolated.run_all([functools.partial(self._build_share, *job) for job in zip(shares, parts, found)])
                subprocess.run([linker, "-r", "-o", path, *parts], check=True, capture_output=True)
            except (isolated.ChildFailure, subprocess.CalledProcessError, OSError):
                return False
            workloads: set[str] = set()
            for name in found:
                with open(name) as file:
                    workloads.update(json.load(file))
        untuned = tuning.Untuned("", str(self.target))
        untuned.workloads = workloads
        untuned.report()
        if progress is not None:
            progress(len(built), len(built))
        return True

    def _build_share(self, share: frozenset[int], path: str, untuned_path: str) -> None:
        """In a child of :meth:`_build_in_parts`: lower the kernels of ``share``, build them into
        ``path``, write the workloads they found untuned into ``untuned_path``."""
        merged = for_llvm(self.lowered(only=share)[0], self.target)
        with open(untuned_path, "w") as file:
            json.dump(sorted(self.untuned_workloads), file)
        _build_in_child(merged, path, self.target)

    def build_c(self, target: str, scratch_params: bool = False) -> str | None:
        """The kernels as C source from TVM's ``c`` target ``target``, unpacked (a standalone
        package compiles it with its own toolchain, as TVM's microcontroller path does); None
        when there are none. TVM's C code generator cannot print vector types, so TIR's
        vectorized loops stay loops (``tir.disable_vectorize``, as for TVM's own C).
        ``scratch_params``: as for :meth:`build`. TVM's C code generator drops assertions
        (TVM 0.19 prints them for no target), so they are made plain tests first
        (:func:`.divisions.explicit_asserts`): a division guard or a shape function's check
        fails the call, its message passed to ``names.kernel_error_symbol`` (LLVM's kernels
        call ``TVMAPISetLastError``)."""
        if not self.needs_build:
            return None
        merged = self.lowered(target, None, scratch_params)[0]
        # Lowered with the package's llvm target (its schedules); printed as C.
        report = names.kernel_error_symbol(self.model)
        funcs = {gvar: func.without_attr("target") for gvar, func in merged.functions.items()}
        funcs = {
            gvar: explicit_asserts(func, report) if isinstance(func, tvm.tir.PrimFunc) else func
            for gvar, func in funcs.items()
        }
        merged = tvm.IRModule(funcs).with_attr("executor", _UNPACKED)
        with tempfile.TemporaryDirectory(prefix="relay_aot-kernels-") as tmp:
            path = os.path.join(tmp, "kernels.c")
            with c_intrinsics.building():
                self._build_isolated(merged, path, tvm.target.Target(target))
            with open(path) as source:
                return c_intrinsics.portable(source.read())

    def scratch_plan(self, c_target: str | None = None) -> dict[str, scratch.Scratch]:
        """Per kernel symbol, the scratch parameters ``build(scratch_params=True)`` (or
        ``build_c(c_target, scratch_params=True)``) gives it (``kernels/scratch.py``)."""
        if not self.needs_build:
            return {}
        return self.lowered(c_target, None, True)[1]

    def lowered(
        self,
        c_target: str | None = None,
        progress=None,
        scratch_params: bool = False,
        only: frozenset[int] | None = None,
    ):
        """The lowered kernels as they are built (for TVM's ``c`` target ``c_target``, or LLVM;
        ``only``: those of these indices, as :meth:`lower_all`);
        what :mod:`.scratch` did to them (nothing unless ``scratch_params``); and, for a
        standalone package, per kernel or shape function symbol over ``?`` dimensions, its
        extent parameters (:mod:`.extents`: (buffer index, dimension, dtype) each)."""
        # A PassContext of our own: the caller's (its TIR options, MetaSchedule) is not part of
        # the cache key, so it must not change what is built.
        # Vectors of custom datatypes are not lowered by TVM (its BYODT framework says so); loops
        # left serial here stay serial (the build does not lower the kernels again).
        scalar_only = bool(c_target) or self._custom_datatypes()
        # TIR's common subexpression elimination: a fifth of an unrolled kernel's lowering (a
        # Winograd convolution's transforms), and the code LLVM makes of the kernels is the same
        # without it (LLVM numbers values itself; the floats it binds were inlined again anyway,
        # llvm_debug_info.py): SqueezeNet, ResNet-50, MLPerf Tiny's, identical results and times.
        config = {"tir.disable_cse_tir": True, **({"tir.disable_vectorize": True} if scalar_only else {})}
        with tvm.transform.PassContext(config=config):
            merged = self.lower_all(progress, report=only is None, only=only)
        if not c_target and is_x86(self.target):
            merged = paired_lanes.apply(merged, 32 * cpu.int32_lanes(self.target))
            merged = input_layout.apply(merged)
        extent_params: dict = {}
        if self.config.standalone:  # unpacked kernels over ? dimensions take their extents as parameters
            built = [k for k in self.kernels if k.scalar is None]
            called = {k.symbol for k in built} | {k.shape_func for k in built if k.shape_func is not None}
            merged, extent_params = extents.apply(merged, called)
        if not scratch_params:
            return merged, {}, extent_params
        return (*scratch.apply(merged, {k.symbol for k in self.kernels if k.scalar is None}), extent_params)

    def _custom_datatypes(self) -> bool:
        """Whether a kernel computes on a datatype registered with ``tvm.target.datatype``."""
        registered = any(name.startswith("tvm.datatype.lower.") for name in tvm._ffi.registry.list_global_func_names())
        return registered and any("custom[" in func.astext() for func in self._funcs)

    def extent_plan(self, c_target: str | None = None) -> dict[str, tuple[tuple[int, int, str], ...]]:
        """The extent parameters ``build()`` (or ``build_c(c_target)``) gives the kernels and
        shape functions of a standalone package (see :meth:`lowered`)."""
        if not self.needs_build:
            return {}
        return self.lowered(c_target)[2]

    def _build_isolated(self, merged: tvm.IRModule, path: str, target) -> None:
        try:
            isolated.run(functools.partial(_build_in_child, merged, path, target))
        except isolated.ChildFailure as failure:
            raise CompileError(self._explain(failure, merged, path, target)) from None

    def _explain(self, failure: isolated.ChildFailure, merged: tvm.IRModule, path: str, target) -> str:
        """The error message of a failed build: which kernel fails, found by building each
        kernel alone in a child of its own until one fails (only after a failure; a stalled
        build is reported as it is)."""
        if failure.stalled:
            return str(failure)
        funcs = {gvar.name_hint: gvar for gvar in merged.get_global_vars()}
        suffix = os.path.splitext(path)[1]
        with tempfile.TemporaryDirectory(prefix="relay_aot-kernels-") as tmp:
            for kernel in self.kernels:
                if kernel.scalar is not None:
                    continue
                own = [
                    gvar
                    for name, gvar in funcs.items()
                    if name == kernel.symbol or name.startswith(kernel.symbol + "_")
                ]
                alone = tvm.IRModule({gvar: merged[gvar] for gvar in own})
                if merged.attrs is not None and "executor" in merged.attrs:
                    alone = alone.with_attr("executor", merged.attrs["executor"])
                try:
                    isolated.run(
                        functools.partial(_build_in_child, alone, os.path.join(tmp, "kernel" + suffix), target)
                    )
                except isolated.ChildFailure as single:
                    return single.describe(f"{_fused_kernel(kernel.ops)} ({kernel.symbol})")
        return str(failure)


def _cost(kernel: ir.Kernel) -> int:
    """About how long ``kernel`` takes to lower and build, in units of an elementwise kernel's
    (measured on SqueezeNet: a Winograd convolution's unrolled transforms 1-2 s, a packed
    convolution's 0.1-0.2 s, a layout transform's 0.07 s)."""
    if any("winograd" in op for op in kernel.ops):
        return 20
    return 2 if any("conv" in op or "dense" in op for op in kernel.ops) else 1


#: The least :func:`_cost` worth a process of its own (about 1.5 s of lowering and building): a
#: fork and the join cost more than smaller shares save, and a loaded machine (a test suite on
#: every CPU) gains nothing from them.
SHARE_COST = 20


def _shares(kernels: list[ir.Kernel], jobs: int) -> list[frozenset[int]]:
    """``kernels``' indices in at most ``jobs`` shares of about equal :func:`_cost` (the costliest
    first, each to the share with the least so far), none below :data:`SHARE_COST`."""
    total = sum(_cost(k) for k in kernels)
    count = max(1, min(jobs, total // SHARE_COST))
    loads = [0] * count
    shares: list[set[int]] = [set() for _ in range(count)]
    for kernel in sorted(kernels, key=lambda k: (-_cost(k), k.index)):
        least = loads.index(min(loads))
        shares[least].add(kernel.index)
        loads[least] += _cost(kernel)
    return [frozenset(share) for share in shares if share]


def _host_objects(target: tvm.target.Target) -> bool:
    """Whether ``target``'s object files are this machine's (``ld`` here can join them)."""
    triple = str(target.attrs.get("mtriple", ""))
    return not triple or triple.split("-")[0] == platform.machine()


#: TVM's AOT executor's convention for kernels called from C: one ``void*`` per buffer.
_UNPACKED = relay.backend.Executor("aot", {"unpacked-api": True, "interface-api": "c"})


def _build_in_child(merged: tvm.IRModule, path: str, target) -> None:
    """TVM's code generation of lowered kernels (:func:`_build_lowered`) into ``path`` (``.c``:
    their C source), in the child."""
    module = _build_lowered(merged, target)
    if path.endswith(".c"):
        with open(path, "w") as out:
            out.write(module.get_source())
    else:
        module.save(path)


def _build_lowered(merged: tvm.IRModule, target) -> tvm.runtime.Module:
    """``tvm.build`` of kernels the TE compiler lowered already, without lowering them again.

    ``tvm.build`` runs TVM's whole lowering pipeline on whatever it is given, lowered or not
    (SqueezeNet's Winograd kernels: half the build's time), and its storage rewrite and common
    subexpression elimination would undo what was done to the lowered kernels here (a loop made
    serial merged into a vector allocation; floats bound again, ``llvm_debug_info.py``).
    ``relay.build`` gives TVM's TE compiler output to ``tir_to_runtime`` (the host and device
    passes, then code generation) directly, and so does this.
    """
    target = tvm.target.Target(target)
    annotated, host = tvm.target.Target.canon_target_map_and_host({target: merged.with_attr("runtime", None)}, target)
    return tvm.driver._ffi_api.tir_to_runtime(annotated, host)


def _fused_kernel(ops) -> str:
    """How errors name a kernel: "fused kernel of cast, erf"."""
    return "fused kernel of " + (", ".join(dict.fromkeys(ops)) or "no operators")


def _lowering_error(err: Exception) -> str:
    """What failed in a TE lowering error (its last line is the failing function's text): TVM's
    failed check, else the Python exception a TOPI function raised inside TVM."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for line in lines:
        if "Check failed" in line:
            return line
    for line in lines:
        if re.match(r"[A-Za-z_.]*(Error|Exception): ", line):
            return line
    return _first_line(err)


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__

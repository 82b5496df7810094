"""Stage 1: Relay-to-Relay passes that prepare a module for lowering.

The result has every tensor operator inside a fused ``Primitive=1`` function and is in
A-normal form, so that ``lower.py`` sees each intermediate value bound by a ``let`` at the
scope where it must be computed (A-normal form places expressions shared across branches at
their lowest common scope, which a naive recursive lowering of a dataflow graph gets wrong).

Fusion must not reorder effects. ``FuseOps`` works on dataflow graphs and freely reorders the
arguments it gathers, so running it on a graph that contains calls of functions that read or
write references changes what a program computes. The pipeline therefore first converts to
A-normal form (fixing the evaluation order of every call), then moves only pure values --
operator calls, tuples and projections -- back into their uses within the same function
(:class:`InlinePureLets`), fuses, and converts to A-normal form again.

Only ``main`` and the globals it reaches are kept: a module holding TVM's Prelude has 240
globals, most of them unused tensor-array helpers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np
import tvm
from tvm import relay

from .. import ir
from ..errors import RelayAotError, TypeCheckError, UnsupportedError
from . import (
    arm_dsp,
    constant_movement,
    dense_transposes,
    depthwise_nchw,
    global_pools,
    int8_boundaries,
    int8_by_eight,
    int16_pairs,
    invariants,
    pooled_pointwise,
    requantization,
    symbolic,
    vector_math,
    winograd,
)
from .bounds import (
    numpy_slice_begin,
    slices_end_kernels,
    static_pad_width,
    unpacked_dynamic_dense,
    zero_reshapes_kept,
)
from .exact_int8 import exact_int8_products, small_int8_convolutions
from .float_divisors import zero_divisors_loaded
from .gradient_cleanup import cleanup
from .layout_cost import LAYOUT_TRANSFORM_SHARE, _multiply_accumulates, _runtime_transform_elements
from .nchw import is_x86, nchw_convolutions
from .te_compiler_speed import faster_te_compiler, warm_error_backtraces
from .walk import ChainMutator, nodes_where, operator_calls


def reachable_globals(mod: tvm.IRModule, root: str = "main") -> list[relay.GlobalVar]:
    """Global functions reachable from ``root`` (including it), in discovery order."""
    order: list[relay.GlobalVar] = []
    seen: set[str] = set()
    stack = [mod.get_global_var(root)]
    while stack:
        gvar = stack.pop()
        if gvar.name_hint in seen:
            continue
        seen.add(gvar.name_hint)
        order.append(gvar)
        found = nodes_where(mod[gvar], lambda node: isinstance(node, relay.GlobalVar))
        for callee in reversed(found):
            if callee.name_hint not in seen:
                stack.append(callee)
    return order


def module_fingerprint(mod: tvm.IRModule) -> str:
    """An exact identity of what compiling ``mod`` reads: the globals ``main`` reaches and every
    type definition, each in TVM's lossless JSON serialization (constants' bytes included, float
    attributes with 17 digits), in name order.

    Not ``mod.astext()``, which rounds floats to 6 digits (two modules differing only past the
    sixth digit of a constant would share a cache entry), and not ``tvm.ir.structural_hash``,
    which differs between processes for functions that mention globals or ADTs. Spans are part
    of the serialization: the same program parsed from another file is another key (a cache
    miss, never a wrong hit).
    """
    digest = hashlib.sha256()
    items = [(f"def {g.name_hint}", g) for g in reachable_globals(mod)]
    items += [(f"type {t.name_hint}", t) for t in mod.get_global_type_vars()]
    for name, var in sorted(items, key=lambda item: item[0]):
        text = tvm.ir.save_json(mod[var])
        digest.update(f"{name}\0{len(text)}\0".encode() + text.encode())
    return digest.hexdigest()


def prune(mod: tvm.IRModule, root: str = "main") -> tvm.IRModule:
    """A module with ``root`` (``main``), the globals it reaches, and every type definition."""
    keep = reachable_globals(mod, root)
    pruned = tvm.IRModule({gvar: mod[gvar] for gvar in keep}, type_definitions=mod.type_definitions)
    return pruned


def bind_params(mod: tvm.IRModule, params: Mapping[str, object] | None) -> tvm.IRModule:
    """Bind named parameters of ``main`` to constants, as ``relay.build(params=...)`` does."""
    if not params:
        return mod
    main = mod["main"]
    names = {p.name_hint for p in main.params}
    unknown = sorted(set(params) - names)
    if unknown:
        raise RelayAotError(f"params name no parameter of @main: {', '.join(unknown)}")
    arrays = {}
    for name, value in params.items():
        arrays[name] = value if isinstance(value, tvm.nd.NDArray) else tvm.nd.array(np.asarray(value))
    mod = tvm.IRModule(dict(mod.functions.items()), type_definitions=mod.type_definitions)
    mod["main"] = relay.build_module.bind_params_by_name(main, arrays)
    return mod


def _is_pure(value: relay.Expr) -> bool:
    """Operator calls, tuples, projections, constants and variables: no effects, no calls."""
    if isinstance(value, relay.Call):
        return isinstance(value.op, tvm.ir.Op)
    return isinstance(value, (relay.Tuple, relay.TupleGetItem, relay.Constant, relay.Var))


class _UseScopes(relay.ExprVisitor):
    """For each variable, whether some use of it lies in a different function than its ``let``."""

    def __init__(self):
        super().__init__()
        self.depth = 0
        self.bound_at: dict[relay.Var, int] = {}
        self.escapes: set[relay.Var] = set()

    def visit_function(self, fn):
        self.depth += 1
        super().visit_function(fn)
        self.depth -= 1

    def visit_let(self, let):
        while isinstance(let, relay.Let):  # iterative: A-normal form chains are very long
            self.bound_at[let.var] = self.depth
            self.visit(let.value)
            let = let.body
        self.visit(let)

    def visit_var(self, var):
        if var in self.bound_at and self.bound_at[var] != self.depth:
            self.escapes.add(var)


class InlinePureLets(ChainMutator):
    """Substitute let-bound pure values (see ``_is_pure``) into their uses.

    Only bindings whose every use is in the same function are moved, so no computation moves
    into a closure body (where it would run once per call). Moving a pure value later, or into
    a branch, cannot change what the program computes; it turns the A-normal form back into a
    dataflow graph that ``FuseOps`` can fuse.
    """

    def __init__(self, escapes: set):
        super().__init__()
        self.escapes = escapes
        self.subst: dict[relay.Var, relay.Expr] = {}

    def rebind(self, var, value):
        new = self.visit(value)
        if _is_pure(value) and var not in self.escapes:
            self.subst[var] = new
            return []
        return [(var, new)]

    def visit_var(self, var):
        return self.subst.get(var, var)


@tvm.transform.module_pass(opt_level=0, name="InlinePureLets")
def inline_pure_lets(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Apply :class:`InlinePureLets` to every function of ``mod``."""
    updates = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, relay.Function):
            continue
        scopes = _UseScopes()
        scopes.visit(func)
        updates[gvar] = InlinePureLets(scopes.escapes).visit(func)
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


class _BoundedTake(relay.ExprMutator):
    def visit_call(self, call):
        call = super().visit_call(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "take" and call.attrs.mode == "fast":
            attrs = call.attrs
            axis = None if attrs.axis is None else int(attrs.axis)
            return relay.take(call.args[0], call.args[1], axis, int(attrs.batch_dims), mode="clip")
        return call


@tvm.transform.module_pass(opt_level=0, name="BoundedTake")
def bounded_take(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """``take(..., mode="fast")`` becomes ``mode="clip"``.

    TVM's ``fast`` mode promises no bounds check: an index out of range reads outside the
    tensor (a crash or garbage). ``clip`` computes the same for every index in range and clamps
    the others, so a program can never read memory it does not own (docs/guarantees.md).
    """
    updates = {
        gvar: _BoundedTake().visit(func) for gvar, func in mod.functions.items() if isinstance(func, relay.Function)
    }
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


@tvm.transform.module_pass(opt_level=0, name="FoldConstantIfPossible")
def fold_constants(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """``FoldConstant``; where TVM's pass fails, the same on A-normal form, else nothing.

    FoldConstant leaves a dangling variable behind -- and fails its own free-variable check --
    when the callee of a call is a ``let`` whose value is a let-bound constant
    (``let %x = 1f; (let %y = %x; fn () { .. })()``). In A-normal form (which the pipeline
    reaches next anyway) that shape is gone. Folding cannot simply be skipped: TVM cannot lower
    some unfolded constant expressions into kernels (``cast(3i64, dtype="bool")``).
    """
    mod = _fold_movement(mod)
    for prepare in (lambda m: m, relay.transform.ToANormalForm()):
        try:
            return relay.transform.FoldConstant()(prepare(mod))
        except tvm.error.TVMError:
            continue
    return mod


@tvm.transform.module_pass(opt_level=0, name="AlterOpLayoutIfItPays")
def alter_layout(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """``AlterOpLayout`` as ``relay.build`` runs it, kept only when its run-time cost is small.

    Packed layouts (``NCHWc`` convolutions, packed ``dense``) are what the target's schedules
    are tuned for; weights that are constants are transformed once, here. What remains at run
    time are the ``layout_transform`` calls of non-constant tensors: a conv net's input and its
    last feature map (a few per call, against millions of multiply-accumulates), but also the
    weights of a layer passed as parameters -- an LSTM cell's weights given to ``@main`` are
    repacked at every call of the cell, inside the loop, as many elements moved as the layer
    multiplies. The rule compares the elements the change adds to run-time transforms with the
    multiply-accumulates of the module's convolutions and matrix products (TVM's count, per
    call of each function: the transform and the layer it feeds sit in the same body) and keeps
    the change when they are at most :data:`LAYOUT_TRANSFORM_SHARE` of them.
    """
    try:
        # AlterOpLayout asks the TE compiler for each operator's strategy; the depthwise
        # convolutions depthwise_nchw.mark kept in NCHW stay there
        with faster_te_compiler(), depthwise_nchw.kept():
            altered = relay.transform.AlterOpLayout()(mod)
            altered = _function_by_function(_simplify_post_alter_op())(altered)
            altered = relay.transform.FoldConstant()(_fold_movement(altered))
    except Exception:  # noqa: BLE001 - any failure of an optimisation leaves the module as it was
        # AlterOpLayout is written for dataflow graphs and fails internally on some programs
        # with closures and control flow ("NodeFunctor calls un-registered function on type
        # relay.alter_op_layout.LayoutAlternatedExprNode"); TVM's x86 layout choice for a 1x1
        # convolution over `?` height and width raises a TypeError from Python (TVM's
        # test_any::test_any_conv2d, which TVM's executors run at opt_level 2, without it).
        # Layouts are only an optimisation.
        return mod
    added = _runtime_transform_elements(altered) - _runtime_transform_elements(mod)
    if added <= 0 or added <= LAYOUT_TRANSFORM_SHARE * _multiply_accumulates(mod):
        return altered
    return mod


def _dense_of_transposes(pack: bool) -> tvm.transform.Pass:
    """:func:`dense_transposes.rewrite` as a pass (see that module)."""

    def apply(mod: tvm.IRModule, ctx) -> tvm.IRModule:
        with faster_te_compiler():  # the packed layout asks the TE compiler for the dense strategy
            return dense_transposes.rewrite(mod, pack)

    return tvm.transform.module_pass(apply, opt_level=0, name="DenseOfTransposes")


@tvm.transform.module_pass(opt_level=0, name="DepthwiseBetweenGrouped")
def depthwise_between_grouped(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`depthwise_nchw.mark` as a pass, on x86 targets (see that module)."""
    target = tvm.target.Target.current(allow_none=True)
    if not is_x86(target):
        return mod
    with target:
        lanes = tvm.target.x86.get_simd_32bit_lanes()
    return depthwise_nchw.mark(mod, lanes)


@tvm.transform.module_pass(opt_level=0, name="WinogradConvolutions")
def winograd_convolutions(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`winograd.rewrite` as a pass, for the current target (see that module)."""
    return winograd.rewrite(mod, tvm.target.Target.current(allow_none=True))


@tvm.transform.module_pass(opt_level=0, name="ArmDspConvolutions")
def arm_dsp_convolutions(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`arm_dsp.rewrite` as a pass, for the current target (see that module)."""
    return arm_dsp.rewrite(mod, tvm.target.Target.current(allow_none=True))


def _integer_qdq_regions() -> tvm.transform.Pass:
    """TVM's ``FakeQuantizationToInteger``: a float operator between ``qnn.dequantize`` and
    ``qnn.quantize`` -- the QDQ form onnxruntime's ``quantize_static`` writes, and other
    quantization tools -- becomes its QNN operator on the integers themselves (a convolution of
    int8 weights and uint8 activations, requantized), as onnxruntime runs such a model: the int8
    kernels then compute it instead of float ones between conversions. Operators the pass has no
    integer form for stay float between their conversions. Not at ``opt_level`` 0, where the
    module's operators run as written."""
    return _where_it_applies(relay.transform.FakeQuantizationToInteger())


@tvm.transform.module_pass(opt_level=0, name="SingleRoundingRequantizations")
def single_rounding_requantizations(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`requantization.single_rounding` as a pass, except on targets with Arm's DSP
    extension, whose requantizations are relay_aot's C function (:mod:`.arm_dsp`)."""
    target = tvm.target.Target.current(allow_none=True)
    if arm_dsp.has_dsp(target):
        return mod
    return requantization.single_rounding(mod, whole=is_x86(target))


@tvm.transform.module_pass(opt_level=0, name="RequantizationsIntoConvolutions")
def requantizations_into_convolutions(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`int8_boundaries.requantizations_into_convolutions` as a pass, on x86 targets."""
    if not is_x86(tvm.target.Target.current(allow_none=True)):
        return mod
    return int8_boundaries.requantizations_into_convolutions(mod)


@tvm.transform.module_pass(opt_level=0, name="ShiftsIntoProducers")
def shifts_into_producers(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`int8_boundaries.shifts_into_producers` as a pass, on x86 targets (whose
    legalization makes the shifts; elsewhere the kernels stay as measured)."""
    if not is_x86(tvm.target.Target.current(allow_none=True)):
        return mod
    return int8_boundaries.shifts_into_producers(mod)


@tvm.transform.module_pass(opt_level=0, name="PadsIntoConvolutions")
def pads_into_convolutions(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`arm_dsp.pads_into_convolutions` as a pass, for the current target (see there)."""
    return arm_dsp.pads_into_convolutions(mod, tvm.target.Target.current(allow_none=True))


@tvm.transform.module_pass(opt_level=0, name="NarrowMultipliers")
def narrow_multipliers(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`requantization.narrow_multipliers` as a pass."""
    return requantization.narrow_multipliers(mod)


@tvm.transform.module_pass(opt_level=0, name="PooledPointwiseConvolutions")
def pooled_pointwise_convolutions(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`pooled_pointwise.rewrite` as a pass (see that module)."""
    return pooled_pointwise.rewrite(mod)


@tvm.transform.module_pass(opt_level=0, name="WindowedGlobalPools")
def windowed_global_pools(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`global_pools.rewrite` as a pass (see that module)."""
    return global_pools.rewrite(mod)


@tvm.transform.module_pass(opt_level=0, name="VectorMath")
def vector_math_functions(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`vector_math.rewrite` as a pass (see that module)."""
    return vector_math.rewrite(mod)


@tvm.transform.module_pass(opt_level=0, name="HoistInvariants")
def hoist_invariants(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """:func:`invariants.hoist` as a pass (see that module)."""
    return invariants.hoist(mod)


def _simplify_post_alter_op() -> tvm.transform.Pass:
    """TVM's ``SimplifyExprPostAlterOp`` (registered, but not exported to Python in 0.19)."""
    return tvm.get_global_func("relay._transform.SimplifyExprPostAlterOp")()


def _where_it_applies(inner: tvm.transform.Pass) -> tvm.transform.Pass:
    """``inner``, or nothing where it fails.

    TVM's dataflow passes fail internally on some programs with closures and control flow
    (``SimplifyExpr``'s pattern matcher checks ``LCA(..) on graph`` on a Relay gradient); they
    are only optimisations, and the module is kept as it was.
    """

    def apply(mod: tvm.IRModule, ctx) -> tvm.IRModule:
        try:
            return inner(mod)
        except tvm.error.TVMError:
            return mod

    return tvm.transform.module_pass(apply, opt_level=0, name=f"{inner.info.name}WhereItApplies")


def _fold_movement(mod: tvm.IRModule) -> tvm.IRModule:
    """:func:`constant_movement.fold` (layouts, reshapes and transposes of constants by numpy,
    rather than each built by LLVM in ``FoldConstant``), or ``mod`` where it fails."""
    try:
        return constant_movement.fold(mod)
    except tvm.error.TVMError:
        return mod


def _has_qdq(mod: tvm.IRModule) -> bool:
    """Whether a function of ``mod`` calls ``qnn.dequantize`` (the rewrite's cost is then paid)."""
    return any(node.op.name == "qnn.dequantize" for node in operator_calls(mod))


def _function_by_function(inner: tvm.transform.Pass) -> tvm.transform.Pass:
    """Function pass ``inner`` run on each Relay function in a module of that function and the
    globals it reaches (marked ``SkipOptimization``: only their types are read).

    ``SimplifyExpr`` type-checks the whole module it is given after every pattern of every
    rewriting round of every function (``InferTypeWithModule`` in TVM's ``PatternRewriter``):
    on a module of many functions that is quadratic, and was half of the compile time of a
    program using the Prelude's lists. The result is the same: each function is rewritten
    seeing the same types.
    """

    def apply(mod: tvm.IRModule, ctx) -> tvm.IRModule:
        functions = dict(mod.functions.items())
        own = [gvar for gvar, func in functions.items() if isinstance(func, relay.Function)]
        if len(own) <= 1:
            return inner(mod)
        updated = dict(functions)
        for gvar in own:
            reached = {
                g: functions[g] if g.same_as(gvar) else functions[g].with_attr("SkipOptimization", 1)
                for g in reachable_globals(mod, gvar.name_hint)
            }
            updated[gvar] = inner(tvm.IRModule(reached, mod.type_definitions))[gvar]
        return tvm.IRModule(updated, mod.type_definitions, attrs=mod.attrs)

    return tvm.transform.module_pass(apply, opt_level=inner.info.opt_level, name=inner.info.name)


def _graph_simplifications(opt_level: int) -> list:
    """The dataflow simplifications of ``relay.build``'s (and the VM's) pass prefix.

    Folding batch-norm scales into convolution weights, common subexpressions, canonical
    ``bias_add`` ... : the kernels relay_aot fuses are then the ones ``relay.build`` fuses for
    the same model (``GetPassPrefix`` in TVM's relay/backend/utils.cc; passes above
    ``opt_level`` are left out, as a PassContext leaves them out there).
    """
    transform = relay.transform
    simplifications = [
        transform.EliminateCommonSubexpr(),
        transform.CombineParallelConv2D(3),
        transform.CombineParallelDense(3),
        transform.CombineParallelBatchMatmul(3),
        transform.FoldScaleAxis(),
        _function_by_function(transform.SimplifyExpr()),
        transform.CanonicalizeCast(),
        transform.CanonicalizeOps(),
        transform.FlattenAtrousConv(),
    ]
    enabled = [_where_it_applies(p) for p in simplifications if p.info.opt_level <= opt_level]
    return [*enabled, fold_constants, transform.InferType()]


def _legalizations() -> list:
    """The two legalizations of ``relay.build``'s (and the VM's) pass prefix, in its order.

    They are not optimisations: they rewrite operator calls the target's kernels cannot compute
    into ones they can (``erf`` of ``float16`` becomes ``erf`` of ``float32`` between casts on
    x86, whose LLVM code generator has no ``float16`` ``erf``; a ``take`` of a ``?``-shaped
    tensor stops fusion with its input; QNN operators become the integer arithmetic they stand
    for). Both are registered at ``opt_level`` 1, so a ``PassContext`` below it leaves them out,
    as it does in ``relay.build``; they read the target in scope (:func:`prepare` enters it).

    The QNN one is TVM's C++ ``qnn::transform::Legalize()``, which the executors run: target
    legalization, then canonicalization into core operators. Python's
    ``relay.qnn.transform.Legalize()`` in TVM 0.19 is the first half only, and leaves
    ``qnn.quantize``, which no x86 strategy lowers.
    """
    return [tvm.get_global_func("relay.qnn._transform.Legalize")(), relay.transform.Legalize()]


def prepare(
    mod: tvm.IRModule,
    params: Mapping[str, object] | None = None,
    opt_level: int = 3,
    target: tvm.target.Target | None = None,
) -> tvm.IRModule:
    """The module :func:`prepare_with_extents` prepares (without the equalities of its entry)."""
    return prepare_with_extents(mod, params, opt_level, target)[0]


def prepare_with_extents(
    mod: tvm.IRModule,
    params: Mapping[str, object] | None = None,
    opt_level: int = 3,
    target: tvm.target.Target | None = None,
    layouts: bool = True,
    until_layouts: bool = False,
    winograd: bool = True,
    dsp_kernels: bool = False,
) -> tuple[tvm.IRModule, tuple[ir.SharedExtent, ...]]:
    """Run the pass pipeline: type check, bind params, legalize, simplify, fuse, A-normal form.

    Named symbolic dimensions become ``?`` first (:mod:`.symbolic`); the second result is the
    equalities they stated between ``@main``'s parameters, for the entry to check.

    From ``opt_level`` 1, the legalizations of ``relay.build`` run first (QNN, then the
    target's: see :func:`_legalizations`), as in TVM's executors; before them, float operators
    between ``qnn.dequantize`` and ``qnn.quantize`` become integer ones (:func:`_integer_qdq_regions`),
    TFLite's requantizations take their one-rounding form (:mod:`.requantization`; not on cores
    with Arm's DSP extension, whose C function computes them) and, on x86 with VNNI, int8
    convolutions of few filters their float32 or int16 form (:mod:`.exact_int8`). On x86, the
    int8 importer's kernel boundaries that cost a stored tensor are dropped (after the layout
    choice and before FuseOps: :mod:`.int8_boundaries`); on every target, float divisors with no
    finite reciprocal are loaded by their kernels (:mod:`.float_divisors`).
    At ``opt_level`` 2 and up, the dataflow simplifications of ``relay.build`` run too; at 3,
    ``AlterOpLayout`` picks the target's preferred data layouts (packed weights for ``dense``,
    ``NCHWc`` convolutions on x86, as ``relay.build`` does) when their run-time cost is small
    (see :func:`alter_layout`); before it, on x86, NHWC convolutions and pools become NCHW ones
    where the transforms this adds are cheap (:func:`.layouts.nchw_convolutions`: TVM's x86
    schedules are written for NCHWc). ``layouts=False`` leaves out the layout choice, whatever
    the level (not the NCHW conversion): AutoTVM's tasks are the kernels before that choice,
    which reads their records.
    ``until_layouts=True`` stops where the layout choice would run: the dataflow graph whose
    operators become those kernels, which TVM's graph tuner reads (see :func:`layout_graph`).
    ``winograd``: after the layout choice, 3x3 convolutions with constant weights on AVX-512
    become Winograd's (:mod:`.winograd`; ``RELAY_AOT_WINOGRAD``). ``dsp_kernels``: the kernels
    are printed as C, so on a target with Arm's DSP extension int8 convolutions take the forms of
    relay_aot's micro-kernels (:mod:`.arm_dsp`; ``Config.c_kernels``).
    """
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"expected a tvm.IRModule, got {type(mod).__name__}")
    if "main" not in [g.name_hint for g in mod.get_global_vars()]:
        raise RelayAotError("the module has no @main function")
    if not isinstance(mod["main"], relay.Function):
        raise UnsupportedError(f"@main is a {type(mod['main']).__name__}, not a Relay function")
    alters_layout = layouts and opt_level >= 3 and target is not None
    if alters_layout:
        warm_error_backtraces()  # AlterOpLayout raises one (see te_compiler_speed)
    mod = prune(mod)
    mod = bind_params(mod, params)
    extents = symbolic.shared_extents(mod["main"])
    mod = symbolic.erase(mod)
    fuse_level = 0 if opt_level < 1 else 2
    sequence = [relay.transform.InferType()]
    if opt_level >= 1 and _has_qdq(mod):
        sequence += [_integer_qdq_regions(), relay.transform.InferType()]
    dsp = dsp_kernels and opt_level >= 1 and target is not None
    if dsp:
        # before the legalizations, which widen an int8 convolution's operands on arm_cpu
        sequence += [arm_dsp_convolutions, relay.transform.InferType()]
    if opt_level >= 1:
        sequence += [single_rounding_requantizations, relay.transform.InferType()]
        # before the legalizations, which would pad the channels
        sequence += [small_int8_convolutions, relay.transform.InferType()]
    sequence += [
        *_legalizations(),
        relay.transform.InferType(),
        exact_int8_products,
        relay.transform.SimplifyInference(),
        bounded_take,
        relay.transform.InferType(),
        numpy_slice_begin,
        unpacked_dynamic_dense,
        static_pad_width,
        zero_reshapes_kept,
        relay.transform.InferType(),
    ]
    if opt_level >= 1:
        # as optimisations do: at opt_level 0 the kernels are TVM's, operator by operator
        sequence += [vector_math_functions, relay.transform.InferType()]
    if opt_level >= 2:
        sequence += [fold_constants, *_graph_simplifications(opt_level)]
    if opt_level >= 3 and target is not None:
        # before the layout choice and AutoTVM's tasks alike: both see the kernels built
        sequence += [
            nchw_convolutions,
            relay.transform.InferType(),
            pooled_pointwise_convolutions,
            windowed_global_pools,
        ]
    if until_layouts:
        return _run_sequence(sequence, mod, opt_level, target), extents
    if alters_layout:
        sequence += [depthwise_between_grouped, alter_layout, relay.transform.InferType()]
        sequence += [requantizations_into_convolutions]
        if winograd:
            sequence += [winograd_convolutions, relay.transform.InferType()]
    sequence += [relay.transform.ToANormalForm(), inline_pure_lets, relay.transform.InferType()]
    if opt_level >= 2:
        # after inlining: a transpose bound by a let is then an argument of the product again
        sequence.append(_dense_of_transposes(pack=alters_layout))
        # after the products' rewrite: a weight's packing is then invariant with its transpose
        sequence.append(hoist_invariants)
    if dsp or (opt_level >= 1 and is_x86(target)):
        # after the last constant folding, which would fold the int32 constants' casts again;
        # for GCC's code of the DSP kernels and LLVM's x86 code, where it was measured
        sequence.append(narrow_multipliers)
    sequence += [
        shifts_into_producers,
        zero_divisors_loaded,
        slices_end_kernels,
        relay.transform.FuseOps(fuse_level),
    ]
    if dsp:
        # a pad's kernel merged into the convolution's that reads it, which then pads itself
        sequence += [relay.transform.InferType(), pads_into_convolutions]
    sequence += [
        symbolic.erase_pass,
        relay.transform.InferType(),
        relay.transform.ToANormalForm(),
        relay.transform.InferType(),
    ]
    return _run_sequence(sequence, mod, opt_level, target), extents


def _run_sequence(sequence: list, mod: tvm.IRModule, opt_level: int, target) -> tvm.IRModule:
    # int8_by_eight: the legalization and the layout choice of int8 convolutions of 8k filters;
    # int16_pairs: the layout choice of int16 ones on x86 without VNNI
    with (
        tvm.transform.PassContext(opt_level=opt_level),
        target or tvm.target.Target("llvm"),
        int8_by_eight.building(),
        int16_pairs.building(),
    ):
        try:
            return tvm.transform.Sequential(sequence)(mod)
        except tvm.error.DiagnosticError as err:
            raise TypeCheckError(f"the Relay program does not type-check: {err}") from None


def layout_graph(
    mod: tvm.IRModule,
    params: Mapping[str, object] | None = None,
    opt_level: int = 3,
    target: tvm.target.Target | None = None,
) -> tvm.IRModule:
    """The module as the layout choice of :func:`prepare_with_extents` reads it: parameters
    bound, legalized and simplified, not yet fused (for TVM's graph tuner, whose workloads must
    be those of the kernels relay_aot builds)."""
    return prepare_with_extents(mod, params, opt_level, target, until_layouts=True)[0]


def _missing_gradients(func: relay.Function) -> list[str]:
    """Names of the operators ``func`` calls that have no ``FPrimalGradient`` registered."""
    missing: set[str] = set()

    def visit(node):
        if isinstance(node, tvm.ir.Op) and node.name != "annotation.checkpoint":
            if node.get_attr("FPrimalGradient") is None:
                missing.add(node.name)

    relay.analysis.post_order_visit(func, visit)
    return sorted(missing)


def _tensors_only(ty: relay.Type) -> bool:
    if isinstance(ty, relay.TensorType):
        return True
    return isinstance(ty, relay.TupleType) and len(ty.fields) > 0 and all(_tensors_only(f) for f in ty.fields)


def _mentions_function_type(ty: relay.Type | None) -> bool:
    if isinstance(ty, relay.FuncType):
        return True
    if isinstance(ty, relay.TupleType):
        return any(_mentions_function_type(f) for f in ty.fields)
    if isinstance(ty, relay.RefType):
        return _mentions_function_type(ty.value)
    if isinstance(ty, relay.TypeCall):
        return any(_mentions_function_type(a) for a in ty.args)
    return False


class _RepairGradient(relay.ExprMutator):
    """Repair two defects of the program Relay's higher-order gradient pass makes.

    The pass replaces every variable by one of the same ``vid`` whose type pairs each tensor
    with a reference, and adds a backpropagator parameter to every function. But

    * it leaves the variables of ``match`` patterns as they were, so the clauses' bodies use
      variables no pattern binds ("contains free variables"): each pattern variable is replaced
      here by the body's variable of the same ``vid``;
    * it rewrites a function type's parameters but not its result (``let %loop: fn ((int32,
      ref(int32)), ..., ref(fn () -> ())) -> Tensor[...]`` for a function that now returns a
      pair), so type inference refuses the program: the annotations of local variables whose
      type mentions a function type are dropped, and inferred again from the functions
      themselves, which the pass annotates correctly.
    """

    def __init__(self):
        super().__init__()
        self.renamed: dict[relay.Var, relay.Var] = {}

    def _fresh(self, var: relay.Var) -> relay.Var:
        if not _mentions_function_type(var.type_annotation):
            return var
        self.renamed[var] = relay.Var(var.name_hint)
        return self.renamed[var]

    def visit_let(self, let):
        bindings = []
        while isinstance(let, relay.Let):  # iterative: the pass makes long let chains
            var = self._fresh(let.var)
            bindings.append((var, self.visit(let.value)))
            let = let.body
        body = self.visit(let)
        for var, value in reversed(bindings):
            body = relay.Let(var, value, body)
        return body

    def visit_function(self, fn):
        params = [self._fresh(p) for p in fn.params]
        return relay.Function(params, self.visit(fn.body), fn.ret_type, fn.type_params, fn.attrs)

    def visit_var(self, var):
        return self.renamed.get(var, var)

    def _pattern(self, pattern, free: list):
        if isinstance(pattern, relay.PatternVar):
            used = next((v for v in free if v.vid.same_as(pattern.var.vid)), None)
            if used is None:
                return relay.PatternVar(relay.Var(pattern.var.name_hint))
            return relay.PatternVar(self._fresh(used))
        if isinstance(pattern, relay.PatternConstructor):
            return relay.PatternConstructor(pattern.constructor, [self._pattern(p, free) for p in pattern.patterns])
        if isinstance(pattern, relay.PatternTuple):
            return relay.PatternTuple([self._pattern(p, free) for p in pattern.patterns])
        return pattern

    def visit_match(self, match):
        clauses = []
        for clause in match.clauses:
            lhs = self._pattern(clause.lhs, relay.analysis.free_vars(clause.rhs))
            clauses.append(relay.Clause(lhs, self.visit(clause.rhs)))
        return relay.Match(self.visit(match.data), clauses, match.complete)


def _globals_in(expr: relay.Expr) -> list[str]:
    return sorted({n.name_hint for n in nodes_where(expr, lambda n: isinstance(n, relay.GlobalVar))})


class _GlobalsToLocals(relay.ExprMutator):
    def __init__(self, local: dict[str, relay.Var]):
        super().__init__()
        self.local = local

    def visit_global_var(self, gvar):
        return self.local.get(gvar.name_hint, gvar)


def _localize_globals(mod: tvm.IRModule, name: str) -> relay.Function:
    """``mod[name]`` with the global functions it reaches bound by ``let`` inside it.

    Relay's gradient pass does not differentiate through calls of globals (it leaves them
    calling the original function on values of the wrong type), but it does through local
    functions, recursive ones included. Monomorphic globals -- each calling only itself and
    globals bound before it -- become let-bound closures, callees first.
    """
    func = mod[name]
    others = [g.name_hint for g in reachable_globals(mod, name) if g.name_hint != name]
    for gname in [name, *others]:
        if name in _globals_in(mod[gname]):
            raise UnsupportedError(
                f"@{name} is recursive (through @{gname}): Relay's gradient does not differentiate through "
                f"calls of global functions; write the recursion as a let-bound local function inside @{name}"
            )
    if not others:
        return func
    polymorphic = [g for g in others if not isinstance(mod[g], relay.Function) or mod[g].type_params]
    if polymorphic:
        raise UnsupportedError(
            f"@{name} calls the polymorphic global function {', '.join(f'@{g}' for g in polymorphic)}: Relay's "
            f"gradient does not differentiate through global functions and relay_aot binds only monomorphic ones "
            f"inside @{name}; write a monomorphic version (TVM's Prelude is polymorphic)"
        )
    order: list[str] = []  # callees first
    remaining = {g: set(_globals_in(mod[g])) - {g} for g in others}
    while remaining:
        ready = sorted(g for g, callees in remaining.items() if not callees - set(order))
        if not ready:
            raise UnsupportedError(
                f"the global functions {', '.join(f'@{g}' for g in sorted(remaining))} are mutually recursive: "
                f"Relay's gradient does not differentiate through global functions, and relay_aot binds only "
                f"self-recursive ones inside @{name}"
            )
        order += ready
        for g in ready:
            del remaining[g]
    local = {g: relay.Var(g, type_annotation=mod[g].checked_type) for g in order}
    body = _GlobalsToLocals(local).visit(func.body)
    for gname in reversed(order):
        callee = mod[gname]
        value = relay.Function(
            callee.params, _GlobalsToLocals(local).visit(callee.body), callee.ret_type, callee.type_params
        )
        body = relay.Let(local[gname], value, body)
    mod[name] = relay.Function(func.params, body, func.ret_type, func.type_params, func.attrs)
    return relay.transform.InferType()(mod)[name]


def gradient(mod: tvm.IRModule, name: str = "main", params: Mapping[str, object] | None = None) -> tvm.IRModule:
    """A module whose ``@main`` is the gradient of ``mod[name]``, ready for ``relay_aot.compile``.

    The function is differentiated by Relay's own reverse-mode pass,
    ``relay.transform.gradient(..., mode="higher_order")``, on every parameter: the new
    ``@main`` takes the same parameters and returns ``(value, (d value / d p0, d value / d p1,
    ...))``, the gradient of the first tensor of ``value`` when ``value`` is a tuple (the
    tensor is seeded with ones, so a non-scalar output gives the gradient of its sum). The
    program it makes keeps one reference per intermediate value and a backpropagator closure
    in a reference: TVM's Relay VM cannot run it (it has no references); relay_aot and the Relay
    interpreter can.

    :param mod: the module holding the function (and the type definitions it uses).
    :param name: the global to differentiate.
    :param params: arrays bound by name to parameters of that function *before*
        differentiating (data inputs, say): they become constants and leave the signature, so
        the gradient is taken with respect to the remaining parameters only.
    :raises UnsupportedError: what Relay's gradient pass cannot differentiate: a parameter or
        result that is not a tensor (or, for the result, a tuple of them), a polymorphic
        function, an operator with no registered gradient. The pass does not differentiate
        through calls of global functions; monomorphic globals the function reaches are bound
        inside it as ``let``-bound local functions first (callees first; self-recursion is
        fine), but a recursive ``@name``, mutually recursive or polymorphic globals (TVM's
        Prelude: ``@map``, ``@foldl``) are refused.
    """
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"expected a tvm.IRModule, got {type(mod).__name__}")
    if name not in [g.name_hint for g in mod.get_global_vars()]:
        raise RelayAotError(f"the module has no @{name} function")
    if not isinstance(mod[name], relay.Function):
        raise UnsupportedError(f"@{name} is a {type(mod[name]).__name__}, not a Relay function")
    mod = prune(mod, name)
    if params:
        func = mod[name]
        unknown = sorted(set(params) - {p.name_hint for p in func.params})
        if unknown:
            raise RelayAotError(f"params name no parameter of @{name}: {', '.join(unknown)}")
        arrays = {k: v if isinstance(v, tvm.nd.NDArray) else tvm.nd.array(np.asarray(v)) for k, v in params.items()}
        mod[name] = relay.build_module.bind_params_by_name(func, arrays)
    try:
        mod = relay.transform.InferType()(mod)
    except tvm.error.DiagnosticError as err:
        raise TypeCheckError(f"the Relay program does not type-check: {err}") from None
    func = mod[name]
    if func.type_params:
        raise UnsupportedError(f"@{name} is polymorphic: Relay's gradient takes a function of tensors")
    for param in func.params:
        if not isinstance(param.checked_type, relay.TensorType):
            raise UnsupportedError(
                f"parameter %{param.name_hint} of @{name} has type {param.checked_type}: Relay's gradient "
                "differentiates functions of tensor parameters only"
            )
    if not _tensors_only(func.checked_type.ret_type):
        raise UnsupportedError(
            f"@{name} returns {func.checked_type.ret_type}: Relay's gradient needs a tensor or a tuple of tensors"
        )
    func = _localize_globals(mod, name)
    missing = _missing_gradients(func)
    if missing:
        raise UnsupportedError(f"no gradient is registered for the operators {', '.join(missing)} (used in @{name})")
    try:
        grad = relay.transform.gradient(func, mod=mod, mode="higher_order")
        grad = relay.Function(
            grad.params, _RepairGradient().visit(grad.body), grad.ret_type, grad.type_params, grad.attrs
        )
        result = tvm.IRModule({"main": grad}, type_definitions=mod.type_definitions)
        return cleanup(relay.transform.InferType()(result))
    except tvm.error.TVMError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        raise UnsupportedError(f"Relay's gradient failed on @{name}: {lines[-1] if lines else err}") from None

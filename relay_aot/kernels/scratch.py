"""Kernels' scratch memory as parameters, for programs whose storage is planned at compile time.

A TVM kernel gets a large intermediate buffer (a dense layer's packed weights, a convolution's
padded input) by calling ``TVMBackendAllocWorkspace`` at run time, checking the pointer and
freeing it again: code in every such kernel and two hooks in the package, plus an arena sized
for the largest request. A standalone package whose tensors are planned at compile time
(``backends/standalone/plan.py``) places these buffers beside its tensors instead, as TVM's
unified static memory planner does for its AOT executor: each one becomes one more pointer
parameter of its kernel (after the outputs) and the caller passes a planned block.

Only allocations ``LowerTVMBuiltin`` would turn into workspace calls, and of a size known at
compile time, move; smaller ones stay on the kernel's stack, as TVM puts them.
"""

from __future__ import annotations

import dataclasses

import tvm
from tvm import tir

#: TVM's ``runtime::kMaxStackAlloca``: a CPU kernel's global buffers smaller than this many bytes
#: are arrays on its stack, larger ones come from the workspace.
MAX_STACK_ALLOCA = 1024


#: Calls whose failure a kernel returns (besides its workspace calls and assertions).
_FAILING_CALLS = frozenset(
    {
        "tir.tvm_call_packed",
        "tir.tvm_call_cpacked",
        "tir.tvm_call_packed_lowered",
        "tir.tvm_call_cpacked_lowered",
        "tir.tvm_throw_last_error",
    }
)


@dataclasses.dataclass(frozen=True)
class Scratch:
    """What :func:`to_params` did to one kernel."""

    sizes: tuple[int, ...]  #: bytes of each scratch parameter, in order
    fallible: bool  #: it can still return non-zero (a workspace call or an assertion remains)


def _workspace_bytes(node: tir.Allocate) -> int | None:
    """Bytes of ``node`` if LowerTVMBuiltin serves it from the workspace and its size is
    constant; 0 if it stays on the stack; None if it is a workspace call of unknown size."""
    if node.buffer_var.type_annotation.storage_scope != "global":
        return None
    if not all(isinstance(e, tir.IntImm) for e in node.extents):
        return None
    extents = [int(e) for e in node.extents]
    count = 1
    for e in extents:
        count *= e
    dtype = tvm.DataType(str(node.dtype))
    nbytes = count * dtype.bits * dtype.lanes // 8
    return 0 if 0 < nbytes < MAX_STACK_ALLOCA else nbytes


#: Bytes up to which a kernel's constant-size buffer is an array on its stack in a library for
#: the host (:func:`on_stack`), where TVM's limit is :data:`MAX_STACK_ALLOCA`.
STACK_ALLOCA_LIMIT = 16 * 1024

#: TVM's annotation (``tir::transform::kDisableLowerTVMBuiltin``) that keeps an allocation from
#: LowerTVMBuiltin: LLVM's code generator then makes it an array on the stack.
_KEEP_ON_STACK = "disable_lower_builtin"


def on_stack(func: tir.PrimFunc, limit: int = STACK_ALLOCA_LIMIT) -> tir.PrimFunc:
    """``func`` with its workspace allocations of constant size up to ``limit`` bytes on the
    stack instead.

    TVM serves every buffer of 1 KiB or more from ``TVMBackendAllocWorkspace``, a call to
    allocate and one to free each time its scope is entered: the accumulators of a
    convolution's register block (27 AVX-512 vectors, 1.7 KiB) once per output row, a thousand
    times per SqueezeNet inference, behind a pointer returned by a call. On the stack, LLVM
    allocates them once, at the function's entry (a parallel loop's body is a function of its
    own: each thread has its own); MobileNet ran 8% faster, the ONNX ResNet-50 1-7%. A
    standalone package keeps TVM's rule: a microcontroller's stack is small, and its scratch is
    planned (:func:`to_params`)."""
    changed = [False]

    def post(node):
        nbytes = _workspace_bytes(node)
        if not nbytes or nbytes > limit or _KEEP_ON_STACK in node.annotations:
            return None
        changed[0] = True
        annotations = {**node.annotations, _KEEP_ON_STACK: tvm.tir.const(True, "bool")}
        return tir.Allocate(
            node.buffer_var, node.dtype, node.extents, node.condition, node.body, annotations, node.span
        )

    body = tir.stmt_functor.ir_transform(func.body, None, post, ["tir.Allocate"])
    return func.with_body(body) if changed[0] else func


def to_params(func: tir.PrimFunc) -> tuple[tir.PrimFunc, Scratch]:
    """``func`` with each workspace allocation of constant size turned into a parameter."""
    moved: list[tuple[tir.Allocate, int]] = []
    fallible = [False]

    def post(node):
        if isinstance(node, tir.Allocate):
            nbytes = _workspace_bytes(node)
            if nbytes:
                moved.append((node, nbytes))
                return node.body
            if nbytes is None:
                fallible[0] = True
        elif isinstance(node, tir.AssertStmt):
            fallible[0] = True
        elif isinstance(node, tir.Call) and (isinstance(node.op, tvm.ir.GlobalVar) or node.op.name in _FAILING_CALLS):
            fallible[0] = True  # another function of the module, or TVM's runtime, may fail
        return None

    body = tir.stmt_functor.ir_transform(func.body, None, post, ["tir.Allocate", "tir.AssertStmt", "tir.Call"])
    if not moved:
        return func, Scratch((), fallible[0])
    # a parameter like the kernel's others: a handle, its buffer (over the allocation's data) in the map
    params, buffer_map = list(func.params), dict(func.buffer_map)
    for node, _ in moved:
        param = tir.Var(node.buffer_var.name, "handle")
        params.append(param)
        buffer_map[param] = tir.decl_buffer(node.extents, node.dtype, node.buffer_var.name, data=node.buffer_var)
    new = tir.PrimFunc(params, body, func.ret_type, buffer_map, func.attrs, func.span)
    return new, Scratch(tuple(n for _, n in moved), fallible[0])


def apply(merged: tvm.IRModule, symbols) -> tuple[tvm.IRModule, dict[str, Scratch]]:
    """:func:`to_params` on the functions of ``merged`` named in ``symbols`` (the kernels the
    generated code calls; functions they call keep their workspace calls)."""
    return rewrite(merged, symbols, to_params)


def rewrite(merged: tvm.IRModule, symbols, transform) -> tuple[tvm.IRModule, dict]:
    """``merged`` with ``transform`` (PrimFunc -> (PrimFunc, info)) applied to the functions
    named in ``symbols``, and the info per name (its attributes kept)."""
    functions, done = {}, {}
    for gvar, func in merged.functions.items():
        if gvar.name_hint in symbols and isinstance(func, tir.PrimFunc):
            func, done[gvar.name_hint] = transform(func)
        functions[gvar] = func
    return _module(merged, functions), done


def rewrite_each(merged: tvm.IRModule, transform) -> tvm.IRModule:
    """``merged`` with ``transform`` (PrimFunc -> PrimFunc) applied to each of its PrimFuncs
    (its attributes kept); ``merged`` itself where ``transform`` returns every one as it is."""
    functions = {}
    changed = False
    for gvar, func in merged.functions.items():
        if isinstance(func, tir.PrimFunc):
            new = transform(func)
            changed |= not new.same_as(func)
            func = new
        functions[gvar] = func
    return _module(merged, functions) if changed else merged


def _module(merged: tvm.IRModule, functions: dict) -> tvm.IRModule:
    """An IRModule of ``functions`` with ``merged``'s attributes."""
    out = tvm.IRModule(functions)
    if merged.attrs is not None:
        for key, value in merged.attrs.items():
            out = out.with_attr(key, value)
    return out

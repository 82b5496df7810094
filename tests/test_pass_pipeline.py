"""The pass pipeline's wrappers of TVM's passes (``relay_aot/passes/__init__.py``): what they
change of TVM's behaviour, and what they must not."""

from __future__ import annotations

import tvm
from tvm import relay
from tvm.ir.instrument import pass_instrument
from tvm.relay.prelude import Prelude

from relay_aot import passes

#: Three functions, each with a reshape of a reshape (SimplifyExpr makes it one), calling each
#: other (recursion included), plus the Prelude's 240 globals, of which main reaches a few.
PROGRAM = """#[version = "0.0.5"]
def @leaf(%x: Tensor[(2, 3), float32]) -> Tensor[(6), float32] { reshape(reshape(%x, newshape=[3, 2]), newshape=[6]) }
def @loop(%x: Tensor[(2, 3), float32], %n: int32) -> Tensor[(6), float32] {
  if (less(%n, 1)) { @leaf(%x) } else { @loop(reshape(reshape(%x, newshape=[6]), newshape=[2, 3]), subtract(%n, 1)) }
}
def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(6), float32] {
  %0 = @loop(%x, 3);
  %1 = @map(fn (%y: Tensor[(6), float32]) { reshape(reshape(%y, newshape=[3, 2]), newshape=[6]) }, Cons(%0, Nil));
  match? (%1) { Cons(%h, _) => %h }
}
"""


def _module() -> tvm.IRModule:
    init = tvm.IRModule()
    Prelude(init)
    return relay.transform.InferType()(passes.prune(relay.parse(PROGRAM, init_module=init)))


def _reshapes(func) -> int:
    found = []
    relay.analysis.post_order_visit(
        func,
        lambda node: found.append(
            isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and node.op.name == "reshape"
        ),
    )
    return sum(found)


def test_simplify_expr_function_by_function_is_simplify_expr_on_a_smaller_module():
    mod = _module()
    assert len(mod.functions) > 3  # main, loop, leaf and the Prelude's map
    sizes = {"each": [], "whole": []}
    run = "each"

    @pass_instrument
    class ModuleSizes:
        def run_before_pass(self, mod, info):
            if info.name == "InferType":
                sizes[run].append(len(mod.functions))

    with tvm.transform.PassContext(instruments=[ModuleSizes()]):
        each = passes._function_by_function(relay.transform.SimplifyExpr())(mod)
        run = "whole"
        whole = relay.transform.SimplifyExpr()(mod)
    assert tvm.ir.structural_equal(each, whole)
    for name in ("leaf", "loop", "main"):  # every function was simplified, not only one
        assert _reshapes(each[name]) == _reshapes(mod[name]) // 2, (name, each[name])
    # each function's rewrites type-checked what it reaches (@leaf: itself), not the module
    assert min(sizes["each"]) == 1 and sum(sizes["each"]) < 0.75 * sum(sizes["whole"]), sizes

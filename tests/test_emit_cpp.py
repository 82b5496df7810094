"""Exact C++ output for each control-IR node (the emitter is a printer: its output is the spec)."""

import textwrap

from relay_aot import ir
from relay_aot.backends.cpp.emit import CppEmitter
from relay_aot.backends.emitter import Emitter
from relay_aot.dispatch import dispatch

F32 = ir.TensorType((2,), "float32")
SCALAR = ir.TensorType((), "int32")
ANY = ir.AnyType()
PAIR = ir.TupleType((F32, SCALAR))
LIST = ir.AdtType(0, (F32,))
LIST_DEF = ir.AdtDef(
    "List", 1, (ir.CtorDef("Cons", 7, (ir.TypeParam(0), ir.AdtType(0, (ir.TypeParam(0),)))), ir.CtorDef("Nil", 8, ()))
)
FN = ir.FuncType((F32,), F32)
KERNEL = ir.Kernel(0, "m_k0_fused_add", (F32, F32), (F32, F32), (F32,), F32, ("add",))
SPLIT = ir.Kernel(
    1, "m_k1_fused_split", (PAIR,), (F32, SCALAR), (SCALAR, SCALAR), ir.TupleType((SCALAR, SCALAR)), ("split",)
)


def v(i, ty, hint=""):
    return ir.Var(i, ty, hint)


def emitter(functions=()):
    program = ir.Program(
        functions=list(functions), main="f0", params=[], ret=F32, kernels=[KERNEL, SPLIT], constants=[], adts=[LIST_DEF]
    )
    return CppEmitter(program, "m", None)


def emit(stmt, functions=(), used=()):
    """``stmt`` printed alone; ``used``: ids of the variables read after it."""
    em = emitter(functions)
    em.out = Emitter()
    em.used = set(used)
    dispatch(em._stmts, stmt)
    return em.out.body


def lines(text):
    return textwrap.dedent(text).lstrip("\n")


def test_constant():
    assert emit(ir.Let(v(1, F32, "w"), ir.Constant(3))) == "const NDArray& v1 = constants()[3];  // %w = constant\n"


def test_fresh_constants_copy_or_zero_fill():
    assert "= copy_tensor(constants()[3]);" in emit(ir.Let(v(1, F32, "w"), ir.Constant(3, fresh=True)))
    assert "= zero_tensor(constants()[3]);" in emit(ir.Let(v(1, F32, "w"), ir.Constant(3, fresh=True, zeros=True)))


def test_kernel_call_single_output():
    stmt = ir.Let(v(3, F32), ir.KernelCall(0, [v(1, F32), v(2, F32)]), "kernel: add")
    assert emit(stmt) == lines(
        """
        // kernel: add (k0)
        NDArray v3 = alloc_tensor(shapes()[0], DLDataType{kDLFloat, 32, 1});  // (2,)
        call_kernel(&m_k0_fused_add, "m_k0_fused_add", arg(v1), arg(v2), arg(v3));
        """
    )


def test_kernel_call_tuple_argument_and_tuple_result():
    stmt = ir.Let(v(5, ir.TupleType((SCALAR, SCALAR))), ir.KernelCall(1, [v(4, PAIR)]))
    assert emit(stmt) == lines(
        """
        // k1
        int32_t v5_0;
        int32_t v5_1;
        call_kernel(&m_k1_fused_split, "m_k1_fused_split", arg(field(v4, 0)), arg(field(v4, 1)), scalar_arg(&v5_0).get(), scalar_arg(&v5_1).get());
        ADT v5 = make_adt(0, box(v5_0), box(v5_1));
        """
    )


def test_tuples_and_projections():
    assert emit(ir.Let(v(3, PAIR), ir.MakeTuple([v(1, F32), v(2, SCALAR)]), "tuple")) == (
        "ADT v3 = make_adt(0, v1, box(v2));  // tuple\n"
    )
    assert emit(ir.Let(v(4, SCALAR), ir.Proj(v(3, PAIR), 1))) == "int32_t v4 = unbox<int32_t>(field(v3, 1));\n"
    assert emit(ir.Let(v(4, F32), ir.Proj(v(3, PAIR), 0))) == "NDArray v4 = as<NDArray>(field(v3, 0));\n"
    assert emit(ir.Let(v(4, ANY), ir.Proj(v(3, PAIR), 1))) == "ObjectRef v4 = field(v3, 1);\n"


def test_constructor_and_closure():
    assert emit(ir.Let(v(2, LIST), ir.MakeAdt(0, 1, []))) == "ADT v2 = make_adt(8);  // Nil\n"
    assert emit(ir.Let(v(3, LIST), ir.MakeAdt(0, 0, [v(1, F32), v(2, LIST)]))) == (
        "ADT v3 = make_adt(7, v1, v2);  // Cons\n"
    )
    assert emit(ir.Let(v(4, FN, "f"), ir.MakeClosure("f3", [v(1, F32), v(2, LIST)]))) == (
        "Closure v4 = make_closure<Closure_f3>(v1, v2);  // %f\n"
    )


def test_calls():
    poly = ir.Function("f2", "@id", [v(10, ANY)], ANY, ir.Block([], v(10, ANY)))
    assert emit(ir.Let(v(3, F32), ir.CallGlobal("f2", [v(1, F32)])), [poly]) == "NDArray v3 = as<NDArray>(f2(v1));\n"
    assert emit(ir.Let(v(3, F32), ir.CallClosure(v(2, FN), [v(1, F32)]))) == lines(
        """
        ObjectRef v3_args[] = {v1};
        NDArray v3 = as<NDArray>(call_closure(v2, v3_args, 1, kTypes, 0));
        """
    )
    assert emit(ir.Let(v(3, F32), ir.CallClosure(v(2, ir.FuncType((), F32)), []))) == (
        "NDArray v3 = as<NDArray>(call_closure(v2, nullptr, 0, kTypes, 0));\n"
    )


def test_references():
    ref = ir.RefType(SCALAR)
    assert emit(ir.Let(v(2, ref), ir.RefNew(v(1, SCALAR)))) == "Ref v2 = ref_new(box(v1));\n"
    assert emit(ir.Let(v(3, SCALAR), ir.RefRead(v(2, ref)))) == "int32_t v3 = unbox<int32_t>(ref_read(v2));\n"
    write = ir.Let(v(4, ir.TupleType(()), "u"), ir.RefWrite(v(2, ref), v(1, SCALAR)))
    assert emit(write, used={4}) == lines(
        """
        ref_write(v2, box(v1));
        ADT v4 = unit();  // %u
        """
    )
    # the unit value only where it is read (taking the shared object costs two atomic counts)
    assert emit(write) == "ref_write(v2, box(v1));  // %u\n"


def test_if():
    stmt = ir.If(v(1, ir.TensorType((), "bool")), ir.Block([], v(2, F32)), ir.Block([], v(3, F32)), v(4, F32, "r"))
    assert emit(stmt) == lines(
        """
        NDArray v4;  // %r = if
        if (v1) {
          v4 = v2;
        } else {
          v4 = v3;
        }
        """
    )


def test_match_nested_patterns_in_order():
    head, rest = v(5, F32, "h"), v(6, LIST, "t")
    clauses = [
        ir.Clause([ir.TagTest((), 7), ir.TagTest((1,), 8)], [ir.Bind(head, (0,))], ir.Block([], head), "Cons(%h, Nil)"),
        ir.Clause([ir.TagTest((), 7)], [ir.Bind(rest, (1,))], ir.Block([], v(2, F32)), "Cons(_, %t)"),
        ir.Clause([], [], ir.Block([], v(3, F32)), "_"),
    ]
    assert emit(ir.Match(v(1, LIST), clauses, v(4, F32), "@f")) == lines(
        """
        NDArray v4;  // match
        if (tag(v1) == 7 && tag(field(v1, 1)) == 8) {  // Cons(%h, Nil)
          NDArray v5 = as<NDArray>(field(v1, 0));  // %h
          v4 = v5;
        } else if (tag(v1) == 7) {  // Cons(_, %t)
          ADT v6 = as<ADT>(field(v1, 1));  // %t
          v4 = v2;
        } else if (true) {  // _
          v4 = v3;
        } else {
          raise_match_failure("@f");
        }
        """
    )


def test_global_function_with_self_tail_call():
    a, b = v(0, SCALAR, "a"), v(1, SCALAR, "b")
    body = ir.Block([], ir.TailCall([b, a]))  # parallel assignment: (a, b) = (b, a)
    func = ir.Function("f0", "@loop", [a, b], F32, body, has_tail_call=True, signature="@loop(...)")
    em = emitter([func])
    em.out = Emitter()
    em.emit_function(func)
    assert em.out.body == lines(
        """
        // @loop(...)
        NDArray f0(int32_t v0, int32_t v1) {
          if (stack_low()) return on_new_stack([&] { return f0(v0, v1); });  // deep recursion
          while (true) {  // self tail calls continue here
            {  // self tail call
              int32_t t0 = v1;
              int32_t t1 = v0;
              v0 = std::move(t0);
              v1 = std::move(t1);
            }
            continue;
          }
        }
        """
    )


def test_closure_function_with_captures_and_self():
    x, y, me = v(0, F32, "x"), v(1, F32, "y"), v(2, FN, "f")
    func = ir.Function("f3", "%f in @main", [y], F32, ir.Block([], x), is_closure=True, captures=[x], self_var=me)
    em = emitter([func])
    em.out = Emitter()
    em.emit_function(func)
    assert em.out.body == lines(
        """
        // %f in @main
        NDArray f3(const Closure_f3* self, const NDArray& v1) {
          const NDArray& v0 = self->c0;
          Closure v2 = closure_ref(self);  // %f (itself)
          return v0;
        }

        ObjectRef entry_f3(const ClosureObj* self, const ObjectRef* args) {
          return f3(static_cast<const Closure_f3*>(self), view<NDArray>(args[0]));
        }

        NDArray typed_f3(const ClosureObj* self, const NDArray& v1) {
          return f3(static_cast<const Closure_f3*>(self), v1);
        }
        """
    )
    header = em.header("// banner")
    assert "struct Closure_f3 final : ClosureObj {\n  NDArray c0;  // x\n" in header
    assert "static constexpr int kParamTypes[] = {0};" in header
    assert (
        "explicit Closure_f3(NDArray c0) : ClosureObj(&entry_f3, 1, kTypes, kParamTypes, "
        "reinterpret_cast<const void*>(&typed_f3), 0), c0(std::move(c0)) {}" in header
    )


def test_closure_call_through_a_typed_entry():
    """A call whose static type matches a closure signature of the program calls it typed."""
    callee = ir.Function("f3", "%f", [v(10, SCALAR)], SCALAR, ir.Block([], v(10, SCALAR)), is_closure=True)
    stmt = ir.Let(v(3, SCALAR), ir.CallClosure(v(2, ir.FuncType((SCALAR,), SCALAR)), [v(1, SCALAR)]))
    assert emit(stmt, [callee]) == lines(
        """
        int32_t v3;
        if (const ClosureObj* c = typed_closure(v2, 0)) {
          v3 = reinterpret_cast<int32_t(*)(const ClosureObj*, int32_t)>(c->typed_entry)(c, v1);
        } else {
          ObjectRef v3_args[] = {box(v1)};
          v3 = unbox<int32_t>(call_closure(v2, v3_args, 1, kTypes, 0));
        }
        """
    )


def test_call_of_a_known_closure_is_direct():
    callee = ir.Function("f3", "%f", [v(10, SCALAR)], SCALAR, ir.Block([], v(10, SCALAR)), is_closure=True)
    stmt = ir.Let(v(3, SCALAR), ir.CallKnown("f3", v(2, ir.FuncType((SCALAR,), SCALAR)), [v(1, SCALAR)]))
    assert emit(stmt, [callee]) == "int32_t v3 = f3(static_cast<const Closure_f3*>(v2.get()), v1);\n"

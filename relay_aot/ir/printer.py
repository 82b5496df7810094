"""The control IR as text: what ``lower.py`` made, before any backend prints it.

``relay-aot show --ir MODEL`` prints it, and the golden tests (``tests/golden/``) compare it. One
line per statement, nested blocks indented, every variable with its type where it is defined::

    kernel k0 default_k0_fused_less(int32, int32) -> bool  = less(p0, p1)
    func f0 @fib(v0: int32) -> int32  [loops]
      v1: bool = kernel k0(v0, v2)
      v3: int32 = if v1 {
        => v0
      } else {
        ...
        tail call(v7)
      }
      => v3

With ``last_uses`` (``liveness.py``), a variable's last use is marked ``^``: where the C++
backend moves the value instead of copying it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..dispatch import dispatch
from . import nodes as ir
from .liveness import last_uses


def _scalar(expr: ir.ScalarExpr) -> str:
    if isinstance(expr, ir.ScalarParam):
        return f"p{expr.index}"
    if isinstance(expr, ir.ScalarConst):
        return f"{expr.value!r}:{expr.dtype}"
    return f"{expr.op}({', '.join(_scalar(a) for a in expr.args)})"


class IrPrinter:
    """Prints one program; see :func:`format_program`."""

    def __init__(self, program: ir.Program, liveness: bool):
        self.program = program
        self.liveness = liveness
        self.lines: list[str] = []
        self.depth = 0
        self.last: set = set()
        self._stmts: dict[type, Callable[..., None]] = {ir.Let: self._let, ir.If: self._if, ir.Match: self._match}
        self._rhs = {
            ir.Constant: lambda r, n: (
                f"constant {r.index}" + (" fresh" if r.fresh else "") + (" zeros" if r.fresh and r.zeros else "")
            ),
            ir.KernelCall: lambda r, n: f"kernel k{r.kernel}({self.uses(r.args, n)})",
            ir.MakeTuple: lambda r, n: f"tuple({self.uses(r.fields, n)})",
            ir.Proj: lambda r, n: f"{self.use(r.value, n)}.{r.index}",
            ir.MakeAdt: lambda r, n: f"{self.program.adts[r.adt].ctors[r.ctor].name}({self.uses(r.fields, n)})",
            ir.MakeClosure: lambda r, n: f"closure {r.func}[{self.uses(r.captures, n)}]",
            ir.CallGlobal: lambda r, n: f"call {r.func}({self.uses(r.args, n)})",
            ir.CallClosure: lambda r, n: f"call {self.use(r.closure, n)}({self.uses(r.args, n)})",
            ir.CallKnown: lambda r, n: f"call {r.func} of {self.use(r.closure, n)}({self.uses(r.args, n)})",
            ir.RefNew: lambda r, n: f"ref({self.use(r.value, n)})",
            ir.RefRead: lambda r, n: f"!{self.use(r.ref, n)}",
            ir.RefWrite: lambda r, n: f"{self.use(r.ref, n)} := {self.use(r.value, n)}",
        }

    def out(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def type(self, ty: ir.Type) -> str:
        return ir.format_type(ty, self.program.adts)

    def define(self, v: ir.Var) -> str:
        return f"v{v.id}: {self.type(v.type)}"

    def use(self, v: ir.Var, node) -> str:
        return f"v{v.id}" + ("^" if (node.uid, v.id) in self.last else "")

    def uses(self, vs: list[ir.Var], node) -> str:
        return ", ".join(self.use(v, node) for v in vs)

    # -- the program ----------------------------------------------------------------------

    def program_text(self) -> str:
        p = self.program
        for adt in p.adts:
            ctors = ", ".join(f"{c.name}={c.tag}({', '.join(self.type(f) for f in c.fields)})" for c in adt.ctors)
            self.out(f"type {adt.name}[{adt.num_params}] {{ {ctors} }}")
        for i, const in enumerate(p.constants):
            self.out(f"constant {i}: {ir.constant_dtype(const)}{list(const.shape)}")
        for k in p.kernels:
            sig = f"({', '.join(self.type(t) for t in k.params)}) -> {self.type(k.result)}"
            native = f"  = {_scalar(k.scalar)}" if k.scalar is not None else ""
            self.out(f"kernel k{k.index} {k.symbol}{sig}{native}")
        params = ", ".join(f"%{param.name}: {self.type(param.type)}" for param in p.params)
        self.out(f"main {p.main}({params}) -> {self.type(p.ret)}")
        for func in p.functions:
            self.function(func)
        return "\n".join(self.lines) + "\n"

    def function(self, func: ir.Function) -> None:
        self.last = last_uses(func) if self.liveness else set()
        params = ", ".join(self.define(p) for p in func.params)
        flags = []
        if func.is_closure:
            flags.append("closure[" + ", ".join(self.define(c) for c in func.captures) + "]")
        if func.self_var is not None:
            flags.append(f"self v{func.self_var.id}")
        if func.has_tail_call:
            flags.append("loops")
        hint = func.hint.encode("unicode_escape").decode("ascii")  # a user's name: one line, ASCII
        head = f"func {func.id} {hint}({params}) -> {self.type(func.ret)}"
        self.out(head + (f"  [{'; '.join(flags)}]" if flags else ""))
        self.depth += 1
        self.block(func.body)
        self.depth -= 1

    def block(self, block: ir.Block) -> None:
        for stmt in block.stmts:
            dispatch(self._stmts, stmt, what="statement")
        if isinstance(block.result, ir.TailCall):
            self.out(f"tail call({self.uses(block.result.args, block.result)})")
        else:
            self.out(f"=> {self.use(block.result, block)}")

    # -- statements -------------------------------------------------------------------------

    def _let(self, stmt: ir.Let) -> None:
        self.out(f"{self.define(stmt.var)} = {dispatch(self._rhs, stmt.rhs, stmt, what='right-hand side')}")

    def _if(self, stmt: ir.If) -> None:
        self.out(f"{self.define(stmt.result)} = if v{stmt.cond.id} {{")
        self.nested(stmt.then)
        self.out("} else {")
        self.nested(stmt.else_)
        self.out("}")

    def _match(self, stmt: ir.Match) -> None:
        self.out(f"{self.define(stmt.result)} = match v{stmt.scrutinee.id} {{")
        for clause in stmt.clauses:
            tests = " and ".join(f"tag{_path(t.path)} == {t.tag}" for t in clause.tests) or "always"
            binds = "".join(f"; {self.define(b.var)} = {_path(b.path)}" for b in clause.binds)
            self.out(f"  when {tests}{binds} {{")
            self.depth += 1
            self.nested(clause.body)
            self.depth -= 1
            self.out("  }")
        self.out("}")

    def nested(self, block: ir.Block) -> None:
        self.depth += 1
        self.block(block)
        self.depth -= 1


def _path(path: tuple[int, ...]) -> str:
    return "(." + ".".join(str(i) for i in path) + ")" if path else "(.)"


def format_program(program: ir.Program, liveness: bool = False) -> str:
    """``program`` as text; ``liveness`` marks each variable's last uses with ``^``."""
    return IrPrinter(program, liveness).program_text()

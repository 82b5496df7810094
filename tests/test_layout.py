"""The package's import graph reads as the pipeline, without cycles (see docs/design.md).

Every module of ``relay_aot`` has a rank; a module imports only modules of its own rank or
below, never ``relay_aot`` itself (leaf modules do not reach up to the package), and no two
modules import each other, directly or around a cycle. Imports inside functions count too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "relay_aot"

#: Pipeline order: passes -> kernels -> control IR -> backends -> build -> runtime, then the
#: drivers that run the stages, the public API, and the tools on top.
RANKS = [
    ("shared leaves", ["version", "config", "errors", "names", "dispatch", "recursion", "cpu", "gate"]),
    ("control IR vocabulary", ["ir"]),
    ("0 frontends", ["frontends"]),
    ("1 passes", ["passes"]),
    ("2 kernels", ["kernels"]),
    ("3 lowering", ["lower", "request"]),
    (
        "4 emitters",
        [
            "backends",
            "backends.emitter",
            "backends.cpp",
            "backends.cpp.emit",
            "backends.python",
            "backends.python.emit",
            "backends.standalone",
        ],
    ),
    ("5 build", ["builder"]),
    ("6 runtime", ["runtime", "backends.python.runtime"]),
    (
        "drivers",
        ["backends.cpp.driver", "backends.python.driver", "backends.standalone.driver", "compiler", "tuner", ""],
    ),
    ("tools", ["cli", "testing"]),
]


def _modules() -> dict[str, Path]:
    """Python modules by dotted name (extension modules too, as imports with no imports)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    for path in PACKAGE.rglob("*.so"):
        parts = list(path.relative_to(PACKAGE).parts)
        parts[-1] = parts[-1].split(".")[0]
        found[".".join(parts)] = path
    return found


def _rank(module: str) -> int:
    best, rank = -1, None
    for index, (_, prefixes) in enumerate(RANKS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".") or prefix == "") and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank is not None, f"relay_aot.{module} has no rank in tests/test_layout.py"
    return rank


def _imports(module: str, path: Path, modules: dict) -> set[str]:
    """The relay_aot modules ``module`` imports (relative names, "" for the package itself)."""
    if path.suffix == ".so":
        return set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "relay_aot":
                target = node.module[len("relay_aot.") :] if node.module != "relay_aot" else ""
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                found.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("relay_aot."):
                    found.add(alias.name[len("relay_aot.") :])
    found.discard(module)
    return found


def test_imports_follow_the_pipeline():
    modules = _modules()
    problems = []
    for module, path in sorted(modules.items()):
        for imported in sorted(_imports(module, path, modules)):
            if imported == "" and module != "":
                problems.append(f"relay_aot.{module} imports the relay_aot package itself (reach the module instead)")
            elif _rank(imported) > _rank(module):
                problems.append(
                    f"relay_aot.{module} ({RANKS[_rank(module)][0]}) imports relay_aot.{imported} "
                    f"({RANKS[_rank(imported)][0]})"
                )
    assert not problems, "\n".join(problems)


def test_no_import_cycles():
    modules = _modules()
    graph = {m: _imports(m, p, modules) - {""} for m, p in modules.items()}
    # A module's package __init__ runs before it: importing a submodule implies its parents.
    cycles = []
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_testing_tools_do_not_need_hypothesis_unless_generating_programs():
    code = (
        "import sys; import relay_aot, relay_aot.testing, relay_aot.testing.oracle, relay_aot.cli; "
        "assert 'hypothesis' not in sys.modules, 'hypothesis was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)

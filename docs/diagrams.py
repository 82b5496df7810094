"""Draw the design page's diagrams: ``python docs/diagrams.py`` writes ``docs/_static/*.svg``.

Plain SVG laid out by hand (no Graphviz, no JavaScript), so the pictures render anywhere and
their text stays searchable. ``tests/test_docs.py`` checks that the committed files are what
this script draws: edit the layout here, run the script, commit both.
"""

from __future__ import annotations

import sys
from pathlib import Path
from xml.sax.saxutils import escape

STATIC = Path(__file__).resolve().parent / "_static"

BLUE = dict(fill="#eef3fb", stroke="#4a6fa5")
ORANGE = dict(fill="#fdf1e2", stroke="#c27c2c")
GREEN = dict(fill="#eef7ee", stroke="#4b8b4b")
PURPLE = dict(fill="#f3eefb", stroke="#7a5aa5")
GREY = dict(fill="#ffffff", stroke="#55606b")


class Drawing:
    """An SVG canvas with boxes, arrows and labels."""

    def __init__(self, width: int, height: int, label: str, centered: bool):
        self.width, self.height, self.label, self.centered = width, height, label, centered
        self.parts: list[str] = []

    def box(self, x, y, w, h, title, lines=(), fill=BLUE["fill"], stroke=BLUE["stroke"]):
        """A rounded box with a bold title and lines of text (centred or left-aligned)."""
        self.parts.append(
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}" stroke="{stroke}" stroke-width="1.4"/>'
        )
        tx, anchor = (x + w / 2, "middle") if self.centered else (x + 10, "start")
        self.text(tx, y + 19, title, "t", anchor)
        for i, line in enumerate(lines):
            self.text(tx, y + 37 + 16 * i, line, "s", anchor)

    def record(self, x, y, title, cells=("[0]", "[1]"), **style):
        """An object with one cell per field; returns each cell's (x, y, w, h)."""
        self.box(x, y, max(20 + 70 * len(cells), 150), 62, title, **style)
        found = []
        for i, cell in enumerate(cells):
            cx = x + 10 + 70 * i
            self.parts.append(f'<rect x="{cx}" y="{y + 28}" width="60" height="24" fill="white" stroke="#8a99aa"/>')
            self.text(cx + 30, y + 45, cell, "m", "middle")
            found.append((cx, y + 28, 60, 24))
        return found

    def arrow(self, x1, y1, x2, y2, label=(), lx=0, ly=0):
        """A line with an arrowhead at (x2, y2), with optional label lines starting at (lx, ly)."""
        self.parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" class="a" marker-end="url(#head)"/>')
        for i, line in enumerate(label):
            self.text(lx, ly + 15 * i, line, "l", "start")

    def text(self, x, y, text, cls, anchor):
        self.parts.append(f'<text x="{x}" y="{y}" class="{cls}" text-anchor="{anchor}">{escape(text)}</text>')

    def svg(self) -> str:
        body = "\n".join(self.parts)
        return f"""<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" width="{self.width}" height="{self.height}" role="img" aria-label="{escape(self.label)}">
<!-- Drawn by docs/diagrams.py; edit that and rerun it instead of this file. -->
<style>
  .t {{ font: bold 13px sans-serif; fill: #1d2733; }}
  .s {{ font: 11.5px sans-serif; fill: #33404d; }}
  .m {{ font: 11.5px monospace; fill: #33404d; }}
  .l {{ font: italic 11.5px sans-serif; fill: #55606b; }}
  .a {{ stroke: #55606b; stroke-width: 1.4; }}
</style>
<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#55606b"/></marker></defs>
<rect width="{self.width}" height="{self.height}" fill="white"/>
{body}
</svg>
"""


def pipeline() -> str:
    """From a Relay module to a shared library: the stages of ``compiler.py``."""
    d = Drawing(860, 640, "relay_aot's compilation pipeline", centered=True)
    d.box(280, 10, 300, 46, "tvm.IRModule (Relay)", ["parsed text · tvm.relay Python API · ONNX"])
    d.arrow(
        430,
        56,
        430,
        112,
        [
            "passes/: prune to what @main reaches · bind params · InferType ·",
            "SimplifyInference · FoldConstant · relay.build's simplifications ·",
            "AlterOpLayout (if it pays) · ANF · InlinePureLets · FuseOps · ANF",
        ],
        442,
        74,
    )
    d.box(280, 114, 300, 46, "Relay: fused, A-normal form", ["each operator inside a Primitive=1 function"])
    d.arrow(360, 160, 180, 214, ["Primitive functions"], 190, 190)
    d.arrow(500, 160, 640, 214, ["everything else"], 578, 190)
    d.box(
        30,
        216,
        300,
        78,
        "kernels/  (+ scalars.py)",
        [
            "TVM's TE compiler, one tvm.build (LLVM)",
            "symbols <model>_k<i>_<ops>; 0-d elementwise",
            "kernels also get a native scalar form",
        ],
        **ORANGE,
    )
    d.box(
        500,
        216,
        330,
        78,
        "lower/  (+ types.py)",
        ["closure conversion · match compilation", "self tail calls → loops", "kernel calls by symbol"],
    )
    d.arrow(665, 294, 665, 336)
    d.box(
        500,
        338,
        330,
        62,
        "control IR (ir/)",
        ["typed statements: Let · If · Match · KernelCall ·", "MakeAdt · MakeClosure · CallGlobal · Ref* · TailCall"],
    )
    d.arrow(600, 400, 540, 446)
    d.arrow(730, 400, 760, 446)
    d.box(400, 448, 230, 46, "backends/cpp/emit.py", ["C++ on runtime_cpp/relay_aot/*.h"])
    d.box(650, 448, 190, 46, "backends/python/emit.py", ["Python source"], **GREEN)
    d.arrow(180, 294, 180, 522, ["kernels.o"], 190, 470)
    d.arrow(515, 494, 420, 522)
    d.box(
        30,
        524,
        450,
        46,
        "builder/: ninja · g++ · content-hash cache",
        ["kernels.o + unit*.cc (precompiled header) → one .so, published atomically"],
        **ORANGE,
    )
    d.arrow(745, 494, 745, 586)
    d.arrow(255, 570, 255, 588)
    d.box(
        30,
        590,
        450,
        44,
        "one shared library: <model>, <model>__metadata, kernels",
        ["relay_aot.load · tvm.runtime.load_module · C++ with libtvm_runtime.so"],
        **PURPLE,
    )
    d.box(560, 588, 290, 46, "CompiledModule (Python backend)", ["kernels built in memory; nothing on disk"], **GREEN)
    return d.svg()


def values() -> str:
    """Relay values as the C++ backend's runtime objects (see design.md, Runtime values)."""
    d = Drawing(860, 330, "How relay_aot represents Relay values at run time", centered=False)
    d.text(20, 24, "Cons(%a, Cons(%b, Nil)) : List[Tensor[(2), float32]]", "l", "start")
    a0, a1 = d.record(20, 40, "ADT  tag = Cons")
    b0, b1 = d.record(220, 40, "ADT  tag = Cons")
    d.box(420, 52, 118, 34, "ADT  tag = Nil")
    d.arrow(a0[0] + 30, a0[1] + 24, 60, 140)
    d.arrow(a1[0] + 45, a1[1] + 12, 220, a1[1] + 12)
    d.arrow(b0[0] + 30, b0[1] + 24, 260, 140)
    d.arrow(b1[0] + 45, b1[1] + 12, 420, 69)
    d.box(20, 142, 150, 40, "NDArray  %a", **ORANGE)
    d.box(220, 142, 150, 40, "NDArray  %b", **ORANGE)

    d.text(560, 24, "(%x, %n) : (Tensor[(4), float32], int32)", "l", "start")
    t0, t1 = d.record(560, 40, "ADT  tag = 0")
    d.arrow(t0[0] + 30, t0[1] + 24, 600, 140)
    d.arrow(t1[0] + 40, t1[1] + 24, 730, 140)
    d.box(560, 142, 120, 40, "NDArray  %x", **ORANGE)
    d.box(700, 142, 150, 56, "NDArray  0-d", ["%n, boxed only here"], **ORANGE)

    d.text(20, 222, "fn (%y) { ... %k ... %w ... }", "l", "start")
    d.box(
        20,
        236,
        330,
        84,
        "Closure_f1 : ClosureObj (a PackedFuncObj)",
        ["entry: typed function f1(self, ...)", "c0: float   (capture %k, unboxed)", "c1: NDArray (capture %w)"],
        **GREEN,
    )
    d.text(380, 222, "ref(%v)", "l", "start")
    (r0,) = d.record(380, 236, "Array of 1", ("[0]",), **PURPLE)
    d.arrow(r0[0] + 45, r0[1] + 12, 540, r0[1] + 12)
    d.box(542, 256, 110, 40, "the value", **ORANGE)
    d.text(690, 222, "%i : int32 (0-d)", "l", "start")
    d.box(690, 236, 160, 50, "int32_t  v3", ["a C++ variable"], **GREY)
    return d.svg()


DIAGRAMS = {"pipeline.svg": pipeline, "values.svg": values}


def main() -> int:
    for name, draw in DIAGRAMS.items():
        (STATIC / name).write_text(draw())
    return 0


if __name__ == "__main__":
    sys.exit(main())

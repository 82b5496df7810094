"""The fenced code blocks of the documentation pages, as the docs tests read and run them.

Rules every page follows (``docs/index.md`` states them for writers):

* ```` ```python ```` and ```` ```sh ```` blocks are run, in order, by the test suite;
* a ```` ```text ```` block right after a command block (only blank lines between) shows that
  block's output: each of its lines must be a line of the output, or begin one when it ends in
  ``...``; other ``text`` blocks are illustrations;
* a command block preceded by ``<!-- not-run: reason -->`` is not run (installation commands,
  the documentation build itself).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Fence languages the tests run.
COMMANDS = ("python", "sh")

_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_NOT_RUN = re.compile(r"<!--\s*not-run\b\s*:?\s*(.*?)\s*-->")


@dataclasses.dataclass
class Block:
    """One fenced block: its language, text, first line of its body (1-based) in the page."""

    kind: str
    body: str
    line: int
    #: why the block is not run (``<!-- not-run: reason -->`` before the fence), or None
    not_run: str | None = None
    #: index (in the page's block list) of the command block whose output this text block shows
    shows: int | None = None

    @property
    def runs(self) -> bool:
        """Whether the docs tests run this block."""
        return self.kind in COMMANDS and self.not_run is None


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order."""
    text = path.read_text()
    found: list[Block] = []
    end = 0
    for match in _FENCE.finditer(text):
        before = text[end : match.start()]
        marker = _NOT_RUN.fullmatch(before.rstrip().rpartition("\n")[2].strip())
        block = Block(
            kind=match.group(1),
            body=match.group(2),
            line=text.count("\n", 0, match.start(2)) + 1,
            not_run=(marker.group(1) or "not run") if marker else None,
        )
        if block.kind == "text" and found and found[-1].runs and not before.strip():
            block.shows = len(found) - 1
        found.append(block)
        end = match.end()
    return found


def check_shown_output(shown: str, actual: str, where: str) -> None:
    """Each line shown is a line of ``actual``, or begins one when it ends in ``...``."""
    lines = actual.splitlines()
    for line in shown.strip().splitlines():
        if line.endswith("..."):
            ok = any(a.startswith(line[:-3]) for a in lines)
        else:
            ok = line in lines
        if not ok:
            close = difflib.get_close_matches(line, lines, n=1, cutoff=0.5)
            hint = f"the closest output line is\n  {close[0]!r}" if close else f"the output was:\n{actual[-3000:]}"
            raise AssertionError(f"{where} shows\n  {line!r}\nbut the example does not print it; {hint}")

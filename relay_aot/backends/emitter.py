"""The text builder both backends print with, and the escaping of user-supplied text.

:class:`Emitter` keeps a declaration buffer and a body buffer, indents automatically
(C-style: a line ending in ``{`` opens a level, a line starting with ``}`` closes one; Python:
the :meth:`Emitter.indent` context), and escapes every comment it is given.

User names (Relay variables, globals, constructors, types) can hold any text. They reach
generated source only through :func:`escape_comment` (inside comments) and
:func:`cpp_string_literal` / ``repr`` (inside string literals); both produce printable ASCII
that cannot end a comment, continue a line, or close a literal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: Characters kept as they are in comments and string literals; everything else is escaped.
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-+=.,:;()[]<>@%#!&|^~'`$")


def escape_comment(text: str) -> str:
    """``text`` made safe for a one-line comment in C++ or Python.

    Keeps letters, digits, spaces and most punctuation, and a ``?`` that does not follow another
    (a dimension of a dynamic shape); writes anything else (newlines, backslashes, ``*``, ``/``,
    ``"``, a second ``?`` in a row, non-ASCII) as ``\\xNN`` byte escapes, so the result cannot
    close a block comment, continue a line comment, or form a trigraph (``??x``).
    """
    out = []
    for i, ch in enumerate(text):
        if ch in _SAFE or (ch == "?" and (i == 0 or text[i - 1] != "?")):
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8"))
    return "".join(out)


def cpp_string_literal(text: str) -> str:
    """``text`` as a C++ string literal, with every unsafe byte written as a 3-digit octal escape."""
    out = []
    for b in text.encode("utf-8"):
        ch = chr(b)
        if ch in _SAFE and ch not in "?":
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


class Emitter:
    """Accumulates generated source in a declaration buffer and a body buffer."""

    def __init__(self, comment_prefix: str = "//", indent_unit: str = "  "):
        self.comment_prefix = comment_prefix
        self.indent_unit = indent_unit
        self._decls: list[str] = []
        self._body: list[str] = []
        self._level = 0

    # -- body ------------------------------------------------------------------------------

    def line(self, text: str = "", comment: str = "") -> None:
        """Append a body line, adjusting the indentation for C-style braces.

        ``comment`` (escaped here) is appended as a trailing comment; braces are looked for in
        ``text`` only.
        """
        stripped = text.strip()
        if stripped.startswith("}"):
            self._level -= 1
        trailer = f"  {self.comment_prefix} {escape_comment(comment)}" if comment else ""
        self._append(stripped + trailer)
        if stripped.endswith("{"):
            self._level += 1

    def _append(self, stripped: str) -> None:
        self._body.append(self.indent_unit * self._level + stripped if stripped else "")

    def lines(self, texts) -> None:
        """Append several body lines."""
        for text in texts:
            self.line(text)

    def comment(self, text: str) -> None:
        """Append an escaped one-line comment to the body (braces in it do not indent)."""
        self._append(f"{self.comment_prefix} {escape_comment(text)}")

    @contextlib.contextmanager
    def indent(self) -> Iterator[None]:
        """Indent the body lines emitted inside the ``with`` block one level deeper."""
        self._level += 1
        try:
            yield
        finally:
            self._level -= 1

    # -- declarations ----------------------------------------------------------------------

    def decl(self, text: str = "") -> None:
        """Append a declaration line (declarations are not indented automatically)."""
        self._decls.append(text)

    def decl_comment(self, text: str) -> None:
        """Append an escaped one-line comment to the declarations."""
        self._decls.append(f"{self.comment_prefix} {escape_comment(text)}")

    # -- output ----------------------------------------------------------------------------

    @property
    def declarations(self) -> str:
        """The declaration buffer's text."""
        return "\n".join(self._decls) + ("\n" if self._decls else "")

    @property
    def body(self) -> str:
        """The body buffer's text."""
        return "\n".join(self._body) + ("\n" if self._body else "")

    def text(self) -> str:
        """Declarations followed by the body."""
        return self.declarations + ("\n" if self._decls and self._body else "") + self.body

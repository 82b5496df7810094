"""Relay text programs with their test cases, read from ``tests/programs/*.relay``.

Directives are comments at the top of a file:

* ``// @case: <python expression>`` -- a tuple of arguments (``np`` is numpy); one call each;
* ``// @prelude`` -- parse the program into a module holding TVM's Prelude;
* ``// @reference: interpreter|vm|none`` -- the executor to compare with (default interpreter);
* ``// @expect: <python expression>`` -- the expected result, when no executor can run it;
* ``// @raises: <regex>`` -- the call must raise an error whose "Type: message" matches;
* ``// @rtol: <float>`` -- tolerance for floats.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm.relay.prelude import Prelude

PROGRAM_DIR = Path(__file__).resolve().parent / "programs"
_DIRECTIVE = re.compile(r"^//\s*@(\w+)(?::\s*(.*))?$")


@dataclasses.dataclass
class ProgramFile:
    """A test program and its directives."""

    path: Path
    text: str
    cases: list[str]
    prelude: bool
    reference: str
    expect: str | None
    raises: str | None
    rtol: float

    @property
    def name(self) -> str:
        return self.path.stem

    def module(self) -> tvm.IRModule:
        """The parsed module (with the Prelude if asked)."""
        init = None
        if self.prelude:
            init = tvm.IRModule()
            Prelude(init)
        return tvm.relay.parse(self.text, source_name=str(self.path), init_module=init)

    def args(self, case: str) -> tuple:
        """The arguments of one case."""
        value = eval(case, {"np": np})  # noqa: S307 - test data written by us
        return value if isinstance(value, tuple) else (value,)

    def expected(self) -> Any:
        """The ``@expect`` value, if any."""
        return eval(self.expect, {"np": np}) if self.expect else None  # noqa: S307


def read(path: Path) -> ProgramFile:
    """Parse the directives of one program file."""
    text = path.read_text()
    cases, options = [], {}
    for line in text.splitlines():
        match = _DIRECTIVE.match(line.strip())
        if match:
            key, value = match.group(1), (match.group(2) or "").strip()
            if key == "case":
                cases.append(value)
            else:
                options[key] = value
    return ProgramFile(
        path=path,
        text=text,
        cases=cases or ["()"],
        prelude="prelude" in options,
        reference=options.get("reference", "interpreter"),
        expect=options.get("expect"),
        raises=options.get("raises"),
        rtol=float(options.get("rtol", "1e-5")),
    )


def all_programs() -> list[ProgramFile]:
    """Every program file, sorted by name."""
    return [read(p) for p in sorted(PROGRAM_DIR.glob("*.relay"))]

"""The documentation: every example in it runs as written, and the site builds without warnings.

Each page of ``docs/`` (and the README) with runnable blocks runs in a fresh process of its own
(``doc_runner.py``), in a scratch directory where ``examples/`` is the checkout's; see
``doc_examples.py`` for what is run and how shown output is checked. ``docs/deployment.md`` is
run by ``test_deploy_docs.py`` instead, block by block in separate processes, as its text
describes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from doc_examples import COMMANDS, ROOT, blocks, check_shown_output

RUNNER = ROOT / "tests" / "doc_runner.py"
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
RUN_ELSEWHERE = {ROOT / "docs" / "deployment.md"}  # tests/test_deploy_docs.py

#: The documented build command (README.md and docs/index.md give it exactly so).
BUILD_COMMAND = "python -m sphinx -W --keep-going -b html docs docs/_build/html"


def _name(page) -> str:
    return str(page.relative_to(ROOT))


def runnable_pages() -> list:
    """Pages with blocks to run here."""
    return [p for p in PAGES if p not in RUN_ELSEWHERE and any(b.runs for b in blocks(p))]


@pytest.mark.parametrize("page", runnable_pages(), ids=_name)
def test_examples_run_as_shown(page, tmp_path):
    page_blocks = blocks(page)
    run = [i for i, b in enumerate(page_blocks) if b.runs]
    (tmp_path / "blocks.json").write_text(json.dumps([dataclass_dict(page_blocks[i]) for i in run]))
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, str(RUNNER), _name(page), str(tmp_path / "blocks.json"), str(tmp_path / "outputs.json")],
        cwd=tmp_path / "work",
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"an example of {_name(page)} failed:\n{done.stderr[-4000:]}"
    outputs = dict(zip(run, json.loads((tmp_path / "outputs.json").read_text())))
    for block in page_blocks:
        if block.shows is not None:
            check_shown_output(block.body, outputs[block.shows], f"{_name(page)}:{block.line}")


def dataclass_dict(block) -> dict:
    return {"kind": block.kind, "body": block.body, "line": block.line}


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_command_block_is_run_or_says_why_not(page):
    """No example escapes the tests: a command fence the parser would miss (indented, say)
    fails here, and so does a not-run marker without a reason."""
    text = page.read_text()
    fences = re.findall(rf"^[ \t]*```({'|'.join(COMMANDS)})\b", text, re.MULTILINE)
    found = [b for b in blocks(page) if b.kind in COMMANDS]
    assert len(fences) == len(found), f"{_name(page)}: a {'/'.join(COMMANDS)} fence is not at the start of a line"
    for block in found:
        assert block.not_run != "not run", f"{_name(page)}:{block.line}: say why the block is not run"


def test_readme_example_script_runs_and_agrees():
    """The README's first set-up command ends by running the shipped example."""
    assert "python examples/run_example.py" in (ROOT / "README.md").read_text()
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_example.py"), str(ROOT / "examples" / "lstm.relay")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert "relay_aot and the Relay interpreter agree." in done.stdout


def test_readme_quotes_the_benchmark_results():
    """The README's headline table is the one ``benchmarks.report.headline`` makes of the last
    full run (docs/benchmarks/results.json), and its "How fast" section reads in a minute: at
    most 40 non-empty lines, saying where relay_aot is slower than a peer."""
    from benchmarks import report

    result = json.loads((ROOT / "docs" / "benchmarks" / "results.json").read_text())
    expected = report.headline(result).strip()
    readme = (ROOT / "README.md").read_text()
    quoted = re.search(r"<!-- benchmark-headline:.*?-->\n(.*?)\n<!-- /benchmark-headline -->", readme, re.DOTALL)
    assert quoted, "README.md has no benchmark-headline table"
    assert quoted.group(1).strip() == expected, f"refresh README.md's benchmark table:\n{expected}"
    section = readme[readme.index("## How fast") : readme.index("\n## ", readme.index("## How fast") + 1)]
    assert len([line for line in section.splitlines() if line.strip()]) <= 40
    assert "slower" in section and len(quoted.group(1).strip().splitlines()) <= 12  # header + at most ten rows


def test_docs_build_without_warnings(tmp_path):
    for module in ("sphinx", "myst_parser", "furo"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[docs]')")
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        assert BUILD_COMMAND in page.read_text(), f"{_name(page)} does not give the build command"
    args = shlex.split(BUILD_COMMAND)[1:-1] + [str(tmp_path / "html")]
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the documentation build failed or warned:\n{done.stderr[-6000:]}"
    api = (tmp_path / "html" / "api.html").read_text()
    # autodoc imported the package and documented it (an import failure is only a warning).
    assert 'id="relay_aot.compile"' in api and 'id="relay_aot.testing.check_equivalence"' in api


def test_diagrams_are_what_docs_diagrams_py_draws():
    """The committed SVGs come from docs/diagrams.py, so the layout has one source."""
    spec = importlib.util.spec_from_file_location("diagrams", ROOT / "docs" / "diagrams.py")
    diagrams = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(diagrams)
    for name, draw in diagrams.DIAGRAMS.items():
        committed = (ROOT / "docs" / "_static" / name).read_text()
        assert committed == draw(), f"docs/_static/{name} is stale: run python docs/diagrams.py"
        assert f"_static/{name}" in (ROOT / "docs" / "design.md").read_text()

"""Run one page's code blocks in order, in this process and the current directory.

Usage: ``python doc_runner.py PAGE BLOCKS.json OUTPUTS.json``. ``BLOCKS.json`` lists the blocks
(``kind``, ``body``, ``line``); ``python`` blocks run in one namespace, so later blocks see what
earlier ones defined, and ``sh`` blocks run in bash. Each block's standard output is written to
``OUTPUTS.json`` (a list, one string per block, rewritten after every block). A failing block
prints where it is in the page and its error, and exits with status 1.

Tracebacks name the page and its line numbers: a block's code is compiled as if it sat at its
place in the Markdown file.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import traceback


def run_python(body: str, page: str, line: int, namespace: dict) -> str:
    code = compile("\n" * (line - 1) + body, page, "exec")
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        exec(code, namespace)  # noqa: S102 - running the documentation's examples is the point
    return captured.getvalue()


def run_sh(body: str) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"exit status {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done.stdout


def main(page: str, blocks_path: str, outputs_path: str) -> int:
    with open(blocks_path) as f:
        blocks = json.load(f)
    # Commands the pages use (relay-aot) are installed next to this interpreter.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    namespace = {"__name__": "__main__"}
    outputs: list[str] = []
    for block in blocks:
        try:
            if block["kind"] == "python":
                output = run_python(block["body"], page, block["line"], namespace)
            else:
                output = run_sh(block["body"])
        except BaseException:  # noqa: BLE001 - report whatever the example raised
            print(f"{page}:{block['line']}: the {block['kind']} block failed:", file=sys.stderr)
            traceback.print_exc()
            return 1
        outputs.append(output)
        with open(outputs_path, "w") as f:
            json.dump(outputs, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

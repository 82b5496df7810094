"""Run test code in a fresh Python process, so that a crash fails a test instead of the suite."""

import json
import os
import resource
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_isolated(code: str, timeout: float = 900, env: dict | None = None, stack_bytes: int | None = None):
    """Run ``code``; it must print one JSON value on its last line, which is returned. ``env``:
    variables set for it (None: removed).

    ``stack_bytes`` limits the main thread's C stack (``RLIMIT_STACK``): a test of deep
    recursion then needs proportionally smaller inputs than under the usual 8 MiB.

    A non-zero exit (a crash, an uncaught exception) raises AssertionError with the output.
    """
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    full_env = {key: value for key, value in full_env.items() if value is not None}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        preexec_fn=None
        if stack_bytes is None
        else lambda: resource.setrlimit(resource.RLIMIT_STACK, (stack_bytes, stack_bytes)),
    )
    if done.returncode != 0:
        raise AssertionError(
            f"isolated test process exited with {done.returncode}\n"
            f"stdout (tail):\n{done.stdout[-3000:]}\nstderr (tail):\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])

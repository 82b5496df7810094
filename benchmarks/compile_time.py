"""Compile time of relay_aot: cold, warm (cache hit in a new process) and the Relay VM's.

    python benchmarks/compile_time.py [--repeat N] [--profile] [--cxxflags=-O1]

For the shipped LSTM example (examples/lstm.relay) and a generated program of 50 global
functions, each measurement runs in a fresh process with a private cache directory:

* ``first``: empty cache -- the precompiled runtime header is built too (once per toolchain);
* ``cold``:  the program is not cached, the precompiled header is;
* ``warm``:  a new process compiles the same program again: a cache hit;
* ``vm``:    ``relay.vm.compile`` of the same module (what the VM user waits for).

Times cover ``relay_aot.compile`` (or ``relay.vm.compile``) only, not importing TVM, which
is the same for both (printed separately). Each is the median over ``--repeat`` processes, and
the ratios to the VM's compile time follow; a second line gives CPU seconds (this process and
the compilers it ran), which a loaded machine inflates less than wall time, and ``load`` the
1-minute load average. ``--profile`` prints where a warm compile spends
its time (cProfile, in-process).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generated_program(n: int = 50) -> str:
    """A Relay program of ``n`` global functions calling each other in a chain.

    Each function has its own tensor operators and constants (so its own fused kernels),
    an ``if`` and a recursive call, and every fifth one builds and matches a tuple -- a
    stand-in for a large model with control flow.
    """
    unary = ["sigmoid(%x)", "tanh(%x)", "exp(%x)", "negative(%x)", "sqrt(abs(%x))", "log(abs(%x))", "nn.relu(%x)"]
    lines = ['#[version = "0.0.5"]']
    for i in range(n):
        inner = unary[i % len(unary)]
        scaled = f"add(multiply({inner}, {1 + i * 0.01:.2f}f), {i * 0.1:.1f}f)"
        if i == n - 1:
            body = scaled
        elif i % 5 == 0:
            body = (
                f"let %p = ({scaled}, subtract(%n, 1));\n"
                f"    if (less(%n, 1)) {{ %p.0 }} else {{ @f{i + 1}(%p.0, %p.1) }}"
            )
        else:
            body = f"if (less(%n, 1)) {{ {scaled} }} else {{ @f{i + 1}({scaled}, subtract(%n, 1)) }}"
        lines.append(f"def @f{i}(%x: Tensor[(16), float32], %n: int32) -> Tensor[(16), float32] {{\n  {body}\n}}")
    lines.append("def @main(%x: Tensor[(16), float32], %n: int32) -> Tensor[(16), float32] {\n  @f0(%x, %n)\n}")
    return "\n".join(lines) + "\n"


PROGRAMS = {
    "lstm": lambda: (ROOT / "examples" / "lstm.relay").read_text(),
    "gen50": generated_program,
}


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the compilers)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child(program: str, what: str) -> None:
    """Runs in a fresh process: time one compile, print JSON."""
    import time

    t0 = time.perf_counter()
    import tvm
    from tvm import relay

    import relay_aot
    from relay_aot import build

    t1 = time.perf_counter()
    mod = tvm.relay.parse(PROGRAMS[program]())
    result = {"import": t1 - t0}
    if what == "vm":
        start, cpu = time.perf_counter(), cpu_seconds()
        relay.vm.compile(mod, target="llvm")
        result["time"], result["cpu"] = time.perf_counter() - start, cpu_seconds() - cpu
    elif what == "profile":
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        relay_aot.compile(mod)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        result["time"] = result["cpu"] = 0.0
    else:
        start, cpu = time.perf_counter(), cpu_seconds()
        compiled = relay_aot.compile(mod)
        result["time"], result["cpu"] = time.perf_counter() - start, cpu_seconds() - cpu
        result["cached"] = compiled.build_result.cached
        result["builds"] = build.stats.builds
    print(json.dumps(result))


def run_child(program: str, what: str, cache: Path, cxxflags: str) -> dict:
    env = dict(os.environ, RELAY_AOT_CACHE_DIR=str(cache), TOPHUB_LOCATION="NONE", RELAY_AOT_PROGRESS="0")
    if cxxflags:
        env["RELAY_AOT_CXXFLAGS"] = cxxflags
    out = subprocess.run(
        [sys.executable, __file__, "--child", program, what],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if out.returncode != 0:
        sys.exit(f"{program} {what} failed:\n{out.stderr}")
    if what == "profile":
        print(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(program: str, repeat: int, cxxflags: str) -> dict:
    """Median times of first/cold/warm/vm for ``program``."""
    times: dict[str, list[float]] = {"first": [], "cold": [], "warm": [], "vm": [], "import": [], "load": []}
    times.update({f"{name} cpu": [] for name in ("first", "cold", "warm", "vm")})
    for _ in range(repeat):
        cache = Path(tempfile.mkdtemp(prefix="relay_aot-bench-"))
        try:
            first = run_child(program, "compile", cache, cxxflags)
            shutil.rmtree(cache / "lib")  # keep the precompiled header: a cold program build
            cold = run_child(program, "compile", cache, cxxflags)
            warm = run_child(program, "compile", cache, cxxflags)
            vm = run_child(program, "vm", cache, cxxflags)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        assert not first["cached"] and not cold["cached"] and warm["cached"] and warm["builds"] == 0, (first, cold, warm)
        for name, result in (("first", first), ("cold", cold), ("warm", warm), ("vm", vm)):
            times[name].append(result["time"])
            times[f"{name} cpu"].append(result["cpu"])
        times["import"].append(warm["import"])
        times["load"].append(os.getloadavg()[0])
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="profile a warm compile of each program")
    parser.add_argument("--cxxflags", default="", help="RELAY_AOT_CXXFLAGS for the builds (e.g. -O1)")
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    print(f"cpus: {os.cpu_count()}, jobs: {os.environ.get('RELAY_AOT_JOBS', os.cpu_count())}, "
          f"cxxflags: {args.cxxflags or '(default)'}, median of {args.repeat}")
    header = f"{'program':8} {'first':>7} {'cold':>7} {'warm':>7} {'vm':>7} {'import':>7}  cold/vm  warm/vm  load"
    print(header + "\n" + " " * 9 + "(second line: CPU seconds, compilers included)")
    for program in args.programs.split(","):
        if args.profile:
            cache = Path(tempfile.mkdtemp(prefix="relay_aot-bench-"))
            try:
                run_child(program, "compile", cache, args.cxxflags)
                run_child(program, "profile", cache, args.cxxflags)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            continue
        t = measure(program, args.repeat, args.cxxflags)
        print(
            f"{program:8} {t['first']:6.2f}s {t['cold']:6.2f}s {t['warm']:6.2f}s {t['vm']:6.2f}s {t['import']:6.2f}s"
            f"  {t['cold'] / t['vm']:7.2f}  {t['warm'] / t['vm']:7.2f}  {t['load']:4.1f}"
        )
        print(
            f"{'  cpu':8} {t['first cpu']:6.2f}s {t['cold cpu']:6.2f}s {t['warm cpu']:6.2f}s {t['vm cpu']:6.2f}s"
            f"          {t['cold cpu'] / t['vm cpu']:7.2f}  {t['warm cpu'] / t['vm cpu']:7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

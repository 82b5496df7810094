"""Compile time of relay_aot against the Relay VM's compile and ``relay.build``.

    python -m benchmarks.compile_time [--repeat N] [--programs lstm,gen50,mlp_b1] [--cold]
                                      [--profile] [--cxxflags=-O1]

(``python benchmarks/compile_time.py`` works too.) ``python -m benchmarks`` runs the same
measurement for :data:`COMPILE_WORKLOADS` and puts the table into its results. A program is
the LSTM example (``lstm``: examples/lstm.relay), a generated program of 50 global functions
(``gen50``), or any workload of ``benchmarks/workloads.py`` by name (``mlp_b1``; weights bound
as constants). Each measurement runs in a fresh process with a private cache directory:

* ``first``: an empty cache -- the kernels and the C++ are built; the precompiled runtime
  header and the runtime object are the ones ``pip install`` built (``relay_aot/builder/prebuilt.py``);
* ``scratch``: the same with nothing prebuilt (``RELAY_AOT_PREBUILT=0``, as for a toolchain
  other than the installing one): the unit compiles without the precompiled header, which is
  started beside it for the next compiles, and includes the runtime's source;
* ``cold`` (``--cold`` only): the library and the kernels are not cached, the header is;
* ``new``: a new module with a warm cache -- the program with its ``@main`` moved into a new
  global function that the new ``@main`` calls: the same kernels, other control code, so a new
  library whose kernels come from the kernel cache;
* ``hit``: a new process compiles the first module again: a cache hit;
* ``vm``: ``relay.vm.compile`` of the module (what the VM user waits for);
* ``build``: ``relay.build`` of the module, for static programs (what a graph or AOT executor
  user waits for).

Times cover ``relay_aot.compile`` (or the peer's compile) only, not importing TVM, which is the
same for all. Each is the median over ``--repeat`` processes; ratios to the VM's compile (and
``relay.build``'s) follow. CPU seconds (this process and the compilers it waited for) are
recorded beside wall times: a loaded machine inflates them less. ``--profile`` prints where a
cold compile spends its time (cProfile, in-process).
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

#: The programs of the compile-time table of ``python -m benchmarks`` (names as for --programs).
COMPILE_WORKLOADS = ["lstm", "gen50", "mlp_b1", "squeezenet"]

#: What each measurement runs, in the order of a round (``cold`` only when asked for).
MEASURES = ("first", "scratch", "cold", "new", "hit", "vm", "build")

#: The measures of TVM's own compiles, which relay_aot's are compared with.
PEERS = ("vm", "build")


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


def program_names() -> list[str]:
    """Every program the table can measure: the two above and the suite's workloads."""
    from . import workloads

    return [*PROGRAMS, *workloads.by_name()]


def program_module(name: str):
    """``(module, static)`` of program ``name``; ``static``: ``relay.build`` can compile it."""
    import tvm

    if name in PROGRAMS:
        return tvm.relay.parse(PROGRAMS[name]()), False
    from . import workloads

    workload = workloads.by_name()[name]
    return workload.module(), workload.static


def with_new_control_code(mod):
    """``mod`` with its ``@main`` moved into a new global function that a new ``@main`` calls:
    the same kernels in the same order, other control code (so another library)."""
    import tvm
    from tvm import relay

    mod = tvm.IRModule(mod.functions, mod.type_definitions)
    main = mod["main"]
    body = relay.GlobalVar("compile_time_body")
    mod[body] = main
    params = [relay.Var(p.name_hint, p.type_annotation) for p in main.params]
    mod["main"] = relay.Function(params, relay.Call(body, params), main.ret_type, main.type_params)
    return relay.transform.InferType()(mod)


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
    from relay_aot import builder
    from relay_aot.cpu import host_target  # relay_aot's default target: the same kernels

    t1 = time.perf_counter()
    mod, _ = program_module(program)
    if what == "new":
        mod = with_new_control_code(mod)
    result = {"import": t1 - t0}
    if what == "profile":
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        relay_aot.compile(mod)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        print(json.dumps(result))
        return
    target = host_target()
    start, cpu = time.perf_counter(), cpu_seconds()
    if what == "vm":
        relay.vm.compile(mod, target=target)
    elif what == "build":
        with tvm.transform.PassContext(opt_level=3):
            relay.build(mod, target=target)
    else:
        compiled = relay_aot.compile(mod)
        result["cached"] = compiled.build_result.cached
    result["time"], result["cpu"] = time.perf_counter() - start, cpu_seconds() - cpu
    result["stats"] = {k: v for k, v in vars(builder.stats).items() if isinstance(v, int)}
    print(json.dumps(result))


def run_child(program: str, what: str, cache: Path, cxxflags: str = "", **settings: str) -> dict:
    """Run :func:`child` in a fresh process with the cache ``cache`` (and the environment
    variables ``settings``); its JSON result."""
    env = dict(os.environ, RELAY_AOT_CACHE_DIR=str(cache), TOPHUB_LOCATION="NONE", RELAY_AOT_PROGRESS="0", **settings)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if cxxflags:
        env["RELAY_AOT_CXXFLAGS"] = cxxflags
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.compile_time", "--child", program, what],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{program} {what} failed:\n{out.stderr[-4000:]}")
    if what == "profile":
        print(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _forget_builds(cache: Path) -> None:
    """Remove the built libraries and kernels, keeping the precompiled header: a cold build."""
    for name in ("lib", "index", "kernels"):
        shutil.rmtree(cache / name, ignore_errors=True)


def measure(program: str, repeat: int = 1, cxxflags: str = "", cold: bool = False) -> dict:
    """Median wall and CPU seconds of each of :data:`MEASURES` for ``program``, with ratios to
    the VM's compile and ``relay.build``'s (``build`` only for static programs)."""
    _, static = program_module(program)
    whats = [w for w in MEASURES if (w != "cold" or cold) and (w != "build" or static)]
    samples: dict[str, list[float]] = {}
    notes: dict[str, dict] = {}
    failures: dict[str, str] = {}
    for _ in range(repeat):
        cache = Path(tempfile.mkdtemp(prefix="relay_aot-compile-time-"))
        try:
            for what in whats:
                if what == "cold":
                    _forget_builds(cache)
                if what == "scratch":
                    scratch = Path(tempfile.mkdtemp(prefix="relay_aot-compile-time-"))
                    try:
                        run = run_child(program, "compile", scratch, cxxflags, RELAY_AOT_PREBUILT="0")
                    finally:
                        shutil.rmtree(scratch, ignore_errors=True)
                elif what in PEERS:
                    try:
                        run = run_child(program, what, cache, cxxflags)
                    except RuntimeError as err:
                        # TVM's own compile can fail where relay_aot's does not (its int8 kernels
                        # abort in LLVM on VNNI CPUs): the peer's column says so, the row stays
                        from relay_aot.kernels.isolated import last_line  # TVM: only on a failure

                        failures[what] = last_line(str(err))[-300:] or "failed"
                        continue
                else:
                    run = run_child(program, "compile" if what in ("first", "cold", "hit") else what, cache, cxxflags)
                expect_hit = what == "hit"
                if what not in PEERS and run["cached"] != expect_hit:
                    raise RuntimeError(f"{program} {what}: expected {'a' if expect_hit else 'no'} cache hit, got {run}")
                samples.setdefault(what, []).append(run["time"])
                samples.setdefault(f"{what}_cpu", []).append(run["cpu"])
                notes[what] = run["stats"]
            samples.setdefault("import", []).append(run["import"])
            samples.setdefault("load", []).append(os.getloadavg()[0])
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    result: dict = {name: statistics.median(values) for name, values in samples.items()}
    result["static"] = static
    result["repeat"] = repeat
    result["stats"] = notes
    result.update({f"{peer}_error": failure for peer, failure in failures.items() if peer not in samples})
    for peer in PEERS:
        if peer in result:
            for what in ("first", "scratch", "cold", "new", "hit"):
                if what in result:
                    result[f"{what}/{peer}"] = result[what] / result[peer]
                    result[f"{what}_cpu/{peer}_cpu"] = result[f"{what}_cpu"] / max(result[f"{peer}_cpu"], 1e-9)
    return result


def compile_table(programs: list[str], repeat: int = 1, progress=print) -> dict:
    """The compile-time table of ``programs`` (``python -m benchmarks`` stores it in its results)."""
    table = {"repeat": repeat, "programs": {}}
    for program in programs:
        progress(f"  compile time: {program}")
        try:
            table["programs"][program] = measure(program, repeat)
        except RuntimeError as err:
            table["programs"][program] = {"error": str(err).splitlines()[0]}
    return table


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks.compile_time``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="profile a cold compile of each program")
    parser.add_argument("--cold", action="store_true", help="also measure a cold build (header cached, nothing else)")
    parser.add_argument("--cxxflags", default="", help="RELAY_AOT_CXXFLAGS for the builds (e.g. -O1)")
    parser.add_argument(
        "--programs",
        default=",".join(COMPILE_WORKLOADS),
        help="comma-separated: lstm, gen50 or workload names of benchmarks/workloads.py",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    from . import report

    programs = [p.strip() for p in args.programs.split(",") if p.strip()]
    unknown = [p for p in programs if p not in program_names()]
    if unknown:
        parser.error(f"unknown programs: {', '.join(unknown)} (choose from {', '.join(program_names())})")
    print(
        f"cpus: {os.cpu_count()}, jobs: {os.environ.get('RELAY_AOT_JOBS', os.cpu_count())}, "
        f"cxxflags: {args.cxxflags or '(default)'}, median of {args.repeat}",
        flush=True,
    )
    table: dict = {"repeat": args.repeat, "programs": {}}
    for program in programs:
        if args.profile:
            cache = Path(tempfile.mkdtemp(prefix="relay_aot-compile-time-"))
            try:
                run_child(program, "compile", cache, args.cxxflags)
                _forget_builds(cache)
                run_child(program, "profile", cache, args.cxxflags)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            continue
        table["programs"][program] = measure(program, args.repeat, args.cxxflags, args.cold)
        print(report.compile_time_table(table, markdown=False, only=[program]), flush=True)
    if not args.profile:
        print()
        print(report.compile_time_table(table, markdown=False))
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a script: benchmarks/compile_time.py
        sys.path.insert(0, str(ROOT))
        from benchmarks.compile_time import main as package_main

        sys.exit(package_main())
    sys.exit(main())

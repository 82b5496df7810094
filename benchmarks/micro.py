"""relay_aot's standalone package against TVM's own microcontroller path, on a Cortex-M4.

``python -m benchmarks.micro [--json OUT]`` builds the issue's MLP (32 -> 64 -> 10, relu) both ways,
weights as constants and weights as inputs, and links each into the same C99 main on QEMU's
``mps2-an386`` (``examples/standalone/cortex-m4``):

* relay_aot: ``export_standalone(..., target="cortex-m4")``, kernels by LLVM;
* TVM: ``relay.build`` with ``Executor("aot", {"unpacked-api": True, "interface-api": "c"})``,
  ``Runtime("crt")``, target ``c -keys=arm_cpu -mcpu=cortex-m4``; its C compiled with the same
  GCC flags against TVM's headers (the interface header is the C API's, which is TVM's).

Measured: the model's own code and data in the linked executable (text, data, bss of the
sections that came from the model's objects, after ``--gc-sections``, from the linker map) and
instructions per inference: QEMU runs the program one instruction per translation block with
every executed block logged (``-singlestep -d exec,nochain``), so the lines of the log count the
instructions executed; the difference between 11 runs and 1 run, divided by 10, is one
inference without start-up. Debian's QEMU ships no TCG plugin (nor its plugin header), hence
this method, which needs none.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import tvm
from tvm import relay
from tvm.relay.backend import Executor, Runtime

import relay_aot
from relay_aot.backends.cpp.capi import c_api, header_text
from relay_aot.backends.standalone.targets import TARGETS
from relay_aot.ir.signature import Signature
from relay_aot.request import Request
from relay_aot.testing import standalone as sa

ROW = TARGETS["cortex-m4"]
TVM_TARGET = "c -keys=arm_cpu -mcpu=cortex-m4"


def mlp(weights_as_inputs: bool):
    """The MLP, its weights bound as constants or left as parameters; and its arguments."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 32))
    arrays = {
        "w1": rng.uniform(-1, 1, (64, 32)),
        "b1": rng.uniform(-1, 1, (64,)),
        "w2": rng.uniform(-1, 1, (10, 64)),
        "b2": rng.uniform(-1, 1, (10,)),
    }
    arrays = {k: v.astype("float32") for k, v in arrays.items()}
    if weights_as_inputs:
        w = {k: relay.var(k, shape=v.shape) for k, v in arrays.items()}
    else:
        w = {k: relay.const(v) for k, v in arrays.items()}
    h = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w["w1"]), w["b1"]))
    y = relay.nn.bias_add(relay.nn.dense(h, w["w2"]), w["b2"])
    params = [x] + ([w[k] for k in arrays] if weights_as_inputs else [])
    mod = tvm.IRModule.from_expr(relay.Function(params, y))
    args = [rng.uniform(-1, 1, (1, 32)).astype("float32")] + (list(arrays.values()) if weights_as_inputs else [])
    return mod, args


def compile_c(source: Path, obj: Path, include=(), flags=(), std: str = "c99") -> Path:
    """``source`` compiled for the Cortex-M4 with the package's flags (and ``flags``) into ``obj``."""
    sa._run(
        [
            sa.tool(ROW, "gcc"),
            f"-std={std}",
            *ROW.cflags,
            *flags,
            *[f"-I{d}" for d in include],
            "-c",
            str(source),
            "-o",
            str(obj),
        ]
    )
    return obj


def link(objects, main: Path, out: Path, include=(), defines=(), driver: str = "gcc") -> Path:
    """``main`` (C99, compiled with ``include`` and ``defines``) linked with ``objects``, the board's
    start-up code and linker script, newlib-nano and semihosting into ``out`` (its map beside it,
    ``out.map``). ``driver``: ``gcc``, or ``g++`` for objects that need the C++ library."""
    main_obj = compile_c(main, out.with_suffix(".main.o"), include, defines)
    startup = compile_c(sa.BOARD_DIR / "startup.c", out.with_suffix(".startup.o"))
    sa._run(
        [
            sa.tool(ROW, driver),
            *ROW.cflags,
            str(main_obj),
            str(startup),
            "-T",
            str(sa.BOARD_DIR / "mps2-an386.ld"),
            "-nostartfiles",
            "--specs=nano.specs",
            "--specs=rdimon.specs",
            "-Wl,--gc-sections",
            f"-Wl,-Map={out}.map",
            *[str(o) for o in objects],
            "-lm",
            "-o",
            str(out),
        ]
    )
    return out


_SECTION = re.compile(r"^ (\.[\w.$]+|COMMON)\s*(?:\n\s+|\s+)0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S+)", re.M)


#: The loaded sections by kind: flash (code, constants, unwind tables), initialised RAM, zeroed RAM.
_KINDS = {
    "text": (".text", ".rodata", ".ARM.exidx", ".ARM.extab"),
    "data": (".data", ".got"),
    "bss": (".bss", "COMMON"),
}


#: A map line placing bytes: an input section or a fill, its address and size.
_PLACED = re.compile(r"0x([0-9a-f]+)\s+0x([0-9a-f]+)")


def map_sections(map_file: Path) -> list[tuple[str, int, str]]:
    """``(kind, bytes, origin)`` of every loaded input section of a linker map: kind ``text``
    (code and constants), ``data`` or ``bss``; origin the object (``lib.a(member.o)``) it came from.

    A section of mergeable strings (``.rodata.*.str1.4``) whose strings the linker merged into
    an earlier one still shows its size before merging: what it really takes is up to where
    the next placed bytes start (nothing, if they start at its own address)."""
    found = []
    text = map_file.read_text()
    text = text[text.find("Linker script and memory map") :]
    for m in _SECTION.finditer(text):
        name, address, size, origin = m.group(1), int(m.group(2), 16), int(m.group(3), 16), m.group(4)
        after = _PLACED.search(text, m.end())
        if after and int(after.group(1), 16) >= address:
            size = min(size, int(after.group(1), 16) - address)
        if size == 0:
            continue
        for kind, prefixes in _KINDS.items():
            if name.startswith(prefixes):  # loaded sections only (not .comment, debug information)
                found.append((kind, size, origin))
    return found


def model_sizes(map_file: Path, is_model) -> dict:
    """text (code and constants), data and bss bytes of the sections from the model's objects."""
    sizes = {"text": 0, "data": 0, "bss": 0}
    for kind, size, origin in map_sections(map_file):
        if is_model(origin):
            sizes[kind] += size
    return sizes


def instructions(elf_for_runs) -> int:
    """Instructions per inference: (count(11 runs) - count(1 run)) / 10."""
    counts = []
    for runs in (1, 11):
        elf = elf_for_runs(runs)
        log = elf.with_suffix(".trace")
        subprocess.run(
            [*ROW.run[:-1], "-singlestep", "-d", "exec,nochain", "-D", str(log), "-kernel", str(elf)],
            check=True,
            capture_output=True,
            timeout=600,
        )
        with open(log) as f:
            counts.append(sum(1 for line in f if line.startswith("Trace")))
        log.unlink()
    return (counts[1] - counts[0]) // 10


def _main(api, args, runs: int) -> str:
    """The same C99 main for both: runs, prints the outputs and (relay_aot's) last_error, and
    calls nothing TVM's entry lacks (no workspace_peak)."""
    return sa.c_main(api, args, runs).replace("(unsigned long)tvmgen_default_workspace_peak()", "0ul")


def measure_relay_aot(mod, args, work: Path) -> dict:
    package = relay_aot.export_standalone(mod, work / "pkg", name="default", target="cortex-m4")
    sa.make_package(package)

    def elf(runs: int) -> Path:
        main = work / f"main{runs}.c"
        main.write_text(_main(package.api, args, runs))
        return link([package.library], main, work / f"relay_aot{runs}.elf", [package.directory])

    sizes = model_sizes(Path(f"{elf(1)}.map"), lambda origin: "libtvmgen_default.a" in origin)
    return {**sizes, "instructions": instructions(elf)}


def tvm_aot_sources(mod, work: Path, params=None, config=None) -> list[Path]:
    """TVM's own microcontroller path for ``mod``: ``relay.build`` with the AOT executor (unpacked
    API, C interface), the crt runtime and target :data:`TVM_TARGET`; its C sources written into
    ``work`` (``tvm_model<i>.c``; this TVM has no ``tvm.micro`` to export them otherwise)."""
    config = {"tir.disable_vectorize": True, **(config or {})}
    with tvm.transform.PassContext(opt_level=3, config=config):
        lib = relay.build(
            mod,
            target=tvm.target.Target(TVM_TARGET),
            params=params,
            executor=Executor("aot", {"unpacked-api": True, "interface-api": "c"}),
            runtime=Runtime("crt"),
        )
    paths = []
    for i, source in enumerate([lib.lib.get_source()] + [m.get_source() for m in lib.lib.imported_modules]):
        paths.append(work / f"tvm_model{i}.c")
        paths[-1].write_text(source)
    return paths


#: GCC's flags for TVM's C sources (as TVM's microcontroller projects build them).
TVM_C_FLAGS = ("-ffunction-sections", "-fdata-sections")


def measure_tvm(mod, args, work: Path) -> dict:
    sources = tvm_aot_sources(mod, work)
    # TVM's code includes the interface header: the C API's header is that convention
    api = c_api(Signature.of_program(Request.make(mod, name="default").lower()[0], "default"))
    (work / "tvmgen_default.h").write_text(header_text(api))
    include = [str(work)] + [str(Path(d)) for d in tvm._ffi.libinfo.find_include_path()]
    objects = [compile_c(path, path.with_suffix(".o"), include, TVM_C_FLAGS, std="gnu99") for path in sources]

    def elf(runs: int) -> Path:
        main = work / f"main{runs}.c"
        # TVM's C entry has no last_error
        main.write_text(_main(api, args, runs).replace("tvmgen_default_last_error()", '""'))
        return link(objects, main, work / f"tvm{runs}.elf", include)

    sizes = model_sizes(Path(f"{elf(1)}.map"), lambda origin: "tvm_model" in origin)
    return {**sizes, "instructions": instructions(elf)}


def run_all() -> dict:
    """Both placements of the weights, both compilers."""
    results = {}
    for placement, as_inputs in (("weights as constants", False), ("weights as inputs", True)):
        mod, args = mlp(as_inputs)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "ra").mkdir()
            (work / "tvm").mkdir()
            results[placement] = {
                "relay_aot": measure_relay_aot(mod, args, work / "ra"),
                "TVM AOT (crt)": measure_tvm(mod, args, work / "tvm"),
            }
    return results


def render(results: dict) -> str:
    """A Markdown table of :func:`run_all`'s results."""
    lines = [
        "| weights | compiler | text (B) | data (B) | bss (B) | instructions per inference |",
        "|---|---|---|---|---|---|",
    ]
    for placement, rows in results.items():
        for compiler, r in rows.items():
            lines.append(
                f"| {placement} | {compiler} | {r['text']:,} | {r['data']:,} | {r['bss']:,} | {r['instructions']:,} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    options = parser.parse_args()
    results = run_all()
    print(render(results))
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""MLPerf Tiny on a Cortex-M4: relay_aot against TVM's AOT executor and TFLite Micro + CMSIS-NN.

``python -m benchmarks.tinyml_m4 [--systems relay_aot,tvm_aot,tflm] [--models kws,resnet8,vww,ad]
[--tflm-sources DIR] [--json OUT] [--markdown OUT]`` builds the four MLPerf Tiny v1.0 int8 models
(``tests/data/tinyml``) with each system, links each with the same C99 main
(``cortex_m4/main.c``), ``examples/standalone/cortex-m4``'s start-up code and linker script,
newlib-nano and semihosting, runs them on QEMU's ``mps2-an386`` with a TCG plugin counting the
instructions executed (``cortex_m4/insn_count.c``) and reports, per model and system:

* **instructions per inference**: (the count of a program running 11 inferences − the count of
  the same program running 1) / 10, on the first input: start-up, initialisation and printing
  cancel out. The counts are deterministic;
* **flash**: the ``.text``, ``.rodata`` and ``.data`` image of the system's own objects (model,
  runtime, kernels, the harness's backend glue), from the linker map after ``--gc-sections``;
* **RAM**: the ``.data`` and ``.bss`` of the same objects; of it, relay_aot's storage planned at
  compile time (which holds its intermediate tensors) or TFLM's arena (which also holds the input
  and output tensors; relay_aot's and TVM's caller owns those buffers, counted in the glue);
* **stack**: the deepest the inferences reached (the main paints the stack);
* **exactness**: the outputs on three inputs (the full int8 range with seed 0, [-40, 40] with
  seed 1, the full range with seed 2) against TFLite's reference kernels (LiteRT's
  ``BUILTIN_REF``): the largest difference in int8 steps, and how many outputs differ.

Systems:

* ``relay_aot``: ``relay_aot.export_standalone(read_tflite(path).mod, ..., target="cortex-m4")``,
  the package built by its Makefile with the target's flags;
* ``tvm_aot``: TVM's own microcontroller path: TVM's importer, ``relay.build`` with the AOT
  executor (unpacked API, C interface, USMP), the crt runtime, target
  ``c -keys=arm_cpu -mcpu=cortex-m4``; its C compiled with the same flags;
* ``tflm``: TFLite Micro + CMSIS-NN built from ``--tflm-sources DIR`` (``benchmarks/tflm.py``:
  the layout and the commits), the model array in flash, a ``MicroMutableOpResolver`` of the
  model's operators, the smallest arena :func:`tflm_arena_is_smallest` confirms;
  ``tflm_int8`` (not run by default): the same with CMSIS-NN's int8-only registrations.

A system whose prerequisites are missing is skipped with the reason. Everything is built under
``--work`` (default ``.cache/benchmarks/tinyml_m4``). Needs ``gcc`` (the plugin),
``gcc-arm-none-eabi``, ``libnewlib-arm-none-eabi``, ``qemu-system-arm`` 7.x (Debian 12's: the
plugin is written against its API), ``ai-edge-litert`` and ``tflite``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from benchmarks import micro, tflm, workloads
from relay_aot.testing import standalone as sa

HERE = Path(__file__).resolve().parent / "cortex_m4"
ROOT = Path(__file__).resolve().parent.parent
ROW = micro.ROW

#: The models: name here, workload of ``workloads.TINYML``, label.
MODELS = {
    "kws": ("tflite_kws", "KWS"),
    "resnet8": ("tflite_resnet8", "ResNet-8"),
    "vww": ("tflite_vww", "VWW"),
    "ad": ("tflite_ad", "AD"),
}
SYSTEMS = {
    "relay_aot": "relay_aot",
    "tvm_aot": "TVM AOT (crt)",
    "tflm": "TFLite Micro + CMSIS-NN",
    "tflm_int8": "TFLM + CMSIS-NN, int8 registrations",
}
DEFAULT_SYSTEMS = ("relay_aot", "tvm_aot", "tflm")

#: Inferences of the longer counting program (the shorter runs one).
RUNS = 10
#: The inputs of the exactness check.
INPUTS = ("full int8 range, seed 0", "[-40, 40], seed 1", "full int8 range, seed 2")
#: TFLM's smallest arenas for these models (bytes): 16 bytes less and ``AllocateTensors`` fails.
ARENAS = {"kws": 22832, "resnet8": 55008, "vww": 100720, "ad": 3024}


def model_path(model: str) -> Path:
    """The model's ``.tflite`` file."""
    file_name, _ = workloads.TINYML[MODELS[model][0]]
    return workloads.TINYML_DIR / f"{file_name}.tflite"


def make_inputs(shape) -> list[np.ndarray]:
    """The three inputs: full int8 range (seed 0), [-40, 40] (seed 1), full range (seed 2)."""
    return [
        np.random.default_rng(0).integers(-128, 128, shape).astype(np.int8),
        np.random.default_rng(1).integers(-40, 41, shape).astype(np.int8),
        np.random.default_rng(2).integers(-128, 128, shape).astype(np.int8),
    ]


def write_inputs_h(path: Path, inputs: Sequence[np.ndarray], output_size: int) -> None:
    """``inputs.h`` of the main: the inputs as one ``const`` array (flash), and the sizes."""
    rows = []
    for x in inputs:
        flat = [str(int(v)) for v in x.reshape(-1)]
        rows.append("{" + ",\n".join(", ".join(flat[k : k + 24]) for k in range(0, len(flat), 24)) + "}")
    path.write_text(
        "#include <stdint.h>\n"
        f"#define INPUT_SIZE {inputs[0].size}\n#define OUTPUT_SIZE {output_size}\n#define NUM_INPUTS {len(inputs)}\n"
        "static const int8_t inputs[NUM_INPUTS][INPUT_SIZE] __attribute__((aligned(16))) = {\n"
        + ",\n".join(rows)
        + "\n};\n"
    )


def write_api_backend(path: Path, header: str, model: str, input_field: str, output_field: str, sizes) -> Path:
    """The main's backend for a C API (``tvmgen_<model>_run``: relay_aot's, TVM's AOT executor's):
    the input copied into a buffer of the caller's (aligned as the package aligns its tensors), the
    run, the output copied out."""
    input_size, output_size = sizes
    path.write_text(f"""/* The harness's backend for the C API of {header} (written by benchmarks/tinyml_m4.py). */
#include <stdint.h>
#include <string.h>
#include "{header}"

static int8_t input_buffer[{input_size}] __attribute__((aligned(16)));
static int8_t output_buffer[{output_size}] __attribute__((aligned(16)));

int backend_init(void) {{ return 0; }}

int backend_run(const int8_t* input) {{
  struct tvmgen_{model}_inputs in = {{ .{input_field} = input_buffer }};
  struct tvmgen_{model}_outputs out = {{ .{output_field} = output_buffer }};
  memcpy(input_buffer, input, sizeof input_buffer);
  return (int)tvmgen_{model}_run(&in, &out);
}}

void backend_output(int8_t* output) {{ memcpy(output, output_buffer, sizeof output_buffer); }}
""")
    return path


# ---------------------------------------------------------------------------------------------
# the systems


@dataclasses.dataclass
class Build:
    """A system's build of one model: what the main is linked with, and which bytes are its own."""

    objects: list  #: objects, archives and linker options, in link order
    category: Callable[[str], str | None]  #: the category (model, runtime, kernels, glue) of an object
    driver: str = "gcc"
    planned: int | None = None  #: relay_aot: bytes planned at compile time
    arena: int | None = None  #: TFLM: the arena's bytes (in the glue's .bss)


def _library_member(origin: str) -> str:
    """``constants.o`` of ``/path/libtvmgen_m.a(constants.o)``."""
    return origin.rpartition("(")[2].rstrip(")")


class RelayAot:
    """relay_aot's standalone package (``--target cortex-m4``)."""

    key = "relay_aot"

    def prepare(self, options) -> str | None:
        return None

    def build(self, model: str, work: Path, sizes) -> Build:
        import relay_aot

        imported = relay_aot.read_tflite(model_path(model))
        package = relay_aot.export_standalone(
            imported.mod, work / "pkg", name="m", target="cortex-m4", params=imported.params
        )
        sa.make_package(package)
        (given,), (result,) = package.api.inputs, package.api.outputs
        backend = write_api_backend(work / "api_backend.c", package.header.name, "m", given.name, result.name, sizes)
        glue = micro.compile_c(backend, work / "api_backend.o", [package.directory])
        library = package.library.name

        def category(origin: str) -> str | None:
            if origin.endswith("api_backend.o"):
                return "glue"
            if f"{library}(" not in origin:
                return None
            member = _library_member(origin)
            return {"constants.o": "model", "kernels.o": "kernels"}.get(member, "runtime")

        return Build([glue, package.library], category, planned=package.planned_size)


#: What TVM's C kernels use of its ``tvm/runtime/crt/error_codes.h``, which TVM's wheel lacks.
TVM_ERROR_CODES_H = """\
/* The constants of TVM's include/tvm/runtime/crt/error_codes.h that its C kernels use (TVM's
 * wheel ships no CRT headers; written by benchmarks/tinyml_m4.py): category << 8 | code. */
#ifndef TVM_RUNTIME_CRT_ERROR_CODES_H_
#define TVM_RUNTIME_CRT_ERROR_CODES_H_
typedef enum {
  kTvmErrorNoError = 0,
  kTvmErrorFunctionCallNumArguments = (8 << 8) | 0,
  kTvmErrorFunctionCallWrongArgType = (8 << 8) | 1,
  kTvmErrorFunctionCallNotImplemented = (8 << 8) | 2,
  kTvmErrorFunctionCallInvalidArg = (8 << 8) | 3,
} tvm_crt_error_t;
#endif
"""


def _field_read(entry: str, struct: str) -> str:
    """The field of ``struct`` (``inputs``, ``outputs``) that TVM's generated entry reads."""
    found = re.search(rf"\b{struct}->(\w+)", entry)
    if found is None:
        raise RuntimeError(f"TVM's AOT entry reads no field of its {struct}")
    return found.group(1)


class TvmAot:
    """TVM's AOT executor and crt runtime, C target (``benchmarks.micro.tvm_aot_sources``)."""

    key = "tvm_aot"

    def prepare(self, options) -> str | None:
        return None

    def build(self, model: str, work: Path, sizes) -> Build:
        import tvm

        import relay_aot

        imported = relay_aot.read_tflite(model_path(model), exact=False)  # TVM's importer
        sources = micro.tvm_aot_sources(imported.mod, work, imported.params, {"tir.usmp.enable": True})
        entry = "\n".join(path.read_text() for path in sources)
        input_field, output_field = (_field_read(entry, struct) for struct in ("inputs", "outputs"))
        (work / "tvmgen_default.h").write_text(
            "#ifndef TVMGEN_DEFAULT_H_\n#define TVMGEN_DEFAULT_H_\n#include <stdint.h>\n"
            f"struct tvmgen_default_inputs {{ void* {input_field}; }};\n"
            f"struct tvmgen_default_outputs {{ void* {output_field}; }};\n"
            "int32_t tvmgen_default_run(struct tvmgen_default_inputs* inputs, "
            "struct tvmgen_default_outputs* outputs);\n#endif\n"
        )
        crt = work / "include" / "tvm" / "runtime" / "crt"
        crt.mkdir(parents=True, exist_ok=True)
        (crt / "error_codes.h").write_text(TVM_ERROR_CODES_H)
        include = [work, work / "include", *tvm._ffi.libinfo.find_include_path()]
        objects = [
            micro.compile_c(path, path.with_suffix(".o"), include, micro.TVM_C_FLAGS, std="gnu99") for path in sources
        ]
        backend = write_api_backend(
            work / "api_backend.c", "tvmgen_default.h", "default", input_field, output_field, sizes
        )
        objects.insert(0, micro.compile_c(backend, work / "api_backend.o", [work]))

        def category(origin: str) -> str | None:
            if origin.endswith("api_backend.o"):
                return "glue"
            # TVM's kernels and constants share objects: all of them count as kernels
            return "kernels" if "tvm_model" in origin else None

        return Build(objects, category)


class TflmLibrary:
    """TFLite Micro + CMSIS-NN's archives, built once from ``--tflm-sources`` (``benchmarks/tflm.py``)."""

    def __init__(self):
        self.sources: Path | None = None
        self.archives: dict[str, Path] = {}
        self.commits: dict[str, str] = {}  #: by directory: the commit checked, or "unverified"

    def prepare(self, options) -> str | None:
        """Checks the sources and builds the archives (once); why not, if it cannot."""
        if self.archives:
            return None
        if options.tflm_sources is None:
            return "no --tflm-sources DIR (benchmarks/README.md: its layout and commits)"
        if shutil.which(ROW.tool("g++")) is None:
            return f"{ROW.tool('g++')} is not installed"
        try:
            self.commits, warnings = tflm.check_sources(Path(options.tflm_sources))
        except ValueError as err:
            return str(err)
        for warning in warnings:
            print(f"tflm: warning: {warning}", file=sys.stderr)
        print(f"tflm: building TFLite Micro + CMSIS-NN from {options.tflm_sources}", flush=True)
        self.sources = Path(options.tflm_sources)
        self.archives = tflm.build(self.sources, Path(options.work) / "tflm_library", options.jobs)
        return None


class Tflm:
    """TFLite Micro + CMSIS-NN: the model array in flash, a ``MicroMutableOpResolver`` of the
    model's operators (``cortex_m4/tflm_backend.cc``); with ``int8_only``, CMSIS-NN's int8-only
    registrations (``Register_X_INT8``: the same code, less of the library linked)."""

    def __init__(self, key: str, library: TflmLibrary, int8_only: bool = False):
        self.key = key
        self.library = library
        self.int8_only = int8_only

    def prepare(self, options) -> str | None:
        return self.library.prepare(options)

    def build(self, model: str, work: Path, sizes, arena: int | None = None) -> Build:
        from relay_aot.frontends import tflite_exact

        sources, archives = self.library.sources, self.library.archives
        assert sources is not None
        arena = ARENAS[model] if arena is None else arena
        data = model_path(model).read_bytes()
        model_c = work / "model_data.c"
        model_c.write_text(
            f"/* {model_path(model).name} */\n"
            f"const unsigned char g_model[{len(data)}] __attribute__((aligned(16))) = {{\n"
            + ",\n".join(",".join(str(b) for b in data[k : k + 32]) for k in range(0, len(data), 32))
            + "\n};\n"
        )
        model_obj = micro.compile_c(model_c, work / "model_data.o", flags=["-fdata-sections"])
        operators = sorted({op.code for op in tflite_exact.parse(data).operators})
        backend = work / f"tflm_backend_{arena}.o"
        sa._run(
            [
                sa.tool(ROW, "g++"),
                *tflm.CPU,
                *tflm.CXXFLAGS,
                "-O2",
                *tflm.includes(sources),
                *[f"-DOP_{op}" for op in operators],
                f"-DARENA_SIZE={arena}",
                *(["-DINT8_ONLY"] if self.int8_only else []),
                "-c",
                str(HERE / "tflm_backend.cc"),
                "-o",
                str(backend),
            ]
        )
        groups = {"libtflm_core.a": "runtime", "libtflm_kernels.a": "kernels", "libtflm_cmsis_nn.a": "kernels"}

        def category(origin: str) -> str | None:
            name = Path(origin.partition("(")[0]).name
            if name == "model_data.o":
                return "model"
            if name == backend.name:
                return "glue"
            if name.startswith(("libstdc++", "libsupc++")):
                return "runtime"  # the few pieces of the C++ library TFLM pulls in
            return groups.get(name)

        libraries = [archives[name] for name in ("kernels", "cmsis_nn", "core")]
        objects = [model_obj, backend, "-Wl,--start-group", *libraries, "-Wl,--end-group"]
        return Build(objects, category, driver="g++", arena=arena)


def all_systems() -> dict:
    """Every system by key (TFLM's two share one build of the library)."""
    library = TflmLibrary()
    return {
        "relay_aot": RelayAot(),
        "tvm_aot": TvmAot(),
        "tflm": Tflm("tflm", library),
        "tflm_int8": Tflm("tflm_int8", library, int8_only=True),
    }


# ---------------------------------------------------------------------------------------------
# building, running, measuring


def build_plugin(work: Path) -> Path:
    """``insn_count.so`` (rebuilt when older than its source)."""
    source, plugin = HERE / "insn_count.c", work / "insn_count.so"
    if not plugin.exists() or plugin.stat().st_mtime < source.stat().st_mtime:
        sa._run(["gcc", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-o", str(plugin), str(source)])
    return plugin


def run_counted(elf: Path, plugin: Path, timeout: float = 1800) -> tuple[str, int]:
    """``(stdout, instructions executed)`` of a run of ``elf`` on QEMU with the counting plugin."""
    count = elf.with_suffix(".count")
    command = [*ROW.run[:-1], "-plugin", f"file={plugin},out={count}", "-kernel", str(elf)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout, int(count.read_text().split()[1])


def printed_outputs(stdout: str) -> dict[int, np.ndarray]:
    """The main's ``OUT k hex`` lines."""
    return {
        int(m.group(1)): np.frombuffer(bytes.fromhex(m.group(2)), dtype=np.int8)
        for m in re.finditer(r"^OUT (\d+) ([0-9a-f]+)$", stdout, re.MULTILINE)
    }


def printed_stack(stdout: str) -> dict[str, int]:
    """The main's stack peaks: of the initialisation and of the inferences."""
    m = re.search(r"STACK init=(\d+) run=(\d+)", stdout)
    if m is None:
        raise RuntimeError(f"the program printed no stack peaks:\n{stdout}")
    return {"init": int(m.group(1)), "run": int(m.group(2))}


def link(build: Build, work: Path, name: str, defines: Sequence[str]) -> Path:
    """The main with ``defines`` linked with the system's build."""
    return micro.link(build.objects, HERE / "main.c", work / f"{name}.elf", [work], defines, build.driver)


def own_bytes(map_file: Path, build: Build) -> dict[str, dict[str, int]]:
    """``{"flash"|"ram": {category: bytes}}`` of the system's own objects in a linked program."""
    flash: dict[str, int] = {}
    ram: dict[str, int] = {}
    for kind, size, origin in micro.map_sections(map_file):
        category = build.category(origin)
        if category is None:
            continue
        if kind in ("text", "data"):
            flash[category] = flash.get(category, 0) + size
        if kind in ("data", "bss"):
            ram[category] = ram.get(category, 0) + size
    return {"flash": flash, "ram": ram}


def exactness(got: dict[int, np.ndarray], expected: Sequence[np.ndarray]) -> list[dict]:
    """Per input: the largest difference in int8 steps, how many outputs differ, argmax agreement."""
    rows = []
    for k, (name, reference) in enumerate(zip(INPUTS, expected)):
        difference = np.abs(got[k].astype(np.int32) - reference.astype(np.int32))
        rows.append(
            {
                "input": name,
                "max_lsb": int(difference.max()),
                "differing": int((difference > 0).sum()),
                "outputs": int(difference.size),
                "argmax_agrees": bool(got[k].argmax() == reference.argmax()),
            }
        )
    return rows


def tflm_arena_is_smallest(system: Tflm, model: str, work: Path, sizes) -> bool:
    """Whether TFLM's initialisation fails with 16 bytes less than :data:`ARENAS` gives it."""
    smaller = system.build(model, work, sizes, ARENAS[model] - 16)
    elf = link(smaller, work, "arena_minus_16", ["-DRUNS=1"])
    done = subprocess.run([*ROW.run, str(elf)], capture_output=True, text=True, timeout=600)
    return "ERROR init" in done.stdout


def measure(system, model: str, work: Path, plugin: Path) -> dict:
    """One system on one model: builds, runs and checks it (the module's docstring says what)."""
    from relay_aot.testing.tflite_models import Reference

    work.mkdir(parents=True, exist_ok=True)
    reference = Reference(model_path(model))
    inputs = make_inputs(reference.inputs[0]["shape"])
    expected = [np.asarray(reference([x])[0]).reshape(-1) for x in inputs]
    write_inputs_h(work / "inputs.h", inputs, expected[0].size)
    build = system.build(model, work, (inputs[0].size, expected[0].size))
    stdout, _ = run_counted(link(build, work, "verify", ["-DVERIFY"]), plugin)
    checked = exactness(printed_outputs(stdout), expected)
    counts = {}
    for runs in (1, RUNS + 1):
        elf = link(build, work, f"runs{runs}", [f"-DRUNS={runs}"])
        stdout, counts[runs] = run_counted(elf, plugin)
    sizes = own_bytes(Path(f"{work / 'runs1.elf'}.map"), build)
    ram = sizes["ram"]
    if build.arena is not None:  # the arena is the glue's .bss: shown on its own
        ram["glue"] -= build.arena
        ram["arena"] = build.arena
    result = {
        "system": system.key,
        "model": model,
        "instructions": (counts[RUNS + 1] - counts[1]) / RUNS,
        "instructions_one_run": counts[1],
        "flash": {**sizes["flash"], "total": sum(sizes["flash"].values())},
        "ram": {**ram, "total": sum(ram.values())},
        "planned": build.planned if build.planned is not None else build.arena,
        "stack": printed_stack(stdout),
        "exactness": checked,
    }
    if isinstance(system, Tflm):
        result["arena_is_smallest"] = tflm_arena_is_smallest(system, model, work, (inputs[0].size, expected[0].size))
    return result


def _first_line(command: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(command), capture_output=True, text=True)
    except OSError:
        return "not found"
    return (done.stdout or done.stderr).splitlines()[0] if (done.stdout or done.stderr) else ""


def environment() -> dict:
    """What the numbers depend on: the toolchain, QEMU, TVM, relay_aot's commit."""
    import tvm

    from relay_aot.version import __version__

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return {
        "date": datetime.date.today().isoformat(),
        "relay_aot": __version__,
        "relay_aot_commit": commit.stdout.strip() if commit.returncode == 0 else "",
        "tvm": tvm.__version__,
        "gcc": _first_line([ROW.tool("gcc"), "--version"]),
        "qemu": _first_line([ROW.run[0], "--version"]),
    }


def common_missing() -> str | None:
    """Why nothing can be measured here, if so."""
    for tool in ("gcc", ROW.tool("gcc"), ROW.run[0]):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    for module, package in (("ai_edge_litert", "ai-edge-litert"), ("tflite", "tflite")):
        try:
            __import__(module)
        except ImportError:
            return f"{package} is not installed"
    return None


def run_all(systems: Sequence[str], models: Sequence[str], options) -> dict:
    """Every system on every model: ``{"environment", "results", "skipped"}``."""
    work = Path(options.work)
    work.mkdir(parents=True, exist_ok=True)
    skipped: dict[str, str] = {}
    results: list[dict] = []
    reason = common_missing()
    if reason is not None:
        return {"environment": {}, "results": [], "skipped": {key: reason for key in systems}}
    plugin = build_plugin(work)
    known = all_systems()
    for key in systems:
        system = known[key]
        reason = system.prepare(options)
        if reason is not None:
            skipped[key] = reason
            continue
        for model in models:
            result = measure(system, model, work / key / model, plugin)
            print(f"{key} {model}: {result['instructions']:,.0f} instructions per inference", flush=True)
            results.append(result)
    found = {"environment": environment(), "results": results, "skipped": skipped}
    if known["tflm"].library.commits:
        found["tflm_sources"] = known["tflm"].library.commits
    return found


def _exactness_cell(rows: list[dict]) -> str:
    if all(r["max_lsb"] == 0 for r in rows):
        return "exact"
    return " / ".join(
        "0" if r["max_lsb"] == 0 else f"{r['max_lsb']} ({r['differing']} of {r['outputs']})" for r in rows
    )


def render(found: dict) -> str:
    """The Markdown table of :func:`run_all`'s results (models in order, then systems)."""
    lines = [
        "| model | system | instructions per inference | flash (B) | RAM (B) | of it planned / arena (B) | stack (B) "
        "| vs reference kernels (max int8 steps off, per input) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    order = {key: i for i, key in enumerate(SYSTEMS)}
    models = list(MODELS)
    for r in sorted(found["results"], key=lambda r: (models.index(r["model"]), order[r["system"]])):
        planned = f"{r['planned']:,}" if r["planned"] is not None else ""
        lines.append(
            f"| {MODELS[r['model']][1]} | {SYSTEMS[r['system']]} | {r['instructions']:,.0f} | {r['flash']['total']:,} "
            f"| {r['ram']['total']:,} | {planned} | {r['stack']['run']:,} | {_exactness_cell(r['exactness'])} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help=f"of {', '.join(SYSTEMS)}")
    parser.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    parser.add_argument("--tflm-sources", help="TFLM's source directory (benchmarks/tflm.py: the layout)")
    parser.add_argument("--work", default=str(ROOT / ".cache" / "benchmarks" / "tinyml_m4"), help="build directory")
    parser.add_argument("--jobs", type=int, default=2, help="compilers run at once (TFLM's build)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--markdown", help="write the table here")
    parser.add_argument("--render", metavar="JSON", help="only print the table of an earlier run's JSON")
    options = parser.parse_args(argv)
    if options.render:
        print(render(json.loads(Path(options.render).read_text())))
        return 0
    systems = [s for s in options.systems.split(",") if s]
    models = [m for m in options.models.split(",") if m]
    unknown = [s for s in systems if s not in SYSTEMS] + [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown system or model: {', '.join(unknown)}")
    found = run_all(systems, models, options)
    for key, reason in found["skipped"].items():
        print(f"skipped {key}: {reason}")
    table = render(found)
    print(table)
    if options.json:
        Path(options.json).write_text(json.dumps(found, indent=1) + "\n")
    if options.markdown:
        Path(options.markdown).write_text(table + "\n")
    return 0 if found["results"] else 1


if __name__ == "__main__":
    sys.exit(main())

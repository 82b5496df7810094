"""TFLite Micro + CMSIS-NN for the Cortex-M4, built from its public repositories (no download scripts).

:func:`check_sources` checks a source directory of the layout below (the commits TFLM's own
download scripts pin, as of its commit here), :func:`build` compiles it into three archives with
the flags of TFLM's Makefile (``tools/make/Makefile`` and ``targets/cortex_m_generic_makefile.inc``)
for ``TARGET_ARCH=cortex-m4+fp BUILD_TYPE=release OPTIMIZED_KERNEL_DIR=cmsis_nn``: the runtime at
``-Os``, the kernels and CMSIS-NN at ``-O2``, ``-DKERNELS_OPTIMIZED_FOR_SPEED`` (the Makefile's
default). The whole runtime and all of CMSIS-NN's integer sources are archived, of the kernels the
ones the MLPerf Tiny models use; the linker takes what is referenced (``--gc-sections``).

The source directory (``benchmarks/README.md`` says how to make it with ``git``)::

    DIR/tflite-micro   tensorflow/tflite-micro
    DIR/cmsis_nn       ARM-software/CMSIS-NN
    DIR/cmsis          ARM-software/CMSIS_6 (the CMSIS core headers)
    DIR/flatbuffers    google/flatbuffers, with TFLM's
                       tensorflow/lite/micro/tools/make/flatbuffers.patch applied
    DIR/gemmlowp       google/gemmlowp
    DIR/ruy            google/ruy
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from relay_aot.backends.standalone.targets import TARGETS

ROW = TARGETS["cortex-m4"]


@dataclasses.dataclass(frozen=True)
class Source:
    """One repository of the source directory."""

    directory: str  #: its name in the source directory
    repository: str  #: owner/name on GitHub
    commit: str
    note: str = ""


#: The sources and their commits: TFLM's, and those its download scripts pin at that commit
#: (``flatbuffers_download.sh``, ``ext_libs/cmsis_download.sh``, ``ext_libs/cmsis_nn_download.sh``,
#: ``third_party_downloads.inc``).
SOURCES = (
    Source("tflite-micro", "tensorflow/tflite-micro", "90b983c2b3f1480642e040bbd2ddb37b998f3424"),
    Source("cmsis_nn", "ARM-software/CMSIS-NN", "4ab83cc3cc98fb85ed6dafb55e8ca02f1628dcae"),
    Source("cmsis", "ARM-software/CMSIS_6", "5782d6f8057906d360f4b95ec08a2354afe5c9b9"),
    Source(
        "flatbuffers",
        "google/flatbuffers",
        "187240970746d00bbd26b0f5873ed54d2477f9f3",
        "tag v25.9.23, with TFLM's flatbuffers.patch",
    ),
    Source("gemmlowp", "google/gemmlowp", "719139ce755a0f31cbf1c37f7f98adcc7fc9f425"),
    Source("ruy", "google/ruy", "d37128311b445e758136b8602d1bbd2a755e115d"),
)

FLATBUFFERS_PATCH = "tensorflow/lite/micro/tools/make/flatbuffers.patch"

_COMMON = [
    "-fno-unwind-tables",
    "-fno-asynchronous-unwind-tables",
    "-ffunction-sections",
    "-fdata-sections",
    "-fmessage-length=0",
    "-DTF_LITE_STATIC_MEMORY",
    "-DTF_LITE_DISABLE_X86_NEON",
    "-DCMSIS_NN",
    "-DKERNELS_OPTIMIZED_FOR_SPEED",
    # cortex_m_generic_makefile.inc's PLATFORM_FLAGS
    "-DTF_LITE_MCU_DEBUG_LOG",
    "-Wno-type-limits",
    "-fomit-frame-pointer",
    "-DCPU_M4=1",
    "-funsigned-char",
    "-DARMCM4",
    "-mlittle-endian",
    # ext_libs/cmsis_nn.inc
    "-DARM_NN_ENABLE_F16=0",
    "-DARM_NN_ENABLE_F32=0",
    # BUILD_TYPE=release
    "-DNDEBUG",
    "-DTF_LITE_STRIP_ERROR_STRINGS",
]
#: The CPU flags: the package's (``-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16``).
CPU = [flag for flag in ROW.cflags if not flag.startswith("-O")]
CXXFLAGS = ["-std=c++17", "-fno-rtti", "-fno-exceptions", "-fno-threadsafe-statics", *_COMMON]
CFLAGS = ["-std=c17", *_COMMON]
CORE_OPT, KERNEL_OPT, CMSIS_NN_OPT = "-Os", "-O2", "-O2"

#: The kernels of the models' operators: kernels/cmsis_nn/X.cc where CMSIS-NN has one, else kernels/X.cc.
KERNELS = (
    "add add_common conv conv_common depthwise_conv depthwise_conv_common fully_connected fully_connected_common "
    "pooling pooling_common reshape reshape_common softmax softmax_common kernel_util micro_tensor_utils "
    "activations activations_common"
).split()

ARCHIVES = ("core", "kernels", "cmsis_nn")


def includes(sources: Path) -> list[str]:
    """The include directories of TFLM's Makefile, for TFLM's sources and a program using them."""
    return [
        f"-I{sources / 'tflite-micro'}",
        f"-I{sources}",
        f"-I{sources / 'gemmlowp'}",
        f"-I{sources / 'flatbuffers' / 'include'}",
        f"-I{sources / 'ruy'}",
        f"-I{sources / 'cmsis'}",
        f"-I{sources / 'cmsis_nn'}",
        f"-I{sources / 'cmsis' / 'CMSIS' / 'Core' / 'Include'}",
        f"-I{sources / 'cmsis_nn' / 'Include'}",
    ]


def _git_head(directory: Path) -> str | None:
    """The commit checked out in ``directory`` if it is the top of a git checkout, else None."""
    if shutil.which("git") is None:
        return None
    top = subprocess.run(["git", "-C", str(directory), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != directory.resolve():
        return None  # not a checkout, or a directory inside another one
    head = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True)
    return head.stdout.strip() if head.returncode == 0 else None


def check_sources(sources: Path) -> tuple[dict[str, str], list[str]]:
    """``({directory: commit or "unverified"}, warnings)`` of a source directory.

    :raises ValueError: a directory is missing, a git checkout is at another commit than
        :data:`SOURCES` says, or TFLM's patch is not applied to flatbuffers.
    """
    commits, warnings = {}, []
    for source in SOURCES:
        path = sources / source.directory
        if not path.is_dir():
            raise ValueError(f"{path} is missing ({source.repository} at {source.commit})")
        head = _git_head(path)
        if head is None:
            commits[source.directory] = "unverified"
            warnings.append(f"{path} is not a git checkout: its commit is not checked (expected {source.commit})")
        elif head != source.commit:
            raise ValueError(f"{path} is at {head}, not {source.commit} ({source.repository})")
        else:
            commits[source.directory] = head
    patch = sources / "tflite-micro" / FLATBUFFERS_PATCH
    if shutil.which("git") is not None:
        # applied: it reverses cleanly (git apply works outside a repository too)
        applied = subprocess.run(
            ["git", "apply", "--reverse", "--check", str(patch)], cwd=sources / "flatbuffers", capture_output=True
        )
        if applied.returncode != 0:
            raise ValueError(
                f"TFLM's flatbuffers patch is not applied: cd {sources / 'flatbuffers'} && git apply {patch}"
            )
    return commits, warnings


def _sources(sources: Path, out: Path) -> list[tuple[Path, Path, str, str]]:
    """(source, object, archive, optimization) of everything archived."""
    tflm = sources / "tflite-micro"
    micro = tflm / "tensorflow" / "lite" / "micro"

    def flat(root: Path, path: Path) -> str:
        # several sources share a base name (common.cc, kernel_util.cc): an archive keeps one per name
        return path.relative_to(root).with_suffix(".o").as_posix().replace("/", "__")

    core = [p for p in sorted(micro.glob("*.cc")) if not p.name.endswith("_test.cc")]
    for sub in ("arena_allocator", "memory_planner", "tflite_bridge"):
        core += [p for p in sorted((micro / sub).glob("*.cc")) if not p.name.endswith("_test.cc")]
    # the Makefile's TFL_CC_SRCS: tensorflow/**/*.{cc,c} outside lite/micro and lite/experimental, but array.cc
    for p in sorted((tflm / "tensorflow").rglob("*")):
        rel = p.relative_to(tflm).as_posix()
        if (
            p.suffix in (".cc", ".c")
            and not rel.startswith(("tensorflow/lite/micro/", "tensorflow/lite/experimental/"))
            and rel != "tensorflow/lite/array.cc"
        ):
            core.append(p)
    items = [(p, out / "core" / flat(tflm, p), "core", CORE_OPT) for p in core]
    for kernel in KERNELS:
        p = micro / "kernels" / "cmsis_nn" / f"{kernel}.cc"
        if not p.exists():
            p = micro / "kernels" / f"{kernel}.cc"
        items.append((p, out / "kernels" / flat(tflm, p), "kernels", KERNEL_OPT))
    cmsis_nn = sources / "cmsis_nn"
    for p in sorted((cmsis_nn / "Source").rglob("*.c")):
        if not p.name.endswith(("_f16.c", "_f32.c")) and p.name != "arm_nntables_flt.c":
            items.append((p, out / "cmsis_nn" / flat(cmsis_nn, p), "cmsis_nn", CMSIS_NN_OPT))
    return items


def _compile(item, include: list[str]) -> str | None:
    source, obj, _, opt = item
    if obj.exists() and obj.stat().st_mtime > source.stat().st_mtime:
        return None
    obj.parent.mkdir(parents=True, exist_ok=True)
    if source.suffix == ".cc":
        command = [ROW.tool("g++"), *CPU, *CXXFLAGS, opt, *include, "-c", str(source), "-o", str(obj)]
    else:
        command = [ROW.tool("gcc"), *CPU, *CFLAGS, opt, *include, "-c", str(source), "-o", str(obj)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return f"{source}:\n{done.stderr}"
    return None


def build(sources: Path, out: Path, jobs: int = 2) -> dict[str, Path]:
    """``libtflm_{core,kernels,cmsis_nn}.a`` in ``out`` (an object is recompiled only when missing
    or older than its source); the archives by name."""
    items = _sources(sources, out)
    include = includes(sources)
    with ThreadPoolExecutor(jobs) as pool:
        failures = [f for f in pool.map(lambda item: _compile(item, include), items) if f]
    if failures:
        raise RuntimeError(f"{len(failures)} TFLM sources failed to compile; the first:\n{failures[0]}")
    archives = {}
    for group in ARCHIVES:
        archive = out / f"libtflm_{group}.a"
        archive.unlink(missing_ok=True)
        objects = [str(obj) for _, obj, g, _ in items if g == group]
        subprocess.run([ROW.tool("ar"), "rcs", str(archive), *objects], check=True)
        archives[group] = archive
    return archives

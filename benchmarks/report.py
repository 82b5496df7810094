"""Present results: ratios, text and Markdown tables, and the speedup chart.

A result is the dict the command line writes as JSON: ``machine`` (see ``machine.py``),
``options`` and ``settings``, one per thread setting, each with its ``records`` (see
``suite.py``). :func:`add_ratios` adds to every timed record its speedup over the VM
(``vs_vm``), over the interpreter where the VM cannot run the program (``vs_interp``:
references, as in Relay's gradients), over the graph executor for static workloads
(``vs_graph``), its multiple of the kernel-only floor (``x_kernels``) and, for the workloads
written by hand (``hand_cpp/``), its multiple of the hand-written C++ (``x_hand``); ratios are of
medians.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import executors as executors_mod
from . import workloads as workloads_mod
from .suite import KERNELS, KERNELS_LABEL

COLUMNS = [e.key for e in executors_mod.all_executors()] + [KERNELS]
SHORT = {
    "interpreter": "interp",
    "vm": "VM",
    "graph": "graph",
    "aot": "TVM AOT",
    "py_converter": "py_conv",
    "relay_aot_python": "ours:py",
    "relay_aot_cpp": "ours:C++",
    "hand_cpp": "hand C++",
    "onnxruntime": "ORT",
    "litert": "LiteRT",
    KERNELS: "kernels",
}
LABELS = {e.key: e.label for e in executors_mod.all_executors()} | {KERNELS: KERNELS_LABEL}


def _timed(record: dict | None) -> float | None:
    if record and record.get("status") in ("ok", "mismatch") and "timing" in record:
        return record["timing"]["median"]
    return None


def by_pair(records: Iterable[dict]) -> dict[tuple[str, str], dict]:
    """Records keyed by (workload, executor)."""
    return {(r["workload"], r["executor"]): r for r in records}


def workloads_of(records: Iterable[dict]) -> list[str]:
    """Workload names in first-seen order."""
    return list(dict.fromkeys(r["workload"] for r in records))


def add_ratios(records: list[dict]) -> None:
    """Add ``vs_vm``, ``vs_graph``, ``x_kernels`` and ``x_hand`` to every timed record."""
    pairs = by_pair(records)
    for record in records:
        median = _timed(record)
        if median is None:
            continue
        workload = record["workload"]
        for field, base_key in (("vs_vm", "vm"), ("vs_graph", "graph")):
            base = _timed(pairs.get((workload, base_key)))
            if base is not None and record["executor"] != base_key:
                record[field] = base / median
        # Where the VM cannot run a program (references), the interpreter is the baseline.
        interp = _timed(pairs.get((workload, "interpreter")))
        if _timed(pairs.get((workload, "vm"))) is None and interp is not None and record["executor"] != "interpreter":
            record["vs_interp"] = interp / median
        for field, base_key in (("x_kernels", KERNELS), ("x_hand", "hand_cpp")):
            base = _timed(pairs.get((workload, base_key)))
            if base is not None and record["executor"] != base_key:
                record[field] = median / base


def seconds(value: float) -> str:
    """A duration with a unit: ``12.3 µs``, ``4.56 ms``, ``1.23 s``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def ratio(value: float | None) -> str:
    """``12.3×`` (three significant digits)."""
    return "" if value is None else f"{value:.3g}×"


def _status_cell(record: dict | None, text: str) -> str:
    if record is None:
        return "-"
    if record["status"] in ("n/a", "crashed"):
        return record["status"]
    if record["status"] == "mismatch":
        return f"WRONG {text}"
    return text


def _time_cell(record: dict | None, markdown: bool) -> str:
    if _timed(record) is None:
        return _status_cell(record, "")
    t = record["timing"]
    if markdown:
        text = f"{seconds(t['median'])} ({seconds(t['min'])}–{seconds(t['max'])})"
    else:
        spread = (t["max"] - t["min"]) / (2 * t["median"]) if t["median"] else 0.0
        text = f"{seconds(t['median'])} ±{spread:.0%}"
    return _status_cell(record, text)


def _ratio_cell(record: dict | None, field: str) -> str:
    if record is not None and field in record:
        return _status_cell(record, ratio(record[field]))
    if record is not None and field == "vs_vm" and "vs_interp" in record:
        return _status_cell(record, f"{ratio(record['vs_interp'])} vs interp")
    if record is not None and record["executor"] == "vm" and field == "vs_vm" and _timed(record):
        return "1×"
    return _status_cell(record, "") if _timed(record) is None else ""


def _prepare_cell(record: dict | None) -> str:
    if record is None or "prepare_s" not in record:
        return _status_cell(record, "")
    return f"{record['prepare_s']:.2f} + {record.get('first_call_s', 0.0):.2f}"


def table(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    """An aligned text table, or a Markdown table."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def fmt(row):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


def _columns(records: list[dict]) -> list[str]:
    present = {r["executor"] for r in records}
    return [c for c in COLUMNS if c in present]


def setting_tables(setting: dict, markdown: bool = False) -> str:
    """Per-call times and speedups over the VM for one thread setting."""
    records = setting["records"]
    pairs = by_pair(records)
    columns = _columns(records)
    names = [LABELS[c] if markdown else SHORT[c] for c in columns]
    times = [[w] + [_time_cell(pairs.get((w, c)), markdown) for c in columns] for w in workloads_of(records)]
    speedups = [[w] + [_ratio_cell(pairs.get((w, c)), "vs_vm") for c in columns] for w in workloads_of(records)]
    floors = [
        [w] + [_ratio_cell(pairs.get((w, c)), "x_kernels") for c in columns if c != KERNELS]
        for w in workloads_of(records)
    ]
    prepare = [[w] + [_prepare_cell(pairs.get((w, c))) for c in columns if c != KERNELS] for w in workloads_of(records)]
    title = setting["setting"]["label"]
    heading = (lambda text: f"#### {text}\n") if markdown else (lambda text: f"{text}\n")
    return "\n\n".join(
        [
            heading(f"{title}: time per call, median ({'min–max' if markdown else '± half the min–max range'})")
            + table(["workload", *names], times, markdown),
            heading(f"{title}: speedup over the Relay VM (VM median / median; higher is faster)")
            + table(["workload", *names], speedups, markdown),
            heading(f"{title}: multiple of the kernel-only time (median / kernels median; 1× = no overhead)")
            + table(["workload", *[n for n, c in zip(names, columns) if c != KERNELS]], floors, markdown),
            heading(f"{title}: preparation (compile, build, convert) + first call, seconds")
            + table(["workload", *[n for n, c in zip(names, columns) if c != KERNELS]], prepare, markdown),
        ]
    )


def summary(result: dict, markdown: bool = False) -> str:
    """relay_aot's ratios across thread settings: the numbers the README quotes."""
    settings = result["settings"]
    header = ["workload"]
    for s in settings:
        label = s["setting"]["TVM_NUM_THREADS"] or "default"
        header += [
            f"C++ vs VM ({label})",
            f"C++ vs interp, no VM ({label})",
            f"C++ vs graph ({label})",
            f"C++ vs ORT ({label})",
            f"C++ vs LiteRT ({label})",
            f"py vs py_conv ({label})",
            f"C++ / hand C++ ({label})",
        ]
    rows = []
    for workload in workloads_of(r for s in settings for r in s["records"]):
        row = [workload]
        for s in settings:
            pairs = by_pair(s["records"])
            cpp = pairs.get((workload, "relay_aot_cpp"))
            if cpp is not None and "vs_interp" in cpp:  # the VM cannot run it: the interpreter is the base
                row += ["", _status_cell(cpp, ratio(cpp["vs_interp"]))]
            else:
                row += [_ratio_cell(cpp, "vs_vm"), ""]
            row.append(_ratio_cell(cpp, "vs_graph") if pairs.get((workload, "graph"), {}).get("status") == "ok" else "")
            ours = _timed(cpp)
            for peer in ("onnxruntime", "litert"):
                theirs = _timed(pairs.get((workload, peer)))
                row.append(ratio(theirs / ours) if theirs and ours else "")
            conv_record = pairs.get((workload, "py_converter"))
            py = pairs.get((workload, "relay_aot_python"))
            conv = _timed(conv_record) if conv_record and conv_record["status"] == "ok" else None  # not if WRONG
            row.append(_status_cell(py, ratio(conv / _timed(py))) if conv and _timed(py) else _status_cell(py, ""))
            row.append(_ratio_cell(cpp, "x_hand") if "x_hand" in (cpp or {}) else "")
        rows.append(row)
    # a peer that ran on no workload (onnxruntime not installed) gets no column
    keep = [0] + [i for i in range(1, len(header)) if any(row[i] for row in rows)]
    header, rows = [header[i] for i in keep], [[row[i] for i in keep] for row in rows]
    return ("### " if markdown else "") + "relay_aot speedups (ratios of medians)\n\n" + table(header, rows, markdown)


#: The README's headline rows: a kind of workload, the peer a user of it would otherwise pick,
#: and the workloads whose ratios make the row (a range when there are several).
HEADLINE = [
    ("Recursion, lists, closures (fib, list folds)", "vm", ["fib20", "list_scalars", "list_tensors", "closures"]),
    ("RNNs over lists (LSTM, TreeLSTM)", "vm", ["lstm_h16", "lstm_h128", "treelstm_h16"]),
    (
        "Growing and `?` shapes (decoder, tensor array, MLP)",
        "vm",
        ["greedy_decoder_50", "tensor_array_lstm_h16", "mlp_dyn_b1", "mlp_dyn_b64"],
    ),
    ("Gradients (LSTM, MLP; the VM cannot run them)", "interpreter", ["grad_lstm_h16", "grad_mlp_b1"]),
    ("ONNX `Loop` RNNs", "onnxruntime", ["onnx_loop_rnn_h16", "onnx_loop_rnn_h256", "onnx_loop_rnn_h512"]),
    (
        "Vision models (ResNet-18, MobileNet, SqueezeNet, DCGAN, Inception-v3)",
        "graph",
        ["resnet18", "mobilenet", "squeezenet", "dcgan", "inception_v3"],
    ),
    (
        "ONNX vision models (SqueezeNet untuned and tuned, ResNet-50, ShuffleNet)",
        "onnxruntime",
        ["onnx_squeezenet", "onnx_squeezenet_tuned", "onnx_resnet50", "onnx_shufflenet"],
    ),
    ("ONNX MLP batch 64, quantized conv net", "onnxruntime", ["onnx_mlp_b64", "onnx_qconv_net"]),
    (
        "ONNX QDQ int8 (SqueezeNet, ResNet-50, Inception-v1)",
        "onnxruntime",
        [f"onnx_qdq_{name}" for name in workloads_mod.QDQ_ZOO],
    ),
    ("MLPerf Tiny int8 TFLite (KWS, ResNet-8, VWW, AD)", "litert", list(workloads_mod.TINYML)),
]

#: How the headline names each peer.
PEERS = {
    "vm": "Relay VM",
    "interpreter": "Relay interpreter",
    "graph": "graph executor",
    "onnxruntime": "onnxruntime",
    "litert": "LiteRT",
}


def _plain(value: float) -> str:
    """A ratio for a reader: three significant digits, whole numbers from 100 on (1,139, not 1.14e+03)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def headline(result: dict, threads: str = "1") -> str:
    """The README's table: per kind of workload, the peer's median time over relay_aot's (C++
    backend), with ``TVM_NUM_THREADS=threads`` (onnxruntime on as many threads), as a range over
    the row's workloads. Below 1x, relay_aot is the slower one."""
    setting = next(s for s in result["settings"] if s["setting"]["TVM_NUM_THREADS"] == threads)
    pairs = by_pair(setting["records"])
    rows = []
    for label, peer, workloads in HEADLINE:
        ratios = []
        for workload in workloads:
            ours, theirs = _timed(pairs.get((workload, "relay_aot_cpp"))), _timed(pairs.get((workload, peer)))
            if ours and theirs:
                ratios.append(theirs / ours)
        if ratios:
            low, high = (_plain(r) for r in (min(ratios), max(ratios)))
            rows.append([label, PEERS[peer], f"{low}×" if low == high else f"{low}–{high}×"])
    return table(["workload", "peer", "peer's time / relay_aot's"], rows, markdown=True)


#: The compile-time table's measures and the ratios it shows (see benchmarks/compile_time.py).
COMPILE_COLUMNS = [
    ("first", "first"),
    ("scratch", "nothing prebuilt"),
    ("cold", "cold"),
    ("new", "new module"),
    ("hit", "cache hit"),
    ("vm", "VM"),
    ("build", "relay.build"),
]
COMPILE_RATIOS = [
    ("first/vm", "first / VM"),
    ("scratch/vm", "nothing prebuilt / VM"),
    ("cold/vm", "cold / VM"),
    ("new/vm", "new / VM"),
    ("hit/vm", "hit / VM"),
    ("first/build", "first / build"),
    ("new/build", "new / build"),
]


def compile_time_table(table_result: dict, markdown: bool = False, only: list[str] | None = None) -> str:
    """The compile-time table: wall seconds (CPU seconds in brackets) of each measure and the
    ratios of medians to the VM's compile and ``relay.build``'s, one row per program."""
    programs = {name: t for name, t in table_result["programs"].items() if only is None or name in only}
    measured = lambda key: any(key in t or f"{key}_error" in t for t in programs.values())  # noqa: E731
    columns = [c for c in COMPILE_COLUMNS if measured(c[0])]
    ratios = [c for c in COMPILE_RATIOS if measured(c[0])]
    header = ["program"] + [label for _, label in columns + ratios] + ["load"]
    rows = []
    for name, t in programs.items():
        if "error" in t:
            rows.append([name, f"n/a: {t['error']}"] + [""] * (len(header) - 2))
            continue
        row = [name]
        for key, _ in columns:
            row.append(
                f"{t[key]:.2f} s ({t[key + '_cpu']:.2f})" if key in t else "failed" if key + "_error" in t else "-"
            )
        for key, _ in ratios:
            row.append(f"{t[key]:.2f} ({t[key.replace('/', '_cpu/') + '_cpu']:.2f})" if key in t else "-")
        row.append(f"{t['load']:.1f}")
        rows.append(row)
    return table(header, rows, markdown)


def compile_time_section(result: dict) -> str | None:
    """The Markdown section of the compile-time table (None if the run has none)."""
    table_result = result.get("compile_time")
    if not table_result or not table_result.get("programs"):
        return None
    return (
        "### Compile time\n\n"
        "Seconds of `relay_aot.compile` (CPU seconds, compilers included, in brackets), each in a "
        f"fresh process with a private cache, median of {table_result['repeat']}: *first* into an "
        "empty cache (with the precompiled header and runtime object `pip install` built), *nothing "
        "prebuilt* the same without them (`RELAY_AOT_PREBUILT=0`), *new module* with a warm cache "
        "(same kernels, other control code), *cache hit* "
        "in a new process; against `relay.vm.compile` and, for static programs, `relay.build` "
        "(`benchmarks/compile_time.py`). Ratios are of medians (CPU ratios in brackets); *load* is "
        "the 1-minute load average.\n\n" + compile_time_table(table_result, markdown=True)
    )


def problems(result: dict) -> list[str]:
    """One line per executor that was n/a, wrong or crashed, with its reason (deduplicated)."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    for s in result["settings"]:
        for r in s["records"]:
            if r["status"] != "ok" and r.get("reason"):
                seen.setdefault((r["executor"], r["status"], r["reason"]), []).append(r["workload"])
    lines = []
    for (executor, status, reason), workloads in seen.items():
        names = ", ".join(dict.fromkeys(workloads))
        lines.append(f"{LABELS.get(executor, executor)} {status} on {names}: {reason.splitlines()[0]}")
    return lines


def caption(result: dict) -> str:
    """Date, machine and versions, one line."""
    m = result["machine"]
    return f"{m['date'][:10]} · {m['cpu']}, {m['cores']} cores · TVM {m['tvm']} · relay_aot {m['relay_aot']}" + (
        f" ({m['commit']})" if m.get("commit") else ""
    )


def text_report(result: dict) -> str:
    """Everything, for the terminal."""
    parts = [caption(result)]
    parts += [setting_tables(s) for s in result["settings"]]
    parts.append(summary(result))
    if result.get("compile_time", {}).get("programs"):
        parts.append("Compile time (s; CPU s in brackets):\n" + compile_time_table(result["compile_time"]))
    issues = problems(result)
    if issues:
        parts.append("Not measured or wrong:\n" + "\n".join(f"  - {line}" for line in issues))
    return "\n\n".join(parts) + "\n"


def markdown_report(result: dict, chart_name: str | None) -> str:
    """``results.md``: generated from the JSON, so the docs never quote numbers from memory."""
    m = result["machine"]
    parts = [
        "# Benchmark results\n\n"
        "Generated by `python -m benchmarks` (see `benchmarks/README.md`); do not edit by hand.\n\n"
        f"- date: {m['date']}\n- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['platform']}\n"
        f"- software: TVM {m['tvm']}, Python {m['python']}, numpy {m['numpy']}, relay_aot {m['relay_aot']}"
        f" (commit {m['commit']}), C++ compiler {m['cxx']}\n"
        f"- target: `{result['options']['target']}`; each executor is timed after a warm-up call, "
        "in runs of back-to-back calls; times are per call.",
    ]
    if chart_name:
        parts.append(f"![speedup over the Relay VM]({chart_name})")
    for name, tuned in result.get("tuning", {}).items():
        parts.append(
            f"Tuned row `{name}`: AutoTVM and the graph tuner, up to {tuned['trials_per_kernel']} trials "
            f"per kernel, one thread, resumed from the records kept in `{tuned['records']}` "
            f"({tuned['wall_s']:.0f} s in this run); its TVM executors and relay_aot compile with them."
        )
    parts.append(summary(result, markdown=True))
    for s in result["settings"]:
        info = s["setting"]
        note = f"TVM runtime threads reported: {info.get('tvm_runtime_num_threads', '?')}"
        if "wall_s" in info:
            note += f"; this setting took {info['wall_s']:.0f} s"
        parts.append(f"### {info['label']}\n\n{note}.\n\n" + setting_tables(s, markdown=True))
    compile_section = compile_time_section(result)
    if compile_section:
        parts.append(compile_section)
    issues = problems(result)
    if issues:
        parts.append("### Not measured or wrong\n\n" + "\n".join(f"- {line}" for line in issues))
    return "\n\n".join(parts) + "\n"


def chart(result: dict, path: Path) -> str | None:
    """Write the speedup-over-the-VM chart (log scale); None, or why no chart was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"

    settings = result["settings"]
    fig, axes = plt.subplots(len(settings), 1, figsize=(13, 4.2 * len(settings) + 0.8), squeeze=False)
    colors = plt.get_cmap("tab10")
    keys = [c for c in COLUMNS if c not in ("vm", KERNELS)]
    handles: dict[str, Any] = {}
    for ax, setting in zip(axes[:, 0], settings):
        records = setting["records"]
        pairs = by_pair(records)
        workloads = workloads_of(records)
        present = {r["executor"] for r in records}
        bars = [k for k in keys if k in present]
        width = 0.8 / max(1, len(bars))
        values = [1.0]
        for i, key in enumerate(bars):
            xs, ys, wrong = [], [], []
            for x, workload in enumerate(workloads):
                record = pairs.get((workload, key))
                if record is not None and "vs_vm" in record:
                    xs.append(x - 0.4 + width * (i + 0.5))
                    ys.append(record["vs_vm"])
                    wrong.append(record["status"] == "mismatch")
            if not xs:
                continue
            values += ys
            drawn = ax.bar(xs, ys, width, label=LABELS[key], color=colors(keys.index(key)))
            handles.setdefault(LABELS[key], drawn)
            for bar, bad in zip(drawn, wrong):
                if bad:
                    bar.set_hatch("xx")
                    bar.set_edgecolor("red")
        floor = [
            (x, pairs[(w, KERNELS)]["vs_vm"]) for x, w in enumerate(workloads) if "vs_vm" in pairs.get((w, KERNELS), {})
        ]
        if floor:
            drawn = ax.scatter(
                *zip(*floor), marker="_", s=1200, linewidths=2, color="black", zorder=3, label="the VM's kernels alone"
            )
            handles.setdefault("the VM's kernels alone", drawn)
            values += [v for _, v in floor]
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylim(min(values) / 2, max(values) * 2)
        ax.set_xlim(-0.5, len(workloads) - 0.5)
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels(workloads, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("speedup over Relay VM (log)")
        ax.set_title(setting["setting"]["label"])
        ax.grid(axis="y", which="major", alpha=0.4)
    if handles:  # none when the VM ran nothing (gradient workloads alone)
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(7, len(handles)), fontsize=8)
    fig.suptitle(
        "Median time per call, relative to the Relay VM (higher is faster; hatched = wrong result)\n" + caption(result),
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None

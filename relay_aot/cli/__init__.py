"""The ``relay-aot`` command line: compile a model to a shared library, run one, show the source.

::

    relay-aot compile MODEL -o out.so [--name N] [--params p.npz] [--input-shapes S] [--c-header N.h] [--profile] ...
    relay-aot run out.so [--inputs in.npz | --inputs a.npy b.npy ...] [--output out.npz] [--profile]
                         [--profile-json trace.json]
    relay-aot show MODEL [--backend cpp|python] [--profile] ...
    relay-aot --version

MODEL is a Relay text file or, with the ``onnx`` extra installed, an ONNX file (by suffix
``.onnx``, or ``--format``). ``run`` prints the result one line per tensor, tuple/ADT,
reference or function -- the same lines ``examples/cpp_deploy`` prints (see
docs/deployment.md); with ``--profile`` (a library compiled with ``--profile``) it then prints
where the time went, as TVM's profiling table, and ``--profile-json`` writes a Chrome trace
(docs/performance.md). Every error ends with one line on stderr, ``relay-aot: error: ...``, and
exit status 2 (usage) or 1 (anything else): mistakes in the command, the model (parse and type
errors included) or the input files, failures of the compiled program, and bugs too (an
"internal error" line; ``--debug`` shows its Python traceback instead).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import tokenize
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..version import __version__
from .format import format_result, result_tensors

__all__ = [
    "CliError",
    "build_parser",
    "format_result",
    "main",
    "read_inputs",
    "read_model",
    "read_params",
    "result_tensors",
]

PROG = "relay-aot"
FORMATS = ("relay", "onnx", "tflite")
OPT_LEVELS = (0, 1, 2, 3)


class CliError(Exception):
    """A user mistake or a failure, reported as one line; ``status`` is the exit status."""

    def __init__(self, message: str, status: int = 1, prog: str = PROG):
        super().__init__(message)
        self.status = status
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (with a pointer to ``--help``), exit status 2."""

    def error(self, message):
        raise CliError(f"{message} (see {self.prog} --help)", status=2, prog=self.prog)


# -- reading models and arrays ---------------------------------------------------------------


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list]:
    """Capture what native code writes to file descriptor 2 (TVM's diagnostics renderer).

    Yields a list that holds the captured text once the block is left.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    captured: list = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.append(tmp.read().decode("utf-8", "replace"))


def _diagnostic(text: str) -> str | None:
    """The first error of TVM's rendered diagnostics as ``file:line:col: message``."""
    match = re.search(r"^error: (.*)\n(?:.*\n)*? --> (\S+)", text, re.MULTILINE)
    if match is None:
        return None
    return f"{match.group(2)}: {match.group(1).strip()}"


def _one_line(err: BaseException) -> str:
    """The meaningful line of an exception message (TVM's carry a backtrace and a note)."""
    from ..errors import CompileError

    if isinstance(err, CompileError):  # a bug of ours: the compiler's words are what helps
        return str(err)
    lines = [line.strip() for line in str(err).splitlines() if line.strip() and not line.startswith("note: run with")]
    if not lines:
        return type(err).__name__
    for line in reversed(lines):
        if re.match(r"[A-Za-z]*(Error|Exception)\b", line):
            return line
    return lines[0] if not lines[0].startswith("Traceback") else lines[-1]


#: One entry of --input-shapes: a name, bare (no whitespace) or quoted ("in put", 'x:0'), then
#: ``:`` and a bracketed list of extents.
_SHAPE_ENTRY = re.compile(r"""(?:"([^"]*)"|'([^']*)'|(\S+?)):\[([0-9,\s]*)\]""")


def _parse_shapes(text: str | None) -> dict[str, list[int]]:
    """``"x:[1,3,224,224] y:[10]"`` as ``{"x": [1, 3, 224, 224], "y": [10]}``. A name with a space
    is quoted (``'"in put":[1,3]'``); a JSON object (``'{"in put": [1, 3]}'``) also works."""
    if not text:
        return {}
    usage = (
        f'--input-shapes {text!r}: expected entries like "x:[1,3,224,224] y:[10]" (quote a name with spaces: '
        '\'"in put":[1,3]\'), or a JSON object {"x": [1, 3, 224, 224]}'
    )
    if text.lstrip().startswith("{"):
        try:
            shapes = json.loads(text)
        except ValueError:
            raise CliError(usage, status=2) from None
        if not all(isinstance(dims, list) and all(type(d) is int and d >= 0 for d in dims) for dims in shapes.values()):
            raise CliError(usage, status=2)
        return shapes
    entries = [
        (m.group(1) if m.group(1) is not None else m.group(2) if m.group(2) is not None else m.group(3), m.group(4))
        for m in _SHAPE_ENTRY.finditer(text)
    ]
    if not entries or _SHAPE_ENTRY.sub("", text).strip(" ,;\t"):
        raise CliError(usage, status=2)
    return {name: [int(d) for d in dims.replace(" ", "").split(",") if d] for name, dims in entries}


def _read_relay(path: Path, shapes: dict) -> tuple:
    import tvm

    if shapes:
        raise CliError("--input-shapes applies to ONNX models; a Relay model declares its parameter types", 2)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise CliError(f"{path}: not a Relay text file (not UTF-8 text; use --format onnx for ONNX)") from None
    _survive_parsing(text, path)
    # Parse and type-check here, where TVM's rendered diagnostics can become one line.
    with _captured_stderr() as diagnostics:
        try:
            mod = tvm.relay.parse(text, source_name=str(path))
            tvm.relay.transform.InferType()(mod)
            return mod, {}
        except tvm.error.DiagnosticError:
            failure = None
        except Exception as err:  # noqa: BLE001 - the parser raises others, without a location
            failure = err
    if failure is not None:
        raise CliError(f"{path}: the Relay text does not parse: {_parser_error(failure)}")
    raise CliError(_diagnostic(diagnostics[0]) or f"{path}: the Relay text does not parse or type-check")


def _survive_parsing(text: str, path: Path) -> None:
    """Parse and type-check ``text`` once in a forked child: TVM's Relay parser dereferences
    the undefined variable of some wrong texts (a local never declared, used after a ``let``:
    SIGSEGV), and a CLI error is one line, not a dead process. A child that raised is fine:
    this process parses again and reports TVM's diagnostics."""
    import tvm

    from ..kernels import isolated

    def parse() -> None:
        tvm.relay.transform.InferType()(tvm.relay.parse(text, source_name=str(path)))

    try:
        isolated.run(parse, doing="parsing")
    except isolated.ChildFailure as failure:
        if not failure.raised:
            raise CliError(
                f"{path}: TVM {failure.verb} this Relay text (its parser does so on some wrong "
                "texts, such as a local variable used after a let but never declared)"
            ) from None


_MISSING_ATTRIBUTE = re.compile(r"(relay\.attrs\.\w+): Cannot find required field '(\w+)'")


def _parser_error(err: BaseException) -> str:
    """What TVM's Relay parser says when it fails outside its diagnostics.

    Attributes are built by reflection, so an operator call that leaves out one without a
    default (``nn.dense(%x, %w)``: ``DenseAttrs.units``, which Python's ``relay.nn.dense``
    fills with ``None``) fails with an ``AttributeError`` naming the attribute class only.
    """
    match = _MISSING_ATTRIBUTE.search(str(err))
    if match is None:
        return _one_line(err)
    attrs, field = match.groups()
    return (
        f"an operator call lacks its attribute {field!r}, which {attrs} requires: write it out as TVM prints "
        f"it (e.g. nn.dense(%x, %w, units=None))"
    )


def _read_onnx(path: Path, shapes: dict) -> tuple:
    try:
        import onnx
    except ImportError:
        raise CliError("ONNX models need the onnx package: pip install 'relay_aot[onnx]'") from None
    from tvm import relay

    try:
        model = onnx.load(str(path))
    except Exception as err:  # protobuf raises its own DecodeError, not a common base class
        raise CliError(f"{path}: not an ONNX model ({_one_line(err)})") from None
    initializers = {init.name for init in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in initializers}
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise CliError(f"--input-shapes names {', '.join(unknown)}, but the model's inputs are {', '.join(inputs)}", 2)
    for name, value in inputs.items():
        # An input without --input-shapes keeps the model's shape: a named or unknown dimension
        # becomes ? (one library for every extent).
        dims = value.type.tensor_type.shape.dim
        if name in shapes and len(shapes[name]) != len(dims):
            raise CliError(
                f"--input-shapes gives {name!r} {len(shapes[name])} dimensions, the model has {len(dims)}", 2
            )
    try:
        return relay.frontend.from_onnx(model, shape=shapes or None, freeze_params=True)
    except Exception as err:  # noqa: BLE001 - TVM's importer raises anything, from asserts to KeyError
        raise CliError(f"{path}: TVM's ONNX importer failed: {_kind_and_line(err, always=True)}") from None


def _not_a_file(path: Path) -> str:
    """Why ``path``, which is not a regular file, cannot be read as one: missing, or what it is
    (reading a FIFO would block)."""
    from ..builder.cache import file_kind

    try:
        return f"is {file_kind(path.stat().st_mode)}, not a regular file"
    except FileNotFoundError:
        return "no such file"
    except OSError as err:
        return err.strerror or "cannot be read"


def _read_tflite(path: Path, shapes: dict) -> tuple:
    from ..errors import RelayAotError
    from ..frontends import tflite

    if shapes:
        raise CliError("--input-shapes applies to ONNX models; a TFLite model declares its input shapes", 2)
    try:
        model = tflite.read(path)
    except RelayAotError as err:
        raise CliError(str(err)) from None
    return model.mod, model.params


def model_format(path: Path) -> str:
    """What the file at ``path`` holds, when --format does not say: a TFLite flatbuffer (its
    ``TFL3`` identifier, whatever the suffix), ONNX (``.onnx``), else Relay text."""
    from ..frontends import tflite

    if tflite.is_tflite(path):
        return "tflite"
    return "onnx" if path.suffix.lower() == ".onnx" else "relay"


def read_model(path: str, fmt: str | None, input_shapes: str | None) -> tuple:
    """``(IRModule, params)`` for a Relay text, ONNX or TFLite file."""
    model = Path(path)
    if not model.is_file():
        raise CliError(f"{path}: {_not_a_file(model)}")
    shapes = _parse_shapes(input_shapes)
    read = {"onnx": _read_onnx, "tflite": _read_tflite, "relay": _read_relay}[fmt or model_format(model)]
    return read(model, shapes)


def _load_arrays(path: Path) -> dict:
    """The arrays of a ``.npz`` file by name, or of a ``.npy`` file under the name ``""``."""
    if path.is_dir():
        raise CliError(f"{path}: is a directory, not a NumPy .npy/.npz file")
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                if not isinstance(data, np.lib.npyio.NpzFile):
                    raise ValueError("not an .npz archive")
                return {key: data[key] for key in data.files}
        array = np.load(path, allow_pickle=False)
        if not isinstance(array, np.ndarray):
            raise ValueError("an .npz archive, not an .npy array")
        return {"": array}
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except PermissionError:
        raise CliError(f"{path}: permission denied") from None
    # numpy reports damaged files as any of these (an empty file is an EOFError; a damaged
    # archive member a BadZipFile, a zlib.error or a KeyError; a damaged header, which numpy
    # parses as a Python literal, a SyntaxError or a tokenize.TokenError).
    except (
        OSError,
        ValueError,
        EOFError,
        KeyError,
        SyntaxError,
        tokenize.TokenError,
        zipfile.BadZipFile,
        zlib.error,
    ) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CliError(f"{path}: not a NumPy .npy/.npz file ({detail})") from None


def read_params(path: str | None) -> dict:
    """The arrays of a ``.npz`` file, by name (``--params``)."""
    if path is None:
        return {}
    if not path.endswith(".npz"):
        raise CliError(f"--params {path}: expected a .npz file (numpy.savez)", 2)
    return _load_arrays(Path(path))


def read_inputs(files: Sequence[str], signature) -> list:
    """The arguments of @main from one ``.npz`` (keys: parameter names, or numpy's ``arr_<i>``)
    or from one ``.npy`` file per parameter, in order."""
    from .. import ir

    params = signature.params
    for p in params:
        if not isinstance(p.type, ir.TensorType):
            raise CliError(
                f"parameter %{p.name} has type {ir.format_type(p.type, signature.adts)}: "
                "relay-aot run passes tensors only"
            )
    if len(files) == 1 and files[0].endswith(".npz"):
        arrays = _load_arrays(Path(files[0]))
        by_name = [p.name for p in params]
        for keys in (by_name, [f"arr_{i}" for i in range(len(params))]):
            if set(arrays) == set(keys):
                return [arrays[k] for k in keys]
        raise CliError(
            f"{files[0]}: expected arrays named {', '.join(by_name) or '(none)'} "
            f"(or arr_0 ... arr_{len(params) - 1}), found {', '.join(sorted(arrays)) or 'none'}"
        )
    if any(not f.endswith(".npy") for f in files):
        raise CliError("--inputs takes one .npz file or one .npy file per parameter", 2)
    if len(files) != len(params):
        given = f"{len(files)} .npy files" if files else "no --inputs"
        raise CliError(f"@main takes {len(params)} parameters, got {given}")
    return [_load_arrays(Path(f))[""] for f in files]


# -- sub-commands ------------------------------------------------------------------------------


def _signature_line(signature) -> str:
    from ..ir import format_type

    params = ", ".join(f"%{p.name}: {format_type(p.type, signature.adts)}" for p in signature.params)
    return f"@main({params}) -> {format_type(signature.ret, signature.adts)}"


def _model_and_params(args) -> tuple:
    """The MODEL of the command line, and its parameters: the model's own, then ``--params``'."""
    mod, params = read_model(args.model, args.format, args.input_shapes)
    return mod, {**params, **read_params(args.params)}


def _compile_args(args) -> dict:
    from .. import names

    try:
        names.check_model_name(args.name)
    except ValueError as err:
        raise CliError(f"--name: {err}", 2) from None
    mod, params = _model_and_params(args)
    records = getattr(args, "tuning_records", None)
    if records is not None and not Path(records).is_file():
        raise CliError(f"--tuning-records {records}: {_not_a_file(Path(records))}")
    return dict(
        mod=mod,
        target=args.target,
        params=params,
        backend=args.backend,
        name=args.name,
        opt_level=args.opt_level,
        profile=args.profile,
        **({"tuning_records": records} if records else {}),
    )


def cmd_compile(args) -> int:
    """``relay-aot compile``: build the model's shared library and write it to ``-o``."""
    import relay_aot

    from .. import names

    if args.backend == "python":
        raise CliError(
            "the python backend builds no shared library (its generated Python calls kernels "
            "in the compiling process): compile with --backend cpp, or see its source with "
            "relay-aot show --backend python",
            2,
        )
    if args.standalone is not None:
        return _compile_standalone(args)
    if args.workspace_size is not None:
        raise CliError("--workspace-size sizes the arena of a standalone package: use it with --standalone DIR", 2)
    out = Path(args.output)
    if not out.parent.is_dir():
        raise CliError(f"-o {args.output}: directory {out.parent} does not exist")
    if args.c_header and not Path(args.c_header).parent.is_dir():
        raise CliError(f"--c-header {args.c_header}: directory {Path(args.c_header).parent} does not exist")
    compiled = relay_aot.compile(**_compile_args(args), verbose=args.verbose)
    compiled.export_library(out, c_header=args.c_header)
    built = " (built for profiling)" if args.profile else ""
    print(f"wrote {out}: model {compiled.name}{built}, {_signature_line(compiled.signature)}")
    if args.c_header:
        print(f"wrote {args.c_header}: the C API, {names.c_api(compiled.name, 'run')}")
    return 0


def cmd_tune(args) -> int:
    """``relay-aot tune``: tune the model's kernels with AutoTVM, appending records to ``-o``."""
    import relay_aot

    out = Path(args.output)
    if not out.parent.is_dir():
        raise CliError(f"-o {args.output}: directory {out.parent} does not exist")
    if args.trials < 1:
        raise CliError(f"--trials {args.trials}: must be at least 1", 2)
    if args.measurements < 1:
        raise CliError(f"--measurements {args.measurements}: must be at least 1", 2)
    mod, params = _model_and_params(args)
    result = relay_aot.tune(
        mod,
        out,
        params=params,
        target=args.target,
        trials=args.trials,
        opt_level=args.opt_level,
        tuner=args.tuner,
        layouts=args.layouts,
        measurements=args.measurements,
        progress=print,
    )
    measured = sum(now for _, now, _ in result.tasks)
    graph = f" and {result.graph_log} (the graph tuner's choice)" if result.graph_log else ""
    print(
        f"wrote {out}: {len(result.tasks)} tasks, {measured} trials measured now{graph}; "
        f"compile with --tuning-records {result.records}"
    )
    return 0


def _compile_standalone(args) -> int:
    """``relay-aot compile --standalone DIR``: write a standalone package (no TVM runtime, no heap)."""
    import relay_aot

    if args.c_header:
        raise CliError("--standalone writes a package with its header: --c-header does not apply", 2)
    if args.backend != "cpp" or args.profile:
        raise CliError("--standalone takes neither --backend python nor --profile", 2)
    directory = Path(args.standalone)
    if directory.exists() and not directory.is_dir():
        raise CliError(f"--standalone {args.standalone}: not a directory")
    if not directory.parent.is_dir():
        raise CliError(f"--standalone {args.standalone}: directory {directory.parent} does not exist")
    options = _compile_args(args)
    for unused in ("backend", "profile"):
        options.pop(unused)
    try:
        package = relay_aot.export_standalone(directory=directory, workspace_size=args.workspace_size, **options)
    except ValueError as err:
        raise CliError(str(err), 2) from None
    sizes = f"{package.planned_size} bytes planned, a {package.workspace_size}-byte workspace"
    print(
        f"wrote {directory}: package {package.library.name} for {package.target.name} ({sizes}); "
        f"build it with make -C {directory} CC=... CXX=... AR=... CFLAGS=... CXXFLAGS=..."
    )
    return 0


def cmd_run(args) -> int:
    """``relay-aot run``: run a compiled library on inputs from files and print the result."""
    import relay_aot

    from ..runtime.profiling import DEFAULT_TRACE_EVENTS

    module = relay_aot.load(args.library, args.name)
    inputs = read_inputs(args.inputs, module.signature)
    profile = None
    if args.profile or args.profile_json:
        if module.profiler is None:
            raise CliError(
                f"{args.library} was not built for profiling: compile it with "
                "`relay-aot compile --profile ...` to use --profile or --profile-json"
            )
        if args.profile_json and not Path(args.profile_json).parent.is_dir():
            raise CliError(
                f"--profile-json {args.profile_json}: directory {Path(args.profile_json).parent} does not exist"
            )
        result, profile = module.profile_call(inputs, max_events=DEFAULT_TRACE_EVENTS if args.profile_json else 0)
    else:
        result = module(*inputs)
    print("\n".join(format_result(result)))
    if args.output:
        with open(args.output, "wb") as out:
            # The names are result paths ("result", "result[0][1]"), never savez's allow_pickle, which
            # mypy must assume a str-keyed dict may hold.
            np.savez(out, **result_tensors(result))  # type: ignore[arg-type]
    if profile is not None:  # --profile or --profile-json
        if args.profile:
            print()
            print(profile.report().table(), end="")
        if args.profile_json:
            profile.write_trace(args.profile_json)
            print(f"wrote {args.profile_json}: a Chrome trace of the call (chrome://tracing, ui.perfetto.dev)")
    return 0


def cmd_show(args) -> int:
    """``relay-aot show``: print the source the model compiles to, or (``--ir``) its control IR."""
    from ..compiler import generate_ir, generate_source

    print(generate_ir(**_compile_args(args)) if args.ir else generate_source(**_compile_args(args)), end="")
    return 0


def _model_options(parser: argparse.ArgumentParser, library: bool = True) -> None:
    """MODEL and how it is read and compiled; ``library``: also the options of what is made of
    it (name, backend, profiling), which tuning has no use for."""
    parser.add_argument("model", metavar="MODEL", help="a Relay text file, an ONNX file (.onnx) or a TFLite model")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="the MODEL's format (default: a TFLite flatbuffer by its TFL3 identifier, .onnx is ONNX, else Relay text)",
    )
    parser.add_argument("--params", metavar="P.npz", help="bind parameters of @main to these arrays (by name)")
    parser.add_argument(
        "--input-shapes",
        metavar="SHAPES",
        help='ONNX input shapes, e.g. "x:[1,3,224,224] y:[10]" (quote a name with spaces: '
        "'\"in put\":[1,3]'; or a JSON object); needed for dynamic ones",
    )
    parser.add_argument(
        "--opt-level", type=int, choices=OPT_LEVELS, default=3, help="Relay optimization level (default: %(default)s)"
    )
    parser.add_argument(
        "--target",
        default=None,
        help="TVM target of the kernels (default: $RELAY_AOT_TARGET, else host: this machine's CPU; "
        "llvm runs on any x86-64)",
    )
    if not library:
        return
    parser.add_argument(
        "--name", default="default", help="model name, the prefix of every exported symbol (default: %(default)s)"
    )
    parser.add_argument("--backend", choices=("cpp", "python"), default="cpp", help="(default: %(default)s)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instrumented for profiling: compile a library for relay-aot run --profile, "
        "or show the instrumented source",
    )


def _debug_option(parser: argparse.ArgumentParser) -> None:
    # Before or after the sub-command. No default: a sub-command's would override the option
    # given before it.
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the Python traceback of an internal error (a bug) instead of one line",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``relay-aot`` and its sub-commands."""
    parser = _Parser(prog=PROG, description="Ahead-of-time compiler for TVM Relay programs (see docs/deployment.md).")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _debug_option(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    compile_ = commands.add_parser(
        "compile",
        help="compile MODEL into a shared library",
        description="Compile MODEL into one self-contained shared library, loadable "
        "by tvm.runtime.load_module, relay_aot.load and TVM's C++ runtime.",
    )
    _model_options(compile_)
    written = compile_.add_mutually_exclusive_group(required=True)
    written.add_argument("-o", "--output", metavar="OUT.so", help="the library to write")
    written.add_argument(
        "--standalone",
        metavar="DIR",
        help="instead, write a standalone package to DIR: sources, the kernels for --target "
        "and a Makefile building libtvmgen_<name>.a, with no TVM runtime and no heap "
        "(--target host, aarch64-linux, cortex-m4 or an llvm target; see docs/deployment.md)",
    )
    compile_.add_argument(
        "--workspace-size",
        type=int,
        metavar="BYTES",
        help="with --standalone: bytes of the arena for programs that allocate (default 65536)",
    )
    compile_.add_argument(
        "--c-header",
        metavar="NAME.h",
        help="also write the C API's header (tvmgen_<name>.h convention: structs of "
        "input and output buffers and tvmgen_<name>_run; see docs/deployment.md)",
    )
    compile_.add_argument(
        "--tuning-records",
        metavar="LOG",
        help="an AutoTVM log (relay-aot tune writes one): kernels use its best records",
    )
    compile_.add_argument("-v", "--verbose", action="store_true", help="show the C++ build's commands")
    _debug_option(compile_)
    compile_.set_defaults(run=cmd_compile)

    run = commands.add_parser(
        "run",
        help="run a compiled library on inputs from files",
        description="Run a library written by `relay-aot compile` and print its result "
        "(one line per tensor, tuple/ADT, reference or function).",
    )
    run.add_argument("library", metavar="LIBRARY", help="a .so written by relay-aot compile")
    run.add_argument(
        "--inputs",
        nargs="+",
        default=[],
        metavar="FILE",
        help="one .npz (arrays named after @main's parameters, or arr_0, arr_1, ...) "
        "or one .npy per parameter, in order",
    )
    run.add_argument("--name", help="the model name (default: the library's only model)")
    run.add_argument("--output", metavar="OUT.npz", help="also save the result's tensors, named by their paths")
    run.add_argument(
        "--profile",
        action="store_true",
        help="print where the call spent its time, as TVM's profiling table (the library must "
        "be compiled with --profile)",
    )
    run.add_argument(
        "--profile-json",
        metavar="TRACE.json",
        help="write a Chrome trace of the call (one slice per function and kernel call; the "
        "library must be compiled with --profile)",
    )
    _debug_option(run)
    run.set_defaults(run=cmd_run)

    tune = commands.add_parser(
        "tune",
        help="tune MODEL's kernels with AutoTVM into a log",
        description="Measure schedules of the kernels relay-aot compile builds for MODEL "
        "(AutoTVM, on this machine) and append them to a log; a task with its trials "
        "in the log already is skipped, so an interrupted run resumes.",
    )
    _model_options(tune, library=False)
    tune.add_argument("-o", "--output", metavar="LOG", required=True, help="the AutoTVM log to append to")
    tune.add_argument(
        "--trials", type=int, default=200, help="configurations per kernel at most (default: %(default)s)"
    )
    tune.add_argument(
        "--tuner",
        choices=("auto", "xgb", "ga", "random", "grid"),
        default="auto",
        help="AutoTVM's tuner (default: %(default)s: xgb if xgboost is installed, else ga)",
    )
    tune.add_argument(
        "--measurements",
        type=int,
        default=3,
        help="before the graph tuner, measure each convolution's best configurations again, "
        "interleaved, until each has this many measurements, and compare them by their medians "
        "(default: %(default)s; 1: AutoTVM's single measurements)",
    )
    tune.add_argument(
        "--no-layouts",
        dest="layouts",
        action="store_false",
        help="skip TVM's graph tuner (which otherwise chooses x86 convolutions' records together, "
        "with the layout transforms between them, into LOG's .graph.json)",
    )
    _debug_option(tune)
    tune.set_defaults(run=cmd_tune)

    show = commands.add_parser(
        "show",
        help="print the source MODEL compiles to",
        description="Print the generated C++ (or Python) source of MODEL, or its control IR.",
    )
    _model_options(show)
    show.add_argument(
        "--ir",
        action="store_true",
        help="print the control IR both backends print (last uses marked ^) instead of the source",
    )
    _debug_option(show)
    show.set_defaults(run=cmd_show)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``relay-aot``; returns the exit status.

    Every error ends with one line on stderr. An exception that is not about the user's
    program, files or inputs is a bug: its line says so, and ``--debug`` shows its traceback.
    """
    os.environ.setdefault("TOPHUB_LOCATION", "NONE")
    logging.getLogger("autotvm").setLevel(logging.ERROR)  # "operators have not been tuned": noise here
    debug = False
    try:
        args = build_parser().parse_args(argv)
        debug = getattr(args, "debug", False)
        return args.run(args)
    except CliError as err:
        print(f"{err.prog}: error: {err}", file=sys.stderr)
        return err.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `relay-aot show ... | head`: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:  # noqa: BLE001 - sorted below: every error is one line
        if _is_user_facing(err):
            print(f"{PROG}: error: {_kind_and_line(err)}", file=sys.stderr)
        elif debug:
            raise
        else:
            print(
                f"{PROG}: error: internal error, {_kind_and_line(err, always=True)} "
                f"(a bug: --debug shows its traceback)",
                file=sys.stderr,
            )
        return 1


def _kind_and_line(err: BaseException, always: bool = False) -> str:
    """:func:`_one_line`, naming the kind of a compiled program's run-time failure (or of any
    error: ``always``)."""
    from ..errors import KernelError, MatchError, RecursionDepthError

    line = _one_line(err)
    kind = type(err).__name__
    named = always or isinstance(err, (KernelError, MatchError, RecursionDepthError, ZeroDivisionError))
    if named and not line.startswith(kind):
        return f"{kind}: {line}"
    return line


def _is_user_facing(err: Exception) -> bool:
    """Errors about the user's program, files or inputs (everything else is a bug: traceback)."""
    import tvm

    from ..errors import RelayAotError

    return isinstance(err, (OSError, ValueError, TypeError, RelayAotError, tvm.error.TVMError))

"""TVM's Relay executors as test oracles: what they can run, and running them safely.

The interpreter and the VM are the references relay_aot is checked against, but they have
limits (see ``docs/testing.md``): the VM has no references, the interpreter overflows its C
stack on deep recursion, both crash on some programs (a segmentation fault takes the whole
process with it), and both compute a matrix product of a weight with a ``?`` row count wrongly
(the references run it as ``matmul``: :func:`_prepared`). This module

* tells in advance when an executor cannot run a program (:func:`unsupported_reason`);
* runs an executor in-process (:func:`run_reference`), or in a child process
  (:class:`IsolatedOracle`), where a crash or a hang becomes a reported outcome. The child can
  run relay_aot's own backends too (:data:`BACKENDS`): the hostile-shape campaign
  (``hostile.py``) must see relay_aot crash without crashing itself.

Results cross the process boundary already normalized (numpy arrays and tuples), see
``testing.normalize``.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import tvm
from tvm import relay

from ..passes import prune, reachable_globals
from ..passes.bounds import unpacked_dynamic_dense
from .compare import normalize

#: TVM's executors, by the names check_equivalence uses.
REFERENCES = ("interpreter", "vm")

#: relay_aot's backends, as executors an :class:`IsolatedOracle` can run (compiled in the child).
BACKENDS = ("cpp", "python")

#: Compiled programs an :class:`IsolatedOracle`'s child keeps, so that a program run on many
#: argument sets is compiled once per executor.
CHILD_CACHE_SIZE = 8

#: Deepest recursion the interpreter survives with margin (it crashes at about 1,500-2,000).
INTERPRETER_MAX_DEPTH = 1000

#: Seconds one isolated reference run may take before it is reported as hung.
DEFAULT_TIMEOUT = 300.0

#: Reference outcomes :func:`evaluate` remembers (the newest), so that a program checked on each
#: backend with the same arguments runs on each reference once per process; one whose tensors
#: hold more than REMEMBERED_BYTES is not remembered.
REMEMBERED_OUTCOMES = 64
REMEMBERED_BYTES = 4 << 20
_remembered: collections.OrderedDict[tuple, tuple[tvm.IRModule, Outcome]] = collections.OrderedDict()

#: Reference runners :func:`evaluate` keeps (the newest), so that a program checked on several
#: argument sets is compiled once per executor in this process too (as in the child's cache).
REMEMBERED_RUNNERS = 8
_runners: collections.OrderedDict[tuple, tuple[tvm.IRModule, Any]] = collections.OrderedDict()


def run_reference(mod: tvm.IRModule, args: Sequence[Any], executor: str = "interpreter") -> Any:
    """Run ``mod["main"]`` on TVM's Relay ``interpreter`` or ``vm``, in this process."""
    return reference(mod, executor)(*args)


def reference(mod: tvm.IRModule, executor: str = "interpreter") -> Callable[..., Any]:
    """``mod["main"]`` on TVM's Relay ``interpreter`` or ``vm``, prepared once (its kernels are
    lowered when it is made): call it like :func:`run_reference`'s ``args`` on each input."""
    mod = _prepared(mod)
    function = _executor(mod, executor)
    return lambda *args: function(*reference_args(mod, args))


def _prepared(mod: tvm.IRModule) -> tvm.IRModule:
    # Only what main reaches: a module holding the Prelude has 240 globals to type-check.
    mod = relay.transform.InferType()(prune(mod))
    # TVM's x86 kernels compute nn.dense of a weight with a ? row count wrongly (uninitialized
    # memory: dense(constant (2, 3), y of (?, 3)) on the interpreter and the VM alike; the
    # dynamic campaign, fresh seed 60015): the references run it as the same matmul, which
    # relay_aot's own rewrite does (passes/bounds.py)
    return relay.transform.InferType()(unpacked_dynamic_dense(mod))


def _executor(mod: tvm.IRModule, executor: str):
    """The evaluated executor function (this is where an executor rejects a program)."""
    if executor not in REFERENCES:
        raise ValueError(f"unknown reference executor {executor!r}: choose one of {', '.join(REFERENCES)}")
    kind = {"interpreter": "debug", "vm": "vm"}[executor]
    with tvm.transform.PassContext(opt_level=3):
        return relay.create_executor(kind, mod=mod, device=tvm.cpu(), target="llvm").evaluate()


def reference_args(mod: tvm.IRModule, args: Sequence[Any]) -> list:
    """Arguments as TVM's executors take them: scalars become tensors of the parameter's dtype."""
    types = [p.checked_type for p in mod["main"].params]
    return [_reference_arg(a, t) for a, t in zip(args, types)]


def _reference_arg(value: Any, ty: relay.Type) -> Any:
    if isinstance(value, (tuple, list)):
        fields = ty.fields if isinstance(ty, relay.TupleType) else [None] * len(value)
        return tuple(_reference_arg(v, t) for v, t in zip(value, fields))
    if isinstance(value, (np.ndarray, np.generic, bool, int, float)):
        dtype = ty.dtype if isinstance(ty, relay.TensorType) else None
        return tvm.nd.array(np.asarray(value, dtype=dtype))
    return value


def uses_references(mod: tvm.IRModule) -> bool:
    """Whether ``main`` or a global it reaches creates, reads or writes a reference."""
    found = []

    def visit(node):
        if isinstance(node, (relay.RefCreate, relay.RefRead, relay.RefWrite)):
            found.append(node)

    for gvar in reachable_globals(mod):
        relay.analysis.post_order_visit(mod[gvar], visit)
        if found:
            return True
    return False


def unsupported_reason(mod: tvm.IRModule, executor: str, recursion_depth: int | None = None) -> str | None:
    """Why ``executor`` cannot run ``mod`` (None if it should be able to).

    ``recursion_depth`` is how deep the program recurses on the arguments at hand, when the
    caller knows it; the interpreter is skipped beyond :data:`INTERPRETER_MAX_DEPTH`.
    """
    if executor == "vm" and uses_references(mod):
        return "the Relay VM does not support references (RefCreate, RefRead, RefWrite)"
    if executor == "interpreter" and recursion_depth is not None and recursion_depth > INTERPRETER_MAX_DEPTH:
        return f"recursion {recursion_depth} deep exceeds what the Relay interpreter survives ({INTERPRETER_MAX_DEPTH})"
    return None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one executor did with a program.

    ``kind`` is ``"value"`` (``value`` holds the normalized result), ``"raised"`` (the program
    failed at run time; ``detail`` holds ``"Type: message"``), or ``"unavailable"`` (the
    executor could not run the program; ``detail`` says why and ``cause`` is ``"rejected"``
    when it refused to compile it, ``"crashed"`` or ``"hung"`` in a child process).
    """

    kind: str
    value: Any = None
    detail: str = ""
    cause: str = ""


def _runner(mod: tvm.IRModule, executor: str):
    """``(convert, func)``: ``func(*convert(args))`` runs ``executor`` on ``mod`` (compiled now;
    raises if the executor rejects the program). A :data:`BACKENDS` name compiles with relay_aot."""
    if executor in BACKENDS:
        from ..compiler import compile as aot_compile

        return tuple, aot_compile(mod, backend=executor)
    mod = _prepared(mod)
    return (lambda args: reference_args(mod, args)), _executor(mod, executor)


def _rejected(executor: str, err: BaseException) -> Outcome:
    return Outcome("unavailable", detail=f"{executor} rejected the program: {error_text(err)}", cause="rejected")


def evaluate(mod: tvm.IRModule, args: Sequence[Any], executor: str, runner=None) -> Outcome:
    """Run a reference (or a :data:`BACKENDS` name: relay_aot) in this process and classify the
    result (see :class:`Outcome`). ``runner`` is ``_runner(mod, executor)``, if already made.

    A reference's outcome on a structurally equal module and the same arguments (their bytes)
    is the one remembered from an earlier call, if one of the last :data:`REMEMBERED_OUTCOMES`:
    TVM's executors are deterministic, and a test runs each backend against the same reference.
    A reference's executor is compiled once for structurally equal modules among the last
    :data:`REMEMBERED_RUNNERS`."""
    key = _outcome_key(mod, args, executor) if runner is None and executor in REFERENCES else None
    if key is not None and key in _remembered and tvm.ir.structural_equal(_remembered[key][0], mod):
        _remembered.move_to_end(key)
        remembered = _copy(_remembered[key][1])
        if remembered is not None:
            return remembered
    if runner is None and executor in REFERENCES:
        runner = _remembered_runner(mod, executor)
    outcome = runner if isinstance(runner, Outcome) else _evaluate(mod, args, executor, runner)
    if key is not None and _nbytes(outcome.value) <= REMEMBERED_BYTES:
        remembered = _copy(outcome)
        if remembered is not None:
            _remembered[key] = (mod, remembered)
            while len(_remembered) > REMEMBERED_OUTCOMES:
                _remembered.popitem(last=False)
    return outcome


def _remembered_runner(mod: tvm.IRModule, executor: str):
    """``_runner(mod, executor)``, or the Outcome of its rejection, made once for structurally
    equal modules among the last :data:`REMEMBERED_RUNNERS`."""
    key = (tvm.ir.structural_hash(mod), executor)
    if key in _runners and tvm.ir.structural_equal(_runners[key][0], mod):
        _runners.move_to_end(key)
        return _runners[key][1]
    try:
        runner = _runner(mod, executor)
    except Exception as err:  # noqa: BLE001 - as in _evaluate: any rejection means "cannot run"
        runner = _rejected(executor, err)
    _runners[key] = (mod, runner)
    while len(_runners) > REMEMBERED_RUNNERS:
        _runners.popitem(last=False)
    return runner


def _copy(outcome: Outcome) -> Outcome | None:
    """A copy no caller's change reaches; None for a value nested too deeply to copy (a long
    Relay list: ``copy.deepcopy`` takes more Python frames per level than ``normalize``)."""
    try:
        return copy.deepcopy(outcome)
    except RecursionError:
        return None


def _nbytes(value) -> int:
    """The bytes of a normalized value's tensors (without recursion: a long list nests deeply)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (tuple, list)):
            stack.extend(item)
        elif isinstance(item, np.ndarray):
            total += item.nbytes
    return total


def _outcome_key(mod: tvm.IRModule, args: Sequence[Any], executor: str) -> tuple | None:
    """What an outcome depends on (the arguments as an isolated run sends them), or None for
    arguments that are not plain values."""
    try:
        plain = pickle.dumps(_portable(tuple(args)))
    except TypeError:
        return None
    return tvm.ir.structural_hash(mod), executor, hashlib.sha256(plain).hexdigest()


def _evaluate(mod: tvm.IRModule, args: Sequence[Any], executor: str, runner=None) -> Outcome:
    try:
        convert, func = runner if runner is not None else _runner(mod, executor)
        converted = convert(args)
    except Exception as err:  # noqa: BLE001 - any rejection means "cannot run this program"
        return _rejected(executor, err)
    try:
        return Outcome("value", normalize(func(*converted)))
    except Exception as err:  # noqa: BLE001 - a run-time failure is an outcome to compare
        return Outcome("raised", detail=error_text(err))


def error_text(err: BaseException) -> str:
    """``"Type: message"`` of an exception (for TVM errors, the message without the backtrace)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    # TVM puts a C++ backtrace first and the message last (a check failure's message may span
    # lines: take the line that names the failed check, if any).
    message = next((line for line in lines if "Check failed" in line), lines[-1] if lines else "")
    kind = type(err).__name__
    return message if message.startswith(kind + ":") else f"{kind}: {message}"


def _portable(value: Any) -> Any:
    """Arguments as picklable plain values (tensors as numpy arrays)."""
    if isinstance(value, tvm.nd.NDArray):
        return value.numpy()
    if isinstance(value, (tuple, list)):
        return tuple(_portable(v) for v in value)
    if isinstance(value, (np.ndarray, np.generic, bool, int, float)):
        return value
    raise TypeError(
        f"an isolated reference run takes tensors, scalars and tuples as arguments, not {type(value).__name__}"
    )


def module_json(mod: tvm.IRModule) -> str:
    """``tvm.ir.save_json(mod)`` in a form ``tvm.ir.load_json`` reads back.

    TVM's JSON reader (dmlc's) knows no escape but ``\\" \\\\ \\n \\r \\t``, and a global or
    constructor whose name is not ASCII fails to load even when written as UTF-8. So strings
    holding other characters are rewritten with Python's ``unicode_escape`` (``"g\u00e9"`` becomes
    ``"g\\xe9"``): names do not change what a program computes.
    """
    return _dmlc_json(json.loads(tvm.ir.save_json(mod), strict=False))  # TVM writes control characters raw


_DMLC_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def _dmlc_json(value) -> str:
    if isinstance(value, str):
        if not (value.isascii() and value.isprintable()):
            value = value.encode("unicode_escape").decode("ascii")
        return '"' + value.translate(_DMLC_ESCAPES) + '"'
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_dmlc_json(k)}: {_dmlc_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dmlc_json(v) for v in value) + "]"
    return json.dumps(value)


class IsolatedOracle:
    """Runs references in a long-lived child process, restarted after a crash.

    A request carries the module as TVM JSON and the arguments as numpy values; the reply is an
    :class:`Outcome`. If the child dies (a segmentation fault in an executor) or exceeds
    ``timeout`` seconds, the outcome is ``unavailable`` with the reason, and the next request
    starts a fresh child. Use as a context manager, or call :meth:`close`.

    The executor may also be one of relay_aot's :data:`BACKENDS`, compiled in the child. The
    child keeps the last :data:`CHILD_CACHE_SIZE` programs it compiled, per executor.
    ``memory_limit`` (bytes) caps the child's address space (``RLIMIT_AS``), so that a
    program that computes a huge shape fails to allocate instead of taking the machine's
    memory.
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, memory_limit: int | None = None):
        self.timeout = timeout
        self.memory_limit = memory_limit
        self._proc: subprocess.Popen | None = None
        self._send: Connection | None = None
        self._recv: Connection | None = None

    def __enter__(self) -> IsolatedOracle:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> tuple[Connection, Connection]:
        """Start the child; the pipes (send, receive) to it."""
        env = dict(os.environ)
        env.setdefault("TOPHUB_LOCATION", "NONE")
        # The references run tiny kernels, for which TVM's thread pool costs more than it saves.
        env.setdefault("TVM_NUM_THREADS", "1")
        limit = [] if self.memory_limit is None else ["--memory-limit", str(int(self.memory_limit))]
        proc = subprocess.Popen(
            # imported, not run with -m: the package imports this module first, and runpy then
            # warns on every child's stderr that it was already in sys.modules
            [sys.executable, "-c", "from relay_aot.testing.oracle import main; main()", *limit],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None  # both are pipes
        self._proc = proc
        self._send = Connection(os.dup(proc.stdin.fileno()), readable=False)
        self._recv = Connection(os.dup(proc.stdout.fileno()), writable=False)
        return self._send, self._recv

    def run(self, mod: tvm.IRModule, args: Sequence[Any], executor: str) -> Outcome:
        """Run ``executor`` on ``mod`` and ``args`` in the child process."""
        request = (module_json(mod), _portable(tuple(args)), executor)
        send, recv = self._send, self._recv
        if self._proc is None or self._proc.poll() is not None or send is None or recv is None:
            # a child that died between runs (killed from outside) leaves its pipes to close and its exit to reap
            self._stop()
            send, recv = self._start()
        try:
            send.send_bytes(pickle.dumps(request))
            if not recv.poll(self.timeout):
                self._stop()
                return Outcome(
                    "unavailable", detail=f"{executor} did not finish within {self.timeout:g} s", cause="hung"
                )
            return Outcome(*pickle.loads(recv.recv_bytes()))
        except (EOFError, OSError):
            code = self._stop()
            return Outcome("unavailable", detail=f"{executor} crashed ({_describe_exit(code)})", cause="crashed")

    def _stop(self) -> int | None:
        proc, self._proc = self._proc, None
        for conn in (self._send, self._recv):
            if conn is not None:
                conn.close()
        self._send = self._recv = None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        return code

    def close(self) -> None:
        """Stop the child process."""
        self._stop()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _serve(memory_limit: int | None = None) -> None:
    """The child side of :class:`IsolatedOracle`: answer requests until stdin closes."""
    if memory_limit is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    requests = Connection(os.dup(0), writable=False)
    replies = Connection(os.dup(1), readable=False)
    # Anything TVM prints must not corrupt the reply channel.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    runners: dict = {}  # (module text, executor) -> _runner's result, or the Outcome of a rejection
    while True:
        try:
            data = requests.recv_bytes()
        except EOFError:
            return
        text, args, executor = pickle.loads(data)
        key = (text, executor)
        runner = runners.pop(key, None)
        if runner is None:
            try:
                mod = tvm.ir.load_json(text)
            except tvm.error.TVMError as err:
                runner = Outcome("unavailable", detail=f"the module did not reach the child process: {error_text(err)}")
            else:
                try:
                    runner = _runner(mod, executor)
                except Exception as err:  # noqa: BLE001 - as in evaluate
                    runner = _rejected(executor, err)
        runners[key] = runner  # the most recently used last
        while len(runners) > CHILD_CACHE_SIZE:
            del runners[next(iter(runners))]
        outcome = runner if isinstance(runner, Outcome) else evaluate(None, args, executor, runner)
        # A plain tuple: the parent needs no class of this module to read it.
        replies.send_bytes(pickle.dumps((outcome.kind, outcome.value, outcome.detail, outcome.cause)))


def main() -> None:
    """The child process of :class:`IsolatedOracle`: serve requests from stdin."""
    import argparse

    parser = argparse.ArgumentParser(description="the child process of IsolatedOracle (reads requests on stdin)")
    parser.add_argument("--memory-limit", type=int, default=None, help="address space limit in bytes")
    _serve(parser.parse_args().memory_limit)


if __name__ == "__main__":
    main()

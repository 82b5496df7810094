"""Tuned schedules: which AutoTVM records a compile uses, and how many kernels have none.

TVM picks each kernel's schedule through AutoTVM's dispatch context, a process-wide stack that
``autotvm.apply_history_best(log)`` pushes onto: inside it, ``relay.build`` -- and
``relay_aot.compile``, which lowers through the same TE compiler -- use the best record of the
log for every workload it has, and a fallback (untuned) configuration for the others. The
records in scope change the kernels built, so :func:`fingerprint` names them for the cache key.

TVM reports untuned workloads once per process, as a raw "One or more operators have not been
tuned" warning on the ``autotvm`` logger; :func:`watch` silences it while relay_aot lowers and
counts the workloads instead, so that a build says once how many kernels use fallback schedules.
It also puts relay_aot's own schedule rules (kernels/schedule_rules.py) under any tuning records.

:func:`read` reads a log, as :func:`records` (``compile(..., tuning_records=log)``) and
``relay_aot.tune`` do, more strictly than TVM's reader: a line that is not a record is refused
by file and line, except a last line cut off mid-write (no newline, the start of a record but
not JSON: a tuner killed, a full disk), which is dropped with a warning; and a record outside its
task's configuration space is refused by name (:func:`check_space`). TVM's ``apply_history_best``
applies such a record as it is -- a ``dense_pack.x86`` record with ``tile_x = [-1, 1, 2**40]``
built a kernel whose output was off by 2e37 -- and ``relay.build`` fails on some of them deep in
a pass (an invalid packed layout, a product that no longer type-checks); refusing them by name,
before anything is built, is that failure made clear. ``tune`` checks every successful record
of its log (:func:`read`); a compile, the records it can apply (each workload's best, those of a
caller's own ``apply_history_best`` context too), when it first asks for a schedule
(:func:`check_scope`, from :func:`watch`): a compile served from the cache, which builds
nothing, makes no task's space.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import numbers
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from tvm import autotvm
from tvm.autotvm.task import space as autotvm_space
from tvm.relay.backend import te_compiler

from . import schedule_rules
from .schedule_rules import ShapeRules

#: The line TVM logs at DEBUG for each workload it finds no record for.
_NO_RECORDS = "Cannot find tuning records for"

_logger = logging.getLogger("relay_aot")


def fingerprint() -> str:
    """A digest of the AutoTVM records in scope ("" outside any tuning context).

    Every context on the dispatch stack counts: a query falls through to the enclosing one.
    A context of a kind not known here gets a key of its own identity, which no later compile
    shares: never a stale library, at the cost of a rebuild.
    """
    parts = []
    context = autotvm.task.DispatchContext.current
    while context is not None and not isinstance(context, autotvm.task.FallbackContext):
        if isinstance(context, ShapeRules):
            pass  # relay_aot's own rule: its sources are in every cache key
        elif isinstance(context, autotvm.task.ApplyHistoryBest):
            for table in (context.best_by_targetkey, context.best_by_model):
                parts += sorted(f"{key}={inp.config}" for key, (inp, _) in table.items())
            parts += sorted(f"{key}={config}" for key, config in context._best_user_defined.items())
        elif isinstance(context, (autotvm.task.ApplyConfig, autotvm.task.ApplyFixedConfig)):
            parts.append(
                f"{type(context).__name__}:{getattr(context, '_config', '')}:{getattr(context, '_schedule_names', '')}"
            )
        else:
            parts.append(f"{type(context).__name__}@{id(context)}")
        context = getattr(context, "_old_ctx", None)
    if not parts:
        return ""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def captured() -> Callable[[], contextlib.AbstractContextManager]:
    """The AutoTVM records in scope now, to put back in scope later: a variant of a compile made
    afterwards (the library instrumented for profiling) must use the records the compile used,
    whether the caller is still inside their context or not."""
    context = autotvm.task.DispatchContext.current

    def restore() -> contextlib.AbstractContextManager:
        active = autotvm.task.DispatchContext.current
        while active is not None:
            if active is context:  # still in effect: entering it again would chain it to itself
                return contextlib.nullcontext()
            active = getattr(active, "_old_ctx", None)
        return context

    return restore


def records(path: str | os.PathLike | None):
    """The context a compile reads ``path``'s AutoTVM records in (nothing for None): TVM's
    ``autotvm.apply_history_best`` of the records :func:`read` accepts.

    The lines are read now. The records the context applies (each workload's best) are checked
    against their tasks' configuration spaces when a compile first asks for a schedule in it
    (:func:`check_scope`, from :func:`watch`), which a compile served from the cache never does:
    its library was built after that check.

    :raises FileNotFoundError: ``path`` does not exist.
    :raises ValueError: a line of it is not an AutoTVM record (:func:`read`).
    """
    if path is None:
        return contextlib.nullcontext()
    path = Path(path)
    context = autotvm.apply_history_best([])
    # In batches, as TVM's reader streams a log: all of a log's records alive at once (thousands
    # of objects each) cost more in garbage collection than reading them.
    batch = []
    for number, inp, res in _read(path):
        inp.config._relay_aot_line = number  # for check_scope's message
        batch.append((inp, res))
        if len(batch) == 256:
            context.load(batch)
            batch = []
    if batch:
        context.load(batch)
    context._relay_aot_path = path
    return context


def read(path: str | os.PathLike, check_spaces: bool = True) -> list:
    """The AutoTVM records ``(MeasureInput, MeasureResult)`` of log ``path``, in file order.

    Lines starting with ``#`` and blank lines are skipped. A last line without its newline that
    starts a record but is not JSON was cut off mid-write (a tuner killed, a full disk:
    :func:`is_cut`): it is dropped, with a warning on the ``relay_aot`` logger naming the file
    and the line. Any other line that is not a record
    (what TVM's ``autotvm.record.decode`` reads, with numeric costs; a successful one's finite
    and not negative) is refused. ``check_spaces``: each successful record is checked against its
    task's configuration space too (:func:`check_space`; a failed measurement is never applied).
    A record's ``index`` is not checked: TVM's dispatch never reads it.

    :raises FileNotFoundError: ``path`` does not exist.
    :raises ValueError: a line is not a record, or a record is outside its space; the message
        names the file and the line (and the workload, the knob and its value).
    """
    path = Path(path)
    found = []
    for number, inp, res in _read(path):
        if check_spaces and res.error_no == 0:
            _check(inp, f"tuning records {path}, line {number}")
        found.append((inp, res))
    return found


def _read(path: Path) -> Iterator[tuple]:
    """:func:`read`'s records, each with its line number, without the spaces' check."""
    if not path.is_file():
        raise FileNotFoundError(f"tuning records {path}: no such file")
    data = path.read_bytes()
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, 1):
        if number == len(lines) and is_cut(raw):
            _warn_cut(path, number, len(data))
            break
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(
                f"tuning records {path}, line {number}: not an AutoTVM record (not UTF-8 text: {err})"
            ) from None
        if not text.strip() or text.startswith("#"):
            continue  # TVM's reader skips the comments; blank lines separate nothing
        try:
            record = autotvm.record.decode(text)
            if record is not None:
                _check_record(*record)
        except Exception as err:  # noqa: BLE001 - TVM's decoder raises anything from a malformed line
            raise ValueError(
                f"tuning records {path}, line {number}: not an AutoTVM record ({type(err).__name__}: {_one_line(err)})"
            ) from None
        if record is not None:  # None: a log of AutoTVM's version 0.1, which TVM's reader skips (and warns of)
            yield (number, *record)


def _check(inp, where: str) -> None:
    """Refuse the record of ``inp`` if it is outside its task's space (``where``: its file and line)."""
    problem = check_space(inp)
    if problem is not None:
        raise ValueError(f"{where}: a record outside its task's configuration space: {inp.task.workload}, {problem}")


def check_scope() -> None:
    """Check the AutoTVM records in scope that a compile can apply -- each workload's best
    record in every ``autotvm.apply_history_best`` context, :func:`records`' and the caller's
    own -- against their tasks' configuration spaces, once per context. :func:`watch` calls it
    before relay_aot asks AutoTVM for any schedule.

    :raises ValueError: a record is outside its task's configuration space: the file and the
        line where the records were read by :func:`records`, the workload, the knob and its value.
    """
    context = autotvm.task.DispatchContext.current
    while context is not None:
        if isinstance(context, autotvm.task.ApplyHistoryBest) and not getattr(context, "_relay_aot_checked", False):
            path = getattr(context, "_relay_aot_path", None)
            applied = {
                id(inp): inp
                for table in (context.best_by_targetkey, context.best_by_model)
                for inp, _ in table.values()
            }
            # in file order: the first line outside its space is the one named
            for inp in sorted(applied.values(), key=lambda inp: getattr(inp.config, "_relay_aot_line", 0)):
                line = getattr(inp.config, "_relay_aot_line", None)
                _check(
                    inp,
                    f"tuning records {path}, line {line}"
                    if path is not None and line is not None
                    else "tuning records in scope (autotvm.apply_history_best)",
                )
            context._relay_aot_checked = True
        context = getattr(context, "_old_ctx", None)


def is_cut(raw: bytes) -> bool:
    """Whether ``raw``, a log's last line (the bytes after its last newline), is a record cut off
    mid-write: the start of a JSON object that is not a JSON document (no prefix of a record
    short of its last byte is one; a complete record whose newline is missing is not cut), or
    NUL bytes only (what a crash can leave at a file's end). Anything else there -- the
    whole of a file that is no log, say -- is a malformed line."""
    body = raw.strip()
    if not body.strip(b"\0"):
        return bool(body)
    if not body.startswith(b"{"):
        return False
    try:
        json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return True
    return False


#: (file, line, size) of the cut lines warned of: a log read again unchanged is not warned of again.
_cuts_warned: set[tuple[str, int, int]] = set()


def _warn_cut(path: Path, number: int, size: int) -> None:
    key = (str(path.resolve()), number, size)
    if key not in _cuts_warned:
        _cuts_warned.add(key)
        _logger.warning(
            "tuning records %s, line %d: the last line was cut off mid-write (no newline, not a record): it is ignored",
            path,
            number,
        )


def _one_line(err: BaseException) -> str:
    """The message of ``err`` in one line: TVM's carry a backtrace before it."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


def _check_record(inp, result) -> None:
    """Raise unless the record holds what AutoTVM writes, of the types TVM's dispatch and
    relay_aot's tuner read: a hashable workload, an integer index, numbers in the result, and
    for a successful measurement finite costs, not negative (the fastest record wins: a cost
    of -1 or NaN would win or lose every comparison)."""
    hash((inp.task.name, inp.task.args))  # the dispatch's key (a JSON object among them is none)
    if type(inp.config.index) is not int:
        raise TypeError(f"index {inp.config.index!r} is not an integer")

    def number(value) -> bool:
        return type(value) in (int, float)  # what JSON gives (a bool is no cost)

    if type(result.error_no) is not int:
        raise TypeError(f"error_no {result.error_no!r} is not an integer")
    if not isinstance(result.costs, tuple) or not result.costs or not all(number(c) for c in result.costs):
        raise TypeError(f"costs {result.costs!r} are not a list of numbers")
    if result.error_no == 0 and not all(math.isfinite(c) and c >= 0 for c in result.costs):
        raise ValueError(f"costs {list(result.costs)} are not all finite times")
    if not number(result.all_cost) or not number(result.timestamp):
        raise TypeError(f"all_cost {result.all_cost!r} and timestamp {result.timestamp!r} are not numbers")


#: Knobs whose splits need not divide their axis: the template's schedule splits the axis by the
#: inner factor and guards a partial last block (its own space lists powers of two that leave
#: one), and relay_aot's schedule rule gives such blocks (a row 13 wide in blocks of 5: ``[3, 5]``),
#: which ``tune`` measures as the task's untuned configuration and AutoTVM's space (divisors and
#: powers of two) does not list. A split of such a knob is accepted with inner factors from 1 to
#: the axis' extent and the outer one -1 or what they leave.
PARTIAL_SPLITS = {"conv2d_NCHWc.x86": frozenset({"tile_ow"})}

#: Each kind of knob: its space's class, its value's class and the attribute holding the value.
_KINDS = {
    "split": (autotvm_space.SplitSpace, autotvm_space.SplitEntity, "size"),
    "reorder": (autotvm_space.ReorderSpace, autotvm_space.ReorderEntity, "perm"),
    "annotation": (autotvm_space.AnnotateSpace, autotvm_space.AnnotateEntity, "anns"),
    "option": (autotvm_space.OtherOptionSpace, autotvm_space.OtherOptionEntity, "val"),
}


_KIND_OF = {cls: kind for kind, (_, cls, _) in _KINDS.items()}
_VALUE_OF = {cls: attribute for _, (_, cls, attribute) in _KINDS.items()}


def _kind(entity) -> str | None:
    return _KIND_OF.get(type(entity))


def _value(entity):
    return getattr(entity, _VALUE_OF[type(entity)])


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _typed(value):
    """``value`` as a hashable key that tells ``1`` from ``True`` and ``1.0`` (a template's
    split factors are integers: a float one is not in its space) and not a list from a tuple
    (a log holds JSON lists where the space may hold tuples)."""
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_typed(v) for v in value))
    if isinstance(value, (bool, np.bool_)):
        return ("bool", bool(value))
    if isinstance(value, numbers.Integral):
        return ("int", int(value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _typed(v)) for k, v in value.items())))
    return (type(value).__name__, value)


class _Knob:
    """One knob of a task's configuration space: its kind, the values it lists, and the value
    relay_aot's schedule rule gives it for the task (None: no rule)."""

    def __init__(self, space, ruled) -> None:
        self.space = space
        self.kind = next((kind for kind, (cls, _, _) in _KINDS.items() if type(space) is cls), None)
        if self.kind == "split":
            # A split is its inner factors: the space lists the outer one as -1 (what they leave).
            self.values = {_typed(e.size[1:]) for e in space.entities}
        elif self.kind is not None:
            self.values = {_typed(_value(e)) for e in space.entities}
        self.ruled = _typed(_value(ruled)) if ruled is not None and _kind(ruled) == self.kind else None
        self.partial = False
        # The answers by value's class and repr: a log repeats each knob's few values thousands of times.
        self._answers: dict = {}

    def problem(self, name: str, entity) -> str | None:
        """Why ``entity`` is not a value of this knob (None where it is)."""
        attribute = _VALUE_OF.get(type(entity))
        memo = (type(entity), repr(getattr(entity, attribute)) if attribute else None)
        if memo not in self._answers:
            self._answers[memo] = self._problem(name, entity)
        return self._answers[memo]

    def _problem(self, name: str, entity) -> str | None:
        if self.kind is None:
            return None  # a kind of knob this TVM did not have: not checked
        kind = _kind(entity)
        if kind != self.kind:
            found = _a(kind or type(entity).__name__)
            return f"knob {name} = {entity!r}: {found}, where the template's knob is {_a(self.kind)}"
        shown = f"knob {name} = {_value(entity)!r}"
        try:
            key = _typed(_value(entity))
            hash(key)
        except TypeError:
            return f"{shown}: not a value of a knob"
        if key == self.ruled:
            return None  # relay_aot's rule gives this value: what an untuned compile builds
        if kind != "split":
            if key in self.values:
                return None
            return f"{shown}: not one of the {len(self.values)} values its space lists"
        size = entity.size
        product = self.space.product
        if not (
            isinstance(size, list)
            and len(size) == self.space.num_output
            and all(isinstance(f, int) and not isinstance(f, bool) for f in size)
            and all(f >= 1 for f in size[1:])
        ):
            return f"{shown}: not {self.space.num_output} integer factors, the inner ones positive"
        inner = math.prod(size[1:])
        if _typed(size[1:]) in self.values or (self.partial and inner <= product):
            if size[0] in (-1, -(-product // inner)):
                return None
            return f"{shown}: its factors multiply to {size[0] * inner}, the axis is {product} long"
        return f"{shown}: not one of the {len(self.values)} splits of {product} its space lists"


class _Space:
    """What a record of one task (template ``name``, workload, target) may hold: its
    configuration space's knobs; ``ruled``, relay_aot's rule's configuration of the task."""

    def __init__(self, name: str, space, ruled) -> None:
        ruled_entities = getattr(ruled, "_entity_map", {})
        self.space = space
        self.knobs = OrderedDict((knob, _Knob(sub, ruled_entities.get(knob))) for knob, sub in space.space_map.items())
        for knob in PARTIAL_SPLITS.get(name, ()):
            if knob in self.knobs:
                self.knobs[knob].partial = True

    def problem(self, config) -> str | None:
        """Why ``config`` is outside this space (None where it is in it)."""
        entities = config._entity_map
        for name in entities:
            if name not in self.knobs:
                return (
                    f"knob {name} = {entities[name]!r}: the template has no such knob "
                    f"(its knobs: {', '.join(self.knobs)})"
                )
        for name, knob in self.knobs.items():
            if name not in entities:
                return f"knob {name}: the record has no value for it"
            problem = knob.problem(name, entities[name])
            if problem is not None:
                return problem
        if self.space._shared_filter is not None:
            try:
                allowed = bool(self.space._shared_filter(OrderedDict((n, entities[n]) for n in self.knobs)))
            except Exception:  # noqa: BLE001 - a filter that cannot read a value outside its own space
                allowed = False
            if not allowed:
                return f"knobs {config}: a combination the template's constraints exclude"
        return None


#: (target, template, arguments) -> the space its records are checked against (None: no task to make)
_spaces: dict = {}


def check_space(inp) -> str | None:
    """Why the record of ``inp`` (an ``autotvm.MeasureInput``) is outside its task's
    configuration space -- the knob and its value -- or None where it is in it (or its task
    cannot be made here).

    Every knob of the template must have a value its space lists (a split by its inner factors,
    its outer one -1 or what they leave of the axis; a reorder, an annotation, a ``define_knob``
    option by value), and no other knob be set. A value relay_aot's schedule rule gives the knob
    (``tune`` measures the rule's configuration first, which may lie outside the space) and the
    splits of :data:`PARTIAL_SPLITS` are accepted too. Spaces are made once per process.
    """
    key = (str(inp.target), inp.task.name, inp.task.args)
    if key not in _spaces:
        _spaces[key] = _make_space(inp.task.name, inp.task.args, inp.target, inp.task.workload)
    checked = _spaces[key]
    return checked.problem(inp.config) if checked is not None else None


def _make_space(name: str, args, target, workload) -> _Space | None:
    template = autotvm.task.task.TASK_TABLE.get(name)
    if template is None:
        return None  # no template of this name here: nothing is built with the record
    space = autotvm.task.ConfigSpace()
    try:
        # autotvm.task.create, without its count of the kernel's operations (slow for some)
        with autotvm.task.ApplyConfig(space), target:
            template(*args)
    except Exception:  # noqa: BLE001 - a template refusing its own arguments builds no kernel with them
        return None
    rule = schedule_rules.RULES.get(name)
    try:
        ruled = rule(workload, target) if rule is not None else None
    except Exception:  # noqa: BLE001 - no rule for what it cannot read
        ruled = None
    return _Space(name, space, ruled)


class Untuned:
    """The workloads a lowering found no tuning records for.

    TVM's TE compiler caches lowered functions for the process and reports a workload only
    when it lowers it; so what each kernel reported is remembered, per tuning context, and a
    kernel served from that cache counts what it reported when it was lowered.
    """

    def __init__(self, context: str, target: str) -> None:
        self.context = context
        self.target = target
        self.workloads: set[str] = set()
        self._pending: set[str] = set()

    def kernel_lowered(self, key: int) -> None:
        """Attribute what was reported since the last kernel to the kernel of structural hash ``key``."""
        memo = (self.context, self.target, key)
        if self._pending:
            _reported[memo] = frozenset(self._pending)
        self.workloads |= _reported.get(memo, frozenset())
        self._pending = set()

    def report(self) -> None:
        """One line when any kernel uses a fallback schedule: a warning the first time in the
        process (as TVM's own), information after that."""
        if self.workloads:
            count = len(self.workloads)
            global _warned
            level = logging.INFO if _warned else logging.WARNING
            _warned = True
            _logger.log(
                level,
                "relay_aot: %d kernel schedule%s untuned (TVM's fallback configuration); tune them with "
                "AutoTVM and compile inside autotvm.apply_history_best(log) (docs/performance.md, "
                '"Tuned kernels")',
                count,
                " is" if count == 1 else "s are",
            )


#: whether a build of this process has warned of untuned kernels already
_warned = False
#: (tuning context, target, kernel's structural hash) -> workloads it had no records for
_reported: dict[tuple[str, str, int], frozenset[str]] = {}
#: the tuning context the TE compiler's cache was last filled under (None: not by relay_aot)
_cached_under: str | None = None


class _Collect(logging.Handler):
    def __init__(self, untuned: Untuned):
        super().__init__(logging.DEBUG)
        self.untuned = untuned

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(_NO_RECORDS):
            self.untuned._pending.add(message.split("key=", 1)[-1].split("\n", 1)[0])


@contextlib.contextmanager
def watch(target: str = "", lowering: bool = False) -> Iterator[Untuned]:
    """Run TVM's passes or lowering inside this: its own tuning messages are held back and the
    workloads without records collected (TVM's process-wide logging state is restored after).

    ``lowering``: kernels will be lowered, so the TE compiler's process-wide cache is emptied
    first if it was filled under other tuning records (or by someone else): a kernel lowered
    without the records in scope now would be served from it.

    The records in scope are checked against their tasks' configuration spaces first
    (:func:`check_scope`).
    """
    global _cached_under
    check_scope()
    context = fingerprint()
    if lowering and (context or _cached_under != context):
        te_compiler.get().clear()
        _cached_under = context
    logger = logging.getLogger("autotvm")
    saved = (
        logger.level,
        logger.propagate,
        list(logger.handlers),
        set(autotvm.task.DispatchContext.warning_messages),
        te_compiler._first_warning,
        autotvm.GLOBAL_SCOPE.silent,
    )
    untuned = Untuned(context, target)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.handlers = [_Collect(untuned)]
    # TVM reports a workload once per process: forget the earlier ones so this build counts its own.
    autotvm.task.DispatchContext.warning_messages.clear()
    te_compiler._first_warning = False
    # TVM's select_implementation sets this flag around its template queries and leaves it set
    # when a compute raises there (a refused shape, say): every later lowering in the process
    # would then report no untuned workload. The messages are held back above anyway.
    autotvm.GLOBAL_SCOPE.silent = False
    rules = ShapeRules(untuned=lambda workload: untuned._pending.add(str(workload)))
    try:
        with rules:
            yield untuned
    finally:
        level, propagate, handlers, messages, first, silent = saved
        autotvm.GLOBAL_SCOPE.silent = silent
        logger.setLevel(level)
        logger.propagate = propagate
        logger.handlers = handlers
        autotvm.task.DispatchContext.warning_messages.clear()
        autotvm.task.DispatchContext.warning_messages.update(messages)
        te_compiler._first_warning = first

"""The epoch protocol without Spark: a source, a sink and an operator in plain Python.

The real protocol code runs on them — :func:`~sluice.protocol.plan_epoch`,
:func:`~sluice.protocol.process.process_attempt` (the process step with a
:class:`~sluice.protocol.process.Compute` of its own), :func:`~sluice.protocol.commit_epoch`,
recovery, rewinds, retention and restores — with the real :class:`Repository` on a local
directory, so a test of plan, commit, crashes, races or rewinds takes milliseconds::

    rt = memory_runtime(tmp_path, qos=2)
    source_of(rt).append(("a", 1), ("b", 2), ("a", 3))
    run_until_drained(rt, max_units=2)
    assert sink_rows(rt, "out") == expected_output(source_of(rt).records, per_epoch=2)

* :class:`MemorySource`: records ``(key, value)`` appended by the test; an offset is a record
  count, a unit a record.
* :class:`RowsSink`: two-phase commit over JSON objects in an :class:`ObjectStore` (durable,
  so a killed process's staged and committed rows outlive it): ``prepare`` stages invisibly
  under the attempt, ``commit`` makes the rows visible once (idempotent), ``abort`` drops
  them, and a rewind's first epoch retracts the rewound epochs' rows.
* :class:`KeyedSum`: a running sum per key; each epoch emits ``{key, total}`` for every key it
  touched; a record whose value is not a whole number is a dead letter. Its state is a dict,
  written as a delta part per epoch and a base every ``checkpoint.compact_every`` deltas.
* :func:`crashed`: run protocol steps in a forked child that the real fault mechanism
  (:class:`~sluice.protocol.Faults`, SIGKILL) kills at a named point.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from sluice.contracts import layout
from sluice.contracts.operators import EpochCounts, EpochFacts, StateUpdate
from sluice.contracts.records import (
    EngineInfo,
    NoHandle,
    Plan,
    Prepared,
    StagedFile,
    StatePart,
    StateRef,
    WatermarkState,
)
from sluice.contracts.sinks import Sink
from sluice.contracts.sources import Offset, Source, SourceRange
from sluice.protocol import runner
from sluice.protocol.faults import Faults
from sluice.protocol.repository import Repository
from sluice.protocol.runner import EpochOutcome
from sluice.protocol.runtime import Runtime, SinkRole
from sluice.spec.components.base import SinkConfig, SourceConfig
from sluice.spec.model import (
    CheckpointSpec,
    EventTimeSpec,
    PipelineSpec,
    ProcessSpec,
    StateSpec,
)
from sluice.state import state_parts, verify_parts
from sluice.storage import ObjectStore, open_store

if TYPE_CHECKING:
    from sluice.contracts.operators import EpochOutput, Frame

__all__ = [
    "SINKS",
    "KeyedSum",
    "MemoryCompute",
    "MemoryOffset",
    "MemoryRange",
    "MemorySource",
    "Record",
    "RowsSink",
    "crashed",
    "dead_positions",
    "expected_epochs",
    "expected_output",
    "memory_runtime",
    "memory_spec",
    "read_memory_state",
    "run_epoch",
    "run_until_drained",
    "sink_of",
    "sink_rows",
    "source_of",
]

Record = tuple[str, Any]  # (key, value): a value that is not a whole number is a dead letter
Row = dict[str, Any]
T = TypeVar("T")

# -- source -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryOffset(Offset):
    next_record: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"type": "memory", "next_record": self.next_record}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryOffset:
        return cls(int(data["next_record"]))


@dataclass(frozen=True)
class MemoryRange(SourceRange):
    start: int
    stop: int

    def to_dict(self) -> dict[str, Any]:
        return {"type": "memory", "start": self.start, "stop": self.stop}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryRange:
        return cls(int(data["start"]), int(data["stop"]))

    @property
    def end(self) -> MemoryOffset:
        return MemoryOffset(self.stop)

    @property
    def units(self) -> int:
        return self.stop - self.start


class MemorySource(Source[MemoryOffset, MemoryRange]):
    """Records appended by the test; a range is ``[start, stop)`` of their positions, so
    reading it again gives the same records (appends only go after it)."""

    offset_type = MemoryOffset
    range_type = MemoryRange

    unit_name = "records"

    def __init__(self, records: Iterable[Record] = (), name: str = "memory") -> None:
        self.records: list[Record] = list(records)
        self.name = name

    def append(self, *records: Record) -> None:
        self.records.extend(records)

    @property
    def location(self) -> str:
        return f"memory://{self.name}"

    def initial_offset(self) -> MemoryOffset:
        return MemoryOffset(0)

    def plan_range(
        self, start: Offset, max_units: int | None, max_records: int | None = None
    ) -> MemoryRange | None:
        first = cast(MemoryOffset, start).next_record
        stop = len(self.records)
        for cap in (max_units, max_records):
            if cap is not None:
                stop = min(stop, first + max(cap, 1))
        return MemoryRange(first, stop) if stop > first else None

    def offset_from_user(self, data: dict[str, Any]) -> MemoryOffset:
        value = data.get("next_record")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f'expected {{"next_record": <whole number >= 0>}}, got {data!r}')
        return MemoryOffset(value)

    def is_before(self, a: Offset, b: Offset) -> bool:
        return cast(MemoryOffset, a).next_record < cast(MemoryOffset, b).next_record

    def read(self, spark: Any, rng: SourceRange) -> Any:
        return self.records_in(cast(MemoryRange, rng))

    def records_in(self, rng: MemoryRange) -> list[tuple[int, Record]]:
        """``(position, record)`` of every record of ``rng``."""
        return list(enumerate(self.records[rng.start : rng.stop], rng.start))

    def pending_units(self, start: Offset) -> int:
        return max(0, len(self.records) - cast(MemoryOffset, start).next_record)


# -- sink ---------------------------------------------------------------------------------

STAGING = "_staging/"


class RowsSink(Sink[NoHandle]):
    """Two-phase commit of rows (dicts) as JSON objects in ``store``.

    ``_staging/<epoch>-<attempt>/rows.json`` is staged (invisible); ``part-<epoch>-<attempt>
    .json`` is visible. A direct ``write`` (qos 0/1) is a prepare and commit at once, so a
    replay of an epoch by another attempt shows its rows twice, as a real non-transactional
    write would. ``supports_retraction`` false: a rewind is refused, as for a sink that
    cannot take back output.
    """

    handle_type = NoHandle

    counts_rows = True

    def __init__(self, name: str, store: ObjectStore, *, retracts: bool = True) -> None:
        self.name = name
        self.store = store
        self.supports_retraction = retracts

    def staging_prefix(self, epoch: int, attempt: str) -> str:
        return f"{STAGING}{epoch:012d}-{attempt}/"

    def prepare(self, epoch: int, attempt: str, df: Any, rows: int | None) -> Prepared:
        frame = cast(list[Row], df)
        if not frame:
            return Prepared(self.name, self.store.uri(), epoch, attempt, 0)
        staged = self.staging_prefix(epoch, attempt) + "rows.json"
        data = json.dumps(frame, sort_keys=True).encode()
        self.store.put(staged, data)
        final = f"part-{epoch:012d}-{attempt}.json"
        files = (StagedFile(staged, final, len(data)),)
        return Prepared(self.name, self.store.uri(), epoch, attempt, len(frame), files)

    def commit(self, prepared: Prepared) -> None:
        if prepared.retract_after is not None:
            for key, epoch in self._visible():
                if prepared.retract_after < epoch < prepared.epoch:
                    self.store.delete(key)
        for staged in prepared.files:
            self.store.move(staged.staged_key, staged.final_key)  # done already: a no-op
        self.store.delete_prefix(self.staging_prefix(prepared.epoch, prepared.attempt))

    def abort(self, prepared: Prepared) -> None:
        self.store.delete_prefix(self.staging_prefix(prepared.epoch, prepared.attempt))

    def abort_others(self, epoch: int, keep: str | None) -> int:
        mine = self.staging_prefix(epoch, keep) if keep is not None else None
        doomed = [
            i.key
            for i in self.store.list(f"{STAGING}{epoch:012d}-")
            if mine is None or not i.key.startswith(mine)
        ]
        for key in doomed:
            self.store.delete(key)
        return len(doomed)

    def rows(self) -> list[Row]:
        """What a reader sees: every visible row, by epoch."""
        found: list[Row] = []
        for key, _ in self._visible():
            found.extend(json.loads(self.store.get(key)))
        return found

    def staged(self) -> list[str]:
        """Keys of staged rows still stored (empty when nothing is left over)."""
        return [i.key for i in self.store.list(STAGING)]

    def epochs(self) -> list[int]:
        """The epochs whose rows are visible, one entry per visible part."""
        return [epoch for _, epoch in self._visible()]

    def _visible(self) -> list[tuple[str, int]]:
        keys = sorted(i.key for i in self.store.list() if i.key.startswith("part-"))
        return [(key, int(key[5:17])) for key in keys]


# -- operator -----------------------------------------------------------------------------


@dataclass
class SumOutput:
    """One epoch of :class:`KeyedSum`, driven by the process step as an ``EpochOutput``."""

    results: list[Row]
    emitted: int | None
    counts: EpochCounts
    update: dict[str, int]
    kind: str
    state_rows: int
    dead_rows: list[Row]

    @property
    def horizon(self) -> int | None:
        return None

    def state_written(self, part: StatePart) -> None:
        """Nothing kept about the parts."""

    def state_update(self) -> StateUpdate | None:
        if not self.update and self.kind == "delta":
            return None
        frame = cast(Any, self.update)  # a dict stands for the state's rows
        return StateUpdate("base" if self.kind == "base" else "delta", frame, len(self.update))

    def finish(self, emitted: int | None, state_rows: int | None) -> EpochFacts:
        return EpochFacts(
            self.counts, WatermarkState(), None, len(self.results), self.state_rows,
            self.state_rows,
        )  # fmt: skip

    def late(self) -> Any:
        return []

    def dead(self) -> Any:
        return self.dead_rows

    def release(self) -> None:
        pass


class KeyedSum:
    """Sums each key's values; emits ``{key, total}`` for every key an epoch touched (sorted
    by key), the total over every epoch so far."""

    def run(
        self,
        records: Sequence[tuple[int, Record]],
        state: dict[str, int],
        *,
        pipeline: str,
        epoch: int,
        source: str,
        compact: bool,
    ) -> SumOutput:
        update: dict[str, int] = {}
        dead: list[Row] = []
        for position, (key, value) in records:
            if isinstance(value, bool) or not isinstance(value, int):
                dead.append(_dead_letter(pipeline, epoch, source, position, key, value))
                continue
            update[key] = update.get(key, state.get(key, 0)) + value
        results = [{"key": k, "total": update[k]} for k in sorted(update)]
        total = {**state, **update}
        counts = EpochCounts(len(records), len(records) - len(dead), 0, len(dead))
        kind = "base" if compact else "delta"
        written = total if compact else update
        return SumOutput(results, len(results), counts, written, kind, len(total), dead)


def _dead_letter(
    pipeline: str, epoch: int, source: str, position: int, key: str, value: Any
) -> Row:
    return {
        "pipeline": pipeline, "epoch": epoch, "source": source, "file": source,
        "line": position, "raw": json.dumps([key, value]), "reason_code": "bad_value",
        "reason": f"value {value!r} is not a whole number",
    }  # fmt: skip


# -- compute ------------------------------------------------------------------------------

STATE_FILE = "part.json"


@dataclass
class MemoryCompute:
    """The process step's :class:`~sluice.protocol.process.Compute` in plain Python: rows are
    lists of dicts, ``S_k`` a dict folded from its parts (checked against the checkpoint's
    fingerprints first, as Spark's reader does). ``on_compute(plan)`` runs first in every
    attempt: a test makes an attempt fail there, or lets another one run meanwhile."""

    operator: KeyedSum = field(default_factory=KeyedSum)
    on_compute: Callable[[Plan], None] | None = None

    def describe(self) -> EngineInfo:
        return {"engine": "memory", "pid": os.getpid()}

    def compute(self, rt: Runtime, plan: Plan) -> EpochOutput:
        if self.on_compute is not None:
            self.on_compute(plan)
        source = source_of(rt)
        state = read_memory_state(rt.repo.store, plan.state)
        every = rt.spec.checkpoint.compact_every
        out = self.operator.run(
            source.records_in(source.decode_range(plan.source_range)), state,
            pipeline=rt.name, epoch=plan.epoch, source=source.location,
            compact=plan.state.deltas >= every,
        )  # fmt: skip
        return cast("EpochOutput", out)

    def write_state(
        self, store: ObjectStore, update: StateUpdate, epoch: int, attempt: str
    ) -> StatePart:
        key = layout.state_prefix(epoch, attempt).rstrip("/")
        store.put(f"{key}/{STATE_FILE}", json.dumps(update.frame, sort_keys=True).encode())
        found = store.fingerprints(key + "/")
        files = tuple(sorted((k[len(key) + 1 :], v) for k, v in found.items()))
        return StatePart(key, update.kind, epoch, update.rows or 0, files)

    def materialized(self, frame: Any, rows: int | None, held: list[Any]) -> tuple[Any, int]:
        return frame, len(frame) if rows is None else rows

    def count(self, frame: Any) -> int:
        return len(frame)

    def side(self, like: Any, build: Frame, rows: int, ddl: str) -> Any:
        return build() if rows else []

    def beside(self, work: Callable[[], T]) -> Future[T]:
        """Runs ``work`` now: its result or error waits in the future, as a thread's would."""
        future: Future[T] = Future()
        try:
            future.set_result(work())
        except Exception as exc:
            future.set_exception(exc)
        return future


def read_memory_state(store: ObjectStore, ref: StateRef) -> dict[str, int]:
    """The state ``ref`` names: its base and deltas folded, each part verified first."""
    parts = state_parts(store, ref)
    verify_parts(store, list(parts))
    state: dict[str, int] = {}
    for part in parts:
        rows = json.loads(store.get(f"{part.key}/{STATE_FILE}"))
        state = rows if part.kind == "base" else {**state, **rows}
    return state


# -- wiring -------------------------------------------------------------------------------

SINKS = ("out", "late", "dead")


class MemorySourceConfig(SourceConfig):
    """The spec side of a :class:`MemorySource` (built in code, never from YAML)."""

    type: Literal["memory"] = "memory"
    columns: tuple[tuple[str, str], ...] = (("key", "string"), ("value", "long"))


class RowsSinkConfig(SinkConfig):
    """The spec side of a :class:`RowsSink` (built in code, never from YAML)."""

    type: Literal["rows"] = "rows"


def memory_spec(
    name: str = "memory",
    *,
    storage: str = "memory://",
    qos: int = 2,
    retained: int = 10,
    compact_every: int = 10,
) -> PipelineSpec:
    """The spec of a :class:`KeyedSum` pipeline over a :class:`MemorySource`: what the
    protocol reads of it is the name, qos, ``checkpoint`` and the state's shape."""
    return PipelineSpec(
        name=name,
        source=MemorySourceConfig(),
        event_time=EventTimeSpec("value", 0),
        key_by=("key",),
        window=None,
        aggregates=(),
        sinks=(RowsSinkConfig(name="out"),),
        late_records=RowsSinkConfig(name="late"),
        dead_letters=RowsSinkConfig(name="dead"),
        checkpoint=CheckpointSpec(storage, retained=retained, compact_every=compact_every),
        qos=qos,
        process=ProcessSpec(
            "sluice.testing.memory:KeyedSum", (StateSpec("total", "value", "long"),)
        ),
    )


def memory_runtime(
    root: str | Path,
    *,
    name: str = "memory",
    qos: int = 2,
    retained: int = 10,
    compact_every: int = 10,
    records: Iterable[Record] = (),
    retracts: bool = True,
    faults: Faults | None = None,
) -> Runtime:
    """A :class:`Runtime` of a :class:`KeyedSum` pipeline: checkpoints under
    ``root/checkpoints/<name>``, sinks ``out`` (results), ``late`` and ``dead`` under
    ``root/sinks/<name>``. Another call with the same ``root`` and ``name`` opens the same
    pipeline (as another process would), with a source of its own."""
    root = Path(root)
    storage = str(root / "checkpoints")
    spec = memory_spec(name, storage=storage, qos=qos, retained=retained,
                       compact_every=compact_every)  # fmt: skip
    repo = Repository(open_store(storage).child(name))
    sinks = open_store(str(root / "sinks")).child(name)
    roles = tuple(
        SinkRole(RowsSink(sink, sinks.child(sink), retracts=retracts), role)
        for sink, role in zip(SINKS, ("results", "late", "dead"), strict=True)
    )
    return Runtime(spec, repo, MemorySource(records), roles, _ticks(), _attempt_ids(),
                   faults or Faults())  # fmt: skip


def _ticks() -> Callable[[], float]:
    """A clock that moves one millisecond a reading (the engine never reads the wall clock)."""
    counter = itertools.count(1)
    return lambda: next(counter) / 1000


_ATTEMPTS = itertools.count(1)  # shared by every runtime of the process: ids never repeat


def _attempt_ids() -> Callable[[], str]:
    """``a<n>p<pid>``: in order within a process, distinct across forked ones."""
    return lambda: f"a{next(_ATTEMPTS)}p{os.getpid()}"


def source_of(rt: Runtime) -> MemorySource:
    assert isinstance(rt.source, MemorySource), rt.source
    return rt.source


def sink_of(rt: Runtime, name: str = "out") -> RowsSink:
    sink = rt.sink(name)
    assert isinstance(sink, RowsSink), sink
    return sink


def sink_rows(rt: Runtime, name: str = "out") -> list[Row]:
    """The rows a reader of sink ``name`` sees."""
    return sink_of(rt, name).rows()


def expected_epochs(records: Sequence[Record], per_epoch: int) -> list[list[Row]]:
    """What :class:`KeyedSum` emits in each epoch over ``records`` read ``per_epoch`` records an
    epoch, computed without the protocol (the oracle)."""
    totals: dict[str, int] = {}
    epochs: list[list[Row]] = []
    for start in range(0, len(records), per_epoch):
        touched = set()
        for key, value in records[start : start + per_epoch]:
            if isinstance(value, int) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
                touched.add(key)
        epochs.append([{"key": k, "total": totals[k]} for k in sorted(touched)])
    return epochs


def expected_output(records: Sequence[Record], per_epoch: int) -> list[Row]:
    """Every row of :func:`expected_epochs`, in order: what a sink holds after the run."""
    return [row for rows in expected_epochs(records, per_epoch) for row in rows]


def dead_positions(records: Sequence[Record]) -> list[int]:
    """The positions of the records :class:`KeyedSum` sends to the dead letters."""
    return [i for i, (_, v) in enumerate(records) if isinstance(v, bool) or not isinstance(v, int)]


# -- running ------------------------------------------------------------------------------


def run_epoch(
    rt: Runtime, compute: MemoryCompute | None = None, *, max_units: int | None = None
) -> EpochOutcome | None:
    """plan -> process -> commit of the next epoch, by the protocol's runner with the process
    step on ``compute`` (a new :class:`MemoryCompute` by default); None when the source has
    nothing new."""
    return runner.run_epoch(rt, compute or MemoryCompute(), max_units=max_units)


def run_until_drained(
    rt: Runtime,
    compute: MemoryCompute | None = None,
    *,
    max_units: int | None = None,
    max_epochs: int | None = None,
) -> list[EpochOutcome]:
    """The protocol's :func:`~sluice.protocol.runner.run_until_drained` on ``compute``."""
    return runner.run_until_drained(
        rt, compute or MemoryCompute(), max_units=max_units, max_epochs=max_epochs
    )


def crashed(
    rt: Runtime, point: str, epoch: int | None, steps: Callable[[Runtime], object]
) -> int | None:
    """Run ``steps(rt)`` in a forked child whose faults kill it (SIGKILL) at ``point`` of
    ``epoch`` (None: the first epoch that gets there); its exit code: ``-9`` when it died
    there, 0 when it never got there."""
    dying = replace(rt, faults=Faults(point, epoch))

    def child() -> None:
        steps(dying)

    process = multiprocessing.get_context("fork").Process(target=child, daemon=True)
    process.start()
    process.join(timeout=120)
    if process.exitcode is None:  # hung: never leave it behind
        process.kill()
        process.join()
    return process.exitcode

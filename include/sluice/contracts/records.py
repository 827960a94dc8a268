"""Plans, attempts, checkpoints, staged output and watermarks: the small typed documents the
protocol stores (the ground floor: this module imports nothing else from sluice).

Each has ``to_dict`` / ``from_dict``; :mod:`sluice.storage.manifest` wraps them with a schema
version and a checksum. Files written by earlier versions stay readable: every field added
since has a default and is written only when set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, Protocol, Self, TypeVar

__all__ = [
    "AttemptRecord",
    "AttemptStatus",
    "Checkpoint",
    "EngineInfo",
    "EpochResult",
    "EpochStats",
    "Handle",
    "HandleT",
    "NoHandle",
    "OutputFate",
    "Plan",
    "Prepared",
    "Restore",
    "RetiredMark",
    "Savepoint",
    "SinksCommitted",
    "StagedFile",
    "StateMigration",
    "StatePart",
    "StateRef",
    "StateShape",
    "TablePin",
    "Void",
    "WatermarkState",
]

# What a checkpoint's keyed state depends on (sluice.spec.PipelineSpec.state_shape): a JSON
# document compared by value, never looked into (sluice.protocol.upgrade).
StateShape = dict[str, object]

# Where an attempt ran, as its record says: {"spark_master": ..., "spark_application_id": ...,
# "execution": "warm", ...}.
EngineInfo = dict[str, str | int | None]


class AttemptStatus(StrEnum):
    STARTED = "started"
    PREPARED = "prepared"
    COMMITTED = "committed"
    ABORTED = "aborted"
    FAILED = "failed"


class OutputFate(StrEnum):
    """What happened to an epoch's output, recorded in its ``sinks_committed`` marker."""

    COMMITTED = "committed"  # qos 2: the staged output was committed; qos 0: written after C(k)
    WRITTEN = "written"  # qos 1: written before the checkpoint (a replay may duplicate it)
    LOST = "lost"  # qos 0: the process died between the checkpoint and the output
    VOID = "void"  # the epoch was voided by a restore after damage (sluice.protocol.restore)


_NEXT = {
    AttemptStatus.STARTED: {AttemptStatus.PREPARED, AttemptStatus.FAILED, AttemptStatus.ABORTED},
    AttemptStatus.PREPARED: {AttemptStatus.COMMITTED, AttemptStatus.ABORTED},
    AttemptStatus.COMMITTED: set(),
    AttemptStatus.ABORTED: set(),
    AttemptStatus.FAILED: set(),
}


@dataclass(frozen=True)
class StatePart:
    """One write of keyed state: a ``base`` (every live row at its epoch) or a ``delta``
    (one epoch's changes, read together with the parts before it). Its files sit directly
    under ``key`` (``state/<epoch>-<attempt>``, under the pipeline's storage).

    ``files`` fingerprints every object of the part (name -> size and digest), so a
    truncated, altered, missing or extra file is found before the state is read. ``bounds``
    are ``(column, low, high)`` over the part's rows, for readers that can skip it."""

    key: str
    kind: str  # "base" | "delta"
    epoch: int
    rows: int  # rows written (physical)
    files: tuple[tuple[str, str], ...]
    bounds: tuple[tuple[str, int, int], ...] = ()

    def bound(self, column: str) -> tuple[int, int] | None:
        return next(((lo, hi) for c, lo, hi in self.bounds if c == column), None)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "key": self.key, "kind": self.kind, "epoch": self.epoch, "rows": self.rows,
            "files": dict(self.files),
        }  # fmt: skip
        if self.bounds:
            body["bounds"] = {c: [lo, hi] for c, lo, hi in self.bounds}
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StatePart:
        bounds = tuple((c, int(v[0]), int(v[1])) for c, v in sorted(data.get("bounds", {}).items()))
        return cls(
            str(data["key"]), str(data["kind"]), int(data["epoch"]), int(data["rows"]),
            tuple(sorted(data["files"].items())), bounds,
        )  # fmt: skip


@dataclass(frozen=True)
class StateRef:
    """The keyed state ``S_k`` of a checkpoint: its parts, a base then deltas (empty: no
    state). ``rows`` counts the live rows a reader sees (open windows, keys holding state).

    ``horizon_us``: every window whose end plus the allowed lateness is at or before it has
    been emitted; rows of such windows may still sit in older parts, and readers skip them
    (:mod:`sluice.state`). ``uri`` is the newest part's location.

    Checkpoints written before parts existed hold one snapshot (``uri`` and ``files``): read
    as a single base part."""

    uri: str | None = None
    rows: int = 0
    files: tuple[tuple[str, str], ...] | None = None
    parts: tuple[StatePart, ...] = ()
    horizon_us: int | None = None

    @property
    def deltas(self) -> int:
        return sum(1 for p in self.parts if p.kind == "delta")

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"uri": self.uri, "rows": self.rows}
        if self.files is not None:
            body["files"] = dict(self.files)
        if self.parts:
            body["parts"] = [p.to_dict() for p in self.parts]
        if self.horizon_us is not None:
            body["horizon_us"] = self.horizon_us
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StateRef:
        files = data.get("files")
        horizon = data.get("horizon_us")
        return cls(
            data.get("uri"),
            int(data.get("rows", 0)),
            None if files is None else tuple(sorted(files.items())),
            tuple(StatePart.from_dict(p) for p in data.get("parts", ())),
            None if horizon is None else int(horizon),
        )


@dataclass(frozen=True)
class EpochStats:
    """Per-epoch counts. ``records_read == accepted + late + dead + filtered`` always holds.

    ``late_rows`` counts the late sink's rows: one per (late record, missed window), so a
    hopping record that missed several windows gives several.
    """

    records_read: int = 0
    accepted: int = 0
    late: int = 0
    dead: int = 0
    windows_emitted: int = 0
    windows_open: int = 0
    input_units: int = 0
    filtered: int = 0
    late_rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpochStats:
        return cls(**{k: int(v) for k, v in data.items()})


@dataclass(frozen=True)
class Restore:
    """Where a run request moved the next epoch's start (a plan's ``restored_from``).

    ``kind`` is ``checkpoint`` or ``savepoint`` (continue from an older committed epoch: a
    rewind whose commit retracts the output of the epochs after ``retract_after``; ``rewound``
    lists those still live, ``missing_input`` what the source no longer has of them) or
    ``offsets`` (start at the source offsets ``requested``, skipping from the committed
    ``skipped_from``). The stored form is the JSON object written in the plan, field for field.
    """

    kind: Literal["checkpoint", "savepoint", "offsets"]
    epoch: int | None = None
    retract_after: int | None = None
    rewound: tuple[int, ...] = ()
    savepoint: str | None = None
    missing_input: tuple[str, ...] = ()
    requested: dict[str, Any] | None = None
    skipped_from: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "offsets":
            body: dict[str, Any] = {"kind": "offsets", "requested": dict(self.requested or {})}
            if self.skipped_from is not None:
                body["skipped_from"] = dict(self.skipped_from)
            return body
        body = {"kind": self.kind, "epoch": self.epoch, "retract_after": self.retract_after,
                "rewound": list(self.rewound)}  # fmt: skip
        if self.savepoint is not None:
            body["savepoint"] = self.savepoint
        if self.missing_input:
            body["missing_input"] = list(self.missing_input)
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Restore | None:
        if not data:
            return None
        return cls(
            data["kind"],
            data.get("epoch"),
            data.get("retract_after"),
            tuple(data.get("rewound", ())),
            data.get("savepoint"),
            tuple(data.get("missing_input", ())),
            data.get("requested"),
            data.get("skipped_from"),
        )

    def __str__(self) -> str:
        if self.kind == "offsets":
            return f"restore_from=offsets {self.requested}"
        named = f" {self.savepoint!r}" if self.savepoint else ""
        return f"restore_from={self.kind}{named} (epoch {self.epoch})"


@dataclass(frozen=True)
class Void:
    """A checkpoint voided by a restore after damage: the next plan must rewind to
    ``restore_to``; ``quarantined`` are the damaged objects moved aside."""

    restore_to: int
    quarantined: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"restore_to": self.restore_to, "quarantined": list(self.quarantined)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Void | None:
        if not data:
            return None
        return cls(int(data["restore_to"]), tuple(data.get("quarantined", ())))


@dataclass(frozen=True)
class WatermarkState:
    """Largest event time seen so far in each partition (microseconds since the epoch)."""

    max_event_time_us: dict[str, int] = field(default_factory=dict)
    # Partitions the source lists with input still unread that have never shown an event
    # time: they hold the global watermark back (a partition is not overtaken before it
    # starts), so results do not depend on which epoch a partition's first file falls in.
    pending: tuple[str, ...] = ()

    def watermark_us(self, bound_us: int, idle_timeout_us: int | None = None) -> int | None:
        """Global watermark: min over the active partitions of (max event time - bound).

        With ``idle_timeout_us``, a partition whose max event time is more than that behind
        the max of all partitions is idle and does not hold the watermark back.
        """
        if not self.max_event_time_us or self.pending:
            return None
        newest = max(self.max_event_time_us.values())
        active = [
            v
            for v in self.max_event_time_us.values()
            if idle_timeout_us is None or newest - v <= idle_timeout_us
        ]
        return min(active) - bound_us

    def advanced(
        self, maxima: Iterable[tuple[str, int]], waiting: Iterable[str] = ()
    ) -> WatermarkState:
        """After an epoch: the new per-partition maxima, and ``waiting`` — the partitions the
        source still has unread input for — of which those never seen become pending."""
        merged = dict(self.max_event_time_us)
        for partition, value in maxima:
            merged[partition] = max(value, merged.get(partition, value))
        pending = tuple(sorted({p for p in waiting if p not in merged}))
        return WatermarkState(merged, pending)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"max_event_time_us": dict(sorted(self.max_event_time_us.items()))}
        if self.pending:
            body["pending"] = list(self.pending)
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatermarkState:
        maxima = {str(k): int(v) for k, v in data.get("max_event_time_us", {}).items()}
        return cls(maxima, tuple(str(p) for p in data.get("pending", ())))


@dataclass(frozen=True)
class StagedFile:
    staged_key: str
    final_key: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"staged_key": self.staged_key, "final_key": self.final_key, "size": self.size}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StagedFile:
        return cls(data["staged_key"], data["final_key"], int(data["size"]))


class Handle(Protocol):
    """What one sink type knows about an epoch it staged besides the files (a staging table, a
    transaction id): a small frozen record, stored as :attr:`Prepared.details`. A sink is
    typed by its handle (:class:`~sluice.contracts.sinks.Sink`); None fields are not stored,
    and ``from_dict`` of a bare ``Prepared`` (recovery aborts an attempt that stored none,
    with no details) must give a handle too: every field optional."""

    def to_dict(self) -> dict[str, str | int | None]: ...

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self: ...


HandleT = TypeVar("HandleT", bound=Handle)


@dataclass(frozen=True)
class NoHandle:
    """The handle of a sink whose staged files say everything (files, the in-memory sink)."""

    def to_dict(self) -> dict[str, str | int | None]:
        return {}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoHandle:
        return cls()


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` staged: enough for any later process to commit or abort it. A sink
    reads its own facts back typed with :meth:`handle`."""

    sink: str
    uri: str
    epoch: int
    attempt: str
    rows: int
    files: tuple[StagedFile, ...] = ()
    # sink-specific, JSON-serialisable facts (e.g. a staging table), as sorted (name, value)
    details: tuple[tuple[str, Any], ...] = ()
    # a rewind's first epoch: commit also retracts the output of the epochs after this one
    retract_after: int | None = None

    @classmethod
    def of(
        cls,
        sink: str,
        uri: str,
        epoch: int,
        attempt: str,
        rows: int,
        handle: Handle,
        files: tuple[StagedFile, ...] = (),
    ) -> Prepared:
        """What a sink staged, its own facts given as its handle."""
        details = tuple(sorted((k, v) for k, v in handle.to_dict().items() if v is not None))
        return cls(sink, uri, epoch, attempt, rows, files, details)

    def handle(self, kind: type[HandleT]) -> HandleT:
        """The sink's facts as its handle type."""
        return kind.from_dict(dict(self.details))

    def detail(self, name: str, default: Any = None) -> Any:
        """One stored fact by name (sinks of your own without a handle type)."""
        return dict(self.details).get(name, default)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sink": self.sink,
            "uri": self.uri,
            "epoch": self.epoch,
            "attempt": self.attempt,
            "rows": self.rows,
            "files": [f.to_dict() for f in self.files],
        }
        if self.details:
            data["details"] = dict(self.details)
        if self.retract_after is not None:
            data["retract_after"] = self.retract_after
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prepared:
        files = tuple(StagedFile.from_dict(f) for f in data["files"])
        details = tuple(sorted(data.get("details", {}).items()))
        return cls(
            data["sink"],
            data["uri"],
            int(data["epoch"]),
            data["attempt"],
            int(data["rows"]),
            files,
            details,
            data.get("retract_after"),
        )


FILES_PIN = "files"  # the kind of a pin stored without one (written before kinds)


@dataclass(frozen=True)
class TablePin:
    """The version of a lookup table an epoch joins (docs/joins.md), fixed by its plan: the
    files under ``uri`` a reader of that version needs, with their fingerprints
    (``"<size>:<digest>"``, what :meth:`~sluice.storage.ObjectStore.fingerprints` gives) when
    it was planned, as its table ``kind`` pinned them (:mod:`sluice.contracts.lookups`: a
    folder's data files, a Delta commit, an Iceberg metadata file, a copy of a database
    table). A retry reads exactly that version, and refuses to run if a pinned file changed or
    is gone."""

    uri: str
    files: tuple[tuple[str, str], ...]  # (key under uri, fingerprint), in key order
    kind: str = FILES_PIN

    @property
    def version(self) -> str:
        """A short hash of the file set: equal pins, equal versions."""
        parts: list[Any] = [self.uri, [list(f) for f in self.files]]
        if self.kind != FILES_PIN:  # files pins keep the versions they had before kinds
            parts.append(self.kind)
        canonical = json.dumps(parts, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        body = {"uri": self.uri, "files": dict(self.files), "version": self.version}
        if self.kind != FILES_PIN:  # the stored form before kinds, kept for files pins
            body["kind"] = self.kind
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TablePin:
        return cls(
            str(data["uri"]),
            tuple(sorted((str(k), str(v)) for k, v in data["files"].items())),
            str(data.get("kind", FILES_PIN)),
        )


@dataclass(frozen=True)
class StateMigration:
    """What continuing a checkpoint under a changed spec keeps, resets or drops (a plan's
    ``state_migration``; :mod:`sluice.protocol.upgrade` decides it)."""

    added: tuple[str, ...] = ()  # compatible additions, e.g. "aggregate mean"
    dropped: tuple[str, ...] = ()  # differences that drop state, each named
    reset_all: bool = False  # start from empty state
    reset_aggregates: tuple[str, ...] = ()  # aggregates whose partials restart empty
    reset_states: tuple[str, ...] = ()  # process-function states that restart empty

    @property
    def drops_state(self) -> bool:
        return bool(self.dropped)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.dropped)

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "dropped": list(self.dropped),
            "reset_all": self.reset_all,
            "reset_aggregates": list(self.reset_aggregates),
            "reset_states": list(self.reset_states),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> StateMigration:
        data = data or {}
        return cls(
            tuple(data.get("added", ())),
            tuple(data.get("dropped", ())),
            bool(data.get("reset_all", False)),
            tuple(data.get("reset_aggregates", ())),
            tuple(data.get("reset_states", ())),
        )


@dataclass(frozen=True)
class Plan:
    """``plan(k)``: the exact input of epoch k and the checkpoint it starts from."""

    pipeline: str
    epoch: int
    source_range: dict[str, Any]
    start_offset: dict[str, Any]
    end_offset: dict[str, Any]
    watermark: WatermarkState
    state: StateRef
    fingerprint: str
    state_shape: StateShape
    created_at: float
    plan_seconds: float = 0.0
    run_id: str | None = None
    # Set when a run request moved the start: a rewind to an older checkpoint or savepoint,
    # or explicit source offsets (see Restore).
    restored_from: Restore | None = None
    # Set when the spec's state shape changed since the checkpoint this plan starts from
    # (sluice.protocol.upgrade): what was added, dropped or reset.
    state_migration: StateMigration | None = None
    # The lookup tables' versions this epoch joins, by lookup name (docs/joins.md); written
    # only when the spec has lookups.
    tables: tuple[tuple[str, TablePin], ...] = ()
    # The rewound epoch this plan replays (a new plan that starts where it started), whose
    # table versions it joins; written only when set (docs/joins.md).
    replays: int | None = None

    def to_dict(self) -> dict[str, Any]:
        body = dict(self.__dict__)
        body["watermark"] = self.watermark.to_dict()
        body["state"] = self.state.to_dict()
        body["restored_from"] = self.restored_from.to_dict() if self.restored_from else None
        migration = self.state_migration
        body["state_migration"] = migration.to_dict() if migration is not None else None
        del body["tables"]
        if self.tables:
            body["tables"] = {name: pin.to_dict() for name, pin in self.tables}
        if self.replays is None:
            del body["replays"]
        return body

    @property
    def retract_after(self) -> int | None:
        """The first epoch of a rewind: its commit retracts every sink's output after this
        epoch (None: not a rewind)."""
        return self.restored_from.retract_after if self.restored_from else None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        data = dict(data)
        data["watermark"] = WatermarkState.from_dict(data["watermark"])
        data["state"] = StateRef.from_dict(data["state"])
        data["restored_from"] = Restore.from_dict(data.get("restored_from"))
        migration = data.get("state_migration")
        data["state_migration"] = StateMigration.from_dict(migration) if migration else None
        tables = data.pop("tables", None) or {}
        data["tables"] = tuple(
            (str(name), TablePin.from_dict(pin)) for name, pin in sorted(tables.items())
        )
        return cls(**data)


@dataclass(frozen=True)
class EpochResult:
    """What a successful process attempt produced (staged, not yet visible)."""

    stats: EpochStats
    watermark: WatermarkState
    watermark_us: int | None
    state: StateRef
    prepared: tuple[Prepared, ...]
    process_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "stats": self.stats.to_dict(),
            "watermark": self.watermark.to_dict(),
            "watermark_us": self.watermark_us,
            "state": self.state.to_dict(),
            "prepared": [p.to_dict() for p in self.prepared],
            "process_seconds": self.process_seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpochResult:
        return cls(
            EpochStats.from_dict(data["stats"]),
            WatermarkState.from_dict(data["watermark"]),
            data["watermark_us"],
            StateRef.from_dict(data["state"]),
            tuple(Prepared.from_dict(p) for p in data["prepared"]),
            float(data["process_seconds"]),
        )


@dataclass(frozen=True)
class AttemptRecord:
    """One process attempt of one epoch; its status only moves forward (see ``_NEXT``)."""

    pipeline: str
    epoch: int
    attempt: str
    status: AttemptStatus
    started_at: float
    updated_at: float
    run_id: str | None = None
    result: EpochResult | None = None
    error: str | None = None
    engine: EngineInfo | None = None  # where the attempt ran

    def moved_to(self, status: AttemptStatus, at: float, **changes: Any) -> AttemptRecord:
        """The record at ``status`` (which the caller checked with :meth:`can_become`)."""
        return replace(self, status=status, updated_at=at, **changes)

    def can_become(self, status: AttemptStatus) -> bool:
        """Whether the status may move to ``status`` (it only moves forward)."""
        return status in _NEXT[self.status]

    def to_dict(self) -> dict[str, Any]:
        body = dict(self.__dict__)
        body["status"] = self.status.value
        body["result"] = self.result.to_dict() if self.result else None
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptRecord:
        data = dict(data)
        data["status"] = AttemptStatus(data["status"])
        data["result"] = EpochResult.from_dict(data["result"]) if data.get("result") else None
        return cls(**data)


@dataclass(frozen=True)
class Checkpoint:
    """``C(k)``: the commit point. Everything the next epoch needs, nothing it can't verify."""

    pipeline: str
    epoch: int
    attempt: str
    plan: Plan
    result: EpochResult
    committed_at: float
    run_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def end_offset(self) -> dict[str, Any]:
        return self.plan.end_offset

    @property
    def void(self) -> Void | None:
        """Set when a restore after damage voided this checkpoint (sluice.protocol.restore)."""
        return Void.from_dict(self.extra.get("void"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "epoch": self.epoch,
            "attempt": self.attempt,
            "plan": self.plan.to_dict(),
            "result": self.result.to_dict(),
            "committed_at": self.committed_at,
            "run_id": self.run_id,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        return cls(
            data["pipeline"],
            int(data["epoch"]),
            data["attempt"],
            Plan.from_dict(data["plan"]),
            EpochResult.from_dict(data["result"]),
            float(data["committed_at"]),
            data.get("run_id"),
            data.get("extra", {}),
        )


@dataclass(frozen=True)
class SinksCommitted:
    epoch: int
    attempt: str
    committed_at: float
    commit_seconds: float
    output: OutputFate = OutputFate.COMMITTED  # what happened to the epoch's output
    # sink name -> the receipt its commit returned (where it holds the epoch), if any
    published: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = {**self.__dict__, "output": self.output.value}
        data.pop("published")
        if self.published:  # absent when no sink gave one: the stored form of before
            data["published"] = dict(self.published)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SinksCommitted:
        return cls(
            int(data["epoch"]),
            data["attempt"],
            float(data["committed_at"]),
            float(data["commit_seconds"]),
            OutputFate(data.get("output", "committed")),
            {str(k): str(v) for k, v in data.get("published", {}).items()},
        )


@dataclass(frozen=True)
class Savepoint:
    """``savepoints/<name>.json``: a named, manual pointer to checkpoint ``epoch``; retention
    never deletes that checkpoint (nor its state) while the savepoint exists."""

    name: str
    pipeline: str
    epoch: int
    attempt: str  # the attempt that committed the checkpoint (a check on restore)
    fingerprint: str
    state_shape: StateShape
    created_at: float
    run_id: str | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Savepoint:
        return cls(**data)


@dataclass(frozen=True)
class RetiredMark:
    """``retired/<below>.json``: every epoch below ``below`` is retired (its documents may be
    deleted, and no attempt may commit it any more) unless a savepoint points to it.

    ``files``: what the retired plans of a files source read, kept by marks written before
    a files source held the set of files it read in its offsets (read, never written now).
    """

    below: int
    created_at: float
    files: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"below": self.below, "created_at": self.created_at}
        return found | ({"files": list(self.files)} if self.files else {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetiredMark:
        return cls(int(data["below"]), float(data["created_at"]), tuple(data.get("files", ())))

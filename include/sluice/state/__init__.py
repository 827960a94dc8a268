"""Keyed state on object storage, written incrementally: a base and deltas (RocksDB's
incremental checkpoints, on S3).

``S_k`` is a list of parts (:class:`~sluice.contracts.records.StatePart`): one ``base``, then
one ``delta`` per epoch since, each a folder of Parquet files Spark wrote under
``state/<epoch>-<attempt>/``. An epoch writes only what it changed; how a reader folds the
parts into the current rows is the operator's (windows merge partial aggregates per window;
keyed functions take the newest row per key). Every ``compact_every`` deltas — and whenever an
upgrade changes the state's columns, or the operator needs it — an epoch writes a new base
instead, after which the older parts are no longer referenced (retention deletes them once no
retained checkpoint or savepoint names them).

Each part's files are fingerprinted when written (only the new files) and checked against the
checkpoint before a part is read: a missing, extra, truncated or altered file stops the epoch
with :class:`~sluice.storage.CorruptObject` naming it. The store computes the fingerprints
(:meth:`~sluice.storage.ObjectStore.fingerprints`): on S3 the ETags of one LIST; on a local disk
a SHA-256 that is computed once per file, kept in a hidden memo in the part's folder and
reused while the file's size, mtime, ctime and inode are unchanged (anything else is hashed
again), so reading a part again does not read its bytes twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sluice.contracts import layout
from sluice.contracts.records import StatePart, StateRef
from sluice.storage import CorruptObject, ObjectStore, to_spark_uri
from sluice.storage.footers import ddl, stored_types

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "COMPACT_EVERY",
    "StoredState",
    "state_input",
    "state_parts",
    "verify_parts",
    "write_part",
]

COMPACT_EVERY = 10

Align = Callable[["DataFrame"], "DataFrame"]


def state_parts(store: ObjectStore, ref: StateRef) -> tuple[StatePart, ...]:
    """The parts of ``ref`` (a checkpoint written before parts existed holds one snapshot,
    read as a single base part)."""
    if ref.parts or ref.uri is None or ref.rows == 0:
        return ref.parts
    key = ref.uri[len(store.uri()) + 1 :].rstrip("/")
    epoch = layout.state_epoch_of(key + "/") or 0
    return (StatePart(key, "base", epoch, ref.rows, ref.files or ()),)


@dataclass(frozen=True)
class StoredState:
    """``S_k`` read from the checkpoint store, lazily, only the parts an operator asks for
    (the :class:`~sluice.contracts.operators.StateInput` every operator is given)."""

    parts: tuple[StatePart, ...] = ()
    rows: int = 0  # live rows (windows open, keys holding state)
    horizon_us: int | None = None  # windows closed at or before it are gone (StateRef)
    spark: SparkSession | None = None
    store: ObjectStore | None = None
    align: Align | None = None  # the operator's column order under the spec now
    compact_every: int = COMPACT_EVERY
    verified: set[str] = field(default_factory=set)

    @property
    def location(self) -> str | None:
        return None if self.store is None else self.store.uri()

    @property
    def empty(self) -> bool:
        return not self.parts

    def frame(
        self,
        keep: Callable[[StatePart], bool] | None = None,
        where: Column | str | None = None,
    ) -> DataFrame | None:
        """The rows of the parts ``keep`` selects (all by default), in the operator's column
        order, filtered by ``where`` (Spark pushes it into the Parquet scan: row groups whose
        statistics cannot match are skipped). None: no part left."""
        chosen = [p for p in self.parts if keep is None or keep(p)]
        if not chosen:
            return None
        assert self.spark is not None and self.store is not None and self.align is not None
        verify_parts(self.store, [p for p in chosen if p.key not in self.verified])
        self.verified.update(p.key for p in chosen)
        files = [
            f"{p.key}/{name}" for p in chosen for name, _ in p.files if name.endswith(".parquet")
        ]
        reader = self.spark.read
        stored = stored_types(self.store, files)  # no schema-inference job (see footers.py)
        if stored is not None:
            reader = reader.schema(ddl(stored))
        frame = reader.parquet(*[to_spark_uri(self.store.uri(p.key)) for p in chosen])
        frame = self.align(frame)
        return frame if where is None else frame.where(where)

    def needs_compaction(self) -> bool:
        return sum(1 for p in self.parts if p.kind == "delta") >= self.compact_every


def state_input(
    spark: SparkSession,
    store: ObjectStore,
    ref: StateRef,
    align: Align,
    compact_every: int = COMPACT_EVERY,
) -> StoredState:
    parts = state_parts(store, ref)
    return StoredState(parts, ref.rows, ref.horizon_us, spark, store, align, compact_every)


def verify_parts(store: ObjectStore, parts: list[StatePart]) -> None:
    """Raise :class:`CorruptObject` naming the first file of ``parts`` that is missing, extra
    or not the one its checkpoint recorded (size and digest). A local file unchanged since it
    was last hashed is not read again (its digest comes from the part's memo)."""
    for part in parts:
        prefix = part.key + "/"
        found = {k[len(prefix) :]: v for k, v in store.fingerprints(prefix).items()}
        for name, recorded in part.files:
            now = found.pop(name, None)
            if now != recorded:
                reason = (
                    "missing" if now is None else f"is {now}, the checkpoint recorded {recorded}"
                )
                raise CorruptObject(store.uri(prefix + name), f"state file {reason}", "state")
        if found:
            extra = min(found)
            raise CorruptObject(
                store.uri(prefix + extra), "not part of the recorded state", "state"
            )


def write_part(
    store: ObjectStore,
    frame: DataFrame,
    *,
    epoch: int,
    attempt: str,
    kind: str,
    rows: int,
    bounds: dict[str, tuple[int, int]] | None = None,
) -> StatePart:
    """Spark writes ``frame`` as a new part under ``state/<epoch>-<attempt>``; only its own
    files are fingerprinted (on a local disk this also writes the part's hidden memo, so the
    epochs that read it do not hash them again)."""
    key = layout.state_prefix(epoch, attempt).rstrip("/")
    frame.write.mode("errorifexists").parquet(to_spark_uri(store.uri(key)))
    found = store.fingerprints(key + "/")
    files = tuple(sorted((k[len(key) + 1 :], v) for k, v in found.items()))
    spans = tuple((c, lo, hi) for c, (lo, hi) in sorted((bounds or {}).items()))
    return StatePart(key, kind, epoch, rows, files, spans)

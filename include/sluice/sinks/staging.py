"""Staged Parquet: where the delta, iceberg and kafka sinks keep an epoch's rows between
*prepare* and *commit*, and how *abort* and recovery take them away again.

Each attempt stages under a folder of its own, ``<stages><epoch:012d>-<attempt>/``, in an
object store the sink names (the table's, the warehouse, the pipeline's checkpoint store):
durable, invisible to every reader of the output, and never written by another attempt, so a
zombie cannot overwrite the winner. The handle records the folder (``staging``); a bare
``Prepared`` (recovery aborting an attempt that recorded none) finds it by its name.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Self, cast

from sluice.contracts.records import HandleT, Prepared
from sluice.contracts.sinks import Sink
from sluice.storage import ObjectStore, to_spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["FieldsHandle", "StagingSink"]


class FieldsHandle:
    """A frozen dataclass handle (:class:`~sluice.contracts.records.Handle`) stored as its
    fields by name: what the delta, iceberg, kafka and postgres sinks' handles are. Every
    field defaults to None, so the bare ``Prepared`` of recovery reads back as a handle."""

    def to_dict(self) -> dict[str, str | int | None]:
        return {f.name: getattr(self, f.name) for f in fields(cast(Any, self))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cast(Any, cls)(**{f.name: data.get(f.name) for f in fields(cast(Any, cls))})


class StagingSink(Sink[HandleT]):
    """A sink that stages each attempt's rows as Parquet under :meth:`stages` in ``store``:
    the staging's names, its one Spark write, ``abort`` and ``abort_others``."""

    store: ObjectStore

    @abstractmethod
    def stages(self) -> str:
        """The folder (ending in ``/``) holding this sink's stages, one folder per attempt."""

    def staging_prefix(self, epoch: int, attempt: str) -> str:
        return f"{self.stages()}{epoch:012d}-{attempt}/"

    def staging_uri(self, prefix: str) -> str:
        """Spark's URI of a staging folder."""
        return to_spark_uri(self.store.uri(prefix.rstrip("/")))

    def stage(self, df: DataFrame, prefix: str) -> None:
        """Write ``df`` as Parquet under ``prefix`` (one Spark write; a folder already there
        is an error: it belongs to another attempt)."""
        df.write.mode("errorifexists").parquet(self.staging_uri(prefix))

    def staging_of(self, prepared: Prepared) -> str:
        """The folder ``prepared`` staged in, as its handle records it or by its name."""
        staging = prepared.detail("staging")
        return str(staging) if staging else self.staging_prefix(prepared.epoch, prepared.attempt)

    def abort(self, prepared: Prepared) -> None:
        self.store.delete_prefix(self.staging_of(prepared))

    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Delete the staging of every attempt of ``epoch`` except ``keep``."""
        mine = self.staging_prefix(epoch, keep) if keep else None
        root = self.stages()
        folders = {
            root + i.key[len(root) :].split("/", 1)[0] + "/"
            for i in self.store.list(f"{root}{epoch:012d}-")
        }
        return sum(self.store.delete_prefix(f) for f in sorted(folders - {mine}))

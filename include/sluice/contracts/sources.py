"""The rewindable-source contract (eKuiper's ``Rewindable``: get offset / rewind); the ground
floor: this module imports nothing else from sluice.

A source turns "everything after offset X, at most N units" into a :class:`SourceRange`
that the plan stores verbatim, and reads exactly that range back.

Contract:

* ``plan_range(start, max_units)`` looks at what is available now and returns the range to
  read next (``None`` when nothing new). It may raise when the source can no longer honour
  ``start`` (e.g. Kafka offsets the broker no longer holds).
* ``read(spark, rng)`` is **deterministic**: the same range yields the same records, in the
  same positions, on every call — retries and replays depend on it.
* Positions: every record has ``(_partition, _major, _line)``; within a partition records are
  ordered by ``(_major, _line)``. Watermarks are computed per partition in that order.
* ``read`` returns the columns of :data:`RECORD_COLUMNS` followed by the spec's schema columns
  (typed; null where ``_error`` says why the record is unusable).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "ONE_SOURCE",
    "RECORD_COLUMNS",
    "RECORD_TYPES",
    "SPARK_TYPES",
    "Offset",
    "OffsetT",
    "RangeT",
    "Source",
    "SourcePart",
    "SourceRange",
]

# _partition: source partition; _file: the object key the record came from; _major/_line:
# position inside the partition; _raw: the record's text; _error: why it is a dead letter.
RECORD_COLUMNS = ("_partition", "_file", "_major", "_line", "_raw", "_error")
# Their Spark SQL types, as every source's ``read`` gives them.
RECORD_TYPES = ("string", "string", "int", "bigint", "string", "string")

# The Spark SQL type of each column type a spec's ``source.schema`` names (as DDL text).
SPARK_TYPES = {
    "string": "string",
    "int": "int",
    "long": "bigint",
    "double": "double",
    "float": "float",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "date": "date",
}


@dataclass(frozen=True)
class Offset:
    """Where the next epoch starts reading. Subclasses add typed fields and a ``type`` tag."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The offset ``to_dict`` wrote."""
        raise NotImplementedError

    def describe(self) -> str:
        """A short human rendering for tables and logs."""
        return str(self.to_dict())


@dataclass(frozen=True)
class SourceRange:
    """The exact input of one epoch: ``[start, end)`` plus what is needed to replay it."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The range ``to_dict`` wrote (a plan stores it verbatim)."""
        raise NotImplementedError

    @property
    def end(self) -> Offset:
        raise NotImplementedError

    @property
    def units(self) -> int:
        """How many source units (files, messages...) the range covers."""
        raise NotImplementedError


# The name of a pipeline's one ``source:`` among its sources (a join names each of its own).
ONE_SOURCE = "source"

OffsetT = TypeVar("OffsetT", bound=Offset)
RangeT = TypeVar("RangeT", bound=SourceRange)


class Source(ABC, Generic[OffsetT, RangeT]):
    """A rewindable source bound to one pipeline's spec, over its own offset type
    ``OffsetT`` and range type ``RangeT``: ``class FilesSource(Source[FilesOffset,
    FilesRange])``."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the source reads from (named in dead letters and errors)."""

    @abstractmethod
    def initial_offset(self) -> OffsetT: ...

    # the source's offset and range classes: stored ones are read back with their from_dict
    offset_type: type[OffsetT]
    range_type: type[RangeT]

    def decode_offset(self, data: dict[str, Any]) -> OffsetT:
        """An offset as a plan or checkpoint stored it."""
        return self.offset_type.from_dict(data)

    def decode_range(self, data: dict[str, Any]) -> RangeT:
        """A range as a plan stored it."""
        return self.range_type.from_dict(data)

    @abstractmethod
    def plan_range(
        self, start: OffsetT, max_units: int | None, max_records: int | None = None
    ) -> RangeT | None:
        """The next range from ``start``, or None when nothing is new.

        ``max_units`` caps the source units (files, messages); ``max_records`` caps the
        records, but a range always holds at least one unit so an epoch can make progress.
        """

    @abstractmethod
    def offset_from_user(self, data: dict[str, Any]) -> OffsetT:
        """An offset a user typed (trigger form, CLI); raises ``ValueError`` naming the
        field that is wrong and what a valid value looks like."""

    @abstractmethod
    def is_before(self, a: OffsetT, b: OffsetT) -> bool:
        """True when reading from ``a`` would re-read input that ``b`` has already passed."""

    @abstractmethod
    def read(self, spark: SparkSession, rng: RangeT) -> DataFrame: ...

    unit_name = "units"  # what pending_units counts, in the plural (one: without the final "s")

    def pending_units(self, start: OffsetT) -> int | None:
        """How many units are available after ``start`` now (None: unknown or unbounded);
        progress bars use it."""
        return None

    def missing_units(self, rng: RangeT) -> list[str]:
        """What ``rng`` read that the source no longer has (deleted files, offsets past the
        broker's retention), described for a person; a rewind that would replay it is
        refused unless the request allows skipping it. Default: nothing is ever missing."""
        return []

    def units_of(self, range_data: dict[str, Any]) -> tuple[str, ...]:
        """The input units a stored range read (files: their keys), for what the protocol
        hands back to the source once no checkpoint can replay them (:meth:`release`); it
        keeps what this returns, never looking inside a range itself. Default: none."""
        return ()

    def planning(self, epoch: int) -> Source[OffsetT, RangeT]:
        """This source, planning epoch ``epoch``: a source that stores objects of its own when
        it plans (the files source: its set of files read) names them by that epoch, so
        :meth:`forget` can tell them from what a plan still being written needs. Default:
        the source itself."""
        return self

    def forget(self, kept: list[dict[str, Any]], through: int) -> int:
        """Retention: delete what plans of epochs up to ``through`` stored for this source
        that none of the ``kept`` offsets (as stored: the end of every checkpoint and
        savepoint kept, the start and end of the plan not yet committed) still needs; returns
        how many objects were deleted. Default: nothing is stored, 0."""
        return 0

    def remarks(self, range_data: dict[str, Any]) -> tuple[str, ...]:
        """What a person should know of a stored range beyond its units, one line each (a
        files source: the files found changed since they were read); the checkpoint history
        shows them. Default: nothing."""
        return ()

    @property
    def releases_input(self) -> bool:
        """Whether :meth:`release` does anything (a files source with ``clean_source``)."""
        return False

    def release(self, units: list[str], latest: dict[str, Any] | None) -> int:
        """Input no retained checkpoint or savepoint can replay any more (``units``: what
        :meth:`units_of` gave for the epochs it belongs to): a files source with
        ``clean_source`` archives or deletes those files. ``latest``: the latest checkpoint's
        end offset as stored, to tell a unit still as it was read from one that changed
        since (left alone). Idempotent: after a crash the protocol calls it again with the
        same units. Returns how many units it released. Default: keeps everything, 0."""
        return 0

    def skipping_missing_input(self) -> Source[OffsetT, RangeT]:
        """This source told to plan past input it no longer has, from what is left (a run
        request said ``on_missing_offsets: earliest``), recording the gap in the range.
        Default: the source itself (it never refuses to plan over missing input)."""
        return self

    def before_hints(self, rng: RangeT, column: str) -> dict[tuple[str, int], int | None]:
        """Lower bounds, known without reading the records, of the largest ``column`` value
        before each ``(partition, major)`` of ``rng`` within the range (e.g. from Parquet
        footers; None: nothing known). An epoch's pass uses them for the watermark at each
        position; a bound above the truth is caught after the pass and costs a second one,
        never a wrong result. Default: none."""
        return {}

    def parts(self, range_data: dict[str, Any]) -> tuple[SourcePart, ...]:
        """Each source this one reads, by the name the pipeline gives it, with its slice of
        the range a plan stored (``range_data``, decoded here): what the process step reads,
        one :class:`SourcePart` at a time (each part's ``read`` returns one source's
        records). Default: this source alone, named :data:`ONE_SOURCE`; a source over several
        (a join's) gives each of its own."""
        return (SourcePart(ONE_SOURCE, self, self.decode_range(range_data)),)

    def offset_parts(self, start: OffsetT) -> dict[str, tuple[Source[Any, Any], Offset]]:
        """Each source this one reads, by the name the pipeline gives it, with its part of
        ``start`` (what a watcher of one source's input counts from). Default: this source
        alone, named :data:`ONE_SOURCE`."""
        return {ONE_SOURCE: (self, start)}

    def waiting_partitions(self, rng: RangeT) -> tuple[str, ...]:
        """Partitions that had input beyond ``rng`` when it was planned (recorded in the
        range, so replays agree). A partition never seen before holds the watermark back
        until its first records are read. Default: none (every partition is in every range)."""
        return ()


@dataclass(frozen=True)
class SourcePart:
    """One source's slice of an epoch's range (:meth:`Source.parts`): ``source`` reads
    ``range`` (None: nothing new from it in this epoch; it reads as no rows)."""

    name: str
    source: Source[Any, Any]
    range: SourceRange | None

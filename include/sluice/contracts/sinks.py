"""The two-phase-commit sink contract (the ground floor: imports nothing else from sluice;
docs/sinks.md is the guide for people writing one).

``prepare(epoch, attempt, df, rows)`` makes the epoch's rows **durable but invisible**, under
a location owned by that attempt alone, so a zombie attempt can never overwrite the winner.
``commit(prepared)`` makes exactly those rows visible; it is **idempotent** — the engine
re-runs it after a crash until the checkpoint says the sinks are committed, possibly in
another process and possibly twice at once. ``abort`` removes an attempt's staged rows and is
idempotent too. ``abort_others(epoch, keep)`` is recovery: it removes what dead attempts of an
epoch left behind. ``write`` is the direct, non-transactional path qos 1 uses. qos 0 stages
with ``prepare`` too (the epoch's one pass writes the output, no cache), and the process that
wrote the checkpoint calls ``publish`` once, right after it; nobody ever retries it (a crash
before it loses the epoch's output: at most once). None of them may depend on the wall clock.

Rewinds (docs/rewind.md). A sink that sets ``supports_retraction`` can take back the output
of committed epochs. The first epoch ``r`` of a rewind to epoch ``k`` is prepared with
``retract_after = k``; its ``commit`` then makes the sink hold again what it held when ``k``
was the last epoch published (the output of every epoch ``e`` with ``k < e < r`` is gone) and
publishes ``r``'s rows — atomically where the sink can (one database or Delta transaction),
idempotently in any case. The engine stages and commits such an epoch at every qos level.
``retraction_problem(k)`` says, before anything is written, why a rewind to ``k`` cannot be
retracted (None: it can). ``forget_through(k)`` tells the sink no rewind will go below ``k``
any more (retention), so history kept for retraction can go.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Generic

from sluice.contracts.records import HandleT, Prepared

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Sink"]


class Sink(ABC, Generic[HandleT]):
    """A two-phase-commit output (see the module docstring for the guarantees), typed by its
    handle: what it records about a staged epoch besides the files (``Sink[NoHandle]`` when
    the files say everything). ``prepare`` returns ``Prepared.of(..., handle)``; ``commit`` and
    ``abort`` read it back with :meth:`handle`."""

    handle_type: type[HandleT]

    name: str
    supports_retraction: bool = False
    # True: ``prepare``/``write`` accept ``rows=None`` (not counted yet) and count the rows
    # as they write them (sluice.jvm.udfs.counting), returning the count in Prepared.rows, so
    # the epoch needs no job of its own to count. False: the engine counts first.
    counts_rows: bool = False

    @abstractmethod
    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Stage ``df`` (``rows`` rows; None only for a sink whose ``counts_rows`` is True)."""

    def handle(self, prepared: Prepared) -> HandleT:
        """The handle ``prepare`` stored in ``prepared``."""
        return prepared.handle(self.handle_type)

    @abstractmethod
    def commit(self, prepared: Prepared) -> str | None:
        """Publish ``prepared`` (idempotent, see the module docstring). May return a short
        receipt of where the sink now holds the epoch (an Iceberg snapshot, a Kafka
        transaction), also when an earlier commit had published it: the engine stores it in
        the epoch's ``sinks-committed.json`` and ``sluice checkpoints`` shows it."""

    @abstractmethod
    def abort(self, prepared: Prepared) -> None: ...

    @abstractmethod
    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Recovery: remove what every attempt of ``epoch`` but ``keep`` staged; returns how
        many objects (files, tables...) it removed."""

    def publish(self, prepared: Prepared) -> str | None:
        """qos 0: make a staged epoch visible once, right after its checkpoint, in the
        process that wrote it; never retried, so it need not be idempotent. The default is
        :meth:`commit`; a sink whose commit costs what qos 0 does not need (a transaction, an
        epoch marker) may publish more simply."""
        return self.commit(prepared)

    def write(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """The direct path of qos 1: make the rows visible now, without a separate
        commit. The default stages and commits at once; sinks with a cheaper direct write
        override it. Not idempotent: a replay may write the rows again (qos 1 allows that)."""
        prepared = self.prepare(epoch, attempt, df, rows)
        self.commit(prepared)
        return prepared

    def retraction_problem(self, after: int) -> str | None:
        """Why a rewind to epoch ``after`` cannot be retracted from this sink, or None."""
        if not self.supports_retraction:
            return (
                f"sink {self.name!r} ({type(self).__name__}) cannot retract published output "
                "(supports_retraction is false)"
            )
        return None

    def forget_through(self, epoch: int) -> None:
        """No rewind will go below ``epoch`` any more; the default keeps nothing extra."""

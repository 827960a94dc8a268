"""The sink contract as a pytest suite: every sink, built-in or your own, runs it.

Subclass :class:`SinkContract` (append sinks) or :class:`UpsertSinkContract` (upsert sinks)
in a test module and provide two fixtures, ``spark`` (a SparkSession) and ``harness`` (a
:class:`Harness` for a fresh, empty sink)::

    class TestMySink(SinkContract):
        @pytest.fixture
        def harness(self, tmp_path):
            spec = FilesSinkConfig(name="out", path=str(tmp_path / "out"))
            return Harness(make=lambda: MySink(spec, ...), rows=..., leftovers=...)

What it checks is what the engine relies on (docs/sinks.md): staged rows are invisible until
commit; commit is idempotent, also from another instance (another process) and when two
commits race; abort and recovery (``abort_others``) remove every loser's staged data and
never the winner's; an epoch without rows works; the direct ``write`` of qos 0/1 is visible at
once; and an upsert sink holds exactly the last value per key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sluice.contracts.sinks import Sink

__all__ = ["KEYS", "Harness", "SinkContract", "UpsertSinkContract", "changelog"]

KEYS = ("user", "window_start", "window_end")
_DDL = (
    "user string, window_start timestamp, window_end timestamp, clicks long,"
    " _op string, _epoch long"
)
_T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Harness:
    """How the contract reaches one sink under test.

    ``make`` returns a new sink instance each call (as a new process would build it);
    ``rows`` is what a reader of the sink sees now — for an upsert sink, the current table —
    as dicts with the columns ``user, window_start, window_end, clicks``; ``leftovers``
    names whatever staged data is still stored (files, tables), empty when clean.
    """

    make: Callable[[], Sink]
    rows: Callable[[], list[dict[str, Any]]]
    leftovers: Callable[[], list[str]]


def changelog(
    spark: Any, epoch: int, rows: Sequence[tuple[str, int, int | None]], op: str = "upsert"
) -> tuple[Any, int]:
    """A result frame as the engine emits it: ``(user, minute, clicks)`` per row."""
    data = [
        (user, _T0 + timedelta(minutes=m), _T0 + timedelta(minutes=m + 1), clicks, op, epoch)
        for user, m, clicks in rows
    ]
    return spark.createDataFrame(data, _DDL).repartition(2), len(data)


def _view(rows: list[dict[str, Any]]) -> list[tuple[str, int, int | None]]:
    """Rows as ``(user, minute, clicks)``, sorted; timestamps may come back naive (UTC) or,
    from JSON, as ISO text."""

    def minute(value: datetime | str) -> int:
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int((value - _T0).total_seconds() // 60)

    return sorted((r["user"], minute(r["window_start"]), r["clicks"]) for r in rows)


ROWS = [("alice", 0, 3), ("bob", 0, 1), ("carol", 1, 7), ("alice", 2, 2)]


class SinkContract:
    """The two-phase-commit contract every sink keeps (append semantics)."""

    def test_prepared_rows_stay_invisible_until_commit(self, spark: Any, harness: Harness) -> None:
        sink = harness.make()
        df, n = changelog(spark, 1, ROWS)
        prepared = sink.prepare(1, "a1", df, n)
        assert prepared.rows == n
        assert harness.rows() == []
        sink.commit(prepared)
        assert _view(harness.rows()) == sorted(ROWS)
        assert harness.leftovers() == []

    def test_commit_is_idempotent_also_from_another_process(
        self, spark: Any, harness: Harness
    ) -> None:
        df, n = changelog(spark, 1, ROWS)
        prepared = harness.make().prepare(1, "a1", df, n)
        harness.make().commit(prepared)
        harness.make().commit(prepared)  # a retry after a crash, in a new process
        harness.make().commit(type(prepared).from_dict(prepared.to_dict()))  # from the manifest
        assert _view(harness.rows()) == sorted(ROWS)

    def test_two_commits_racing_publish_the_rows_once(self, spark: Any, harness: Harness) -> None:
        df, n = changelog(spark, 1, ROWS)
        prepared = harness.make().prepare(1, "a1", df, n)
        errors: list[BaseException] = []

        def commit() -> None:
            try:
                harness.make().commit(prepared)
            except BaseException as exc:  # reported below, with the other thread's
                errors.append(exc)

        threads = [threading.Thread(target=commit) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert _view(harness.rows()) == sorted(ROWS)

    def test_recovery_removes_the_losers_and_never_the_winner(
        self, spark: Any, harness: Harness
    ) -> None:
        sink = harness.make()
        df, n = changelog(spark, 3, ROWS)
        winner = sink.prepare(3, "win", df, n)
        loser = sink.prepare(3, "zombie", df, n)  # a second attempt of the same epoch
        assert harness.leftovers() != []
        assert harness.make().abort_others(3, keep="win") > 0
        harness.make().commit(winner)
        harness.make().abort(loser)  # idempotent: already gone
        assert harness.make().abort_others(3, keep=None) == 0
        assert _view(harness.rows()) == sorted(ROWS)
        assert harness.leftovers() == []

    def test_abort_leaves_nothing_visible(self, spark: Any, harness: Harness) -> None:
        sink = harness.make()
        df, n = changelog(spark, 1, ROWS)
        prepared = sink.prepare(1, "a1", df, n)
        sink.abort(prepared)
        sink.abort(prepared)
        assert harness.rows() == []
        assert harness.leftovers() == []

    def test_an_epoch_without_rows(self, spark: Any, harness: Harness) -> None:
        df, _ = changelog(spark, 1, [])
        prepared = harness.make().prepare(1, "a1", df, 0)
        harness.make().commit(prepared)
        assert prepared.rows == 0
        assert harness.rows() == []
        assert harness.leftovers() == []

    def test_direct_write_is_visible_at_once(self, spark: Any, harness: Harness) -> None:
        df, n = changelog(spark, 1, ROWS)
        harness.make().write(1, "a1", df, n)
        assert _view(harness.rows()) == sorted(ROWS)
        assert harness.leftovers() == []


class UpsertSinkContract(SinkContract):
    """Upsert sinks also hold exactly the last value per key, deletes included."""

    def test_the_changelog_ends_in_the_last_value_per_key(
        self, spark: Any, harness: Harness
    ) -> None:
        sink = harness.make()
        steps: list[tuple[int, Sequence[tuple[str, int, int | None]], str]] = [
            (1, ROWS, "upsert"),
            (2, [("alice", 0, 5), ("dave", 3, 1)], "upsert"),  # update + insert
            (3, [("bob", 0, None)], "delete"),
            (4, [("alice", 0, 6)], "upsert"),
        ]
        for epoch, rows, op in steps:
            df, n = changelog(spark, epoch, rows, op)
            prepared = sink.prepare(epoch, f"a{epoch}", df, n)
            sink.commit(prepared)
            sink.commit(prepared)  # replays change nothing
        expected = [("alice", 0, 6), ("alice", 2, 2), ("carol", 1, 7), ("dave", 3, 1)]
        assert _view(harness.rows()) == expected

    def test_a_replayed_epoch_does_not_resurrect_an_old_value(
        self, spark: Any, harness: Harness
    ) -> None:
        sink = harness.make()
        df, n = changelog(spark, 1, [("alice", 0, 1)])
        first = sink.prepare(1, "a1", df, n)
        sink.commit(first)
        df, n = changelog(spark, 2, [("alice", 0, 2)])
        sink.commit(sink.prepare(2, "a2", df, n))
        harness.make().commit(first)  # a late retry of epoch 1's commit
        assert _view(harness.rows()) == [("alice", 0, 2)]

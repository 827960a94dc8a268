"""The worked example of a user-defined sink runs the sink contract every built-in sink runs
(sluice.testing.sink_contract), append and upsert, on a real SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.examples import SqliteSink
from sluice.examples.exceptions import SqliteSinkError
from sluice.examples.sqlite_sink import FENCE_TABLE, read_table, staging_tables
from sluice.spec import PluginSinkConfig
from sluice.testing.sink_contract import KEYS, Harness, SinkContract, UpsertSinkContract, changelog


def sqlite_harness(tmp_path: Path, mode: str) -> Harness:
    db = str(tmp_path / "out.db")
    options = {"path": db, "table": "clicks"}
    keys = KEYS if mode == "upsert" else ()
    spec = PluginSinkConfig(name="out", type="sluice.examples:SqliteSink", mode=mode,  # type: ignore[arg-type]
                    keys=keys, options=tuple(sorted(options.items())))  # fmt: skip
    return Harness(
        make=lambda: SqliteSink(spec, dict(options), "contract"),
        rows=lambda: read_table(db, "clicks"),
        leftovers=lambda: staging_tables(db),
    )


class TestSqliteAppend(SinkContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Harness:
        return sqlite_harness(tmp_path, "append")


class TestSqliteUpsert(UpsertSinkContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Harness:
        return sqlite_harness(tmp_path, "upsert")


def test_each_epoch_has_one_fence_row_and_bad_upsert_keys_fail_in_prepare(
    spark: Any, tmp_path: Path
) -> None:
    harness = sqlite_harness(tmp_path, "upsert")
    sink = harness.make()
    df, n = changelog(spark, 1, [("alice", 0, 1)])
    first = sink.prepare(1, "a1", df, n)
    sink.commit(first)
    sink.commit(first)
    df, _ = changelog(spark, 2, [])
    sink.commit(sink.prepare(2, "a2", df, 0))  # an empty epoch is fenced too
    fence = read_table(str(tmp_path / "out.db"), FENCE_TABLE)
    assert sorted((r["epoch"], r["attempt"], r["row_count"]) for r in fence) == [
        (1, "a1", 1), (2, "a2", 0)]  # fmt: skip
    df, n = changelog(spark, 3, [("bob", 0, 1), ("bob", 0, 2)])
    with pytest.raises(
        SqliteSinkError, match=r"epoch 3, attempt a3: key \('bob', .*upserted twice"
    ):
        sink.prepare(3, "a3", df, n)
    assert harness.leftovers() == []

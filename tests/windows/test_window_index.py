"""sluice.windows.index: the open windows an epoch finds in the state, from memory.

A process that runs a pipeline epoch after epoch answers "which of my open windows does the
state already hold" from per-part hash sets instead of a scan of the state. Both ways must
count the same windows after every epoch, and the hashes must tell apart keys that differ
only in where a null is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.demo import render_click_files
from sluice.jvm.udfs import helper_classes
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec
from sluice.windows import index as window_index

from tests.fixtures.pipelines import (
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec_dict,
    runtime,
)

FILES = render_click_files(files=6, events_per_file=80, seed=7)
REFERENCE = click_reference(FILES)


def _run(spark: Any, tmp_path: Path, name: str) -> tuple[Any, list[int]]:
    ws = Workspace("local", (tmp_path / name).as_uri())
    ws.put_files(FILES)
    body = click_spec_dict(ws)
    body["checkpoint"] = {"storage": ws.uri("ckpt"), "compact_every": 3}
    spec = parse_spec(body)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1)
    assert_click_output_exact(spec, REFERENCE)
    opened = [rt.repo.checkpoint(e).result.stats.windows_open for e in rt.repo.committed_epochs()]
    return rt, opened


def test_open_windows_from_memory_equal_a_scan_of_the_state(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One file per epoch, a base every 3 deltas: counted from the indexes (every epoch but
    the first of the process) and counted by scanning the state (no memory allowed), the
    open windows after every epoch are the same, and the last equal the reference's."""
    probes: list[int | None] = []
    real = window_index.WindowIndexes.probe

    def spy(self: Any, *args: Any) -> Any:
        found = real(self, *args)
        probes.append(None if found is None else found.found)
        return found

    monkeypatch.setattr(window_index.WindowIndexes, "probe", spy)
    _, from_memory = _run(spark, tmp_path, "memory")
    answered = [p for p in probes if p is not None]
    assert len(answered) >= 3, probes  # the indexes answered most epochs
    assert any(p > 0 for p in answered), probes  # windows already open were found in them

    probes.clear()
    monkeypatch.setattr(window_index, "HEAP_SHARE", 0.0)  # no index fits: scan every time
    _, scanned = _run(spark, tmp_path, "scan")
    assert probes and all(p is None for p in probes), probes
    assert from_memory == scanned
    assert scanned[-1] == len(REFERENCE.open_windows)


def test_a_delta_keeps_the_windows_its_epoch_hashed(spark: Any, tmp_path: Path) -> None:
    """After each epoch the process holds an index for every part of the state (the deltas
    from the windows the epoch probed, a base built once when first needed) and none for
    parts the state no longer has."""
    rt, _ = _run(spark, tmp_path, "kept")
    held = window_index.WindowIndexes(spark, rt.repo.store.uri())
    keys = {k for (root, k) in held._all.parts if root == rt.repo.store.uri()}
    latest = rt.repo.latest_checkpoint()
    assert latest is not None
    live = {p.key for p in latest.result.state.parts}
    assert keys <= live | {p.key for p in rt.repo.checkpoint(latest.epoch - 1).result.state.parts}
    assert keys & live, (keys, live)


def test_keys_that_differ_only_in_where_a_null_is_hash_apart(spark: Any) -> None:
    rows = [(None, 1, 0), (1, None, 0), (None, None, 0), (1, 1, 0), (0, 0, 0), (0, None, 0)]
    frame = spark.createDataFrame(rows, "a long, b long, _ws long")
    hashed = window_index._hashes(frame, ["a", "b", "_ws"]).collect()
    assert len({(r._h1, r._h2) for r in hashed}) == len(rows)


def test_an_index_finds_exactly_its_windows(spark: Any) -> None:
    """io.sluice.spark.WindowIndex: a set of (h1, h2) pairs, the pair (0, 0) included; a probe
    counts each probed window found in any index once."""
    jvm = helper_classes(spark).WindowIndex
    stored = spark.createDataFrame([(0, 0), (1, 2), (2, 1), (-5, 7)], "h1 long, h2 long")
    other = spark.createDataFrame([(9, 9)], "h1 long, h2 long")
    probed = spark.createDataFrame([(0, 0), (1, 2), (1, 3), (9, 9), (8, 8)], "h1 long, h2 long")
    index = jvm.of(stored._jdf, 4)
    assert index.size() == 4
    probe = jvm.probe(probed._jdf)
    probe.mark(index)
    assert probe.found() == 2  # (0, 0) and (1, 2); (1, 3) shares a half only
    probe.mark(jvm.of(other._jdf, 1))
    probe.mark(index)  # found again: still counted once
    assert probe.found() == 3
    assert probe.index().size() == 5


def test_room_is_made_from_the_least_recently_used_sets_of_others() -> None:
    """A server running many pipelines: the sets of a pipeline gone quiet give way, oldest
    first; the sets the asking epoch needs never do, and what cannot fit is refused."""
    indexes = window_index._Indexes()
    for n, key in enumerate([("a", "p1"), ("b", "p1"), ("a", "p2"), ("c", "p1")], start=1):
        indexes.parts[key] = window_index._Entry(java=None, bytes=100, used=n)
    assert indexes.make_room(250, 500, keep={("c", "p1")})  # 400 + 250: drop a/p1, b/p1
    assert set(indexes.parts) == {("a", "p2"), ("c", "p1")}
    assert not indexes.make_room(450, 500, keep={("c", "p1")})  # a/p2 goes, still no room
    assert set(indexes.parts) == {("c", "p1")}
    assert indexes.make_room(400, 500, keep={("c", "p1")})

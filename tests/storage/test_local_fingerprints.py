"""LocalObjectStore.fingerprints: a file is hashed once and its digest remembered in the
folder's hidden memo while its stat (size, mtime, ctime, inode) is unchanged; a file changed
in any way, a copied folder, a folder without a memo or with a damaged one is hashed again, and
the fingerprints are always the ones the base class computes from the bytes.

Hashing is counted by wrapping the store's hash function: no timing."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from sluice.storage import LocalObjectStore, ObjectStore
from sluice.storage import local as local_store
from sluice.storage.local import FINGERPRINT_MEMO, TEMP_PREFIX

from tests.fixtures.file_damage import DAMAGE

PART = "state/000000000001-a1"
FILES = {"part-00000.parquet": b"p" * 1000, "part-00001.parquet": b"q" * 700, "_SUCCESS": b""}


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the store reads to hash them, in order."""
    names: list[str] = []
    real = local_store._sha256

    def counting(path: Path) -> tuple[int, str]:
        names.append(path.name)
        return real(path)

    monkeypatch.setattr(local_store, "_sha256", counting)
    return names


def _part(root: Path) -> LocalObjectStore:
    store = LocalObjectStore(root)
    for name, data in FILES.items():
        store.put(f"{PART}/{name}", data)
    return store


def _from_bytes(store: LocalObjectStore) -> dict[str, str]:
    """What the base class computes: every file read and hashed."""
    return ObjectStore.fingerprints(store, PART + "/")


def _hidden(root: Path) -> list[str]:
    return sorted(p.name for p in (root / PART).iterdir() if p.name.startswith("."))


def test_a_part_fingerprinted_twice_is_read_once(tmp_path: Path, hashed: list[str]) -> None:
    store = _part(tmp_path)

    first = store.fingerprints(PART + "/")
    assert sorted(hashed) == sorted(FILES)
    second = store.fingerprints(PART + "/")

    assert sorted(hashed) == sorted(FILES), "the second call took every digest from the memo"
    assert first == second == _from_bytes(store)
    assert list(first) == sorted(first)  # in key order, as the base class lists them
    assert first[f"{PART}/part-00000.parquet"].startswith("1000:sha256:")
    assert _hidden(tmp_path) == [FINGERPRINT_MEMO]  # no temp file left behind
    assert [i.key.rpartition("/")[2] for i in store.list(PART + "/")] == sorted(FILES)


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_file_changed_after_the_memo_is_hashed_again(
    tmp_path: Path, hashed: list[str], damage: Callable[[Path], None]
) -> None:
    store = _part(tmp_path)
    before = store.fingerprints(PART + "/")
    hashed.clear()
    key = f"{PART}/part-00000.parquet"

    damage(tmp_path / key)
    after = store.fingerprints(PART + "/")

    assert hashed == ["part-00000.parquet"]  # only the changed file is read
    assert after[key] != before[key]
    assert after == _from_bytes(store)


def test_a_touched_file_is_hashed_again_with_the_same_fingerprint(
    tmp_path: Path, hashed: list[str]
) -> None:
    store = _part(tmp_path)
    before = store.fingerprints(PART + "/")
    hashed.clear()

    os.utime(tmp_path / PART / "part-00001.parquet")

    assert store.fingerprints(PART + "/") == before
    assert hashed == ["part-00001.parquet"]


def test_a_copied_folder_is_hashed_once_there(tmp_path: Path, hashed: list[str]) -> None:
    store = _part(tmp_path / "a")
    original = store.fingerprints(PART + "/")
    hashed.clear()

    shutil.copytree(tmp_path / "a", tmp_path / "b")  # the memo too; new inodes and ctimes
    copy = LocalObjectStore(tmp_path / "b")

    assert _hidden(tmp_path / "b") == [FINGERPRINT_MEMO]
    assert copy.fingerprints(PART + "/") == original
    assert sorted(hashed) == sorted(FILES)  # the copied memo is not trusted: hashed
    assert copy.fingerprints(PART + "/") == original
    assert sorted(hashed) == sorted(FILES)  # and remembered there


@pytest.mark.parametrize(
    "memo",
    [None, b"", b"{not json", b"[]", b'{"version": 2, "as_of_ns": 1, "files": {}}'],
    ids=["missing", "empty", "not-json", "not-an-object", "other-version"],
)
def test_without_a_usable_memo_every_file_is_hashed(
    tmp_path: Path, hashed: list[str], memo: bytes | None
) -> None:
    store = _part(tmp_path)
    expected = _from_bytes(store)
    path = tmp_path / PART / FINGERPRINT_MEMO
    if memo is not None:
        path.write_bytes(memo)

    assert store.fingerprints(PART + "/") == expected
    assert sorted(hashed) == sorted(FILES)
    assert json.loads(path.read_bytes())["version"] == 1  # rewritten
    assert store.fingerprints(PART + "/") == expected
    assert sorted(hashed) == sorted(FILES)


def test_a_memo_entry_with_another_stat_is_not_trusted(tmp_path: Path, hashed: list[str]) -> None:
    """A memo naming a wrong digest is only believed for the exact stat it was taken with."""
    store = _part(tmp_path)
    store.fingerprints(PART + "/")
    path = tmp_path / PART / FINGERPRINT_MEMO
    memo = json.loads(path.read_bytes())
    entry = memo["files"]["part-00000.parquet"]
    entry[4] = "1000:sha256:" + "0" * 64
    entry[3] += 1  # another inode
    path.write_text(json.dumps(memo))
    hashed.clear()

    assert store.fingerprints(PART + "/") == _from_bytes(store)
    assert hashed == ["part-00000.parquet"]


def test_a_file_changed_within_the_clock_tick_is_not_remembered(
    tmp_path: Path, hashed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coarse clock (one that has not ticked since the files' ctimes) cannot tell a later
    change in the same tick: the digests are kept but trusted only once hashed after a tick."""
    store = _part(tmp_path)
    stuck = min((tmp_path / PART / n).stat().st_ctime_ns for n in FILES)
    ticking = local_store._clock
    clock = {"stuck": True}
    monkeypatch.setattr(local_store, "RACY_WAIT_S", 0.0)
    monkeypatch.setattr(
        local_store, "_clock", lambda tmp: stuck if clock["stuck"] and tmp else ticking(tmp)
    )

    assert store.fingerprints(PART + "/") == store.fingerprints(PART + "/") == _from_bytes(store)
    assert sorted(hashed) == sorted([*FILES, *FILES])  # hashed both times

    clock["stuck"] = False
    hashed.clear()
    store.fingerprints(PART + "/")
    store.fingerprints(PART + "/")
    assert sorted(hashed) == sorted(FILES)


def test_where_no_memo_can_be_written_every_call_hashes(
    tmp_path: Path, hashed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _part(tmp_path)
    monkeypatch.setattr(local_store, "_temp_file", lambda directory: None)  # read-only

    assert store.fingerprints(PART + "/") == store.fingerprints(PART + "/") == _from_bytes(store)
    assert sorted(hashed) == sorted([*FILES, *FILES])
    assert _hidden(tmp_path) == []


def test_memos_follow_each_folder_and_keep_entries_outside_the_prefix(
    tmp_path: Path, hashed: list[str]
) -> None:
    store = _part(tmp_path)
    store.put("state/000000000002-a1/part-00000.parquet", b"x" * 10)

    everything = store.fingerprints("state/")
    assert len(everything) == len(FILES) + 1 and len(hashed) == len(FILES) + 1
    assert store.fingerprints(f"{PART}/part-00000") == {
        f"{PART}/part-00000.parquet": everything[f"{PART}/part-00000.parquet"]
    }
    assert store.fingerprints("state/") == everything
    assert len(hashed) == len(FILES) + 1
    assert (tmp_path / "state/000000000002-a1" / FINGERPRINT_MEMO).is_file()


def test_a_deleted_file_leaves_the_listing_and_the_memo(tmp_path: Path) -> None:
    store = _part(tmp_path)
    store.fingerprints(PART + "/")
    store.delete(f"{PART}/part-00001.parquet")
    os.utime(tmp_path / PART / "_SUCCESS")  # something to hash: the memo is rewritten

    assert sorted(store.fingerprints(PART + "/")) == [
        f"{PART}/_SUCCESS",
        f"{PART}/part-00000.parquet",
    ]
    memo = json.loads((tmp_path / PART / FINGERPRINT_MEMO).read_bytes())
    assert sorted(memo["files"]) == ["_SUCCESS", "part-00000.parquet"]


def test_delete_prefix_takes_the_memo_and_the_folder(tmp_path: Path) -> None:
    store = _part(tmp_path)
    store.fingerprints(PART + "/")
    (tmp_path / PART / ".part-00000.parquet.crc").write_bytes(b"c")  # Spark's companion

    assert store.delete_prefix(PART + "/") == len(FILES)
    assert not (tmp_path / PART).exists()
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith((TEMP_PREFIX, "."))]

"""State parts on a local disk are hashed once: the checkpoint records each file's SHA-256
when the part is written, and every later read verifies it from the part's memo unless the
file changed (sluice.state.verify_parts over LocalObjectStore.fingerprints).

The pipeline is the in-memory one (sluice.testing.memory): the real protocol and repository on
a local directory, a delta part per epoch and a base every 3 deltas, every epoch verifying the
parts it reads. Hashing is counted by wrapping the store's hash function: no timing."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sluice.contracts.records import StateRef
from sluice.protocol import Runtime
from sluice.state import verify_parts
from sluice.storage import CorruptObject, LocalObjectStore
from sluice.storage import local as local_store
from sluice.storage.local import FINGERPRINT_MEMO
from sluice.testing.memory import (
    STATE_FILE,
    memory_runtime,
    read_memory_state,
    run_until_drained,
    source_of,
)

from tests.fixtures.file_damage import DAMAGE, same_size_in_place, truncated

RECORDS = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5), ("a", 6), ("d", 7), ("c", 8),
           ("a", 9), ("e", 10)]  # fmt: skip
TOTALS = {"a": 19, "b": 7, "c": 12, "d": 7, "e": 10}


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each file was read to be hashed, by path."""
    counts: Counter[str] = Counter()
    real = local_store._sha256

    def counting(path: Path) -> tuple[int, str]:
        counts[str(path)] += 1
        return real(path)

    monkeypatch.setattr(local_store, "_sha256", counting)
    return counts


def _run(root: Path) -> Runtime:
    rt = memory_runtime(root, records=RECORDS, compact_every=3)
    run_until_drained(rt, max_units=2)
    return rt


def _state(rt: Runtime) -> StateRef:
    checkpoint = rt.repo.checkpoint(rt.repo.latest_epoch() or 0)
    assert checkpoint is not None
    return checkpoint.result.state


def _store(rt: Runtime) -> LocalObjectStore:
    assert isinstance(rt.repo.store, LocalObjectStore)
    return rt.repo.store


def _newest_file(rt: Runtime) -> Path:
    """The data file of the newest part: the one the next epoch reads last."""
    return _store(rt).root / _state(rt).parts[-1].key / STATE_FILE


def test_every_state_file_is_hashed_once_however_often_it_is_read(
    tmp_path: Path, hashed: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    verified: Counter[str] = Counter()
    real = LocalObjectStore.fingerprints

    def counting(store: LocalObjectStore, prefix: str) -> dict[str, str]:
        verified[prefix] += 1
        return real(store, prefix)

    monkeypatch.setattr(LocalObjectStore, "fingerprints", counting)
    rt = _run(tmp_path)
    assert read_memory_state(rt.repo.store, _state(rt)) == TOTALS
    assert read_memory_state(rt.repo.store, _state(rt)) == TOTALS

    written = [i.key for i in rt.repo.store.list("state/")]
    assert len(written) == 5  # an epoch's part each (two records an epoch)
    assert sorted(hashed) == sorted(str(_store(rt).root / key) for key in written)
    assert set(hashed.values()) == {1}, hashed
    # ... although each part was fingerprinted when written and again by every read of it
    assert max(verified.values()) >= 3, verified
    assert [p.files[0][1].split(":")[1] for p in _state(rt).parts] == ["sha256"] * 2


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_file_changed_after_it_was_verified_is_corrupt(
    tmp_path: Path, hashed: Counter[str], damage: Callable[[Path], None]
) -> None:
    rt = _run(tmp_path)
    assert read_memory_state(rt.repo.store, _state(rt)) == TOTALS  # memos of every part
    path = _newest_file(rt)
    hashed.clear()

    damage(path)

    with pytest.raises(CorruptObject, match="corrupt state: state file is") as caught:
        read_memory_state(rt.repo.store, _state(rt))
    assert caught.value.uri == path.as_uri()
    assert list(hashed) == [str(path)]  # the unchanged files came from their memos
    source_of(rt).append(("a", 1))  # the next epoch refuses it too
    with pytest.raises(CorruptObject):
        run_until_drained(rt, max_units=2)


def test_a_copied_checkpoint_folder_verifies_there(tmp_path: Path, hashed: Counter[str]) -> None:
    rt = _run(tmp_path / "a")
    state = _state(rt)
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # new inodes and ctimes, memos copied
    copy = memory_runtime(tmp_path / "b")
    hashed.clear()

    assert _state(copy) == state  # recorded as it was: SHA-256 fingerprints
    assert read_memory_state(copy.repo.store, state) == TOTALS
    parts = [_store(copy).root / p.key / STATE_FILE for p in state.parts]
    assert sorted(hashed) == sorted(map(str, parts))  # the copied memos are not trusted
    assert read_memory_state(copy.repo.store, state) == TOTALS
    assert set(hashed.values()) == {1}  # hashed there once, then remembered there

    same_size_in_place(parts[-1])
    with pytest.raises(CorruptObject, match="corrupt state"):
        read_memory_state(copy.repo.store, state)
    assert read_memory_state(rt.repo.store, state) == TOTALS  # the original is untouched


def test_a_part_without_a_memo_is_verified_by_hashing(tmp_path: Path, hashed: Counter[str]) -> None:
    """Parts written before the memo existed (or whose memo was lost) read as before."""
    rt = _run(tmp_path)
    state = _state(rt)
    memos = [_store(rt).root / p.key / FINGERPRINT_MEMO for p in state.parts]
    for memo in memos:
        memo.unlink()
    hashed.clear()

    verify_parts(rt.repo.store, list(state.parts))

    assert len(hashed) == len(state.parts) and set(hashed.values()) == {1}
    assert all(memo.is_file() for memo in memos)  # written by that verification
    memos[-1].unlink()
    truncated(_newest_file(rt))
    with pytest.raises(CorruptObject, match="corrupt state"):
        verify_parts(rt.repo.store, list(state.parts))

"""The set of files read (sluice.sources.files_read): a base plus deltas, compacted every
DELTAS_PER_BASE plans, immutable objects named by the plan's epoch, forgotten once no kept
offset names them; a damaged object is an error, never an empty set. Both backends."""

from __future__ import annotations

import pytest
from sluice.sources.files_read import DELTAS_PER_BASE, FileEntry, ReadLog, ReadSet
from sluice.storage import CorruptObject, ObjectStore

from tests.fixtures.pipelines import Workspace


def log_of(ws: Workspace) -> tuple[ReadLog, ObjectStore]:
    store = ws.store("ckpt")
    return ReadLog(store, "sources/source/files-read"), store


def entry(n: int) -> FileEntry:
    return FileEntry(n, 1_000_000_000 * n, f"etag{n}")


def keep_all(key: str, entry: FileEntry) -> bool:
    return True


def test_deltas_build_on_a_base_and_compact_into_a_new_one(workspace: Workspace) -> None:
    log, store = log_of(workspace)
    ref, read = ReadSet(), {}
    names = []
    for epoch in range(1, DELTAS_PER_BASE + 2):
        added = {f"f{epoch}.jsonl": entry(epoch)}
        ref = log.write(epoch, ref, read, added, keep_all)
        read = ReadLog(store, log.prefix).load(ref)  # a fresh process reads the same set
        names.append(ref)
        assert read == {f"f{e}.jsonl": entry(e) for e in range(1, epoch + 1)}
        assert ref.files == epoch
    assert [len(r.deltas) for r in names] == [*range(DELTAS_PER_BASE), 0]
    assert names[-1].base != names[0].base  # the eleventh plan wrote a new base
    stored = sorted(i.key for i in store.list(log.prefix) if i.key.endswith(".json.gz"))
    assert len(stored) == DELTAS_PER_BASE + 1
    indexes = [i.key for i in store.list(log.prefix) if i.key.endswith(".keys")]
    assert len(indexes) == 2  # each base's key index
    assert all(k.rsplit("/", 1)[1][:12].isdigit() for k in stored)  # named by epoch


def test_a_new_base_keeps_only_what_keep_accepts(workspace: Workspace) -> None:
    log, _ = log_of(workspace)
    read = {f"old{n}": entry(n) for n in range(3)}
    ref = log.write(1, ReadSet(), {}, read, keep_all)
    for epoch in range(2, DELTAS_PER_BASE + 1):
        ref = log.write(epoch, ref, read, {}, keep_all)
    compacted = log.write(99, ref, read, {"new": entry(9)}, lambda k, e: e.size >= 1)
    assert sorted(log.load(compacted)) == ["new", "old1", "old2"] and compacted.files == 3


def test_forget_deletes_only_what_no_kept_set_names_up_to_an_epoch(workspace: Workspace) -> None:
    log, store = log_of(workspace)
    first = log.write(1, ReadSet(), {}, {"a": entry(1)}, keep_all)
    second = log.write(2, first, log.load(first), {"b": entry(2)}, keep_all)
    orphan = log.write(2, first, log.load(first), {"c": entry(3)}, keep_all)  # a losing plan
    later = log.write(3, second, log.load(second), {"d": entry(4)}, keep_all)
    assert orphan.deltas != second.deltas
    assert log.forget([second], through=2) == 1  # the orphan; 3's delta is a plan in flight
    left = {i.key for i in store.list(log.prefix)}
    assert first.base is not None
    index = first.base.removesuffix(".json.gz") + ".keys"
    assert left == set(second.objects) | set(later.deltas) | {index}
    assert log.load(second) == {"a": entry(1), "b": entry(2)}


def test_keys_of_any_name_round_trip(workspace: Workspace) -> None:
    log, store = log_of(workspace)
    names = {"a*b.jsonl": entry(1), "été/日本 x.jsonl": entry(2), "tab\there": entry(3)}
    ref = log.write(1, ReadSet(), {}, names, keep_all)
    assert ReadLog(store, log.prefix).load(ref) == names


def test_a_damaged_object_is_an_error_naming_it(workspace: Workspace) -> None:
    log, store = log_of(workspace)
    ref = log.write(1, ReadSet(), {}, {"a": entry(1)}, keep_all)
    assert ref.base is not None
    store.put(ref.base, store.get(ref.base)[:-9])  # truncated
    with pytest.raises(CorruptObject, match="set of files read"):
        ReadLog(store, log.prefix).load(ref)


def recorded_gets(store: ObjectStore) -> list[str]:
    """The keys ``store`` is asked for from now on."""
    gets: list[str] = []
    get = store.get

    def recording(key: str) -> bytes:
        gets.append(key)
        return get(key)

    store.get = recording  # type: ignore[method-assign]
    return gets


def a_set_with_deltas(log: ReadLog) -> ReadSet:
    """A base of 1,000 files (f0..f999) and two deltas (g1, g2, and f5 found changed)."""
    ref = log.write(1, ReadSet(), {}, {f"f{n}": entry(n) for n in range(1000)}, keep_all)
    ref = log.write(2, ref, log.load(ref), {"g1": entry(1)}, keep_all)
    return log.write(3, ref, log.load(ref), {"g2": entry(2), "f5": entry(55)}, keep_all)


def test_lookup_reads_the_base_only_when_its_index_may_hold_a_name(
    workspace: Workspace,
) -> None:
    """The events' path: names the set never read cost the deltas and the base's key index,
    not the base; a name in the base loads it; the answers are :meth:`load`'s, restricted."""
    log, store = log_of(workspace)
    ref = a_set_with_deltas(log)
    assert ref.base is not None and ref.files == 1002
    whole = ReadLog(store, log.prefix).load(ref)

    fresh = ReadLog(store, log.prefix)
    gets = recorded_gets(store)
    assert fresh.lookup(ref, ["new1", "new2", "g2"]) == {"g2": entry(2)}
    assert ref.base not in gets and ref.base.removesuffix(".json.gz") + ".keys" in gets
    assert fresh.lookup(ref, ["f5", "f7", "new1"]) == {"f5": entry(55), "f7": whole["f7"]}
    assert ref.base in gets  # f7 is in the base
    names = ["f1", "f999", "g1", "nope", "f5"]
    assert fresh.lookup(ref, names) == {k: whole[k] for k in names if k in whole}


def test_a_base_without_its_index_is_loaded_whole(workspace: Workspace) -> None:
    """A crash between the index and the base, or a base written before indexes: lookups
    still answer exactly, by loading the base."""
    log, store = log_of(workspace)
    ref = a_set_with_deltas(log)
    assert ref.base is not None
    store.delete(ref.base.removesuffix(".json.gz") + ".keys")
    fresh = ReadLog(store, log.prefix)
    gets = recorded_gets(store)
    assert fresh.lookup(ref, ["new1", "f3"]) == {"f3": entry(3)}
    assert ref.base in gets


def test_the_index_goes_with_its_base_and_a_damaged_one_is_an_error(
    workspace: Workspace,
) -> None:
    log, store = log_of(workspace)
    old = log.write(1, ReadSet(), {}, {"a": entry(1)}, keep_all)
    ref = old
    for epoch in range(2, DELTAS_PER_BASE + 2):
        ref = log.write(epoch, ref, log.load(ref), {f"e{epoch}": entry(epoch)}, keep_all)
    assert ref.base != old.base and ref.deltas == ()
    indexes = {i.key for i in store.list(log.prefix) if i.key.endswith(".keys")}
    assert len(indexes) == 2
    log.forget([ref], through=DELTAS_PER_BASE + 1)
    left = {i.key for i in store.list(log.prefix)}
    assert left == {ref.base, ref.base.removesuffix(".json.gz") + ".keys"}

    index = ref.base.removesuffix(".json.gz") + ".keys"
    store.put(index, store.get(index)[:-3])  # not a whole number of hashes
    with pytest.raises(CorruptObject, match="key index"):
        ReadLog(store, log.prefix).lookup(ref, ["x"])

"""The ObjectStore contract (see sluice.storage.base), run unchanged against every backend."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from sluice.storage import (
    InvalidKey,
    LocalObjectStore,
    ObjectAlreadyExists,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    StorageError,
)

from tests.fixtures.seaweed import BACKENDS

pytestmark = pytest.mark.parametrize("store", BACKENDS, indirect=True)

ALL_BYTES = bytes(range(256))


@pytest.fixture
def store(
    request: pytest.FixtureRequest, object_store_factory: Callable[[str], ObjectStore]
) -> ObjectStore:
    return object_store_factory(request.param)


def keys(store: ObjectStore, prefix: str = "") -> list[str]:
    return [info.key for info in store.list(prefix)]


# -- get / put -----------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"x", ALL_BYTES * 64], ids=["empty", "one", "binary"])
def test_put_then_get_roundtrips_bytes(store: ObjectStore, data: bytes) -> None:
    store.put("epochs/000000000001/plan.json", data)

    assert store.get("epochs/000000000001/plan.json") == data


def test_put_replaces_existing_object(store: ObjectStore) -> None:
    store.put("a", b"old")
    store.put("a", b"new")

    assert store.get("a") == b"new"


def test_keys_may_hold_spaces_unicode_and_url_characters(store: ObjectStore) -> None:
    key = "sp ace/plus+percent%20/é-ü/q?x=1&y#z"
    store.put(key, b"odd")

    assert store.get(key) == b"odd"
    assert keys(store) == [key]


def test_a_backslash_is_an_ordinary_character(store: ObjectStore) -> None:
    """As on POSIX file systems and S3; only '/' separates (a files source may hold such
    names: ``b\\c.jsonl`` is not ``b/c.jsonl``). Not on SeaweedFS, whose S3 gateway stores
    the key ``b\\c`` as ``b/c`` (AWS S3 keeps it)."""
    if store.uri().startswith("s3://"):
        pytest.skip("SeaweedFS turns '\\' in keys into '/'")
    store.put("b\\c.jsonl", b"one")
    store.put("b/c.jsonl", b"two")

    assert store.get("b\\c.jsonl") == b"one"
    assert keys(store) == ["b/c.jsonl", "b\\c.jsonl"]
    assert keys(store, "b\\") == ["b\\c.jsonl"]


def test_get_missing_raises_object_not_found_naming_the_uri(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as caught:
        store.get("epochs/000000000009/checkpoint.json")

    assert caught.value.uri == store.uri("epochs/000000000009/checkpoint.json")
    assert "epochs/000000000009/checkpoint.json" in str(caught.value)


@pytest.mark.parametrize("size", [1, 7, 300, 10_000])
def test_get_tail_returns_the_last_bytes(store: ObjectStore, size: int) -> None:
    data = ALL_BYTES * 2  # 512 bytes: a tail longer than the object returns all of it
    store.put("t/obj", data)
    assert store.get_tail("t/obj", size) == data[-size:]


def test_get_tail_of_missing_or_empty_objects(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as info:
        store.get_tail("t/missing", 8)
    assert store.uri("t/missing") in str(info.value)
    store.put("t/empty", b"")
    assert store.get_tail("t/empty", 8) == b""
    with pytest.raises(ValueError, match="positive"):
        store.get_tail("t/empty", 0)


def test_exists_reports_objects_not_prefixes(store: ObjectStore) -> None:
    store.put("dir/obj", b"1")

    assert store.exists("dir/obj")
    assert not store.exists("dir")
    assert not store.exists("dir/other")


# -- put_if_absent -------------------------------------------------------------------------


def test_put_if_absent_succeeds_once_then_refuses(store: ObjectStore) -> None:
    store.put_if_absent("epochs/000000000001/checkpoint.json", b"winner")

    with pytest.raises(ObjectAlreadyExists) as caught:
        store.put_if_absent("epochs/000000000001/checkpoint.json", b"loser")

    assert caught.value.uri == store.uri("epochs/000000000001/checkpoint.json")
    assert store.get("epochs/000000000001/checkpoint.json") == b"winner"


def test_put_if_absent_refuses_over_a_plain_put(store: ObjectStore) -> None:
    store.put("k", b"first")

    with pytest.raises(ObjectAlreadyExists):
        store.put_if_absent("k", b"second")
    assert store.get("k") == b"first"


def test_put_if_absent_works_again_after_delete(store: ObjectStore) -> None:
    store.put_if_absent("k", b"1")
    store.delete("k")
    store.put_if_absent("k", b"2")

    assert store.get("k") == b"2"


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_put_if_absent_has_exactly_one_winner(store: ObjectStore, round_: int) -> None:
    key = f"epochs/{round_:012d}/checkpoint.json"
    start = threading.Barrier(8)
    winners: list[bytes] = []
    losers: list[bytes] = []
    failures: list[BaseException] = []

    def contend(payload: bytes) -> None:
        start.wait()
        try:
            store.put_if_absent(key, payload)
            winners.append(payload)
        except ObjectAlreadyExists:
            losers.append(payload)
        except BaseException as exc:  # surfaced below: a thread cannot fail the test itself
            failures.append(exc)

    threads = [
        threading.Thread(target=contend, args=(f"attempt-{i}".encode() * 100,)) for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert len(winners) == 1
    assert len(losers) == 7
    assert store.get(key) == winners[0]


# -- list ----------------------------------------------------------------------------------


def test_list_is_recursive_and_in_byte_order(store: ObjectStore) -> None:
    # "a/x" sorts after "a-b" and "a.c" in byte order although a tree walk meets it first.
    for key in ["é", "z/y/x", "a0", "a/x", "a.c", "a-b", "B"]:
        store.put(key, key.encode())

    assert store.list() == [
        ObjectInfo("B", 1),
        ObjectInfo("a-b", 3),
        ObjectInfo("a.c", 3),
        ObjectInfo("a/x", 3),
        ObjectInfo("a0", 2),
        ObjectInfo("z/y/x", 5),
        ObjectInfo("é", 2),
    ]


def test_list_filters_by_string_prefix(store: ObjectStore) -> None:
    for key in ["a/x", "a-b", "a0", "ab/c/d", "b/a"]:
        store.put(key, b"1")

    assert keys(store, "a") == ["a-b", "a/x", "a0", "ab/c/d"]
    assert keys(store, "a/") == ["a/x"]
    assert keys(store, "ab/c/") == ["ab/c/d"]
    assert keys(store, "ab/c/d") == ["ab/c/d"]
    assert keys(store, "missing/") == []


def test_list_from_a_start_key_gives_only_the_keys_after_it(store: ObjectStore) -> None:
    names = ["dt=2026-12-06/h=23/a", "dt=2026-12-07/h=07/b", "dt=2026-12-07/h=08/c",
             "dt=2026-12-07/h=08/d/e", "dt=2026-12-07/h=09/f", "dt=2026-12-08/g", "z"]  # fmt: skip
    for key in names:
        store.put(key, b"1")

    # a start key that is no folder's own path: SeaweedFS takes "dt=2026-12-07/h=08" as "after
    # that folder" (it walks folders); S3 compares keys (sluice.sources.file_listing)
    assert keys_after(store, "", "dt=2026-12-07/h=07\U0010ffff") == names[2:]
    assert keys_after(store, "", "dt=2026-12-07/h=08/c") == names[3:]
    assert keys_after(store, "dt=2026-12-07/", "dt=2026-12-07/h=07/b") == names[2:5]
    assert keys_after(store, "", "zz") == []
    assert keys_after(store, "", "") == names


def test_listed_objects_carry_their_modification_time(store: ObjectStore) -> None:
    import time

    before = time.time_ns() - 5_000_000_000  # the server's clock may differ a little
    store.put("a/b", b"12345")
    (info,) = store.list()
    assert info.size == 5
    assert before <= info.modified_ns <= time.time_ns() + 5_000_000_000
    if not isinstance(store, LocalObjectStore):
        assert info.etag == "827ccb0eea8a706c4c34a16891f84e7b"  # MD5 of "12345", unquoted


def test_info_is_one_objects_listing_entry(store: ObjectStore) -> None:
    store.put("a/b", b"12345")
    store.put("a/bc", b"1")
    (listed,) = [i for i in store.list() if i.key == "a/b"]
    info = store.info("a/b")
    assert info == listed and (info.modified_ns, info.etag) == (listed.modified_ns, listed.etag)
    assert store.info("a") is None and store.info("a/x") is None


def test_move_to_another_store_of_the_backend_and_again(store: ObjectStore) -> None:
    source, archive = store.child("in"), store.child("archive")
    source.put("d/f.jsonl", b"data")
    source.move_to("d/f.jsonl", archive, "d/f.jsonl")
    assert not source.exists("d/f.jsonl") and archive.get("d/f.jsonl") == b"data"
    source.move_to("d/f.jsonl", archive, "d/f.jsonl")  # re-run after a crash: done already
    with pytest.raises(ObjectNotFound):
        source.move_to("d/none.jsonl", archive, "d/none.jsonl")


def keys_after(store: ObjectStore, prefix: str, start_after: str) -> list[str]:
    return [info.key for info in store.list(prefix, start_after=start_after)]


def test_list_of_an_empty_store_is_empty(store: ObjectStore) -> None:
    assert store.list() == []


def test_list_pages_through_many_objects(store: ObjectStore) -> None:
    expected = [f"state/{i:04d}" for i in range(1105)]  # > one 1000-key S3 page
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda key: store.put(key, b""), expected))

    assert keys(store, "state/") == expected


# -- delete / move -------------------------------------------------------------------------


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put("k", b"1")

    store.delete("k")
    store.delete("k")
    store.delete("never/was")

    assert not store.exists("k")
    assert store.list() == []


def test_move_replaces_dst_and_removes_src(store: ObjectStore) -> None:
    store.put("staging/a", b"new")
    store.put("final/deep/a", b"old")

    store.move("staging/a", "final/deep/a")

    assert store.get("final/deep/a") == b"new"
    assert not store.exists("staging/a")


def test_move_into_a_new_directory(store: ObjectStore) -> None:
    store.put("a", b"1")

    store.move("a", "x/y/z")

    assert keys(store) == ["x/y/z"]


def test_move_rerun_after_crash_between_copy_and_delete(store: ObjectStore) -> None:
    store.put("src", b"payload")
    store.put("dst", b"payload")  # the crashed run copied but never deleted

    store.move("src", "dst")

    assert keys(store) == ["dst"]
    assert store.get("dst") == b"payload"


def test_move_rerun_after_it_completed_is_a_no_op(store: ObjectStore) -> None:
    store.put("src", b"payload")
    store.move("src", "dst")

    store.move("src", "dst")

    assert keys(store) == ["dst"]
    assert store.get("dst") == b"payload"


def test_move_of_absent_src_without_dst_raises_naming_src(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as caught:
        store.move("nowhere", "dst")

    assert caught.value.uri == store.uri("nowhere")


def test_delete_prefix_removes_everything_under_it(store: ObjectStore) -> None:
    for key in ["state/1-a/p0", "state/1-a/sub/p1", "state/1-b/p0", "state/10/p0", "keep"]:
        store.put(key, b"1")

    assert store.delete_prefix("state/1-") == 3
    assert keys(store) == ["keep", "state/10/p0"]
    assert store.delete_prefix("state/1-") == 0
    assert store.delete_prefix("absent/") == 0


def test_delete_prefix_empty_clears_the_store(store: ObjectStore) -> None:
    for key in ["a", "b/c", "d/e/f"]:
        store.put(key, b"1")

    assert store.delete_prefix("") == 3
    assert store.list() == []


# -- child stores and URIs -----------------------------------------------------------------


def test_child_store_is_a_view_under_its_prefix(store: ObjectStore) -> None:
    orders = store.child("pipelines/orders")
    orders.put("epochs/1", b"x")

    assert orders.uri() == store.uri("pipelines/orders")
    assert orders.uri("epochs/1") == store.uri("pipelines/orders/epochs/1")
    assert store.get("pipelines/orders/epochs/1") == b"x"
    assert keys(orders) == ["epochs/1"]
    assert keys(orders.child("epochs")) == ["1"]


def test_child_stores_do_not_see_siblings(store: ObjectStore) -> None:
    store.child("p/a").put("k", b"a")
    store.child("p/ab").put("k", b"ab")  # "p/a" is a string prefix of "p/ab"

    assert keys(store.child("p/a")) == ["k"]
    assert store.child("p/a").delete_prefix("") == 1
    assert keys(store) == ["p/ab/k"]


def test_child_accepts_one_trailing_slash(store: ObjectStore) -> None:
    assert store.child("a/b/").uri() == store.child("a/b").uri()


# -- key validation ------------------------------------------------------------------------

BAD_KEYS = ["", "../escape", "a/../../escape", "/etc/passwd", "a\\..\\b", "\\etc", "a//b", "a/"]
BAD_KEYS += [".", "./a"]
BAD_KEYS += ["a/.tmp-123", ".hidden", "nul\x00byte"]


@pytest.mark.parametrize("bad", BAD_KEYS)
def test_bad_keys_are_refused_naming_the_key(store: ObjectStore, bad: str) -> None:
    inner = store.child("inner")
    operations: list[Callable[[], object]] = [
        lambda: inner.put(bad, b"x"),
        lambda: inner.put_if_absent(bad, b"x"),
        lambda: inner.get(bad),
        lambda: inner.exists(bad),
        lambda: inner.delete(bad),
        lambda: inner.move(bad, "ok"),
        lambda: inner.move("ok", bad),
    ]
    for operation in operations:
        with pytest.raises(InvalidKey) as caught:
            operation()
        assert repr(bad) in str(caught.value)
        assert isinstance(caught.value, StorageError)

    assert store.list() == []  # nothing escaped into the parent


@pytest.mark.parametrize("bad", ["../x", "a//", "/abs/", "..", ".tmp"])
def test_bad_prefixes_are_refused(store: ObjectStore, bad: str) -> None:
    for operation in (store.list, store.delete_prefix, store.child):
        with pytest.raises(InvalidKey):
            operation(bad)


def test_one_objects_fingerprint_is_what_the_listing_gives_and_writes_nothing(
    store: ObjectStore,
) -> None:
    store.put("t/_delta_log/00000000000000000000.json", b"{}\n")
    store.put("t/_delta_log/00000000000000000000.json.crc", b"crc")
    before = keys(store)
    one = store.fingerprint("t/_delta_log/00000000000000000000.json")
    assert keys(store) == before  # nothing written (no memo beside someone else's file)
    if isinstance(store, LocalObjectStore):  # the listing skips hidden files: look on disk
        assert [p.name for p in store.root.rglob(".*")] == []
    listed = store.fingerprints("t/")
    assert one == listed["t/_delta_log/00000000000000000000.json"]
    assert store.fingerprint("t/_delta_log/00000000000000000001.json") is None
    store.put("t/_delta_log/00000000000000000000.json", b"{} \n")
    assert store.fingerprint("t/_delta_log/00000000000000000000.json") != one

"""Storage faults: a fault-injecting proxy (tests/fixtures/s3proxy.py) in front of SeaweedFS.

(a) every object-store operation succeeds through each fault kind on its first try (retries
with backoff), and put-if-absent picks the right winner when its first try landed but the
answer was lost; (b) the click pipeline, boto3 and s3a both through the proxy, drains under a
mixed fault rate to exactly the reference; (c) an outage longer than the retries fails the step
with a storage error naming the key, leaves only complete checkpoints, and resuming after the
proxy heals ends at the reference. Seeds and rates are fixed. make test runs (b) and (c) as one
test (6% faults plus an outage at epoch 2's commit); make chaos adds an uninterrupted drain
at 6% and at 10% with hangs, and a full outage while Spark writes through s3a.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sluice.contracts.layout import EPOCHS
from sluice.demo import render_click_files
from sluice.protocol import plan_epoch, process_epoch, run_until_drained
from sluice.spark import configure_s3
from sluice.storage import (
    ObjectAlreadyExists,
    ObjectStore,
    S3ObjectStore,
    S3Options,
    StorageError,
    open_store,
    read_manifest,
)
from sluice.storage.s3 import make_s3_client

from tests.faults.conftest import report
from tests.fixtures.pipelines import (
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec,
    runtime,
)
from tests.fixtures.s3proxy import FaultProxy

pytestmark = pytest.mark.s3

BUCKET = "sluice-tests"
FILES = render_click_files(files=4, events_per_file=80, seed=11)  # 2 epochs
REFERENCE = click_reference(FILES)
BIG_FILES = render_click_files(files=8, events_per_file=80, seed=12)  # 4 epochs (slow)
BIG_REFERENCE = click_reference(BIG_FILES)
FILES_PER_EPOCH = 2
HANG_READ_TIMEOUT_S = 2.0  # the hang cases use a short read timeout; the engine's is 15 s
MIXED = {
    "slowdown": 0.02,
    "internal_error": 0.01,
    "reset_before": 0.01,
    "reset_after": 0.01,
    "slow": 0.01,
}  # 6% of requests faulted
HEAVY = {**MIXED, "slowdown": 0.03, "reset_after": 0.03, "hang": 0.002}  # 10.2%, hangs too
FAULTED = ["slowdown", "internal_error", "reset_before", "reset_after", "slow", "hang"]


def _store(proxy: FaultProxy, *, read_timeout_s: float = 15.0) -> S3ObjectStore:
    client = make_s3_client(proxy.endpoint, read_timeout_s=read_timeout_s)
    return S3ObjectStore(BUCKET, f"faults-{uuid.uuid4().hex[:10]}", client=client)


def _direct(server: Any, store: S3ObjectStore) -> ObjectStore:
    """The same prefix, straight to the server (no proxy): the ground truth."""
    return open_store(store.root_uri, s3=S3Options(endpoint_url=server.endpoint_url))


# -- (a) object-store operations -----------------------------------------------------------


@pytest.mark.parametrize("kind", FAULTED)
def test_each_operation_survives_a_fault_on_its_first_try(
    s3_server: Any, s3_fault_proxy: FaultProxy, kind: str
) -> None:
    s3_server.bucket(BUCKET)
    store = _store(s3_fault_proxy, read_timeout_s=HANG_READ_TIMEOUT_S)
    proxy = s3_fault_proxy

    proxy.rule(kind, method="PUT", path=r"/a\.bin$")
    store.put("a.bin", b"alpha")
    proxy.rule(kind, method="PUT", path=r"/b\.bin$")
    store.put_if_absent("b.bin", b"beta")
    proxy.rule(kind, method="GET", path=r"/a\.bin$")
    assert store.get("a.bin") == b"alpha"
    proxy.rule(kind, method="GET", path=r"list-type=2")
    assert [i.key for i in store.list()] == ["a.bin", "b.bin"]
    proxy.rule(kind, method="DELETE", path=r"/a\.bin$")
    store.delete("a.bin")

    assert proxy.counts().get(kind) == 5, proxy.counts()
    assert _direct(s3_server, store).get("b.bin") == b"beta"
    assert not _direct(s3_server, store).exists("a.bin")


def test_put_if_absent_whose_first_try_landed_still_wins(
    s3_server: Any, s3_fault_proxy: FaultProxy
) -> None:
    """The PUT lands, its answer is lost (RST), the retry gets 412: the bytes are ours."""
    s3_server.bucket(BUCKET)
    store = _store(s3_fault_proxy)
    s3_fault_proxy.rule("reset_after", method="PUT", path=r"/checkpoint\.json$")

    store.put_if_absent("checkpoint.json", b"ours")

    assert s3_fault_proxy.counts().get("reset_after") == 1
    assert _direct(s3_server, store).get("checkpoint.json") == b"ours"
    with pytest.raises(ObjectAlreadyExists):  # and a later, real second writer still loses
        store.put_if_absent("checkpoint.json", b"ours")


def test_put_if_absent_never_replaces_a_competing_writer(
    s3_server: Any, s3_fault_proxy: FaultProxy
) -> None:
    """Another writer got there first; our faulted, retried put must lose, not overwrite."""
    s3_server.bucket(BUCKET)
    store = _store(s3_fault_proxy)
    _direct(s3_server, store).put_if_absent("checkpoint.json", b"theirs")

    for kind in ("reset_after", "reset_before", "slowdown"):
        s3_fault_proxy.rule(kind, method="PUT", path=r"/checkpoint\.json$")
        with pytest.raises(ObjectAlreadyExists, match=r"checkpoint\.json"):
            store.put_if_absent("checkpoint.json", b"ours")
        assert _direct(s3_server, store).get("checkpoint.json") == b"theirs"
    assert {k: s3_fault_proxy.counts().get(k) for k in ("reset_after", "reset_before")} == {
        "reset_after": 1,
        "reset_before": 1,
    }


def test_mixed_fault_rate_on_many_operations(s3_server: Any, s3_fault_proxy: FaultProxy) -> None:
    s3_server.bucket(BUCKET)
    store = _store(s3_fault_proxy)
    s3_fault_proxy.policy(rates={**MIXED, "slowdown": 0.1, "reset_after": 0.1})

    for i in range(25):
        store.put(f"k/{i:03d}", str(i).encode())
        store.put_if_absent(f"once/{i:03d}", str(i).encode())
    got = {i.key: store.get(i.key) for i in store.list("k/")}

    assert got == {f"k/{i:03d}": str(i).encode() for i in range(25)}
    counts = s3_fault_proxy.counts()
    assert counts["requests"] - counts.get("pass", 0) >= 5, counts
    direct = _direct(s3_server, store)
    assert [direct.get(f"once/{i:03d}") for i in range(25)] == [str(i).encode() for i in range(25)]


# -- (b), (c) the pipeline through the proxy -----------------------------------------------


@pytest.fixture
def proxied(
    spark: Any, s3_server: Any, s3_fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FaultProxy]:
    """boto3 (AWS_ENDPOINT_URL) and s3a (fs.s3a.endpoint) both through the proxy."""
    s3_server.bucket(BUCKET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_fault_proxy.endpoint)
    configure_s3(spark, None)
    yield s3_fault_proxy
    monkeypatch.undo()
    configure_s3(spark, None)  # back to the server itself


def _workspace() -> Workspace:
    return Workspace("s3", f"s3://{BUCKET}/faults-{uuid.uuid4().hex[:10]}")


def _spec(ws: Workspace, files: list[tuple[str, bytes]] = FILES) -> Any:
    ws.put_files(files)
    return click_spec(
        ws,
        source={
            "type": "files",
            "path": ws.uri("in"),
            "format": "jsonl",
            "schema": {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"},
            "max_files_per_epoch": FILES_PER_EPOCH,
        },
    )


def _assert_exact(spec: Any, reference: Any = REFERENCE) -> None:
    assert_click_output_exact(spec, reference)


def _checkpoints_valid(server: Any, spec: Any) -> list[int]:
    """Epochs with a stored checkpoint.json, each read straight from the server and decoded
    (CorruptObject if any is incomplete or its checksum is wrong)."""
    uri = runtime(spec).repo.store.root_uri
    store = open_store(uri, s3=S3Options(endpoint_url=server.endpoint_url))
    found = [i.key for i in store.list(EPOCHS) if i.key.endswith("/checkpoint.json")]
    for key in found:
        read_manifest(store, key, "checkpoint")
    return sorted(int(key[len(EPOCHS) :].split("/", 1)[0]) for key in found)


def _report_counts(request: pytest.FixtureRequest, proxy: FaultProxy) -> dict[str, int]:
    counts = proxy.counts()
    print(f"proxy counts: {counts}")
    report(request.config, f"storage faults: proxy counts ({request.node.name})", [str(counts)])
    return counts


def test_pipeline_under_faults_survives_an_outage_at_commit_then_resumes_exactly(
    request: pytest.FixtureRequest, spark: Any, s3_server: Any, proxied: FaultProxy
) -> None:
    """6% of requests faulted throughout; on top, every write of epoch 2's checkpoint answers
    503 until the retries run out. The run fails naming that key, leaves only epoch 1's
    (valid) checkpoint; after the proxy heals, resuming ends at the reference."""
    spec = _spec(_workspace())
    proxied.reseed(1).policy(rates=MIXED)
    proxied.rule("slowdown", method="PUT", path=r"/000000000002/checkpoint\.json$", times=10**6)

    with pytest.raises(StorageError, match=r"s3://.*/epochs/000000000002/checkpoint\.json") as err:
        run_until_drained(runtime(spec), spark)
    assert "SlowDown" in str(err.value)
    assert _checkpoints_valid(s3_server, spec) == [1]

    proxied.heal().policy(rates=MIXED)
    outcomes = run_until_drained(runtime(spec, prefix="b"), spark)

    counts = _report_counts(request, proxied.heal())
    assert [o.checkpoint.epoch for o in outcomes] == [2]
    assert counts["requests"] - counts.get("pass", 0) - counts.get("slowdown", 0) > 0, counts
    _assert_exact(spec)
    assert _checkpoints_valid(s3_server, spec) == [1, 2]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "reference", "rates", "seed"),
    [
        pytest.param(FILES, REFERENCE, MIXED, 1, id="6pct"),
        pytest.param(BIG_FILES, BIG_REFERENCE, HEAVY, 2, id="10pct-hang"),
    ],
)
def test_pipeline_drains_exactly_under_mixed_faults(
    request: pytest.FixtureRequest,
    spark: Any,
    s3_server: Any,
    proxied: FaultProxy,
    files: list[tuple[str, bytes]],
    reference: Any,
    rates: dict[str, float],
    seed: int,
) -> None:
    spec = _spec(_workspace(), files)
    proxied.reseed(seed).policy(rates=rates)

    outcomes = run_until_drained(runtime(spec), spark)

    counts = _report_counts(request, proxied.heal())
    epochs = list(range(1, len(files) // FILES_PER_EPOCH + 1))
    assert [o.checkpoint.epoch for o in outcomes] == epochs
    assert counts["requests"] - counts.get("pass", 0) > 0, counts
    _assert_exact(spec, reference)
    assert _checkpoints_valid(s3_server, spec) == epochs


@pytest.mark.slow
def test_outage_of_spark_writes_fails_the_step_then_resumes_exactly(
    request: pytest.FixtureRequest, spark: Any, s3_server: Any, proxied: FaultProxy
) -> None:
    """503 to every PUT of the keyed-state snapshot (only Spark writes it, through s3a;
    epoch 1 closes no window, so its sinks may write nothing): process fails once s3a's
    retries are spent, naming the key; the attempt is marked failed, no checkpoint
    exists; after healing, resuming ends at the reference."""
    spec = _spec(_workspace())
    rt = runtime(spec)
    assert plan_epoch(rt, max_units=FILES_PER_EPOCH) is not None
    proxied.rule("slowdown", method="PUT", path=r"/ckpt/clicks/state/", times=10**6)

    # Spark's error (a Py4JJavaError around S3A's AWSServiceThrottledException) names the
    # bucket-relative key, not an s3a:// URI, and is not wrapped in a StorageError.
    with pytest.raises(Exception, match=r"ckpt/clicks/state/000000000001-") as err:
        process_epoch(rt, spark, 1)
    print(f"outage error: {type(err.value).__name__}: {str(err.value)[:300]}")
    assert "Status Code: 503" in str(err.value)
    proxied.heal()
    assert _checkpoints_valid(s3_server, spec) == []
    assert [a.status.value for a in rt.repo.attempts(1)] == ["failed"]

    outcomes = run_until_drained(runtime(spec, prefix="b"), spark)

    _report_counts(request, proxied)
    assert [o.checkpoint.epoch for o in outcomes] == [1, 2]
    _assert_exact(spec)
    assert _checkpoints_valid(s3_server, spec) == [1, 2]

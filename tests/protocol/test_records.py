"""The protocol's typed records read and write exactly the JSON stored before they were typed:
a plan's ``restored_from``, a voided checkpoint's ``extra.void`` and a marker's output fate."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.contracts.records import (
    OutputFate,
    Plan,
    Restore,
    SinksCommitted,
    StateMigration,
    Void,
)

STORED_RESTORES: list[dict[str, Any]] = [
    {"kind": "checkpoint", "epoch": 2, "retract_after": 2, "rewound": [3, 4]},
    {"kind": "savepoint", "epoch": 2, "retract_after": 2, "rewound": [3], "savepoint": "at-2"},
    {"kind": "checkpoint", "epoch": 1, "retract_after": 1, "rewound": [2, 3],
     "missing_input": ["f2.jsonl"]},
    {"kind": "offsets", "requested": {"after_key": "b.jsonl"}},
    {"kind": "offsets", "requested": {"after_key": "b.jsonl"},
     "skipped_from": {"type": "files", "after_key": "a.jsonl"}},
]  # fmt: skip


@pytest.mark.parametrize("stored", STORED_RESTORES)
def test_a_stored_restore_reads_and_writes_unchanged(stored: dict[str, Any]) -> None:
    restore = Restore.from_dict(stored)
    assert restore is not None and restore.to_dict() == stored
    assert restore.kind == stored["kind"]
    rewinds = stored["kind"] != "offsets"
    assert restore.retract_after == (stored["epoch"] if rewinds else None)


def test_no_restore_is_none() -> None:
    assert Restore.from_dict(None) is None and Restore.from_dict({}) is None


def test_void_and_output_fate_keep_their_stored_form() -> None:
    void = Void.from_dict({"restore_to": 1, "quarantined": ["pipe/state/x"]})
    assert void == Void(1, ("pipe/state/x",))
    assert void.to_dict() == {"restore_to": 1, "quarantined": ["pipe/state/x"]}
    marker = SinksCommitted(3, "a1", 10.0, 0.5, OutputFate.WRITTEN)
    assert marker.to_dict()["output"] == "written"
    assert SinksCommitted.from_dict(marker.to_dict()) == marker
    old = {"epoch": 3, "attempt": "a1", "committed_at": 10.0, "commit_seconds": 0.5}
    assert SinksCommitted.from_dict(old).output is OutputFate.COMMITTED  # before fates
    with pytest.raises(ValueError, match="nonsense"):
        SinksCommitted.from_dict({**old, "output": "nonsense"})
    assert "published" not in marker.to_dict()  # no receipt: the stored form of before
    receipt = SinksCommitted(3, "a1", 10.0, 0.5, published={"lake": "snapshot 42"})
    assert receipt.to_dict()["published"] == {"lake": "snapshot 42"}
    assert SinksCommitted.from_dict(receipt.to_dict()) == receipt


def test_the_last_refusal_is_kept_and_replaced(tmp_path: Any) -> None:
    from sluice.protocol.repository import Repository
    from sluice.storage import open_store

    repo = Repository(open_store(str(tmp_path)))
    assert repo.last_refusal() is None
    repo.record_refusal("manual__1", "restore_from_epoch: epoch 0 is not a checkpoint", 10)
    repo.record_refusal("manual__2", "take_savepoint: 'a' is taken", 20)
    assert repo.last_refusal() == {
        "run_id": "manual__2",
        "message": "take_savepoint: 'a' is taken",
        "at_us": 20,
    }
    assert repo.committed_epochs() == [] and repo.savepoints() == []


def _plan(**changes: Any) -> Plan:
    body: dict[str, Any] = {
        "pipeline": "p", "epoch": 3,
        "source_range": {"type": "files", "files": ["a"]},
        "start_offset": {"type": "files", "last": None},
        "end_offset": {"type": "files", "last": "a"},
        "watermark": {"max_event_time_us": {"0": 5}}, "state": {"uri": None, "rows": 0},
        "fingerprint": "sha256:x", "state_shape": {"operator": "stateless"}, "created_at": 1.0,
        "plan_seconds": 0.0, "run_id": None, "restored_from": None, "state_migration": None,
    }  # fmt: skip
    return Plan.from_dict({**body, **changes})


def test_a_plan_keeps_its_stored_form() -> None:
    """A join's sources live in the composite range and offsets of the same three fields
    (sluice.sources.multi), so every plan has one stored form."""
    plan = _plan()
    stored = plan.to_dict()
    assert "sources" not in stored
    assert stored["source_range"] == {"type": "files", "files": ["a"]}
    assert Plan.from_dict(stored) == plan


def test_a_plan_state_migration_is_typed_and_stored_as_before() -> None:
    stored = {"added": ["aggregate m: added (max(x))"], "dropped": [], "reset_all": False,
              "reset_aggregates": [], "reset_states": []}  # fmt: skip
    plan = _plan(state_migration=stored)
    assert plan.state_migration == StateMigration(added=("aggregate m: added (max(x))",))
    assert plan.to_dict()["state_migration"] == stored

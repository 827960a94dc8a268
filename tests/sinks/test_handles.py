"""A sink's prepared handle (contracts.records.Handle): stored as Prepared.details with the
keys sinks always wrote, read back typed, and read from the bare Prepared recovery aborts a
dead attempt with (no details at all)."""

from __future__ import annotations

import pytest
from sluice.contracts.records import NoHandle, Prepared
from sluice.examples.sqlite_sink import SqliteStaged
from sluice.sinks.delta import DeltaStaged
from sluice.sinks.postgres.sink import PostgresStaged


@pytest.mark.parametrize(
    ("handle", "stored"),
    [
        (
            PostgresStaged("public.out", "sluice_staging.s_1"),
            {"table": "public.out", "staging_table": "sluice_staging.s_1"},
        ),
        (PostgresStaged("public.out"), {"table": "public.out"}),
        (
            DeltaStaged("sluice-p-out", "lake/_sluice_staging/1-a"),
            {"txn_app_id": "sluice-p-out", "staging": "lake/_sluice_staging/1-a"},
        ),
        (DeltaStaged("sluice-p-out"), {"txn_app_id": "sluice-p-out"}),
        (SqliteStaged("clicks", "staging_1"), {"table": "clicks", "staging_table": "staging_1"}),
        (NoHandle(), {}),
    ],
)
def test_a_handle_is_stored_as_the_details_sinks_always_wrote(handle: object, stored: dict) -> None:
    prepared = Prepared.of("out", "uri", 3, "a1", 7, handle)  # type: ignore[arg-type]
    assert prepared.to_dict().get("details", {}) == stored
    again = Prepared.from_dict(prepared.to_dict())
    assert again.handle(type(handle)) == handle  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "empty"),
    [
        (PostgresStaged, PostgresStaged(None, None)),
        (DeltaStaged, DeltaStaged(None, None)),
        (SqliteStaged, SqliteStaged(None, None)),
        (NoHandle, NoHandle()),
    ],
)
def test_the_bare_prepared_of_recovery_gives_an_empty_handle(kind: type, empty: object) -> None:
    assert Prepared("out", "", 3, "a1", 0).handle(kind) == empty

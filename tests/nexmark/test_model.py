"""NexmarkConfig validation and serialisation; the record types and their column schemas."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from sluice.exceptions import SluiceError
from sluice.nexmark import (
    ARROW_SCHEMAS,
    SPEC_SCHEMAS,
    Auction,
    Bid,
    EventKind,
    InvalidNexmarkConfig,
    NexmarkConfig,
    Person,
    generate_rows,
    record_from_row,
)


def test_defaults_are_beams() -> None:
    config = NexmarkConfig()

    assert config.events_per_second == 10_000
    assert (config.num_in_flight_auctions, config.num_active_people) == (100, 1000)
    assert (config.hot_auction_ratio, config.hot_bidders_ratio, config.hot_sellers_ratio) == (
        2,
        4,
        4,
    )
    assert (
        config.avg_person_byte_size,
        config.avg_auction_byte_size,
        config.avg_bid_byte_size,
    ) == (200, 500, 100)
    assert datetime.fromtimestamp(config.base_time_us / 1e6, UTC) == datetime(
        2026, 1, 1, tzinfo=UTC
    )


def test_every_bad_field_is_reported_at_once() -> None:
    with pytest.raises(InvalidNexmarkConfig) as caught:
        NexmarkConfig(seed=-1, events_per_second=0, hot_auction_ratio=0, avg_bid_byte_size=10**6)

    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == [
        "seed",
        "events_per_second",
        "hot_auction_ratio",
        "avg_bid_byte_size",
    ]
    assert "events_per_second: 0 is outside [1, 1000000000]" in str(caught.value)
    assert isinstance(caught.value, SluiceError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("value", [True, 1.5, "10", None])
def test_non_integers_are_refused(value: object) -> None:
    with pytest.raises(InvalidNexmarkConfig, match="events_per_second: expected an integer"):
        NexmarkConfig(events_per_second=value)  # type: ignore[arg-type]


def test_config_round_trips_through_a_dict() -> None:
    config = NexmarkConfig(seed=2**64 - 1, events_per_second=7, first_event_id=500)

    assert NexmarkConfig.from_dict(config.to_dict()) == config
    assert NexmarkConfig.from_dict({"seed": 3}) == NexmarkConfig(seed=3)


def test_unknown_config_keys_are_refused() -> None:
    with pytest.raises(InvalidNexmarkConfig, match="rate: unknown field; known: seed, "):
        NexmarkConfig.from_dict({"rate": 5})


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        NexmarkConfig().seed = 1  # type: ignore[misc]


def test_schemas_use_nexmark_field_names() -> None:
    assert ARROW_SCHEMAS[EventKind.BID].names == [
        "event_id",
        "auction",
        "bidder",
        "price",
        "channel",
        "url",
        "date_time",
        "extra",
    ]
    assert ARROW_SCHEMAS[EventKind.PERSON].field("date_time").type == pa.timestamp("us", tz="UTC")
    assert SPEC_SCHEMAS[EventKind.AUCTION] == {
        "event_id": "long",
        "id": "long",
        "item_name": "string",
        "description": "string",
        "initial_bid": "long",
        "reserve": "long",
        "date_time": "timestamp",
        "expires": "timestamp",
        "seller": "long",
        "category": "long",
        "extra": "string",
    }
    assert list(SPEC_SCHEMAS[EventKind.PERSON]) == ARROW_SCHEMAS[EventKind.PERSON].names


def test_rows_become_typed_records() -> None:
    records = [record_from_row(row["kind"], row) for row in generate_rows(0, 50)]

    assert [type(r) for r in records[:5]] == [Person, Auction, Auction, Auction, Bid]
    person = records[0]
    assert isinstance(person, Person) and person.id == 1000
    assert person.date_time == datetime(2026, 1, 1, tzinfo=UTC)

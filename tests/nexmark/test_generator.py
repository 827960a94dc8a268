"""The generator against Beam's rules: kinds, ids, references, times, hot shares, determinism.

Expected ids and times are recomputed here from Beam's formulas in plain Python, independently
of the vectorised code under test.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.nexmark import (
    ARROW_SCHEMAS,
    EventKind,
    InvalidEventRange,
    NexmarkConfig,
    event_kind,
    event_time_us,
    generate,
    generate_rows,
    last_auction_id,
    last_person_id,
)
from sluice.nexmark.files import encode_jsonl
from sluice.nexmark.generator import chunk_size

KINDS = list(EventKind)


def column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy()


def newest_person(event_id: int) -> int:
    """Beam: one person opens every block of 50 events."""
    return 1000 + event_id // 50


def newest_auction(event_id: int) -> int:
    """Beam: three auctions follow the person in each block."""
    created = (event_id // 50) * 3 + min(max(event_id % 50, 0), 3)
    return 1000 + created - 1


# ---------------------------------------------------------------- kinds


def test_every_block_of_50_is_1_person_3_auctions_46_bids() -> None:
    rows = generate_rows(0, 500)

    for block in range(10):
        kinds = [r["kind"] for r in rows[block * 50 : (block + 1) * 50]]
        assert kinds == ["person"] + ["auction"] * 3 + ["bid"] * 46


@pytest.mark.parametrize(("start", "stop"), [(0, 50_000), (17, 10_017), (123_456, 133_456)])
def test_any_50_event_multiple_has_exact_proportions(start: int, stop: int) -> None:
    counts = {kind: t.num_rows for kind, t in generate(start, stop).items()}

    blocks = (stop - start) // 50
    assert counts == {
        EventKind.PERSON: blocks,
        EventKind.AUCTION: 3 * blocks,
        EventKind.BID: 46 * blocks,
    }


def test_event_kind_agrees_with_the_tables_and_first_event_id() -> None:
    config = NexmarkConfig(first_event_id=7)
    tables = generate(0, 300, config)

    for kind, table in tables.items():
        for event_id in column(table, "event_id"):
            assert event_kind(int(event_id) - 7, config) == kind
    every_id = sorted(i for t in tables.values() for i in column(t, "event_id"))
    assert every_id == list(range(7, 307))


# ---------------------------------------------------------------- ids and references


def test_persons_and_auctions_get_consecutive_ids_from_1000() -> None:
    tables = generate(0, 5_000)

    assert list(column(tables[EventKind.PERSON], "id")) == list(range(1000, 1100))
    assert list(column(tables[EventKind.AUCTION], "id")) == list(range(1000, 1300))
    for n in (0, 1, 3, 4, 49, 50, 51, 53, 54, 4999):
        assert last_person_id(n) == newest_person(n)
        assert last_auction_id(n) == newest_auction(n)
    assert last_auction_id(0) == 999  # no auction yet


def test_bids_reference_existing_auctions_and_people_or_a_few_ahead() -> None:
    bids = generate(0, 60_000)[EventKind.BID]

    for event_id, auction, bidder in zip(
        column(bids, "event_id"), column(bids, "auction"), column(bids, "bidder"), strict=True
    ):
        last_a, last_p = newest_auction(int(event_id)), newest_person(int(event_id))
        hot_auction = 1000 + (last_a - 1000) // 100 * 100
        assert auction == hot_auction or max(last_a - 100, 1000) <= auction <= last_a + 10
        hot_bidder = 1000 + (last_p - 1000) // 100 * 100 + 1
        assert bidder == hot_bidder or max(last_p - 999, 1000) <= bidder <= last_p + 10


def test_auctions_are_sold_by_existing_people_or_a_few_ahead() -> None:
    auctions = generate(0, 100_000)[EventKind.AUCTION]

    for event_id, seller in zip(
        column(auctions, "event_id"), column(auctions, "seller"), strict=True
    ):
        last_p = newest_person(int(event_id))
        hot_seller = 1000 + (last_p - 1000) // 100 * 100
        assert seller == hot_seller or max(last_p - 999, 1000) <= seller <= last_p + 10


# ---------------------------------------------------------------- times


@pytest.mark.parametrize("rate", [1, 3, 10_000, 10**6, 3 * 10**6])
def test_event_time_is_base_plus_number_over_rate(rate: int) -> None:
    config = NexmarkConfig(events_per_second=rate, base_time_us=10**15)
    start = 987_650
    tables = generate(start, start + 1_000, config)

    times: dict[int, int] = {}
    for table in tables.values():
        micros = table.column("date_time").cast(pa.int64()).to_numpy()
        times.update(zip(column(table, "event_id").tolist(), micros.tolist(), strict=True))
    ordered = [times[n] for n in sorted(times)]
    assert ordered == [10**15 + n * 1_000_000 // rate for n in range(start, start + 1_000)]
    assert ordered == [event_time_us(n, config) for n in range(start, start + 1_000)]
    assert all(a <= b for a, b in itertools.pairwise(ordered))


def test_auctions_expire_within_two_horizons() -> None:
    auctions = generate(0, 200_000)[EventKind.AUCTION]
    opened = auctions.column("date_time").cast(pa.int64()).to_numpy()
    length = auctions.column("expires").cast(pa.int64()).to_numpy() - opened

    horizon = (100 * 50 // 3) * 100  # 1666 events at 100 µs each
    assert length.min() >= 1 and length.max() <= 2 * horizon
    assert abs(length.mean() - horizon) < 0.03 * horizon


# ---------------------------------------------------------------- hot shares


def share(values: np.ndarray, expected: np.ndarray) -> float:
    return float(np.mean(values == expected))


def test_hot_auctions_bidders_and_sellers_get_beams_share() -> None:
    tables = generate(100_000, 400_000)
    bids, auctions = tables[EventKind.BID], tables[EventKind.AUCTION]
    bid_ids, auction_ids = column(bids, "event_id"), column(auctions, "event_id")

    hot_auction = 1000 + ((bid_ids // 50) * 3 + 2) // 100 * 100
    hot_bidder = 1000 + (bid_ids // 50) // 100 * 100 + 1
    hot_seller = 1000 + (auction_ids // 50) // 100 * 100
    # hot with probability 1 - 1/ratio, plus the random picks that land on the hot one
    assert share(column(bids, "auction"), hot_auction) == pytest.approx(0.5 + 0.5 / 111, abs=0.01)
    assert share(column(bids, "bidder"), hot_bidder) == pytest.approx(0.75 + 0.25 / 1010, abs=0.01)
    assert share(column(auctions, "seller"), hot_seller) == pytest.approx(0.75, abs=0.02)
    hot_channels = pc.is_in(
        bids.column("channel"), pa.array(["Google", "Facebook", "Baidu", "Apple"])
    )
    assert pc.mean(hot_channels.cast(pa.int8())).as_py() == pytest.approx(0.5, abs=0.01)


def test_a_hot_ratio_of_one_turns_hot_picks_off() -> None:
    config = NexmarkConfig(hot_auction_ratio=1)
    bids = generate(100_000, 200_000, config)[EventKind.BID]
    ids = column(bids, "event_id")

    hot_auction = 1000 + ((ids // 50) * 3 + 2) // 100 * 100
    assert share(column(bids, "auction"), hot_auction) == pytest.approx(1 / 111, abs=0.005)


# ---------------------------------------------------------------- values


def test_field_values_follow_beam() -> None:
    rows = generate_rows(0, 20_000)
    persons = [r for r in rows if r["kind"] == "person"]
    auctions = [r for r in rows if r["kind"] == "auction"]
    bids = [r for r in rows if r["kind"] == "bid"]

    for p in persons:
        assert re.fullmatch(r"\d{4} \d{4} \d{4} \d{4}", p["credit_card"])
        assert re.fullmatch(r"[a-z ]*@[a-z ]*\.com", p["email_address"])
        assert p["state"] in {"AZ", "CA", "ID", "OR", "WA", "WY"} and p["city"]
        assert len(p["name"].split(" ")) == 2
    for a in auctions:
        assert 10 <= a["category"] <= 14 and 100 <= a["initial_bid"] <= a["reserve"]
        assert len(a["item_name"]) <= 19 and len(a["description"]) <= 99
        assert a["item_name"] == a["item_name"].strip()
    for b in bids:
        assert 100 <= b["price"] <= 100_000_000
        assert re.fullmatch(
            r"https://www\.nexmark\.com/[a-z_]{3,4}/[a-z_]{3,4}/[a-z_]{3,4}/item\.htm\?query=1(&channel_id=-?\d+)?",
            b["url"],
        )
        assert re.fullmatch(r"channel-\d{1,4}|Google|Facebook|Baidu|Apple", b["channel"])
        assert re.fullmatch(r"[a-z]*", b["extra"])
    assert Counter(a["category"] for a in auctions).keys() == {10, 11, 12, 13, 14}


def test_channel_urls_are_a_function_of_the_channel() -> None:
    bids = generate(0, 200_000)[EventKind.BID]
    pairs = set(
        zip(bids.column("channel").to_pylist(), bids.column("url").to_pylist(), strict=True)
    )

    assert len(pairs) == len({channel for channel, _ in pairs})


# Beam's "idealized" size: 8 bytes per number, the length of each counted string, then extra.
SIZED = {
    EventKind.BID: (32, ["extra"], 100),
    EventKind.PERSON: (8, ["name", "email_address", "credit_card", "city", "state", "extra"], 200),
    EventKind.AUCTION: (48, ["item_name", "description", "extra"], 500),
}


@pytest.mark.parametrize("kind", KINDS)
def test_extra_pads_events_to_the_average_size(kind: EventKind) -> None:
    table = generate(0, 300_000)[kind]
    fixed, counted, average = SIZED[kind]

    size = fixed + sum(pc.utf8_length(table.column(c)).to_numpy() for c in counted)
    # Beam draws len(extra) uniformly from [gap - d, gap + d) with d = round(gap / 5): -0.5
    assert size.mean() == pytest.approx(average - 0.5, abs=0.5)


# ---------------------------------------------------------------- determinism and splits


def concat(*tables: pa.Table) -> pa.Table:
    return pa.concat_tables(tables)


configs = st.builds(
    NexmarkConfig,
    seed=st.integers(0, 2**64 - 1),
    events_per_second=st.sampled_from([1, 7, 10_000, 2_000_000]),
    first_event_id=st.sampled_from([0, 1, 49, 10**9]),
)


@settings(max_examples=40, deadline=None)
@given(
    config=configs,
    start=st.integers(0, 10**9),
    sizes=st.tuples(st.integers(0, 400), st.integers(0, 400)),
)
def test_a_range_equals_any_split_of_it(
    config: NexmarkConfig, start: int, sizes: tuple[int, int]
) -> None:
    cut, stop = start + sizes[0], start + sizes[0] + sizes[1]

    whole = generate(start, stop, config)
    left, right = generate(start, cut, config), generate(cut, stop, config)

    for kind in KINDS:
        assert whole[kind].schema == ARROW_SCHEMAS[kind]
        assert whole[kind].equals(concat(left[kind], right[kind]))


@settings(max_examples=10, deadline=None)
@given(config=configs, start=st.integers(0, 10**6))
def test_a_replay_is_byte_identical(config: NexmarkConfig, start: int) -> None:
    first, again = generate(start, start + 300, config), generate(start, start + 300, config)

    for kind in KINDS:
        assert encode_jsonl(first[kind]) == encode_jsonl(again[kind])


def test_ranges_larger_than_one_internal_chunk_split_cleanly() -> None:
    config = NexmarkConfig(avg_auction_byte_size=100_000)  # small chunks
    step = chunk_size(config)
    assert step < 10_000

    whole = generate(0, 3 * step + 7, config)
    parts = [generate(a, min(a + 1000, 3 * step + 7), config) for a in range(0, 3 * step + 7, 1000)]
    for kind in KINDS:
        assert whole[kind].equals(concat(*[p[kind] for p in parts]))


def test_seeds_give_different_streams_with_the_same_shape() -> None:
    a, b = generate(0, 5_000, NexmarkConfig(seed=1)), generate(0, 5_000, NexmarkConfig(seed=2))

    assert a[EventKind.PERSON].column("id").equals(b[EventKind.PERSON].column("id"))
    assert not a[EventKind.BID].column("extra").equals(b[EventKind.BID].column("extra"))
    assert not a[EventKind.BID].column("price").equals(b[EventKind.BID].column("price"))


def test_first_event_id_shifts_ids_but_not_times() -> None:
    shifted = generate(0, 2_000, NexmarkConfig(first_event_id=5_000))
    plain = generate(5_000, 7_000)

    for kind in KINDS:
        times = [c for c in ("date_time", "expires") if c in shifted[kind].column_names]
        assert shifted[kind].drop_columns(times).equals(plain[kind].drop_columns(times))
    first_bid = shifted[EventKind.BID].column("date_time")[0].value
    assert first_bid == event_time_us(4)


def test_the_stream_is_pinned() -> None:
    """Rewind relies on the same events coming back on any install: a change here means
    replays of existing offsets would differ (numpy/pyarrow upgrade or a generator change)."""
    tables = generate(0, 2_000, NexmarkConfig(seed=42))
    digest = hashlib.sha256(b"".join(encode_jsonl(tables[k]) for k in KINDS)).hexdigest()

    assert digest == PINNED_DIGEST


PINNED_DIGEST = "a71c321d5ef9048b9491abb8e53d0603b6bf163bdfbe165166733dfef9865b71"


# ---------------------------------------------------------------- ranges


@pytest.mark.parametrize(("start", "stop"), [(-1, 5), (5, 4), (0, 2**62 + 1), (0, 10**30)])
def test_impossible_ranges_are_refused(start: int, stop: int) -> None:
    with pytest.raises(InvalidEventRange, match=re.escape(f"[{start}, {stop})")):
        generate(start, stop)


def test_times_past_the_year_9999_are_refused() -> None:
    with pytest.raises(InvalidEventRange, match="year 9999"):
        generate(10**12 - 5, 10**12, NexmarkConfig(events_per_second=1))


def test_an_empty_range_gives_empty_tables_with_the_schemas() -> None:
    tables = generate(10, 10)

    assert {k: (t.num_rows, t.schema) for k, t in tables.items()} == {
        k: (0, ARROW_SCHEMAS[k]) for k in KINDS
    }
    assert generate_rows(10, 10) == []

"""The deterministic Nexmark event generator: event ``n`` is a pure function of (n, config).

Rules follow Beam's ``org.apache.beam.sdk.nexmark.sources.generator`` (Flink's nexmark repo
for ``Bid.channel`` / ``Bid.url``); docs/nexmark.md lists where and why they differ.

>>> tables = generate(0, 1_000_000, NexmarkConfig(seed=7))   # {"person": ..., "bid": ...}
>>> tables["bid"].num_rows
920000

``generate(a, c)[kind]`` equals ``generate(a, b)[kind]`` followed by ``generate(b, c)[kind]``.

Event number ``n`` (0, 1, 2, ...) is the stream position and the source's offset; its event
id is ``config.first_event_id + n``. The id decides the kind (``id % 50``: 1 person, then 3
auctions, then 46 bids), the entity ids and the random stream; ``n`` decides the event time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.nexmark import fields
from sluice.nexmark.model import (
    AUCTION_ID_LEAD,
    AUCTION_PROPORTION,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    NUM_CATEGORIES,
    PERSON_ID_LEAD,
    PERSON_PROPORTION,
    PROPORTION_DENOMINATOR,
    RECORD_TYPES,
    EventKind,
    NexmarkConfig,
)
from sluice.nexmark.prng import (
    I64,
    Draws,
    below,
    digit_strings,
    event_draws,
)
from sluice.nexmark.ranges import (
    DEFAULT_CONFIG,
    check_range,
    chunk_size,
    event_kind,
    event_time_us,
    horizon_events,
)

__all__ = [
    "ARROW_SCHEMAS",
    "DEFAULT_CONFIG",
    "check_range",
    "chunk_size",
    "event_kind",
    "event_time_us",
    "event_times_us",
    "generate",
    "generate_rows",
    "last_auction_id",
    "last_person_id",
]

# "Hot" entities come in batches of 100 (Beam's HOT_AUCTION_RATIO / HOT_BIDDER_RATIO /
# HOT_SELLER_RATIO): the hot one is the first (second, for bidders) of the newest batch.
HOT_BATCH = 100

_ARROW_TYPES = {"int": pa.int64(), "str": pa.string(), "datetime": pa.timestamp("us", tz="UTC")}


def _arrow_schema(record: type) -> pa.Schema:
    columns = [("event_id", "int")] + [(f.name, str(f.type)) for f in dataclasses.fields(record)]
    return pa.schema([pa.field(name, _ARROW_TYPES[kind], nullable=False) for name, kind in columns])


# The columns of generate()'s tables: event_id, then the record's fields in order.
ARROW_SCHEMAS: dict[EventKind, pa.Schema] = {k: _arrow_schema(t) for k, t in RECORD_TYPES.items()}


# ---------------------------------------------------------------- kinds, ids, times


def event_times_us(ns: I64, config: NexmarkConfig) -> I64:
    """:func:`event_time_us` of an array of event numbers (exact, no int64 overflow)."""
    rate = config.events_per_second
    return config.base_time_us + (ns // rate) * 1_000_000 + (ns % rate) * 1_000_000 // rate


def last_person_id(n: int, config: NexmarkConfig = DEFAULT_CONFIG) -> int:
    """The newest person id that exists at event ``n`` (its own id for a person event)."""
    ids = np.array([config.first_event_id + n], dtype=np.int64)
    return int(_last_person0(ids)[0]) + FIRST_PERSON_ID


def last_auction_id(n: int, config: NexmarkConfig = DEFAULT_CONFIG) -> int:
    """The newest auction id that exists at event ``n``; ``FIRST_AUCTION_ID - 1`` if none."""
    ids = np.array([config.first_event_id + n], dtype=np.int64)
    return int(_last_auction0(ids)[0]) + FIRST_AUCTION_ID


def _last_person0(event_ids: I64) -> I64:
    """Beam's ``lastBase0PersonId``."""
    epoch, offset = np.divmod(event_ids, PROPORTION_DENOMINATOR)
    return epoch * PERSON_PROPORTION + np.minimum(offset, PERSON_PROPORTION - 1)


def _last_auction0(event_ids: I64) -> I64:
    """Beam's ``lastBase0AuctionId``: before this block's auctions, the previous block's last."""
    epoch, offset = np.divmod(event_ids, PROPORTION_DENOMINATOR)
    last_of_block = epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1
    return np.where(
        offset < PERSON_PROPORTION,
        last_of_block - AUCTION_PROPORTION,
        np.where(
            offset >= PERSON_PROPORTION + AUCTION_PROPORTION,
            last_of_block,
            epoch * AUCTION_PROPORTION + offset - PERSON_PROPORTION,
        ),
    )


def _next_person0(event_ids: I64, words: np.ndarray, config: NexmarkConfig) -> I64:
    """Beam's ``nextBase0PersonId``: one of the newest ``num_active_people``, or a few ahead."""
    people = _last_person0(event_ids) + 1
    active = np.minimum(people, config.num_active_people)
    return people - active + below(words, active + PERSON_ID_LEAD)


def _next_auction0(event_ids: I64, words: np.ndarray, config: NexmarkConfig) -> I64:
    """Beam's ``nextBase0AuctionId``: one of the ~in-flight auctions, or a few ahead."""
    newest = _last_auction0(event_ids)
    oldest = np.maximum(newest - config.num_in_flight_auctions, 0)
    return oldest + below(words, newest - oldest + 1 + AUCTION_ID_LEAD)


# ---------------------------------------------------------------- tables


def generate(
    start: int, stop: int, config: NexmarkConfig = DEFAULT_CONFIG
) -> dict[EventKind, pa.Table]:
    """Events ``[start, stop)`` as one table per kind (``ARROW_SCHEMAS``), each in event order.

    Pure: any split of a range generates the same rows, and a replay is identical.
    """
    check_range(start, stop, config)
    parts: dict[EventKind, list[pa.Table]] = {kind: [] for kind in EventKind}
    step = chunk_size(config)
    for low in range(start, stop, step):
        for kind, table in _generate_chunk(low, min(low + step, stop), config).items():
            parts[kind].append(table)
    return {
        kind: pa.concat_tables(tables) if tables else ARROW_SCHEMAS[kind].empty_table()
        for kind, tables in parts.items()
    }


def generate_rows(
    start: int, stop: int, config: NexmarkConfig = DEFAULT_CONFIG
) -> list[dict[str, Any]]:
    """Events ``[start, stop)`` as dicts in event order: ``event_id``, ``kind`` ("person",
    "auction" or "bid"), then the record's fields (times as UTC ``datetime``). For small
    ranges and tests; :func:`record_from_row` turns one into a dataclass."""
    rows = [
        {"event_id": row["event_id"], "kind": kind.value, **row}
        for kind, table in generate(start, stop, config).items()
        for row in table.to_pylist()
    ]
    return sorted(rows, key=lambda row: row["event_id"])


# ---------------------------------------------------------------- one batch


@dataclass(frozen=True)
class _Batch:
    """The events of one kind in one chunk."""

    numbers: I64
    ids: I64
    config: NexmarkConfig

    @cached_property
    def times(self) -> I64:
        return event_times_us(self.numbers, self.config)

    @cached_property
    def draws(self) -> Draws:
        return event_draws(self.config.seed, self.ids)


def _generate_chunk(low: int, high: int, config: NexmarkConfig) -> dict[EventKind, pa.Table]:
    numbers = np.arange(low, high, dtype=np.int64)
    ids = numbers + config.first_event_id
    offset = ids % PROPORTION_DENOMINATOR
    is_person = offset < PERSON_PROPORTION
    is_bid = offset >= PERSON_PROPORTION + AUCTION_PROPORTION
    selections = {
        EventKind.PERSON: is_person,
        EventKind.AUCTION: ~is_person & ~is_bid,
        EventKind.BID: is_bid,
    }
    out = {}
    for kind, selected in selections.items():
        picked = np.flatnonzero(selected)
        batch = _Batch(numbers[picked], ids[picked], config)
        columns = _BUILDERS[kind](batch)
        out[kind] = pa.Table.from_arrays(columns, schema=ARROW_SCHEMAS[kind])
    return out


def _persons(batch: _Batch) -> list[pa.Array]:
    """Beam's ``PersonGenerator.nextPerson``."""
    d, seed = batch.draws, batch.config.seed
    first = pa.array(fields.FIRST_NAMES).take(below(d[0], len(fields.FIRST_NAMES)))
    last = pa.array(fields.LAST_NAMES).take(below(d[1], len(fields.LAST_NAMES)))
    name = pc.binary_join_element_wise(first, last, " ")
    user, domain = fields.text(seed, d[2], d[3], 7), fields.text(seed, d[4], d[5], 5)
    email = pc.binary_join_element_wise(user, pa.scalar("@"), domain, pa.scalar(".com"), "")
    card = digit_strings([below(d[6 + i], 10_000) for i in range(4)])
    city = pa.array(fields.US_CITIES).take(below(d[10], len(fields.US_CITIES)))
    state = pa.array(fields.US_STATES).take(below(d[11], len(fields.US_STATES)))
    size = 8 + sum(fields.lengths(a) for a in (name, email, card, city, state))
    extra = fields.extra(seed, d[12], d[13], size, batch.config.avg_person_byte_size)
    person_id = _last_person0(batch.ids) + FIRST_PERSON_ID
    times = fields.timestamps(batch.times)
    return [pa.array(batch.ids), pa.array(person_id), name, email, card, city, state, times, extra]


def _auctions(batch: _Batch) -> list[pa.Array]:
    """Beam's ``AuctionGenerator.nextAuction``."""
    d, seed, config = batch.draws, batch.config.seed, batch.config
    hot_seller = (_last_person0(batch.ids) // HOT_BATCH) * HOT_BATCH
    is_hot = below(d[0], config.hot_sellers_ratio) > 0
    seller = np.where(is_hot, hot_seller, _next_person0(batch.ids, d[1], config))
    category = FIRST_CATEGORY_ID + below(d[2], NUM_CATEGORIES)
    initial_bid = fields.price(d[3])
    expires = batch.times + _auction_length_us(batch, d[4])
    item_name, description = fields.text(seed, d[5], d[6], 20), fields.text(seed, d[7], d[8], 100)
    reserve = initial_bid + fields.price(d[9])
    size = 8 + fields.lengths(item_name) + fields.lengths(description) + 8 * 5
    extra = fields.extra(seed, d[10], d[11], size, config.avg_auction_byte_size)
    auction_id = _last_auction0(batch.ids) + FIRST_AUCTION_ID
    return [
        pa.array(batch.ids),
        pa.array(auction_id),
        item_name,
        description,
        pa.array(initial_bid),
        pa.array(reserve),
        fields.timestamps(batch.times),
        fields.timestamps(expires),
        pa.array(seller + FIRST_PERSON_ID),
        pa.array(category),
        extra,
    ]


def _bids(batch: _Batch) -> list[pa.Array]:
    """Beam's ``BidGenerator.nextBid`` plus Flink's ``channel`` and ``url``."""
    d, config = batch.draws, batch.config
    hot_auction = (_last_auction0(batch.ids) // HOT_BATCH) * HOT_BATCH
    is_hot = below(d[0], config.hot_auction_ratio) > 0
    auction = np.where(is_hot, hot_auction, _next_auction0(batch.ids, d[1], config))
    hot_bidder = (_last_person0(batch.ids) // HOT_BATCH) * HOT_BATCH + 1  # not the hot seller
    is_hot = below(d[2], config.hot_bidders_ratio) > 0
    bidder = np.where(is_hot, hot_bidder, _next_person0(batch.ids, d[3], config))
    is_hot = below(d[5], fields.HOT_CHANNELS_RATIO) > 0
    channel = np.where(
        is_hot,
        fields.CHANNELS_NUMBER + below(d[6], len(fields.HOT_CHANNELS)),
        below(d[6], fields.CHANNELS_NUMBER),
    )
    names, urls = fields.channel_table(config.seed)
    extra = fields.extra(config.seed, d[7], d[8], 8 * 4, config.avg_bid_byte_size)
    return [
        pa.array(batch.ids),
        pa.array(auction + FIRST_AUCTION_ID),
        pa.array(bidder + FIRST_PERSON_ID),
        pa.array(fields.price(d[4])),
        names.take(channel),
        urls.take(channel),
        fields.timestamps(batch.times),
        extra,
    ]


_BUILDERS = {EventKind.PERSON: _persons, EventKind.AUCTION: _auctions, EventKind.BID: _bids}


# ---------------------------------------------------------------- auction length


def _auction_length_us(batch: _Batch, words: np.ndarray) -> I64:
    """Beam's ``nextAuctionLengthMs`` in µs: uniform in [1, 2 * horizon], i.e. on average
    as long as it takes to create ``num_in_flight_auctions`` more auctions."""
    later = event_times_us(batch.numbers + horizon_events(batch.config), batch.config)
    horizon = later - batch.times
    return 1 + below(words, np.maximum(horizon * 2, 1))

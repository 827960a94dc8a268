"""Field values of Nexmark events, vectorised: Beam's value lists, prices, strings, padding.

Strings are cut from the seeded character pools of :mod:`sluice.nexmark.prng`, so every
value is a pure function of the seed and the event's random words.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.nexmark.prng import I64, POOL_SIZE, below, event_draws, pool, pool_strings, unit

__all__ = [
    "CHANNELS_NUMBER",
    "FIRST_NAMES",
    "HOT_CHANNELS",
    "HOT_CHANNELS_RATIO",
    "LAST_NAMES",
    "US_CITIES",
    "US_STATES",
    "channel_table",
    "extra",
    "lengths",
    "price",
    "text",
    "timestamps",
]

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
FIRST_NAMES = (
    "Peter",
    "Paul",
    "Luke",
    "John",
    "Saul",
    "Vicky",
    "Kate",
    "Julie",
    "Sarah",
    "Deiter",
    "Walter",
)
LAST_NAMES = (
    "Shultz",
    "Abrams",
    "Spencer",
    "White",
    "Bartels",
    "Walton",
    "Smith",
    "Jones",
    "Noris",
)
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
HOT_CHANNELS_RATIO = 2
CHANNELS_NUMBER = 10_000
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_CHANNEL_DOMAIN = 4  # prng.stream_key domain of the per-channel URL draws


def price(words: np.ndarray) -> I64:
    """Beam's ``nextPrice``: ``round(10^(6u) * 100)`` cents, log-uniform in [$1, $1M]."""
    return np.floor(np.power(10.0, unit(words) * 6.0) * 100.0 + 0.5).astype(np.int64)


def text(seed: int, offsets: np.ndarray, lengths: np.ndarray, max_length: int) -> pa.Array:
    """Beam's ``nextString(max_length)``: 3 to max_length-1 characters (a-z, 1/13 spaces),
    trimmed."""
    length = 3 + below(lengths, max_length - 3)
    start = below(offsets, POOL_SIZE - (max_length - 1) + 1)
    return pc.utf8_trim(pool_strings(pool(seed, "text"), start, length), characters=" ")


def extra(
    seed: int, offsets: np.ndarray, lengths: np.ndarray, size: I64 | int, average: int
) -> pa.Array:
    """Beam's ``nextExtra``: a-z padding so ``size + len(extra)`` averages ``average``
    (uniform within ±20% of the gap; empty once ``size`` exceeds ``average``)."""
    gap = average - np.asarray(size, dtype=np.int64) + np.zeros(len(offsets), dtype=np.int64)
    delta = np.floor(gap * 0.2 + 0.5).astype(np.int64)
    length = gap - delta + below(lengths, np.maximum(2 * delta, 1))
    length = np.where(gap < 0, 0, length)
    start = below(offsets, POOL_SIZE - (average + average // 5 + 1) + 1)
    return pool_strings(pool(seed, "letters"), start, length)


def timestamps(micros: I64) -> pa.Array:
    return pa.array(micros, type=_TIMESTAMP)


def lengths(strings: pa.Array) -> I64:
    return np.asarray(pc.utf8_length(strings), dtype=np.int64)


@lru_cache(maxsize=16)
def channel_table(seed: int) -> tuple[pa.Array, pa.Array]:
    """Channel names and URLs: ``channel-<k>`` for k < 10000, then the 4 hot channels.

    Flink caches one URL per channel number from an unseeded ``Random``; here the URL of
    channel ``k`` is a pure function of (seed, k), and 9 in 10 carry ``&channel_id=``.
    """
    count = CHANNELS_NUMBER + len(HOT_CHANNELS)
    d = event_draws(seed, np.arange(count, dtype=np.int64), domain=_CHANNEL_DOMAIN)
    chars = pool(seed, "url")
    pieces = [
        pool_strings(chars, below(d[2 * i], POOL_SIZE - 3), 3 + below(d[2 * i + 1], 2))
        for i in range(3)
    ]
    base = pc.binary_join_element_wise(
        pa.scalar("https://www.nexmark.com"), *pieces, pa.scalar("item.htm?query=1"), "/"
    )
    suffixes = [f"&channel_id={_java_abs_reverse(k)}" for k in range(CHANNELS_NUMBER)]
    suffixes += [""] * len(HOT_CHANNELS)
    with_id = pc.binary_join_element_wise(base, pa.array(suffixes), "")
    urls = pc.if_else(pa.array(below(d[6], 10) > 0), with_id, base)  # hot: suffix is ""
    names = pa.array([f"channel-{k}" for k in range(CHANNELS_NUMBER)] + list(HOT_CHANNELS))
    return names, urls


def _java_abs_reverse(k: int) -> int:
    """Java's ``Math.abs(Integer.reverse(k))`` (which leaves ``Integer.MIN_VALUE`` negative)."""
    value = int(f"{k:032b}"[::-1], 2)
    value = value - 2**32 if value >= 2**31 else value
    return value if value == -(2**31) else abs(value)

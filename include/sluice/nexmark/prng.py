"""Counter-based randomness: every draw is a pure function of (seed, event id, draw slot).

Beam seeds one ``java.util.Random`` per event with the event id and draws from it in order.
Here each event gets a SplitMix64 state ``mix64(event_id * M ^ key(seed))`` and draw ``j`` is
``mix64(state + (j + 1) * GAMMA)``: the same "one seeded stream per event" idea, but computed
for a whole numpy array of events at once, so a range of events costs a few vector passes and
any sub-range gives the same values. Strings are cut from fixed 1 MiB character pools derived
from the seed (an offset and a length drawn per event), which keeps them vectorised too.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from numpy.lib.stride_tricks import sliding_window_view

__all__ = [
    "POOL_SIZE",
    "Draws",
    "below",
    "digit_strings",
    "event_draws",
    "mix64_int",
    "pool",
    "pool_strings",
    "unit",
]

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (golden ratio)
EVENT_MUL = 0xD1B54A32D192ED03  # odd, so event_id * EVENT_MUL is a bijection mod 2^64
POOL_SIZE = 1 << 20
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LETTERS, _SPACE, _UNDERSCORE = 97, 32, 95  # 'a', ' ', '_'


def mix64(z: U64) -> U64:
    """SplitMix64's finaliser (a bijection of uint64), element-wise."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def mix64_int(value: int) -> int:
    """:func:`mix64` of one Python int (taken mod 2^64)."""
    z = value & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def stream_key(seed: int, domain: int) -> int:
    """Independent keys per seed: events are domain 0, the pools 1-3, channels 4."""
    return mix64_int(mix64_int(seed) ^ mix64_int(domain * GAMMA))


class Draws:
    """The random words of a batch of events: ``draws[j]`` is draw slot ``j`` of each event."""

    def __init__(self, state: U64) -> None:
        self._state = state

    def __getitem__(self, slot: int) -> U64:
        return mix64(self._state + np.uint64(((slot + 1) * GAMMA) & MASK64))


def event_draws(seed: int, event_ids: I64, domain: int = 0) -> Draws:
    """The per-event random streams of ``event_ids`` (>= 0) under ``seed``; other
    ``domain`` values give independent streams for things that are not events."""
    key = np.uint64(stream_key(seed, domain))
    return Draws(mix64((event_ids.astype(np.uint64) * np.uint64(EVENT_MUL)) ^ key))


def unit(words: U64) -> npt.NDArray[np.float64]:
    """Uniform doubles in [0, 1) from the top 53 bits (exact, platform independent)."""
    return (words >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def below(words: U64, bound: int | I64) -> I64:
    """Uniform integers in ``[0, bound)`` (``bound`` >= 1, < 2^53), like ``Random.nextInt``."""
    return np.floor(unit(words) * bound).astype(np.int64)


@lru_cache(maxsize=16)
def pool(seed: int, alphabet: str) -> npt.NDArray[np.uint8]:
    """``POOL_SIZE`` random ASCII bytes for ``seed``, read-only.

    ``letters``: a-z, as Beam's ``nextExactString`` (the ``extra`` padding). ``text`` and
    ``url``: Beam's ``nextString`` characters, a space (``text``) or ``_`` (``url``, Flink's
    URL pieces) with probability 1/13, else a-z.
    """
    domain = {"letters": 1, "text": 2, "url": 3}[alphabet]
    words = mix64(np.arange(POOL_SIZE, dtype=np.uint64) ^ np.uint64(stream_key(seed, domain)))
    if alphabet == "letters":
        chars = below(words, 26) + _LETTERS
    else:
        picks = below(words, 13 * 26)  # < 26: the special character (p = 1/13)
        special = _SPACE if alphabet == "text" else _UNDERSCORE
        chars = np.where(picks < 26, special, picks % 26 + _LETTERS)
    out = chars.astype(np.uint8)
    out.flags.writeable = False
    return out


def pool_strings(chars: npt.NDArray[np.uint8], offsets: I64, lengths: I64) -> pa.StringArray:
    """``chars[offsets[i] : offsets[i] + lengths[i]]`` for every ``i``, as one Arrow array.

    Callers draw ``offsets`` in ``[0, len(chars) - max possible length]`` so every slice fits.
    """
    count = len(offsets)
    ends = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=ends[1:])
    width = int(lengths.max()) if count else 0
    if width == 0:
        data = np.zeros(0, dtype=np.uint8)
    else:
        windows = sliding_window_view(chars, width)[offsets]
        data = windows[np.arange(width) < lengths[:, None]]  # row-major: the concatenation
    return _string_array(count, ends, data)


def digit_strings(groups: list[I64]) -> pa.StringArray:
    """``"%04d %04d ..."`` of equally long integer arrays in [0, 10000), vectorised."""
    count = len(groups[0])
    width = 5 * len(groups) - 1
    matrix = np.full((count, width), _SPACE, dtype=np.uint8)
    for g, values in enumerate(groups):
        for d, scale in enumerate((1000, 100, 10, 1)):
            matrix[:, 5 * g + d] = (values // scale) % 10 + 48
    ends = np.arange(count + 1, dtype=np.int64) * width
    return _string_array(count, ends, matrix.reshape(-1))


def _string_array(count: int, ends: I64, data: npt.NDArray[np.uint8]) -> pa.StringArray:
    # Callers generate in chunks small enough for 32-bit offsets (see generator.chunk_size).
    assert ends[-1] < 2**31, "string batch over 2 GiB"
    buffers = [None, pa.py_buffer(ends.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.Array.from_buffers(pa.string(), count, buffers)

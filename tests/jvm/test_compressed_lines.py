"""The helper jar's decompression (``CompressedLines.decompress``: the streams the files
source's reader uses) against Python's codecs, byte for byte, and on damaged input.

The LZ4 frame decoder (``Lz4Frames``) is Sluice's own for linked blocks (python-lz4's default,
which lz4-java refuses): every frame option python-lz4 writes is decoded here, and damaged
frames fail with an ``IOException``, never another error (an index out of bounds) or a hang.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import random
from typing import Any

import lz4.frame
import pytest
import zstandard
from py4j.protocol import Py4JJavaError
from sluice.sources.compression import decompressed


def jar(spark: Any, codec: str, data: bytes) -> bytes:
    return bytes(spark.sparkContext._jvm.io.sluice.spark.CompressedLines.decompress(codec, data))


def sample(rng: random.Random, size: int) -> bytes:
    """Text-like data (repeats: long matches, overlapping ones) with random stretches."""
    words = [bytes(rng.randrange(97, 123) for _ in range(rng.randint(1, 9))) for _ in range(300)]
    out = bytearray()
    while len(out) < size:
        pick = rng.random()
        if pick < 0.05:
            out += rng.randbytes(rng.randint(1, 400))
        elif pick < 0.1:
            out += bytes([rng.randrange(256)]) * rng.randint(1, 3000)  # overlapping matches
        else:
            out += rng.choice(words) + b" "
    return bytes(out[:size])


LZ4_OPTIONS = list(itertools.product(
    [lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB, lz4.frame.BLOCKSIZE_MAX1MB,
     lz4.frame.BLOCKSIZE_MAX4MB],
    [True, False],  # block_linked
    [True, False],  # block_checksum
    [True, False],  # content_checksum
    [True, False],  # store_size
))  # fmt: skip


def test_lz4_frames_of_every_option_decode_as_python_lz4(spark: Any) -> None:
    rng = random.Random(1)
    for n, (block_size, linked, block_checksum, content_checksum, store_size) in enumerate(
        LZ4_OPTIONS
    ):
        data = sample(rng, rng.choice([0, 1, 70_000, 300_000, 2_500_000]))
        level = rng.choice([0, 3, 9, 16])  # fast and high-compression modes
        frame = lz4.frame.compress(
            data, compression_level=level, block_size=block_size, block_linked=linked,
            block_checksum=block_checksum, content_checksum=content_checksum,
            store_size=store_size,
        )  # fmt: skip
        assert jar(spark, "lz4", frame) == data, (n, len(data), level)
        assert decompressed(frame, "lz4") == data


def test_lz4_concatenated_and_skippable_frames(spark: Any) -> None:
    rng = random.Random(2)
    parts = [sample(rng, n) for n in (100_000, 0, 5, 200_000)]
    skippable = (0x184D2A5F).to_bytes(4, "little") + (6).to_bytes(4, "little") + b"sluice"
    frames = skippable + b"".join(
        lz4.frame.compress(p, block_linked=i % 2 == 0) + (skippable if i == 1 else b"")
        for i, p in enumerate(parts)
    )
    assert jar(spark, "lz4", frames) == b"".join(parts)
    assert decompressed(frames, "lz4") == b"".join(parts)


def test_damaged_lz4_frames_fail_with_an_io_error(spark: Any) -> None:
    """Cut or with a byte changed anywhere, a frame decodes or fails with an IOException:
    never an index out of bounds, never a hang. With a content checksum a change is
    caught."""
    rng = random.Random(3)
    data = sample(rng, 200_000)
    for linked in (True, False):
        frame = lz4.frame.compress(data, block_linked=linked, content_checksum=True)
        damaged = [frame[:cut] for cut in sorted(rng.sample(range(1, len(frame)), 25))]
        for _ in range(60):
            at = rng.randrange(len(frame))
            damaged.append(
                frame[:at] + bytes([frame[at] ^ (1 << rng.randrange(8))]) + frame[at + 1 :]
            )
        for bad in damaged:
            try:
                result = jar(spark, "lz4", bad)
            except Py4JJavaError as error:
                name = error.java_exception.getClass().getName()
                assert name in ("java.io.IOException", "java.io.EOFException"), (
                    name,
                    str(error)[:300],
                )
                continue
            assert result == data  # read whole: an unchanged bit (it never happens here)
    # garbage is not lz4 (the first word read as Hadoop's block length): an error, no heap
    with pytest.raises(Py4JJavaError, match="not an lz4 file"):
        jar(spark, "lz4", b'{"user": "u1"}\n' * 100)


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "zstd"])
def test_the_other_codecs_decode_as_python(spark: Any, codec: str) -> None:
    rng = random.Random(4)
    data = sample(rng, 1_500_000)
    packed = {
        "gzip": lambda d: gzip.compress(d[:700_000]) + gzip.compress(d[700_000:]),
        "bzip2": lambda d: bz2.compress(d[:700_000]) + bz2.compress(d[700_000:]),
        "zstd": lambda d: (
            zstandard.ZstdCompressor().compress(d[:700_000])
            + zstandard.ZstdCompressor(write_checksum=True).compress(d[700_000:])
        ),
    }[codec](data)
    assert jar(spark, codec, packed) == data == decompressed(packed, codec)

"""How the files source's JSON lines and CSV files are compressed (``source.compression``).

``auto`` goes by the file name's extension, case aside: ``.gz`` / ``.gzip`` gzip, ``.bz2``
bzip2, ``.zst`` / ``.zstd`` zstd, ``.lz4`` lz4, anything else as it is; ``none`` or a codec
applies to every file (``.json`` files that are gzip). The helper jar's ``CompressedLines``
decides the same way (``codecOf``) when Spark reads the files; :func:`decompressed` is the
planner's side (no Spark: :func:`sluice.sources.file_formats.count_records`).

What each codec reads (docs/file-formats.md): gzip (concatenated members too), bzip2
(concatenated streams too), zstd frames (several in a row too), lz4 frames as the ``lz4`` tool
and python-lz4 write them (concatenated and skippable frames too) and Hadoop's lz4 block
framing, which is what Spark and Hadoop write for ``compression: lz4``.
"""

from __future__ import annotations

import bz2
import zlib
from collections.abc import Iterator

__all__ = [
    "CODECS",
    "SPARK_SUFFIXES",
    "codec_of",
    "decompressed",
    "needs_codec_reader",
]

CODECS = ("gzip", "bzip2", "zstd", "lz4")
_BY_SUFFIX = (
    (".gz", "gzip"),
    (".gzip", "gzip"),
    (".bz2", "bzip2"),
    (".zst", "zstd"),
    (".zstd", "zstd"),
    (".lz4", "lz4"),
)
# The extensions Spark's own line reader decompresses (Hadoop's default codecs and the two
# names Spark adds): a file named so is never read by Spark's reader as plain text.
SPARK_SUFFIXES = (".gz", ".gzip", ".bz2", ".zst", ".zstd", ".lz4", ".deflate", ".snappy")

_LZ4_FRAME = b"\x04\x22\x4d\x18"
_CHUNK = 1 << 20


def codec_of(key: str, compression: str) -> str:
    """The codec the file ``key`` is read with (``none`` or one of :data:`CODECS`)."""
    if compression != "auto":
        return compression
    name = key.rsplit("/", 1)[-1].lower()
    return next((codec for suffix, codec in _BY_SUFFIX if name.endswith(suffix)), "none")


def needs_codec_reader(keys: list[str], compression: str) -> bool:
    """Whether Spark's plain line reader would read any of ``keys`` otherwise than the source
    says: a file to decompress, or a file Spark would decompress by its name that is plain."""
    return any(
        codec_of(key, compression) != "none" or key.lower().endswith(SPARK_SUFFIXES) for key in keys
    )


def decompressed(data: bytes, codec: str) -> bytes:
    """``data`` decompressed by ``codec``, as far as it decompresses: a truncated or corrupt
    file gives the bytes before the damage (the Spark reader fails such a file instead)."""
    if codec == "none":
        return data
    return b"".join(_chunks(data, codec))


def _chunks(data: bytes, codec: str) -> Iterator[bytes]:
    try:
        if codec == "gzip":
            yield from _members(data, lambda: zlib.decompressobj(wbits=16 + zlib.MAX_WBITS))
        elif codec == "bzip2":
            yield from _members(data, bz2.BZ2Decompressor)
        elif codec == "zstd":
            yield from _zstd(data)
        elif codec == "lz4":
            yield from _lz4(data)
        else:
            raise ValueError(f"unknown compression {codec!r}")
    except (OSError, EOFError, RuntimeError, zlib.error):
        return  # damaged from here on


def _members(data: bytes, new: object) -> Iterator[bytes]:
    """Concatenated gzip members or bzip2 streams, each with a fresh decompressor."""
    rest = data
    while rest:
        decompressor = new()  # type: ignore[operator]
        for start in range(0, len(rest), _CHUNK):
            yield decompressor.decompress(rest[start : start + _CHUNK])
            if decompressor.eof:
                break
        if not decompressor.eof:
            return  # truncated
        rest = decompressor.unused_data
        if rest.strip(b"\0") == b"":
            return  # padding after the last member (as gzip writes to tapes)


def _zstd(data: bytes) -> Iterator[bytes]:
    import io

    import zstandard  # only planners counting zstd files need it

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    while True:
        try:
            chunk = reader.read(_CHUNK)
        except zstandard.ZstdError:
            return
        if not chunk:
            return
        yield chunk


def _lz4(data: bytes) -> Iterator[bytes]:
    """lz4 frames (the ``lz4`` tool, python-lz4), else Hadoop's lz4 block framing."""
    word = int.from_bytes(data[:4], "little")
    if data[:4] == _LZ4_FRAME or (len(data) >= 4 and word & 0xFFFFFFF0 == 0x184D2A50):
        yield from _lz4_frames(data)  # a frame, or a skippable frame before one
    else:
        yield from _hadoop_lz4(data)


def _lz4_frames(data: bytes) -> Iterator[bytes]:
    import lz4.frame  # only planners counting lz4 files need it

    rest = data
    while len(rest) >= 8:
        magic = int.from_bytes(rest[:4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame
            size = int.from_bytes(rest[4:8], "little")
            rest = rest[8 + size :]
            continue
        if rest[:4] != _LZ4_FRAME:
            return
        decompressor = lz4.frame.LZ4FrameDecompressor()
        try:
            yield decompressor.decompress(rest)
        except RuntimeError:
            return
        if not decompressor.eof:
            return
        rest = decompressor.unused_data or b""


def _hadoop_lz4(data: bytes) -> Iterator[bytes]:
    """Hadoop's ``BlockCompressorStream`` framing: a big-endian raw length, then chunks of a
    big-endian compressed length and lz4 block data until the raw length is produced."""
    import lz4.block

    pos = 0
    while pos + 4 <= len(data):
        raw = int.from_bytes(data[pos : pos + 4], "big")
        pos += 4
        produced = 0
        while produced < raw:
            if pos + 4 > len(data):
                return
            size = int.from_bytes(data[pos : pos + 4], "big")
            pos += 4
            if size <= 0 or pos + size > len(data):
                return
            chunk = lz4.block.decompress(data[pos : pos + size], uncompressed_size=raw - produced)
            pos += size
            produced += len(chunk)
            yield chunk

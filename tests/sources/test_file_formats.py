"""The formats a landing zone holds (``sluice.sources.file_formats``): compressed JSON lines and
CSV (gzip, bzip2, zstd, lz4; by extension or forced), Avro and ORC files, Hive-style partition
folders as columns, and :func:`count_records`.

Every file here is written by the tools users write them with (Python's gzip and bz2,
zstandard, python-lz4's frame format, Spark's own lz4 output, fastavro, pyarrow); every
record is checked with its file, its exact line or row and its exact dead-letter reason,
against the same input read plain, also when Spark reads a file in several splits.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import lz4.block
import lz4.frame
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
import zstandard
from sluice.contracts.sources import RECORD_COLUMNS
from sluice.protocol import run_epoch
from sluice.sources.compression import codec_of, decompressed
from sluice.sources.file_formats import avro_rows, count_records, parse_files
from sluice.sources.parsing import IndexedFile
from sluice.sources.partition_columns import folder_values, unescape_path_name
from sluice.spec import FilesSourceConfig
from sluice.storage import to_spark_uri

from tests.fixtures.pipelines import (
    LOCAL_NOW_S3_EXTENDED,
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec,
    new_workspace,
    runtime,
)

SCHEMA = (("user", "string"), ("url", "string"), ("ts", "timestamp"), ("amount", "double"))
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# The reader is the same Spark code on both backends (s3a or file:): the codec and format
# matrix runs on S3 in make test-extended; test_avro_and_orc_records_are_parquets reads
# from S3 in make test too (``both``).
@pytest.fixture(params=LOCAL_NOW_S3_EXTENDED)
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Workspace:
    return new_workspace(request, tmp_path)


@pytest.fixture(params=["local", "s3"])
def both(request: pytest.FixtureRequest, tmp_path: Path) -> Workspace:
    return new_workspace(request, tmp_path)


# One file of JSON lines with a record of every kind; the line numbers count the blank line.
JSONL = (
    b'{"user": "u1", "url": "/a", "ts": "2026-01-01T00:00:01Z", "amount": 1.5}\n'  # 1 ok
    b"\n"  # 2 blank: not a record
    b'{"user": "u2", "url": "/b", "ts": "2026-01-01T00:00:0\n'  # 3 cut short
    b'{"user": "u3", "url": "/c", "amount": 2}\n'  # 4 no event time
    b'{"user": "u4", "url": "/d", "ts": "2026-01-01T00:00:04Z", "amount": "abc"}\r\n'  # 5
    b'{"user": "caf\xe9", "url": "/e", "ts": "2026-01-01T00:00:05Z", "amount": 5}\n'  # 6 Latin-1
    b'{"user": "u7", "url": "/g", "ts": "2026-01-01T00:00:07Z", "amount": 7} x\n'  # 7
    b"  \t\n"  # 8 blank
    b'{"user": "u9", "url": "/h", "ts": "2026-01-01T00:00:09Z", "amount": 9}'  # 9 ok, no \n
)
JSONL_ERRORS = {
    1: None,
    3: "malformed: not a JSON object",
    4: "missing_event_time: field 'ts' is absent or null",
    5: "wrong_type: field 'amount' = abc is not a double",
    6: "malformed: not valid UTF-8",
    7: "malformed: text after the JSON object",
    9: None,
}
CSV = (
    b"user,url,ts,amount\n"  # 1 header
    b"u1,/a,2026-01-01T00:00:01Z,1.5\r\n"  # 2 ok
    b"\n"  # 3 blank
    b"u2,/b,2026-01-01T00:00:02Z\n"  # 4 too few fields
    b"u3,/c,,2\n"  # 5 no event time
    b"u4,/d,2026-01-01T00:00:04Z,lots\n"  # 6 wrong type
    b'u5,"/e,f",2026-01-01 00:00:05,5\n'  # 7 ok
)
CSV_ERRORS = {
    2: None,
    4: "malformed: expected 4 CSV fields",
    5: "missing_event_time: field 'ts' is absent or null",
    6: "wrong_type: field 'amount' = lots is not a double",
    7: None,
}
CODECS = {"gzip": ".gz", "bzip2": ".bz2", "zstd": ".zst", "lz4": ".lz4"}


def hadoop_lz4(data: bytes, block: int = 256 * 1024) -> bytes:
    """Hadoop's ``Lz4Codec`` framing (``BlockCompressorStream``), as Spark writes
    ``compression: lz4`` text: per block, its length, then one compressed chunk's length
    and data (both big-endian)."""
    out = bytearray()
    for start in range(0, len(data), block):
        piece = data[start : start + block]
        chunk = lz4.block.compress(piece, store_size=False)
        out += len(piece).to_bytes(4, "big") + len(chunk).to_bytes(4, "big") + chunk
    return bytes(out)


def compress(data: bytes, codec: str) -> bytes:
    """``data`` as the usual tools write it: Python's gzip and bz2, zstandard, python-lz4's
    frame format (what the ``lz4`` tool writes)."""
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "bzip2":
        return bz2.compress(data)
    if codec == "zstd":
        return zstandard.ZstdCompressor(write_checksum=True).compress(data)
    if codec == "lz4":  # python-lz4's default: linked blocks (the lz4 tool: independent)
        return lz4.frame.compress(data, block_linked=True, content_checksum=True)
    if codec == "lz4-hadoop":
        return hadoop_lz4(data)
    raise ValueError(codec)


# -- reading ---------------------------------------------------------------------------------


def qualified(spark: Any, uri: str) -> str:
    """The path as Spark reports it in ``_metadata.file_path`` (what the files source gives
    the readers as ``IndexedFile.reported``)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    text = str(path.getFileSystem(conf).makeQualified(path).toUri().toString())
    return "file:/" + text[len("file:///") :] if text.startswith("file:///") else text


def config(ws: Workspace, fmt: str, **fields: Any) -> FilesSourceConfig:
    fields.setdefault("schema", SCHEMA)
    return FilesSourceConfig(path=ws.uri("in"), format=fmt, **fields)  # type: ignore[arg-type]


def parse(
    spark: Any,
    ws: Workspace,
    cfg: FilesSourceConfig,
    keys: list[str],
    required: tuple[str, ...] = ("ts",),
    read: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """The records ``parse_files`` gives for ``keys`` (in that read order), sorted by
    position, after checking the columns."""
    store = ws.store("in")
    index = [
        IndexedFile(qualified(spark, to_spark_uri(store.uri(k))), k, i, to_spark_uri(store.uri(k)))
        for i, k in enumerate(keys)
    ]
    frame, _ = parse_files(spark, cfg, store, index, required, read)
    assert tuple(frame.columns) == RECORD_COLUMNS + tuple(c for c, _ in cfg.schema)
    rows = [r.asDict() for r in frame.collect()]
    return sorted(rows, key=lambda r: (r["_major"], r["_line"]))


def records(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a record is, its file's name aside: position, text, reason, values."""
    return [tuple(v for k, v in r.items() if k != "_file") for r in rows]


class SplitSize:
    """``spark.sql.files.maxPartitionBytes`` set for a block (Spark then splits big files)."""

    def __init__(self, spark: Any, size: int) -> None:
        self.spark, self.size = spark, size

    def __enter__(self) -> None:
        self.previous = self.spark.conf.get("spark.sql.files.maxPartitionBytes")
        self.spark.conf.set("spark.sql.files.maxPartitionBytes", str(self.size))

    def __exit__(self, *exc: object) -> None:
        self.spark.conf.set("spark.sql.files.maxPartitionBytes", self.previous)


# -- compression -----------------------------------------------------------------------------


def test_the_codec_of_a_name_is_the_jars(spark: Any) -> None:
    """The planner (Python) and the reader (the helper jar) choose the same codec."""
    jar = spark.sparkContext._jvm.io.sluice.spark.CompressedLines
    names = ["a.jsonl", "a.gz", "a.JSON.GZ", "a.gzip", "b.bz2", "c.zst", "c.zstd", "d.lz4",
             "e.snappy", "f.deflate", "g.tar.gz", "dir.gz/h.jsonl", "x.gz.json", "bz2"]  # fmt: skip
    for compression in ("auto", "none", "gzip", "bzip2", "zstd", "lz4"):
        for name in names:
            key = f"p/{name}"
            assert codec_of(key, compression) == jar.codecOf(compression, name), (name, compression)
    assert codec_of("a/b.JSONL.Gz", "auto") == "gzip"
    assert codec_of("dir.gz/h.jsonl", "auto") == "none"


@pytest.mark.parametrize("naming", ["extension", "forced"])
@pytest.mark.parametrize("codec", list(CODECS))
def test_compressed_jsonl_reads_as_the_plain_file(
    spark: Any, workspace: Workspace, codec: str, naming: str
) -> None:
    """Every record of a compressed file is the plain file's, with the same line and reason;
    named by its extension (``compression: auto``) or forced on ``.json`` names."""
    key = f"c{CODECS[codec]}" if naming == "extension" else "c.json"
    compression = "auto" if naming == "extension" else codec
    workspace.put_files([("a.jsonl", JSONL), (key, compress(JSONL, codec))])
    plain = parse(spark, workspace, config(workspace, "jsonl"), ["a.jsonl"])
    cfg = config(workspace, "jsonl", compression=compression)
    rows = parse(spark, workspace, cfg, [key])
    assert {(r["_file"], r["_line"]): r["_error"] for r in rows} == {
        (key, n): e for n, e in JSONL_ERRORS.items()
    }
    assert records(rows) == records(plain)
    assert rows[0]["user"] == "u1" and rows[0]["amount"] == 1.5
    assert rows[0]["ts"].replace(tzinfo=UTC) == T0 + timedelta(seconds=1)
    by_line = {r["_line"]: r for r in rows}
    assert by_line[5]["_raw"] == JSONL.split(b"\n")[4].decode().rstrip("\r")
    assert by_line[6]["_raw"] == '{"user": "caf\ufffd", "url": "/e", "ts": ' \
        '"2026-01-01T00:00:05Z", "amount": 5}'  # fmt: skip
    assert count_records(workspace.store("in"), key, cfg) == len(rows) == 7


@pytest.mark.parametrize("codec", list(CODECS))
def test_compressed_csv_reads_as_the_plain_file(
    spark: Any, workspace: Workspace, codec: str
) -> None:
    key = f"c.csv{CODECS[codec]}"
    workspace.put_files([("a.csv", CSV), (key, compress(CSV, codec))])
    plain = parse(spark, workspace, config(workspace, "csv"), ["a.csv"])
    cfg = config(workspace, "csv")
    rows = parse(spark, workspace, cfg, [key])
    assert {r["_line"]: r["_error"] for r in rows} == CSV_ERRORS
    assert records(rows) == records(plain)
    assert {r["_file"] for r in rows} == {key}
    assert count_records(workspace.store("in"), key, cfg) == len(rows) == 5


def test_lz4_as_spark_and_hadoop_write_it(spark: Any, local_workspace: Workspace) -> None:
    """``.lz4`` files in Hadoop's block framing: what Spark writes with ``compression: lz4``
    (Hadoop's own codec reads the ``lz4`` tool's frames as a block length and runs out of
    heap, which kills a local Spark driver), and the same framing written here."""
    lines = [json.dumps({"user": f"u{i}", "url": "/", "ts": f"2026-01-01T00:00:{i % 60:02d}Z",
                         "amount": i}) for i in range(3000)]  # fmt: skip
    out = Path(local_workspace.uri("spark")[len("file://") :])
    spark.createDataFrame([(x,) for x in lines], "value string").coalesce(1).write.option(
        "compression", "lz4"
    ).text(str(out))
    (written,) = out.glob("part-*.lz4")
    data = "\n".join(lines).encode() + b"\n"
    assert written.read_bytes()[:4] != b"\x04\x22\x4d\x18"  # not a frame
    local_workspace.put_files([("spark.jsonl.lz4", written.read_bytes()),
                               ("python.jsonl.lz4", hadoop_lz4(data, block=4096))])  # fmt: skip
    cfg = config(local_workspace, "jsonl")
    rows = parse(spark, local_workspace, cfg, ["spark.jsonl.lz4", "python.jsonl.lz4"])
    for major, key in enumerate(["spark.jsonl.lz4", "python.jsonl.lz4"]):
        mine = [r for r in rows if r["_major"] == major]
        assert [(r["_line"], r["user"], r["_error"]) for r in mine] == [
            (i + 1, f"u{i}", None) for i in range(3000)
        ]
        assert count_records(local_workspace.store("in"), key, cfg) == 3000
        assert decompressed(local_workspace.store("in").get(key), "lz4") == data


def test_concatenated_members_and_frames(spark: Any, local_workspace: Workspace) -> None:
    """``cat a.gz b.gz``, two bzip2 streams, two zstd and two lz4 frames (with a skippable
    frame between): one file of both parts' lines."""
    first, second = JSONL[:200], JSONL[200:]
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    files = [
        ("a.jsonl.gz", gzip.compress(first) + gzip.compress(second)),
        ("b.jsonl.bz2", bz2.compress(first) + bz2.compress(second)),
        ("c.jsonl.zst", compress(first, "zstd") + compress(second, "zstd")),
        # the lz4 tool's default (independent blocks), then python-lz4's (linked)
        (
            "d.jsonl.lz4",
            lz4.frame.compress(first, block_linked=False) + skippable + compress(second, "lz4"),
        ),
    ]
    local_workspace.put_files([("plain.jsonl", JSONL), *files])
    cfg = config(local_workspace, "jsonl")
    plain = parse(spark, local_workspace, cfg, ["plain.jsonl"])
    for key, _ in files:
        rows = parse(spark, local_workspace, cfg, [key])
        assert records(rows) == records(plain), key
        assert count_records(local_workspace.store("in"), key, cfg) == 7


def test_plain_files_named_as_compressed_with_compression_none(
    spark: Any, local_workspace: Workspace
) -> None:
    """``compression: none``: a plain file named ``.gz`` is read as it is (Spark's own reader
    would gunzip it by its name and fail)."""
    local_workspace.put_files([("a.jsonl", JSONL), ("b.gz", JSONL), ("c.jsonl.zst", JSONL)])
    cfg = config(local_workspace, "jsonl", compression="none")
    rows = parse(spark, local_workspace, cfg, ["a.jsonl", "b.gz", "c.jsonl.zst"])
    by_file = {m: [r for r in rows if r["_major"] == m] for m in range(3)}
    assert records(by_file[1]) == [(r[0], 1, *r[2:]) for r in records(by_file[0])]
    assert records(by_file[2]) == [(r[0], 2, *r[2:]) for r in records(by_file[0])]
    assert count_records(local_workspace.store("in"), "b.gz", cfg) == 7


def _mixed_lines(rng: random.Random, n: int) -> tuple[bytes, dict[int, str | None]]:
    """``n`` lines: mostly good records, some blank, cut short, Latin-1 or wrong-typed."""
    out, expected = [], {}
    for number in range(1, n + 1):
        pick = rng.random()
        if pick < 0.03:
            out.append(rng.choice([b"", b"   ", b"\r"]))
            continue
        if pick < 0.05:
            out.append(b'{"user": "x", "ts": "2026-01-01T00:0')
            expected[number] = "malformed: not a JSON object"
        elif pick < 0.06:
            out.append(b'{"user": "\xe9t\xe9", "ts": "2026-01-01T00:00:01Z", "amount": 1}')
            expected[number] = "malformed: not valid UTF-8"
        elif pick < 0.08:
            record = {"user": f"u{number}", "ts": "2026-01-01T00:00:01Z", "amount": "lots"}
            out.append(json.dumps(record).encode())
            expected[number] = "wrong_type: field 'amount' = lots is not a double"
        else:
            pad = "x" * rng.choice([0, 0, 0, 40, 300])
            ts = f"2026-01-01T00:{number // 60 % 60:02d}:{number % 60:02d}Z"
            record = {"user": f"u{number}{pad}", "url": "/", "amount": number, "ts": ts}
            out.append(json.dumps(record).encode())
            expected[number] = None
    return b"\n".join(out) + b"\n", expected


def test_bzip2_lines_are_exact_when_spark_splits_the_file(
    spark: Any, local_workspace: Workspace
) -> None:
    """bzip2 is splittable: Spark reads a big ``.bz2`` in several tasks (each from the first
    bzip2 block that starts in its split); every line keeps its number and reason, as in the
    plain file split the same way, and the forced codec on another name (one task) agrees."""
    data, expected = _mixed_lines(random.Random(11), 60_000)
    packed = bz2.compress(data, compresslevel=1)  # 100 kB blocks: many blocks
    local_workspace.put_files([("a.jsonl", data), ("b.jsonl.bz2", packed), ("c.bin", packed)])
    with SplitSize(spark, 64 * 1024):
        cfg = config(local_workspace, "jsonl")
        store = local_workspace.store("in")
        index = [IndexedFile(qualified(spark, to_spark_uri(store.uri("b.jsonl.bz2"))),
                             "b.jsonl.bz2", 0, to_spark_uri(store.uri("b.jsonl.bz2")))]  # fmt: skip
        frame, _ = parse_files(spark, cfg, store, index, ("ts",), None)
        assert frame.rdd.getNumPartitions() > 4  # the file was split
        split = sorted((r.asDict() for r in frame.collect()), key=lambda r: r["_line"])
        plain = parse(spark, local_workspace, cfg, ["a.jsonl"])
        forced = parse(spark, local_workspace, config(local_workspace, "jsonl",
                                                      compression="bzip2"), ["c.bin"])  # fmt: skip
    assert {r["_line"]: r["_error"] for r in split} == expected  # every record once
    assert records(split) == records(plain) == records(forced)
    assert count_records(store, "b.jsonl.bz2", cfg) == len(expected)


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_truncated_compressed_file_fails_naming_it(
    spark: Any, workspace: Workspace, codec: str
) -> None:
    """A file cut short (a writer that died, a partial upload) fails the read with one
    message naming it and its codec: its records are never silently dropped."""
    data, _ = _mixed_lines(random.Random(5), 5000)
    packed = compress(data, codec)
    key = f"cut.jsonl{CODECS[codec]}"
    workspace.put_files([("ok.jsonl", JSONL), (key, packed[: len(packed) * 2 // 3])])
    cfg = config(workspace, "jsonl")
    with pytest.raises(Exception) as info:
        parse(spark, workspace, cfg, ["ok.jsonl", key])
    message = str(info.value)
    assert f"sluice: cannot read {qualified(spark, to_spark_uri(workspace.store('in').uri(key)))}"\
        f" as {codec} (truncated or corrupt?)" in message  # fmt: skip
    # the planner's count stops at the damage instead of failing the plan
    assert count_records(workspace.store("in"), key, cfg) < len(data.splitlines())


def test_a_damaged_file_fails_even_when_the_session_skips_corrupt_files(
    spark: Any, local_workspace: Workspace
) -> None:
    """``spark.sql.files.ignoreCorruptFiles`` (a cluster's default, say) would skip the rest of
    a damaged file without an error: the files source's reads never skip. Garbage named
    ``.lz4`` fails too (Hadoop's own codec ran out of heap on it)."""
    data, _ = _mixed_lines(random.Random(5), 3000)
    packed = gzip.compress(data)
    rows = big_rows(3000)
    orc_data = orc_bytes(typed_table(rows))
    local_workspace.put_files([("cut.jsonl.gz", packed[: len(packed) // 2]),
                               ("junk.jsonl.lz4", data), ("cut.orc", orc_data[:-40])])  # fmt: skip
    previous = spark.conf.get("spark.sql.files.ignoreCorruptFiles")
    spark.conf.set("spark.sql.files.ignoreCorruptFiles", "true")
    try:
        for key, fmt in (
            ("cut.jsonl.gz", "jsonl"),
            ("junk.jsonl.lz4", "jsonl"),
            ("cut.orc", "orc"),
        ):
            with pytest.raises(Exception) as info:
                parse(spark, local_workspace, config(local_workspace, fmt), [key])
            assert key in str(info.value)
    finally:
        spark.conf.set("spark.sql.files.ignoreCorruptFiles", previous)
    with pytest.raises(Exception) as info:
        parse(spark, local_workspace, config(local_workspace, "jsonl"), ["junk.jsonl.lz4"])
    assert "as lz4 (truncated or corrupt?)" in str(info.value)
    assert "not an lz4 file" in str(info.value)


@pytest.mark.extended  # ~45 s: a sweep over every cut; one cut per codec is in make test above
def test_every_cut_of_a_compressed_file_fails_or_reads_it_whole(
    spark: Any, local_workspace: Workspace
) -> None:
    """Cut anywhere — in the data, in the checksums, in the end-of-stream marker — a file
    either reads every record or fails: never a shorter file without an error."""
    data = b"".join(b'{"user": "u%d", "ts": "2026-01-01T00:00:01Z"}\n' % i for i in range(40_000))
    rng = random.Random(3)
    files = []
    for codec, suffix in CODECS.items():
        packed = compress(data, codec)
        cuts = {len(packed) - k for k in range(1, 14)} | {
            rng.randrange(len(packed)) for _ in range(4)
        }
        files += [(f"{codec}-{cut:08d}.jsonl{suffix}", cut, packed[:cut]) for cut in sorted(cuts)]
    files += [(f"{codec}-whole.jsonl{suffix}", 0, compress(data, codec)) for codec, suffix in
              CODECS.items()]  # fmt: skip
    local_workspace.put_files([(key, body) for key, _, body in files])
    cfg = config(local_workspace, "jsonl")
    outcomes = {}
    for key, _, _ in files:
        try:
            rows = parse(spark, local_workspace, cfg, [key])
            outcomes[key] = "whole" if len(rows) == 40_000 else f"SHORT: {len(rows)}"
        except Exception as error:
            assert "sluice: cannot read" in str(error), key
            outcomes[key] = "failed"
    assert not [k for k, v in outcomes.items() if v.startswith("SHORT")], outcomes
    assert [outcomes[f"{codec}-whole.jsonl{suffix}"] for codec, suffix in CODECS.items()] == [
        "whole"
    ] * len(CODECS)
    # what reads whole cut: bzip2 cut in its end-of-stream marker (all blocks there)
    cut_whole = {k.split("-")[0] for k, v in outcomes.items() if v == "whole" and "whole" not in k}
    assert cut_whole <= {"bzip2"}


# -- Avro and ORC ----------------------------------------------------------------------------


def avro_bytes(rows: list[dict[str, Any]], fields: list[dict[str, Any]], **options: Any) -> bytes:
    out = io.BytesIO()
    schema = {"type": "record", "name": "click", "fields": fields}
    fastavro.writer(out, fastavro.parse_schema(schema), rows, **options)
    return out.getvalue()


def orc_bytes(table: pa.Table, **options: Any) -> bytes:
    out = io.BytesIO()
    orc.write_table(table, out, **options)
    return out.getvalue()


def parquet_bytes(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


AVRO_TYPED = [
    {"name": "user", "type": "string"},
    {"name": "url", "type": ["null", "string"]},
    {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
    {"name": "amount", "type": ["null", "double"]},
]
AVRO_TEXT = [  # every column stored as text: read as text and cast
    {"name": "user", "type": "string"},
    {"name": "ts", "type": ["null", "string"]},
    {"name": "amount", "type": ["null", "string"]},
]
TYPED_ROWS = [
    {"user": "u1", "url": "/a", "ts": T0 + timedelta(seconds=1), "amount": 1.5},
    {"user": "u2", "url": None, "ts": None, "amount": 2.0},  # no event time
    {"user": "u3", "url": "/c", "ts": T0 + timedelta(seconds=3), "amount": None},
    {"user": "u4", "url": "/d", "ts": T0 + timedelta(seconds=4), "amount": float("nan")},
]
TEXT_ROWS = [
    {"user": "v1", "ts": "2026-01-01T00:00:01Z", "amount": "4.5"},
    {"user": "v2", "ts": "2026-01-01T00:00:02Z", "amount": "abc"},  # wrong type
    {"user": "v3", "ts": "someday", "amount": "1"},  # wrong type, the event time
    {"user": "v4", "ts": "2026-01-01 00:00:04", "amount": "Infinity"},  # not finite
    {"user": "v5", "ts": None, "amount": "1"},  # no event time
]
TEXT_ERRORS = [
    None,
    "wrong_type: field 'amount' = abc is not a double",
    "wrong_type: field 'ts' = someday is not a timestamp",
    "wrong_type: field 'amount' = Infinity is not a finite double",
    "missing_event_time: field 'ts' is absent or null",
]


def typed_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table({
        "user": [r["user"] for r in rows], "url": [r["url"] for r in rows],
        "ts": pa.array([r["ts"] for r in rows], pa.timestamp("us", tz="UTC")),
        "amount": pa.array([r["amount"] for r in rows], pa.float64()),
    })  # fmt: skip


def text_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table({c: pa.array([r[c] for r in rows], pa.string()) for c in rows[0]})


def test_avro_and_orc_records_are_parquets(spark: Any, both: Workspace) -> None:
    """The same rows in Parquet, Avro and ORC give the same records: stored types taken as
    they are (a stored NaN too, as Parquet's), text columns cast by the text rules, a column
    a file lacks null, ``_raw`` only for dead rows, positions the row in the file."""
    workspace = both
    typed, text = typed_table(TYPED_ROWS), text_table(TEXT_ROWS)
    files = {
        "parquet": (parquet_bytes(typed), parquet_bytes(text)),
        "avro": (avro_bytes(TYPED_ROWS, AVRO_TYPED), avro_bytes(TEXT_ROWS, AVRO_TEXT)),
        "orc": (orc_bytes(typed), orc_bytes(text)),
    }
    found = {}
    for fmt, (first, second) in files.items():
        workspace.put_files([(f"{fmt}/a.{fmt}", first), (f"{fmt}/b.{fmt}", second)])
        cfg = config(workspace, fmt)
        rows = parse(spark, workspace, cfg, [f"{fmt}/a.{fmt}", f"{fmt}/b.{fmt}"])
        found[fmt] = rows
        store = workspace.store("in")
        assert [count_records(store, f"{fmt}/{n}.{fmt}", cfg) for n in "ab"] == [4, 5]
    parquet = found["parquet"]
    assert [(r["_major"], r["_line"], r["_error"]) for r in parquet] == [
        (0, 1, None), (0, 2, "missing_event_time: field 'ts' is absent or null"), (0, 3, None),
        (0, 4, None), *[(1, n + 1, e) for n, e in enumerate(TEXT_ERRORS)]]  # fmt: skip
    for fmt in ("avro", "orc"):
        rows = found[fmt]
        assert [r["_file"] for r in rows] == [f"{fmt}/a.{fmt}"] * 4 + [f"{fmt}/b.{fmt}"] * 5
        for mine, theirs in zip(rows, parquet, strict=True):
            same = {k: v for k, v in mine.items() if k not in ("_file", "_raw", "amount")}
            assert same == {k: v for k, v in theirs.items() if k not in ("_file", "_raw", "amount")}
            nan = mine["amount"] != mine["amount"] and theirs["amount"] != theirs["amount"]
            assert mine["amount"] == theirs["amount"] or nan
            assert (mine["_raw"] is None) == (mine["_error"] is None), (fmt, mine)
    for fmt in ("avro", "orc"):  # the values are what Spark's own readers give
        uri = to_spark_uri(workspace.store("in").uri(f"{fmt}/a.{fmt}"))
        theirs = [r.asDict() for r in spark.read.format(fmt).load(uri).collect()]
        ours = [{c: r[c] for c in ("user", "url", "ts")} for r in found[fmt][:4]]
        assert ours == [{c: r[c] for c in ("user", "url", "ts")} for r in theirs]
    avro_raw = {r["user"]: r["_raw"] for r in found["avro"]}
    assert json.loads(avro_raw["v2"]) == {"user": "v2", "ts": "2026-01-01T00:00:02Z",
                                          "amount": "abc"}  # the row as stored  # fmt: skip
    assert found["avro"][0]["ts"].replace(tzinfo=UTC) == T0 + timedelta(seconds=1)


def big_rows(n: int) -> list[dict[str, Any]]:
    """Rows whose user names their 1-based position; every 97th without an event time."""
    return [{"user": f"u{i}", "url": "/" * (i % 7), "amount": float(i),
             "ts": None if i % 97 == 0 else T0 + timedelta(seconds=i)}
            for i in range(1, n + 1)]  # fmt: skip


@pytest.mark.parametrize("fmt", ["avro", "orc"])
def test_avro_and_orc_rows_are_exact_when_spark_splits_the_files(
    spark: Any, workspace: Workspace, fmt: str
) -> None:
    """Spark splits big Avro and ORC files (no row index in either): each row's position is
    still its row in the file, numbered per split in read order from the rows of the earlier
    splits, counted in one extra job."""
    rows = big_rows(30_000)
    if fmt == "avro":
        big = avro_bytes(rows, AVRO_TYPED, sync_interval=2000, codec="deflate")
        small = avro_bytes(rows[:50], AVRO_TYPED)
    else:
        big = orc_bytes(typed_table(rows), stripe_size=32 * 1024, compression="zstd")
        small = orc_bytes(typed_table(rows[:50]))
    workspace.put_files([(f"a.{fmt}", big), (f"b.{fmt}", small)])
    with SplitSize(spark, 48 * 1024):
        cfg = config(workspace, fmt)
        store = workspace.store("in")
        index = [IndexedFile(qualified(spark, to_spark_uri(store.uri(k))), k, i,
                             to_spark_uri(store.uri(k)))
                 for i, k in enumerate([f"a.{fmt}", f"b.{fmt}"])]  # fmt: skip
        frame, _ = parse_files(spark, cfg, store, index, ("ts",), None)
        assert frame.rdd.getNumPartitions() > 3  # the big file was split
        got = [r.asDict() for r in frame.collect()]
    for major, n in ((0, 30_000), (1, 50)):
        mine = sorted((r for r in got if r["_major"] == major), key=lambda r: r["_line"])
        assert [r["_line"] for r in mine] == list(range(1, n + 1))  # every row once
        assert all(r["user"] == f"u{r['_line']}" for r in mine)  # the right row
        dead = [r["_line"] for r in mine if r["_error"]]
        assert dead == [i for i in range(1, n + 1) if i % 97 == 0]
        assert count_records(store, index[major].key, cfg) == n
    assert avro_rows(big) == 30_000 if fmt == "avro" else True


def test_avro_files_with_other_schemas_and_glob_names(spark: Any, workspace: Workspace) -> None:
    """Each file is read with its own stored schema (one scan per schema), and exactly the
    files named: ``a*.avro`` is itself, not ``ab.avro`` too."""
    workspace.put_files([
        ("a*.avro", avro_bytes(TYPED_ROWS, AVRO_TYPED)),
        ("ab.avro", avro_bytes(TEXT_ROWS, AVRO_TEXT)),
        ("[x].orc", orc_bytes(text_table(TEXT_ROWS))),
        ("x.orc", orc_bytes(typed_table(TYPED_ROWS))),
    ])  # fmt: skip
    rows = parse(spark, workspace, config(workspace, "avro"), ["ab.avro", "a*.avro"])
    assert [(r["_file"], r["_line"], r["user"]) for r in rows] == [
        *[("ab.avro", i + 1, r["user"]) for i, r in enumerate(TEXT_ROWS)],
        *[("a*.avro", i + 1, r["user"]) for i, r in enumerate(TYPED_ROWS)],
    ]
    assert [r["_error"] for r in rows[:5]] == TEXT_ERRORS
    only = parse(spark, workspace, config(workspace, "avro"), ["a*.avro"])
    assert [r["user"] for r in only] == ["u1", "u2", "u3", "u4"]
    orcs = parse(spark, workspace, config(workspace, "orc"), ["[x].orc"])
    assert [(r["_file"], r["_error"]) for r in orcs] == [("[x].orc", e) for e in TEXT_ERRORS]


@pytest.mark.parametrize("fmt", ["avro", "orc"])
def test_a_truncated_avro_or_orc_file_fails(
    spark: Any, local_workspace: Workspace, fmt: str
) -> None:
    rows = big_rows(5000)
    data = avro_bytes(rows, AVRO_TYPED) if fmt == "avro" else orc_bytes(typed_table(rows))
    local_workspace.put_files([(f"cut.{fmt}", data[: len(data) // 2])])
    with pytest.raises(Exception) as info:
        parse(spark, local_workspace, config(local_workspace, fmt), [f"cut.{fmt}"])
    assert "cut." + fmt in str(info.value)


# -- partition columns -----------------------------------------------------------------------


def test_folder_values_unescape_as_spark_does(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    spark_unescape = jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils.unescapePathName
    for text in ["2026-01-01 00%3A01%3A00", "a%2Fb", "%", "%4", "%41", "x%41", "%zz%41", "%+f1",
                 "%-1x", "%-0x", "%C3%A9", "100%", "%%41", "a%4", "\u00e9t\u00e9", "%\uff21\uff21x",
                 "%3a%3A%g1%1"]:  # fmt: skip
        assert unescape_path_name(text) == spark_unescape(text), text
    # Spark 4.2 throws ArrayIndexOutOfBoundsException on '%' then a Latin-1 letter (its hex
    # table has 128 entries): here it is no escape, kept as it is
    assert unescape_path_name("%\u00e9\u00e91") == "%\u00e9\u00e91"
    key = "dt=2026-12-07/HOUR=1%30/x=1/dt=2026-12-08/f.jsonl"
    assert folder_values(key, ("dt", "hour", "y")) == {"dt": "2026-12-08", "hour": "10", "y": None}
    assert folder_values("dt=__HIVE_DEFAULT_PARTITION__/f", ("dt",)) == {"dt": None}
    assert folder_values("dt=/f", ("dt",)) == {"dt": None}
    assert folder_values("a/dt=2026-12-07", ("dt",)) == {"dt": None}  # the file's own name


PARTITIONED_KEYS = [
    "dt=2026-12-07/hour=10/a",  # both
    "dt=2026-13-45/hour=11/b",  # a date that does not exist
    "dt=__HIVE_DEFAULT_PARTITION__/hour=%31%32/c",  # null, and an escaped 12
    "d",  # no folders: nulls
]


def partitioned_file(fmt: str, users: list[str]) -> bytes:
    rows = [{"user": u, "url": "/", "ts": T0, "amount": 1.0} for u in users]
    if fmt == "jsonl":
        return b"".join(json.dumps({**r, "ts": "2026-01-01T00:00:00Z"}).encode() + b"\n"
                        for r in rows)  # fmt: skip
    if fmt == "csv":
        return b"user,url,ts,amount\n" + b"".join(
            f"{r['user']},/,2026-01-01T00:00:00Z,1\n".encode() for r in rows
        )
    if fmt == "avro":
        return avro_bytes(rows, AVRO_TYPED)
    table = typed_table(rows)
    return parquet_bytes(table) if fmt == "parquet" else orc_bytes(table)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "avro", "orc"])
def test_partition_columns_in_every_format(spark: Any, workspace: Workspace, fmt: str) -> None:
    """``dt`` and ``hour`` from the folders: typed, null where absent or Hive's default,
    ``wrong_type`` naming the partition for every record of a file whose value does not
    convert, and only for a column the pipeline reads."""
    keys = [f"{k}.{fmt}" for k in PARTITIONED_KEYS]
    workspace.put_files(
        [(k, partitioned_file(fmt, [f"u{i}a", f"u{i}b"])) for i, k in enumerate(keys)]
    )
    cfg = config(workspace, fmt, partition_columns={"dt": "date", "hour": "int"})
    assert cfg.schema == (*SCHEMA, ("dt", "date"), ("hour", "int"))
    rows = parse(spark, workspace, cfg, keys)
    bad = "wrong_type: partition 'dt' = 2026-13-45 is not a date"
    line = 2 if fmt == "csv" else 1
    assert [(r["_file"], r["_line"], r["user"], r["dt"], r["hour"], r["_error"]) for r in rows] == [
        (keys[0], line, "u0a", date(2026, 12, 7), 10, None),
        (keys[0], line + 1, "u0b", date(2026, 12, 7), 10, None),
        (keys[1], line, "u1a", None, 11, bad),
        (keys[1], line + 1, "u1b", None, 11, bad),
        (keys[2], line, "u2a", None, 12, None),
        (keys[2], line + 1, "u2b", None, 12, None),
        (keys[3], line, "u3a", None, None, None),
        (keys[3], line + 1, "u3b", None, None, None),
    ]
    # a pipeline that never reads dt takes the bad value as null, as for any column
    lenient = parse(spark, workspace, cfg, keys, read=("user", "ts", "amount", "hour"))
    assert [r["_error"] for r in lenient] == [None] * 8


def test_the_event_time_from_a_folder(spark: Any, local_workspace: Workspace) -> None:
    """``ts`` in the folder (Spark's escaping of ``:``): required, so a file without it is
    ``missing_event_time`` and a bad value ``wrong_type``, before the file's own columns'
    problems, after a malformed line's."""
    body = (b'{"user": "a", "amount": 1}\n'
            b'{"user": "b", "amount": "lots"}\n'
            b'{"user": "c", "amount": 1} x\n')  # fmt: skip
    keys = ["ts=2026-01-01 00%3A00%3A05/a.jsonl", "ts=yesterday/b.jsonl", "c.jsonl",
            "ts=__HIVE_DEFAULT_PARTITION__/d.jsonl"]  # fmt: skip
    local_workspace.put_files([(k, body) for k in keys])
    schema = (("user", "string"), ("amount", "double"))
    cfg = config(local_workspace, "jsonl", schema=schema, partition_columns={"ts": "timestamp"})
    rows = parse(spark, local_workspace, cfg, keys)
    wrong = "wrong_type: field 'amount' = lots is not a double"
    trailing = "malformed: text after the JSON object"
    missing = "missing_event_time: partition 'ts' is absent or null"
    assert [(r["_major"], r["user"], r["_error"]) for r in rows] == [
        (0, "a", None), (0, "b", wrong), (0, "c", trailing),
        (1, "a", "wrong_type: partition 'ts' = yesterday is not a timestamp"),
        (1, "b", "wrong_type: partition 'ts' = yesterday is not a timestamp"), (1, "c", trailing),
        (2, "a", missing), (2, "b", missing), (2, "c", trailing),
        (3, "a", missing), (3, "b", missing), (3, "c", trailing),
    ]  # fmt: skip
    assert rows[0]["ts"].replace(tzinfo=UTC) == T0 + timedelta(seconds=5)


# -- a pipeline ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["avro", "jsonl.zst"])
def test_a_windowed_pipeline_equals_the_reference(
    spark: Any, workspace: Workspace, kind: str
) -> None:
    """Avro files, or zstd-compressed JSON lines, through two epochs of the click pipeline
    (windows, late records, dead letters): the committed output equals the reference computed
    from the same records as plain JSON lines."""
    rng = random.Random(17)
    files_jsonl, files_in = [], []
    for n in range(4):
        rows = []
        for i in range(60):
            second = n * 50 + i + rng.randint(-20, 5)
            ts = None if rng.random() < 0.05 else T0 + timedelta(seconds=max(second, 0) * 3)
            rows.append({"user": f"u{rng.randint(1, 4)}", "url": f"/{i % 3}", "ts": ts,
                         "amount": round(rng.uniform(0, 10), 2)})  # fmt: skip
        key = f"clicks-{n}.{kind}"
        lines = [json.dumps({**r, "ts": None if r["ts"] is None else
                             r["ts"].strftime("%Y-%m-%dT%H:%M:%SZ")}) for r in rows]  # fmt: skip
        if n == 2:
            lines[7] = '{"user": "u1", "url": "/", "ts": "2026-01-01T00:09:00Z", "amount": "x"}'
            rows[7] = {"user": "u1", "url": "/", "ts": "2026-01-01T00:09:00Z", "amount": "x"}
        text = "\n".join(lines).encode() + b"\n"
        files_jsonl.append((key, text))
        if kind == "avro":
            fields = AVRO_TYPED if n != 2 else [*AVRO_TEXT[:1], AVRO_TYPED[1], *AVRO_TEXT[1:]]
            stored = rows if n != 2 else [
                {**r, "ts": r["ts"] if isinstance(r["ts"], str) or r["ts"] is None
                 else r["ts"].strftime("%Y-%m-%dT%H:%M:%SZ"), "amount": str(r["amount"])}
                for r in rows
            ]  # fmt: skip
            files_in.append((key, avro_bytes(stored, fields)))
        else:
            files_in.append((key, compress(text, "zstd")))
    workspace.put_files(files_in)
    reference = click_reference(files_jsonl)
    assert reference.late and reference.dead  # the input has both
    assert any(code == "wrong_type" for _, _, code in reference.dead)
    source = {"type": "files", "path": workspace.uri("in"), "format": kind.split(".")[0],
              "max_files_per_epoch": 2, "schema": dict(SCHEMA)}  # fmt: skip
    spec = click_spec(workspace, source=source)
    epochs = 0
    while run_epoch(runtime(spec), spark) is not None:
        epochs += 1
    assert epochs == 2
    assert_click_output_exact(spec, reference)

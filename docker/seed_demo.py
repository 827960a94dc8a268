"""Upload the input files of the shipped specs that read files (MinIO in docker-compose): the
demo's clicks and count_window_average's readings (:func:`sluice.demo.shipped_input`).

    docker compose exec airflow-scheduler python docker/seed_demo.py [--spec SPEC]... [--files N]

The destination is each spec's ``source.path`` (``s3://sluice/demo/in`` and
``s3://sluice/count_window_average/in`` in docker-compose.yaml); the endpoint and credentials
come from the spec's ``s3`` block or the ``AWS_*`` environment, as for the pipeline itself.
Files already present are left alone, so running it twice uploads nothing new. ``--files N``
uploads only the first N files of each (then run it again with a larger N to make new input
arrive).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

DEFAULT_SPECS = (
    "include/pipelines/clicks_per_minute.yaml",
    "include/pipelines/count_window_average.yaml",
    "include/pipelines/clicks_to_iceberg.yaml",
    "include/pipelines/clicks_to_kafka.yaml",
)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")`` (no leading or trailing slash)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in ("s3", "s3a"):
        raise ValueError(f"not an s3:// URI: {uri!r} (set SLUICE_DATA=s3://bucket/prefix)")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri!r}")
    return bucket, prefix.strip("/")


def seed(
    client: Any, source_path: str, files: int | None = None, pipeline: str = "clicks_per_minute"
) -> list[str]:
    """Put ``pipeline``'s demo files under ``source_path``; return the keys written (new ones
    only)."""
    from sluice.demo import shipped_input

    rendered = shipped_input(pipeline)
    if rendered is None:
        raise ValueError(f"pipeline {pipeline!r} has no demo input files")
    bucket, prefix = split_s3_uri(source_path)
    existing: set[str] = set()
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{prefix}/" if prefix else ""
    )
    for page in pages:
        existing.update(obj["Key"] for obj in page.get("Contents", []))
    written = []
    for name, body in rendered[:files]:
        key = f"{prefix}/{name}" if prefix else name
        if key in existing:
            continue
        client.put_object(Bucket=bucket, Key=key, Body=body)
        written.append(key)
    return written


def main(argv: Sequence[str] | None = None, client: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="seed_demo.py", description=__doc__.split("\n")[0])
    parser.add_argument("--spec", action="append", help="repeatable; default: both shipped")
    parser.add_argument("--files", type=int, default=None, help="upload only the first N files")
    args = parser.parse_args(argv)

    from sluice.spec import load_spec

    for path in args.spec or DEFAULT_SPECS:
        spec = load_spec(path)
        s3, target = spec.s3, client
        if target is None:  # each spec's own endpoint (its s3 block, else the AWS_* env)
            from sluice.storage.s3 import make_s3_client

            target = make_s3_client(s3.endpoint_url if s3 else None, s3.region if s3 else None)
        try:
            written = seed(target, spec.source.path, args.files, spec.name)
        except ValueError as exc:
            print(f"seed_demo: error: {exc}", file=sys.stderr)
            return 2
        print(f"seed_demo: {len(written)} new file(s) under {spec.source.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Upload the demo click files to the demo pipeline's input prefix (MinIO in docker-compose).

    docker compose exec airflow-scheduler python docker/seed_demo.py [--spec SPEC] [--files N]

The destination is the spec's ``source.path`` (``$SLUICE_DATA/in``, i.e.
``s3://sluice/demo/in`` in docker-compose.yaml); the endpoint and credentials come from the
spec's ``s3`` block or the ``AWS_*`` environment, as for the pipeline itself. Files already
present are left alone, so running it twice uploads nothing new. ``--files N`` uploads only
the first N files (then run it again with a larger N to make new input arrive).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

DEFAULT_SPEC = "include/pipelines/clicks_per_minute.yaml"


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")`` (no leading or trailing slash)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in ("s3", "s3a"):
        raise ValueError(f"not an s3:// URI: {uri!r} (set SLUICE_DATA=s3://bucket/prefix)")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri!r}")
    return bucket, prefix.strip("/")


def seed(client: Any, source_path: str, files: int | None = None) -> list[str]:
    """Put the demo files under ``source_path``; return the keys written (new ones only)."""
    from sluice.demo import render_click_files

    bucket, prefix = split_s3_uri(source_path)
    existing: set[str] = set()
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{prefix}/" if prefix else ""
    )
    for page in pages:
        existing.update(obj["Key"] for obj in page.get("Contents", []))
    written = []
    for name, body in render_click_files()[:files]:
        key = f"{prefix}/{name}" if prefix else name
        if key in existing:
            continue
        client.put_object(Bucket=bucket, Key=key, Body=body)
        written.append(key)
    return written


def main(argv: Sequence[str] | None = None, client: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="seed_demo.py", description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default=DEFAULT_SPEC)
    parser.add_argument("--files", type=int, default=None, help="upload only the first N files")
    args = parser.parse_args(argv)

    from sluice.spec import load_spec

    spec = load_spec(args.spec)
    if client is None:
        from sluice.storage.s3 import make_s3_client

        s3 = spec.s3
        client = make_s3_client(s3.endpoint_url if s3 else None, s3.region if s3 else None)
    try:
        written = seed(client, spec.source.path, args.files)
    except ValueError as exc:
        print(f"seed_demo: error: {exc}", file=sys.stderr)
        return 2
    print(f"seed_demo: {len(written)} new file(s) under {spec.source.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

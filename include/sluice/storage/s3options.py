"""Connection options for S3-compatible checkpoint storage (AWS, MinIO, SeaweedFS)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["S3Options"]


@dataclass(frozen=True)
class S3Options:
    """Where to reach S3; credentials always come from the standard AWS chain, never from here.

    ``None`` means "let boto3 decide" (its own env vars, config files, then AWS defaults).
    """

    endpoint_url: str | None = None
    region: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> S3Options:
        """Read ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` and ``AWS_REGION`` /
        ``AWS_DEFAULT_REGION`` (first non-empty wins)."""
        env = os.environ if environ is None else environ
        return cls(
            endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
        )

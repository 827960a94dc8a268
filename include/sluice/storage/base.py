"""The object-store interface every checkpoint backend implements.

Keys are '/'-separated paths relative to the store's root URI (no leading '/').

Contract (the engine's exactly-once argument rests on it):

* ``put_if_absent(key, data)`` is **atomic**: of any number of concurrent callers with the
  same key, exactly one succeeds; every other one raises :class:`ObjectAlreadyExists`, and
  the stored bytes are exactly the winner's. A reader never sees a partial object.
* ``put(key, data)`` replaces the object atomically (readers see the old or the new bytes).
* ``get(key)`` raises :class:`ObjectNotFound` when absent.
* ``list(prefix)`` returns every key under ``prefix`` (recursively) in ascending byte order.
* ``delete`` / ``delete_prefix`` are idempotent: deleting what is absent is not an error.
* ``move(src, dst)`` makes ``dst`` hold ``src``'s bytes and removes ``src``; it is idempotent
  when re-run after a crash (if ``src`` is gone and ``dst`` exists, it does nothing).
* Transient failures are retried with bounded exponential backoff inside the backend;
  what escapes is a :class:`StorageError` naming the URI.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

__all__ = ["ObjectInfo", "ObjectStore"]


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(ABC):
    """A flat key/value store of byte objects rooted at :attr:`root_uri`."""

    root_uri: str

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]: ...

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def move(self, src: str, dst: str) -> None: ...

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many were deleted."""
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        return len(infos)

    def uri(self, key: str = "") -> str:
        """The full URI of ``key`` (``s3://bucket/prefix/key`` or ``file:///abs/key``)."""
        root = self.root_uri.rstrip("/")
        return f"{root}/{key}" if key else root

    @abstractmethod
    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``prefix`` under this one (same backend, same credentials)."""

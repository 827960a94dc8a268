"""The object-store interface every checkpoint backend implements.

Keys are '/'-separated paths relative to the store's root URI (no leading '/'). Every segment
is non-empty and does not start with '.' (which also rules out '.' and '..'; hidden names are
reserved for a backend's temporary files); NUL is refused. A backslash is an ordinary
character, as on POSIX file systems and S3 (``b\\c.jsonl`` is one name), but a key that would
leave the root were backslashes separators (``a\\..\\b``, ``\\etc``) is refused too. A bad key
or prefix raises :class:`InvalidKey` naming it, so no key can escape the root. A key should not
also be a prefix of other keys ("a" next to "a/b"): a directory-backed store cannot hold both.

Contract (the engine's exactly-once argument rests on it):

* ``put_if_absent(key, data)`` is **atomic**: of any number of concurrent callers with the
  same key, exactly one succeeds; every other one raises :class:`ObjectAlreadyExists`, and
  the stored bytes are exactly the winner's. A reader never sees a partial object.
* ``put(key, data)`` replaces the object atomically (readers see the old or the new bytes).
* ``get(key)`` raises :class:`ObjectNotFound` when absent; ``get_tail(key, size)`` returns
  its last ``size`` bytes (the whole object when it is shorter), with the same errors.
* ``list(prefix)`` returns every key under ``prefix`` (recursively) in ascending byte order,
  each with its size, modification time and (S3) ETag; ``list(prefix, start_after=k)`` only
  the keys that sort after ``k`` (S3's ``StartAfter``: the store skips what sorts before; a
  ``k`` that is a folder's own path, ``a/b`` beside ``a/b/c``, is "after that folder" on
  SeaweedFS, which walks folders: give a key no folder has).
* ``delete`` / ``delete_prefix`` are idempotent: deleting what is absent is not an error.
* ``move(src, dst)`` makes ``dst`` hold ``src``'s bytes and removes ``src``; it is idempotent
  when re-run after a crash (if ``src`` is gone and ``dst`` exists, it does nothing).
  ``move_to(src, other, dst)`` does the same into another store of the same backend (an
  archive folder); ``info(key)`` is one object's listing entry (None: absent).
* Transient failures are retried with bounded exponential backoff inside the backend;
  what escapes is a :class:`StorageError` naming the URI.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from sluice.storage.exceptions import InvalidKey

__all__ = ["ObjectInfo", "ObjectStore", "key_problem"]


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid object key, or None if it is (see the module docstring)."""
    if not key:
        return "empty key"
    windows = key.replace("\\", "/")
    if windows != key and (windows.startswith("/") or ".." in windows.split("/")):
        return "backslashes that would escape the store root where '\\' separates paths"
    if "\x00" in key:
        return "NUL character in key"
    if key.startswith("/"):
        return "absolute key (keys are relative to the store root)"
    for segment in key.split("/"):
        if not segment:
            return "empty path segment ('//' or a trailing '/')"
        if segment == "..":
            return "'..' segment would escape the store root"
        if segment.startswith("."):
            return f"segment {segment!r} starts with '.' (reserved for temporary files)"
    return None


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object. Two infos are equal when key and size are: ``modified_ns`` (the
    object's modification time, ns since the epoch, UTC) and ``etag`` (S3's ETag without its
    quotes; "" on local disk) describe the listing's moment, not the object's identity."""

    key: str
    size: int
    modified_ns: int = field(default=0, compare=False)
    etag: str = field(default="", compare=False)


class ObjectStore(ABC):
    """A flat key/value store of byte objects rooted at :attr:`root_uri`."""

    root_uri: str

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    def get_tail(self, key: str, size: int) -> bytes:
        """The last ``size`` bytes of ``key`` (all of it when shorter): a Parquet footer
        without the file. Backends that can read a range override this whole-object read."""
        if size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        return self.get(key)[-size:]

    @abstractmethod
    def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> list[ObjectInfo]: ...

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def move(self, src: str, dst: str) -> None: ...

    def info(self, key: str) -> ObjectInfo | None:
        """``key``'s entry as :meth:`list` gives it, or None when there is no such object."""
        found = [i for i in self.list(key) if i.key == key]
        return found[0] if found else None

    def move_to(self, src: str, other: ObjectStore, dst: str) -> None:
        """``move`` into ``other`` (``dst`` a key there): copy, then delete ``src``; re-run
        after a crash, it finishes (``src`` gone and ``dst`` there: nothing to do)."""
        from sluice.storage.exceptions import ObjectNotFound

        try:
            data = self.get(src)
        except ObjectNotFound:
            if other.exists(dst):
                return
            raise
        other.put(dst, data)
        self.delete(src)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many were deleted."""
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        return len(infos)

    def fingerprints(self, prefix: str) -> dict[str, str]:
        """``{key: "<size>:<digest>"}`` for every object under ``prefix``: it changes when an
        object is rewritten, truncated or altered. Here a SHA-256 of the bytes (S3 takes the
        ETags of one LIST; the local store hashes a file again only once its stat changed)."""
        return {
            info.key: f"{info.size}:sha256:{hashlib.sha256(self.get(info.key)).hexdigest()}"
            for info in self.list(prefix)
        }

    def fingerprint(self, key: str) -> str | None:
        """The one object ``key``'s fingerprint as :meth:`fingerprints` gives it (None: no
        such object). Writes nothing: the local store's memo is for folders read again and
        again, not for one file of someone else's table (a Delta log, Iceberg metadata)."""
        from sluice.storage.exceptions import ObjectNotFound

        try:
            data = self.get(key)
        except ObjectNotFound:
            return None
        return f"{len(data)}:sha256:{hashlib.sha256(data).hexdigest()}"

    def uri(self, key: str = "") -> str:
        """The full URI of ``key`` (``s3://bucket/prefix/key`` or ``file:///abs/key``)."""
        root = self.root_uri.rstrip("/")
        return f"{root}/{key}" if key else root

    @abstractmethod
    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``prefix`` under this one (same backend, same credentials)."""

    def _check_key(self, key: str) -> str:
        """``key`` if valid, else :class:`InvalidKey` naming it and this store."""
        problem = key_problem(key)
        if problem is not None:
            raise InvalidKey(self.root_uri, key, problem)
        return key

    def _check_prefix(self, prefix: str) -> str:
        """``prefix`` if it is '' or a valid key, optionally with one trailing '/'."""
        if prefix:
            problem = key_problem(prefix.removesuffix("/"))
            if problem is not None:
                raise InvalidKey(self.root_uri, prefix, problem)
        return prefix

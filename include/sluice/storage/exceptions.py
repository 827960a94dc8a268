"""Errors of the object-store layer."""

from __future__ import annotations

from sluice.exceptions import SluiceError

__all__ = [
    "CorruptObject",
    "InvalidKey",
    "InvalidStoreUri",
    "ObjectAlreadyExists",
    "ObjectNotFound",
    "StorageError",
    "UnsupportedCatalog",
]


class StorageError(SluiceError):
    """A storage call failed after its retries."""

    def __init__(self, uri: str, message: str) -> None:
        super().__init__(f"{uri}: {message}")
        self.uri = uri


class ObjectNotFound(StorageError):
    """No object at this key."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, "no such object")


class ObjectAlreadyExists(StorageError):
    """put_if_absent lost: an object is already stored at this key."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, "object already exists (put-if-absent refused)")


class CorruptObject(StorageError):
    """A manifest failed to parse or its checksum does not match its content (or a state file
    differs from what its checkpoint recorded)."""

    def __init__(self, uri: str, reason: str, what: str = "manifest") -> None:
        super().__init__(uri, f"corrupt {what}: {reason}")
        self.reason, self.what = reason, what


class InvalidKey(StorageError):
    """A key or prefix that could escape the store's root or is not portable across backends."""

    def __init__(self, uri: str, key: str, reason: str) -> None:
        super().__init__(uri, f"invalid key {key!r}: {reason}")
        self.key = key
        self.reason = reason


class InvalidStoreUri(StorageError):
    """A storage URI that :func:`sluice.storage.open_store` cannot open."""

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(uri, f"unusable storage URI: {reason}")
        self.reason = reason


class UnsupportedCatalog(StorageError):
    """An Iceberg catalog connection URI of no kind Sluice opens (``uri`` shown without its
    secrets: :func:`sluice.storage.catalogs.redacted`)."""

    def __init__(self, uri: str, message: str) -> None:
        super().__init__(uri, message)
        self.message = message

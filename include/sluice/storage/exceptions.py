"""Errors of the object-store layer."""

from __future__ import annotations

from sluice.exceptions import SluiceError

__all__ = [
    "CorruptObject",
    "ObjectAlreadyExists",
    "ObjectNotFound",
    "StorageError",
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
    """A manifest failed to parse or its checksum does not match its content."""

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(uri, f"corrupt manifest: {reason}")
        self.reason = reason

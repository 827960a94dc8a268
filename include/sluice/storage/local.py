"""Object store on a local directory (``file:///abs/root``), the embedded default backend.

Every write goes to a hidden temp file (``.tmp-<uuid>``) in the target's directory, is fsynced,
and only then becomes visible: ``os.replace`` for :meth:`put`, ``os.link`` for
:meth:`put_if_absent` (the kernel refuses to link onto an existing name, which makes it atomic
across threads and processes on one filesystem). Readers therefore never see partial objects.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from sluice.storage.base import ObjectInfo, ObjectStore
from sluice.storage.exceptions import ObjectAlreadyExists, ObjectNotFound, StorageError

__all__ = ["TEMP_PREFIX", "LocalObjectStore"]

TEMP_PREFIX = ".tmp-"
"""Name prefix of in-flight temp files; like every hidden name, never listed."""


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root``; keys map to relative paths.

    >>> store = LocalObjectStore("/var/sluice/orders")
    >>> store.uri("epochs/000000000007/checkpoint.json")
    'file:///var/sluice/orders/epochs/000000000007/checkpoint.json'
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(os.path.abspath(root))
        self.root_uri = f"file://{self.root.as_posix()}"

    def __repr__(self) -> str:
        return f"LocalObjectStore({self.root_uri!r})"

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise ObjectNotFound(self.uri(key)) from exc
        except OSError as exc:
            raise self._error(key, "read", exc) from exc

    def get_tail(self, key: str, size: int) -> bytes:
        if size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        path = self._path(key)
        try:
            with path.open("rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - size))
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise ObjectNotFound(self.uri(key)) from exc
        except OSError as exc:
            raise self._error(key, "read", exc) from exc

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_temp(key, path, data)
        try:
            os.replace(tmp, path)
        except OSError as exc:
            _unlink_quietly(tmp)
            raise self._error(key, "replace", exc) from exc
        self._fsync_dir(key, path.parent)

    def put_if_absent(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_temp(key, path, data)
        try:
            os.link(tmp, path)
        except FileExistsError as exc:
            raise ObjectAlreadyExists(self.uri(key)) from exc
        except OSError as exc:
            raise self._error(key, "link", exc) from exc
        finally:
            _unlink_quietly(tmp)
        self._fsync_dir(key, path.parent)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        self._check_prefix(prefix)
        try:
            files = list(self._walk_files(self._dir_of(prefix)))
        except OSError as exc:
            raise self._error(prefix, "list", exc) from exc
        infos = [ObjectInfo(key, size) for key, size in files if key.startswith(prefix)]
        # a name whose bytes are not UTF-8 holds surrogates (os.walk): sorted by its bytes
        return sorted(infos, key=lambda info: info.key.encode("utf-8", "surrogateescape"))

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            pass  # absent (or only a prefix of other keys): nothing to delete
        except OSError as exc:
            raise self._error(key, "unlink", exc) from exc

    def move(self, src: str, dst: str) -> None:
        src_path, dst_path = self._path(src), self._path(dst)
        if not src_path.is_file():
            self._finish_or_fail_move(src, dst_path)
            return
        self._make_parents(dst, dst_path)
        try:
            os.replace(src_path, dst_path)
        except FileNotFoundError:
            self._finish_or_fail_move(src, dst_path)  # a concurrent move got there first
            return
        except OSError as exc:
            raise self._error(src, f"move to {dst!r}", exc) from exc
        self._fsync_dir(dst, dst_path.parent)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``, then tidy the directories it leaves behind.

        Hidden companions under the prefix (Spark's ``.part-*.crc``) go too; other writers'
        in-flight ``.tmp-`` files and the root itself stay.
        """
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        self._prune(prefix)
        return len(infos)

    def child(self, prefix: str) -> LocalObjectStore:
        key = self._check_key(prefix.removesuffix("/"))
        return LocalObjectStore(self.root.joinpath(*key.split("/")))

    # -- helpers ---------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*self._check_key(key).split("/"))

    def _dir_of(self, prefix: str) -> Path:
        """The deepest directory that can hold keys starting with ``prefix``."""
        parent = prefix.rpartition("/")[0]
        return self.root.joinpath(*parent.split("/")) if parent else self.root

    def _key_of(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _write_temp(self, key: str, path: Path, data: bytes) -> Path:
        """Write ``data`` to a fresh fsynced temp file next to ``path`` and return its path."""
        self._make_parents(key, path)
        tmp = path.parent / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            with open(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            _unlink_quietly(tmp)
            raise self._error(key, "write temp file", exc) from exc
        return tmp

    def _make_parents(self, key: str, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise StorageError(self.uri(key), "a parent of this key is already an object") from exc
        except OSError as exc:
            raise self._error(key, "mkdir", exc) from exc

    def _fsync_dir(self, key: str, directory: Path) -> None:
        """Make a rename/link in ``directory`` durable (it lives in the directory entry)."""
        try:
            fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP):  # fs without directory fsync
                raise self._error(key, "fsync directory", exc) from exc

    def _finish_or_fail_move(self, src: str, dst_path: Path) -> None:
        """``src`` is gone: the move already happened if ``dst`` exists, else ``src`` is absent."""
        if not dst_path.is_file():
            raise ObjectNotFound(self.uri(src))

    def _walk_files(self, start: Path) -> Iterator[tuple[str, int]]:
        """(key, size) of every visible file under ``start``; hidden names are skipped."""
        for dirpath, dirnames, filenames in os.walk(start, onerror=_raise_unless_missing):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith("."):
                    continue
                path = Path(dirpath, name)
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue  # deleted while we walked
                yield self._key_of(path), size

    def _prune(self, prefix: str) -> None:
        """Remove hidden companions and empty directories whose keys start with ``prefix``."""
        start = self._dir_of(prefix)
        for dirpath, _dirnames, filenames in os.walk(start, topdown=False):
            directory = Path(dirpath)
            dir_key = self._key_of(directory)
            for name in filenames:
                key = f"{dir_key}/{name}" if dir_key != "." else name
                if _is_companion(name) and key.startswith(prefix):
                    _unlink_quietly(directory / name)
            if directory != self.root and f"{dir_key}/".startswith(prefix):
                _rmdir_quietly(directory)

    def _error(self, key: str, action: str, exc: OSError) -> StorageError:
        return StorageError(self.uri(key), f"{action} failed: {exc.strerror or exc}")


def _raise_unless_missing(exc: OSError) -> None:
    """os.walk error hook: a missing directory is an empty listing, anything else fails."""
    if not isinstance(exc, FileNotFoundError | NotADirectoryError):
        raise exc


def _is_companion(name: str) -> bool:
    """A hidden file some other writer left next to objects (Spark's ``.crc``), not ours."""
    return name.startswith(".") and not name.startswith(TEMP_PREFIX)


def _unlink_quietly(path: Path) -> None:
    path.unlink(missing_ok=True)


def _rmdir_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (a concurrent writer) or already gone
        path.rmdir()

"""Object store on a local directory (``file:///abs/root``), the embedded default backend.

Every write goes to a hidden temp file (``.tmp-<uuid>``) in the target's directory, is fsynced,
and only then becomes visible: ``os.replace`` for :meth:`put`, ``os.link`` for
:meth:`put_if_absent` (the kernel refuses to link onto an existing name, which makes it atomic
across threads and processes on one filesystem). Readers therefore never see partial objects.

:meth:`LocalObjectStore.fingerprints` hashes a file once: it keeps each directory's digests in
a hidden memo (``.sluice-fingerprints.json``) keyed by the file's size, mtime, ctime and inode,
and hashes again only a file whose stat no longer matches (rewritten, truncated, touched,
copied). The fingerprints it returns are the same ``<size>:sha256:<hex>`` as without the memo.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from operator import attrgetter
from pathlib import Path
from stat import S_ISREG
from typing import Any

from sluice.bulk import paused_gc
from sluice.storage.base import ObjectInfo, ObjectStore
from sluice.storage.exceptions import ObjectAlreadyExists, ObjectNotFound, StorageError

__all__ = ["FINGERPRINT_MEMO", "TEMP_PREFIX", "LocalObjectStore"]

TEMP_PREFIX = ".tmp-"
"""Name prefix of in-flight temp files; like every hidden name, never listed."""

FINGERPRINT_MEMO = ".sluice-fingerprints.json"
"""A directory's memo of its files' digests (see :meth:`LocalObjectStore.fingerprints`)."""

RACY_WAIT_S = 0.1
"""How long :meth:`LocalObjectStore.fingerprints` waits for the clock to tick past a file
changed just now before it hashes it (a few ms on ext4, xfs, tmpfs)."""

Stats = dict[str, tuple[str, os.stat_result]]  # name -> (key, stat) of files in one directory


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

    def list(self, prefix: str = "", start_after: str | None = None) -> list[ObjectInfo]:
        """``start_after``: folders whose every key sorts at or before it are not walked."""
        self._check_prefix(prefix)
        with paused_gc():  # a folder of a million files: a million infos
            try:
                files = list(self._walk_files(self._dir_of(prefix), start_after))
            except OSError as exc:
                raise self._error(prefix, "list", exc) from exc
            infos = [
                ObjectInfo(key, st.st_size, st.st_mtime_ns)
                for key, _, _, st in files
                if key.startswith(prefix) and (start_after is None or _after(key, start_after))
            ]
            return _in_byte_order(infos)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            pass  # absent (or only a prefix of other keys): nothing to delete
        except OSError as exc:
            raise self._error(key, "unlink", exc) from exc

    def move(self, src: str, dst: str) -> None:
        self._rename(src, self, dst)

    def info(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._error(key, "stat", exc) from exc
        return ObjectInfo(key, st.st_size, st.st_mtime_ns) if S_ISREG(st.st_mode) else None

    def move_to(self, src: str, other: ObjectStore, dst: str) -> None:
        """A rename when ``other`` is a local store on the same file system (else a copy)."""
        if not isinstance(other, LocalObjectStore):
            super().move_to(src, other, dst)
            return
        if not self._rename(src, other, dst):
            super().move_to(src, other, dst)  # another file system: copy, then delete

    def _rename(self, src: str, other: LocalObjectStore, dst: str) -> bool:
        """``src`` renamed to ``dst`` of ``other`` (this store or another); False when
        ``other`` is on another file system (nothing done)."""
        src_path, dst_path = self._path(src), other._path(dst)
        if not src_path.is_file():
            other._finish_or_fail_move(src, dst_path)
            return True
        other._make_parents(dst, dst_path)
        try:
            os.replace(src_path, dst_path)
        except FileNotFoundError:
            other._finish_or_fail_move(src, dst_path)  # a concurrent move got there first
            return True
        except OSError as exc:
            if exc.errno == errno.EXDEV and other is not self:
                return False
            raise self._error(src, f"move to {other.uri(dst)!r}", exc) from exc
        other._fsync_dir(dst, dst_path.parent)
        return True

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``, then tidy the directories it leaves behind.

        Hidden companions under the prefix (Spark's ``.part-*.crc``, the fingerprint memo) go
        too; other writers' in-flight ``.tmp-`` files and the root itself stay.
        """
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        self._prune(prefix)
        return len(infos)

    def fingerprints(self, prefix: str) -> dict[str, str]:
        """``{key: "<size>:sha256:<hex>"}`` for every object under ``prefix``, as the base
        class computes them, without reading a file hashed before and unchanged since.

        Each directory keeps a hidden memo (:data:`FINGERPRINT_MEMO`) of its files' digests
        with their stat when hashed (size, mtime, ctime, inode). A file whose stat still
        matches takes its digest from the memo; any other one is hashed, and the memo is
        rewritten (a temp file and ``os.replace``) when anything was. A rewritten, truncated,
        touched or replaced file gets a new ctime (no call sets it back), a copied one a new
        inode and ctime, so each is hashed again: corruption is still found. A missing,
        unreadable or damaged memo only means hashing; one that cannot be written (a
        read-only directory) is skipped.

        An entry counts only if the file's ctime is older than a clock reading taken before
        its bytes were read (the memo's ``as_of_ns``, the ctime of the memo's temp file): a
        change within the same clock tick would otherwise keep the stat. A file changed just
        now is hashed after the clock ticks on (at most :data:`RACY_WAIT_S`).
        """
        self._check_prefix(prefix)
        try:
            found = list(self._walk_files(self._dir_of(prefix)))
        except OSError as exc:
            raise self._error(prefix, "list", exc) from exc
        directories: dict[Path, Stats] = {}
        for key, folder, name, st in found:
            if key.startswith(prefix):
                directories.setdefault(Path(folder), {})[name] = (key, st)
        prints: dict[str, str] = {}
        for directory, stats in directories.items():
            prints.update(self._directory_fingerprints(directory, stats, prefix))
        return dict(sorted(prints.items(), key=lambda kv: kv[0].encode("utf-8", "surrogateescape")))

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

    def _walk_files(
        self, start: Path, after: str | None = None
    ) -> Iterator[tuple[str, str, str, os.stat_result]]:
        """(key, folder, name, stat) of every visible file under ``start``; hidden names are
        skipped, and with ``after`` every folder whose keys all sort at or before it. Plain
        strings and ``os.scandir`` (a million files: pathlib's parsing cost most of a walk);
        symbolic links to folders are not followed (as ``os.walk``), to files they are."""
        root = str(self.root)
        folders = [str(start)]
        while folders:
            folder = folders.pop()
            base = "" if folder == root else folder[len(root) + 1 :].replace(os.sep, "/") + "/"
            try:
                entries = list(os.scandir(folder))
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone while we walked (or never there)
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                try:
                    if entry.is_dir():
                        if not entry.is_symlink() and (
                            after is None or not _all_before(base + name + "/", after)
                        ):
                            folders.append(entry.path)
                        continue
                    st = entry.stat()
                except FileNotFoundError:
                    continue  # deleted while we walked
                yield base + name, folder, name, st

    def _directory_fingerprints(self, directory: Path, stats: Stats, prefix: str) -> dict[str, str]:
        """The fingerprints of ``stats`` (files of ``directory`` under ``prefix``), from the
        directory's memo where it still holds, else hashed (and the memo rewritten)."""
        memo_path = directory / FINGERPRINT_MEMO
        as_of, entries = _read_memo(memo_path)
        prints: dict[str, str] = {}
        stale: Stats = {}
        for name, (key, st) in stats.items():
            known = _memoized(entries.get(name), st, as_of)
            if known is None:
                stale[name] = (key, st)
            else:
                prints[key] = known
        if not stale:
            return prints
        dir_key = self._key_of(directory)
        memo = {  # the entries that held, and settled ones of names outside ``prefix``
            name: entry
            for name, entry in entries.items()
            if (name in stats and name not in stale)
            or (
                not (name if dir_key == "." else f"{dir_key}/{name}").startswith(prefix)
                and _settled(entry, as_of)
            )
        }
        tmp = _temp_file(directory)  # its ctime is the clock; then the memo's next version
        try:
            now = _clock(tmp)
            deadline = time.monotonic() + RACY_WAIT_S
            while now is not None and any(st.st_ctime_ns >= now for _, st in stale.values()):
                if time.monotonic() >= deadline:
                    break  # a coarse clock: remembered, but hashed again next time
                time.sleep(0.001)  # changed within this clock tick: wait for the next one
                now = _clock(tmp)
                stale = _restat(directory, stale)
            for name, (key, st) in stale.items():
                try:
                    size, digest = _sha256(directory / name)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # deleted meanwhile: not listed
                except OSError as exc:
                    raise self._error(key, "read", exc) from exc
                prints[key] = f"{size}:sha256:{digest}"
                if size == st.st_size:  # else it changed while read: not worth remembering
                    memo[name] = [size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, prints[key]]
            if tmp is not None and now is not None:
                _write_memo(tmp, memo_path, now, memo)
                tmp = None
        finally:
            if tmp is not None:
                _unlink_quietly(tmp)
        return prints

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


def _in_byte_order(infos: list[ObjectInfo]) -> list[ObjectInfo]:
    """``infos`` by their keys' bytes: code point order is UTF-8's byte order, except for the
    surrogates a name whose bytes are not UTF-8 holds (``os.scandir``), sorted by its bytes."""
    if all(i.key.isascii() or not _SURROGATE.search(i.key) for i in infos):
        return sorted(infos, key=attrgetter("key"))
    return sorted(infos, key=lambda info: _raw(info.key))


_SURROGATE = re.compile("[\udc80-\udcff]")


def _raw(key: str) -> bytes:
    return key.encode("utf-8", "surrogateescape")


def _after(key: str, start_after: str) -> bool:
    """``key`` sorts after ``start_after`` (in byte order, as S3 compares keys)."""
    return _raw(key) > _raw(start_after)


def _all_before(folder: str, start_after: str) -> bool:
    """Every key under ``folder`` (``a/b/``) sorts at or before ``start_after``: the folder
    sorts before it and is not a prefix of it."""
    return _raw(folder) < _raw(start_after) and not start_after.startswith(folder)


def _is_companion(name: str) -> bool:
    """A hidden file kept next to objects (Spark's ``.crc``, the fingerprint memo), not an
    in-flight write."""
    return name.startswith(".") and not name.startswith(TEMP_PREFIX)


def _unlink_quietly(path: Path) -> None:
    path.unlink(missing_ok=True)


def _rmdir_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (a concurrent writer) or already gone
        path.rmdir()


def _sha256(path: Path) -> tuple[int, str]:
    """The size and SHA-256 (hex) of the file at ``path``, read in chunks."""
    with path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        return f.tell(), digest


def _memoized(entry: Any, st: os.stat_result, as_of: int) -> str | None:
    """The fingerprint a memo ``entry`` holds if it is still the file's (same size, mtime,
    ctime and inode, and a ctime older than the memo's clock reading), else None."""
    if not isinstance(entry, list) or len(entry) != 5:
        return None
    size, mtime_ns, ctime_ns, ino, fingerprint = entry
    if [size, mtime_ns, ctime_ns, ino] != [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]:
        return None
    if not isinstance(fingerprint, str) or not fingerprint.startswith(f"{st.st_size}:sha256:"):
        return None
    return fingerprint if st.st_ctime_ns < as_of else None


def _settled(entry: Any, as_of: int) -> bool:
    """Whether a memo ``entry`` was hashed after the clock ticked past its ctime (so it may
    move into a memo with a later ``as_of_ns``)."""
    return (
        isinstance(entry, list)
        and len(entry) == 5
        and isinstance(entry[2], int)
        and entry[2] < as_of
    )


def _read_memo(path: Path) -> tuple[int, dict[str, Any]]:
    """``(as_of_ns, {name: entry})`` of the memo at ``path``; ``(0, {})`` if it is missing,
    unreadable or not a memo (the files are hashed then)."""
    try:
        memo = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return 0, {}
    if not isinstance(memo, dict) or memo.get("version") != 1:
        return 0, {}
    as_of, files = memo.get("as_of_ns"), memo.get("files")
    if not isinstance(as_of, int) or not isinstance(files, dict):
        return 0, {}
    return as_of, files


def _write_memo(tmp: Path, path: Path, as_of: int, files: dict[str, Any]) -> None:
    """Replace the memo at ``path`` by ``tmp`` holding ``files``; quietly nothing if that
    fails (a cache: not fsynced, since a lost or torn memo only means hashing again)."""
    body = {"version": 1, "as_of_ns": as_of, "files": dict(sorted(files.items()))}
    try:
        tmp.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        _unlink_quietly(tmp)


def _temp_file(directory: Path) -> Path | None:
    """A new empty temp file in ``directory``, or None if it cannot be made (read-only)."""
    tmp = directory / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError:
        return None
    return tmp


def _clock(tmp: Path | None) -> int | None:
    """The file system's clock now, in its own ticks: ``tmp``'s ctime after touching it
    (a change made after this reading gets a ctime at least as late)."""
    if tmp is None:
        return None
    try:
        os.utime(tmp)
        return tmp.stat().st_ctime_ns
    except OSError:
        return None


def _restat(directory: Path, stats: Stats) -> Stats:
    """``stats`` read again; files deleted meanwhile are dropped."""
    fresh: Stats = {}
    for name, (key, _) in stats.items():
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            fresh[name] = (key, (directory / name).stat())
    return fresh

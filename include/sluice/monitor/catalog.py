"""The monitor's pipelines: the spec files of a folder, each loaded once and its runtime built
once per version of the file (docs/monitor.md).

A version is the file's (path, modification time, size): a request stats the folder's spec
files and reuses what it has for every file that did not change. A changed file is loaded
again on the next request and its runtime rebuilt, a new one is added, a removed one dropped.

One lock guards the fill (stat results compared, changed specs loaded); building a runtime
holds only that pipeline's lock. Reading pages holds none: different pipelines, and requests
for the same one, read their checkpoint stores in parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["PipelineCatalog", "SpecEntry"]

SpecT = TypeVar("SpecT")
RuntimeT = TypeVar("RuntimeT")
SPEC_PATTERNS = ("*.yaml", "*.yml")


@dataclass(eq=False)
class SpecEntry(Generic[SpecT, RuntimeT]):
    """One version of one spec file: its spec (or why it does not load) and, once a page needed
    it, its runtime."""

    path: Path
    version: tuple[int, int]  # (st_mtime_ns, st_size)
    key: str  # the DAG id; "?<file name>" when the spec does not load
    spec: SpecT | None
    error: str | None = None
    runtime: RuntimeT | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def loaded(self) -> bool:
        return self.spec is not None


class PipelineCatalog(Generic[SpecT, RuntimeT]):
    """Spec files in ``folder`` by DAG id, with their runtimes, cached by file version.

    ``load(path)`` parses a spec, ``key(spec)`` names its DAG, ``build(path)`` opens its runtime.
    ``spec_loads`` and ``runtime_builds`` count the calls (the cache's effect, visible).
    """

    def __init__(
        self,
        folder: Path,
        *,
        load: Callable[[Path], SpecT],
        key: Callable[[SpecT], str],
        build: Callable[[Path], RuntimeT],
    ) -> None:
        self.folder = folder
        self._load, self._key, self._build = load, key, build
        self._entries: dict[Path, SpecEntry[SpecT, RuntimeT]] = {}
        self._fill = threading.Lock()
        self.spec_loads = 0
        self.runtime_builds = 0

    def pipelines(self) -> dict[str, SpecEntry[SpecT, RuntimeT]]:
        """Every spec file by DAG id (sorted by path; of two files naming one DAG, the last),
        after loading again those whose version changed."""
        # Stat before loading: a file rewritten meanwhile is then seen as changed next time.
        found = {p: v for p in self._files() if (v := _version(p)) is not None}
        with self._fill:
            for gone in self._entries.keys() - found.keys():
                del self._entries[gone]
            for path, version in found.items():
                held = self._entries.get(path)
                if held is None or held.version != version:
                    self._entries[path] = self._entry(path, version)
            entries = [self._entries[p] for p in sorted(self._entries)]
        return {e.key: e for e in entries}

    def runtime(self, entry: SpecEntry[SpecT, RuntimeT]) -> RuntimeT:
        """``entry``'s runtime, built on first use; a failed build is tried again next time
        (a connection defined meanwhile, a store back up)."""
        with entry.lock:
            if entry.runtime is None:
                entry.runtime = self._build(entry.path)
                with self._fill:
                    self.runtime_builds += 1
            return entry.runtime

    def _files(self) -> list[Path]:
        return sorted({p for pattern in SPEC_PATTERNS for p in self.folder.glob(pattern)})

    def _entry(self, path: Path, version: tuple[int, int]) -> SpecEntry[SpecT, RuntimeT]:
        self.spec_loads += 1  # under self._fill
        try:
            spec = self._load(path)
            return SpecEntry(path, version, self._key(spec), spec)
        except Exception as exc:  # an invalid spec is Airflow's import error, not ours
            return SpecEntry(path, version, f"?{path.name}", None, f"{type(exc).__name__}: {exc}")


def _version(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:  # removed since the folder was listed
        return None
    return (stat.st_mtime_ns, stat.st_size)

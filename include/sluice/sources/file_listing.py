"""Which files a files source sees: the listing of its path, filtered.

* Hidden names (a segment starting with ``_`` or ``.``: ``_SUCCESS``, ``_temporary/``,
  ``.part-0.crc``) are never read.
* ``include`` / ``exclude``: glob patterns over the key under the path. A pattern without
  ``/`` matches the file name (``*.json.gz``), one with ``/`` the whole key
  (``2026/*/clicks-*.jsonl``); ``*`` and ``?`` stay inside a name, ``**`` spans folders,
  ``[abc]`` / ``[!abc]`` are classes and ``{a,b}`` alternatives. The patterns only choose
  among listed names: a file whose own name holds ``*`` or ``[`` is still read as itself.
* ``layout.time_prefix``: keys start with a time (``dt=%Y-%m-%d/hour=%H/``). A listing
  starts at the partition of ``newest time read - lookback`` (S3 ``StartAfter``; on local
  disk the older folders are not walked), so it costs what the recent partitions hold. A key
  that does not start with the prefix is not part of the layout and is not read.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sluice.storage import ObjectInfo, ObjectStore

if TYPE_CHECKING:
    from sluice.spec.components.files_source import FilesSourceConfig, LayoutConfig

__all__ = ["FileFilter", "TimePrefix", "glob_regex", "hidden"]

# A start key above every key that shares its first characters: U+10FFFF is the largest
# code point, so "...hour=07" + it sorts after every key of hour 07 and before hour 08.
_ABOVE = "\U0010ffff"


def hidden(key: str) -> bool:
    return any(part.startswith(("_", ".")) for part in key.split("/"))


def glob_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` (see the module docstring) as a regular expression over a whole key."""
    return re.compile(r"^(?s:" + _translate(pattern) + r")\Z")


def _translate(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := pattern.find("]", i + 2)) > 0:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = re.sub(r"([\\\]\[^])", r"\\\1", body[1:] if negate else body)
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end + 1
            continue
        elif c == "{" and (end := pattern.find("}", i)) > 0:
            options = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_translate(o) for o in options) + ")")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _matcher(patterns: tuple[str, ...]) -> list[tuple[bool, re.Pattern[str]]]:
    """(matches the whole key, regex) per pattern."""
    return [("/" in p, glob_regex(p)) for p in patterns]


class TimePrefix:
    """The time at the start of a key, by a strftime pattern of fixed-width fields."""

    def __init__(self, layout: LayoutConfig) -> None:
        pattern = layout.time_prefix
        last = max(pattern.rfind(d) for d in ("%Y", "%m", "%d", "%H", "%M", "%S")) + 2
        self.pattern = pattern
        self.head = pattern[:last]  # up to the end of the last directive
        self.width = len(datetime(2000, 1, 1).strftime(self.head))
        self.lookback_s = layout.lookback / 1_000_000

    def time_of(self, key: str) -> int | None:
        """The key's time (seconds since the epoch, UTC), None when it does not start with the
        prefix."""
        try:
            moment = datetime.strptime(key[: self.width], self.head)
        except ValueError:
            return None
        return calendar.timegm(moment.timetuple())

    def lowest(self, newest: int | None) -> int | None:
        """The oldest partition time a listing after ``newest`` (the newest time read) still
        covers: the start of the partition holding ``newest - lookback``; None: every one."""
        if newest is None:
            return None
        text = datetime.fromtimestamp(max(int(newest - self.lookback_s), 0), UTC).strftime(
            self.head
        )
        return calendar.timegm(datetime.strptime(text, self.head).timetuple())

    def start_after(self, newest: int | None) -> str | None:
        """The listing's start key: above every key of a partition older than the
        boundary's, below every key of the boundary's partition or a later one — the text of
        the partition just before the boundary's, then U+10FFFF (so no folder is named by
        it, which SeaweedFS would take as "after that folder")."""
        start = self.lowest(newest)
        if start is None or start <= 0:
            return None
        before = datetime.fromtimestamp(start - 1, UTC).strftime(self.head)
        return before + _ABOVE


class FileFilter:
    """The listed files a source reads (hidden names, include / exclude, the layout)."""

    def __init__(self, config: FilesSourceConfig) -> None:
        self.include = _matcher(config.include)
        self.exclude = _matcher(config.exclude)
        self.layout = TimePrefix(config.layout) if config.layout is not None else None

    def wanted(self, key: str) -> bool:
        if hidden(key):
            return False
        if self.include and not _any(self.include, key):
            return False
        if self.exclude and _any(self.exclude, key):
            return False
        return self.layout is None or self.layout.time_of(key) is not None

    def listing(self, store: ObjectStore, newest_time: int | None) -> list[ObjectInfo]:
        """The wanted files under the store's root, from the layout's start key on."""
        start = self.layout.start_after(newest_time) if self.layout is not None else None
        return [info for info in store.list("", start_after=start) if self.wanted(info.key)]


def _any(patterns: list[tuple[bool, re.Pattern[str]]], key: str) -> bool:
    name = key.rpartition("/")[2]
    return any(rx.match(key if whole else name) for whole, rx in patterns)

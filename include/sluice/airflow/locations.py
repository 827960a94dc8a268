"""Where each pipeline of a deployment reads and writes, and the pipelines that would meet there.

One DAG file builds every spec of a folder in one environment, so a variable shared by all of
them (``SLUICE_DATA``) can put two pipelines in one place: both would write (and, on a rewind,
retract) the same output, Airflow would keep one asset per URI and deactivate the other DAG's
(its ``commit`` then fails with ``AirflowInactiveAssetInInletOrOutletException``), and both
would consume the same input. :func:`check_apart` refuses that, naming both specs and the URI.

Locations compared, across pipelines:

* outputs (every ``files`` / ``delta`` sink, late records, dead letters): none at, inside or
  around another pipeline's output; a PostgreSQL table (per connection) written by one only;
* inputs (a ``files`` source's path): none at, inside or around another's (a Kafka topic may be
  read by several pipelines, each with its own offsets);
* checkpoints (``<checkpoint.storage>/<name>``): no other pipeline's input, output or
  checkpoints at, inside or around them.

One pipeline's output inside another's input is allowed: that is how pipelines are chained.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from sluice.airflow.exceptions import PipelineClash
from sluice.spec import PipelineSpec, SinkSpec
from sluice.storage import normalized_uri, storage_uri_problem

__all__ = ["Location", "PipelineClash", "check_apart", "clashes", "locations"]

INPUT, OUTPUT, CHECKPOINTS = "input", "output", "checkpoints"
# pairs of kinds that may not overlap (output inside another's input is chaining: allowed)
_APART = {
    frozenset({OUTPUT}): "two pipelines would write (and on a rewind retract) one location; "
    "Airflow keeps one asset per URI and deactivates the other DAG's",
    frozenset({INPUT}): "both pipelines would consume the same input",
    frozenset({CHECKPOINTS}): "one pipeline's checkpoints inside another's",
    frozenset({OUTPUT, CHECKPOINTS}): "one pipeline would write into another's checkpoints",
    frozenset({INPUT, CHECKPOINTS}): "one pipeline would read another's checkpoints as input",
}


@dataclass(frozen=True)
class Location:
    spec_file: str
    pipeline: str
    field: str  # "source.path", "sinks.out", "late_records", "dead_letters", "checkpoint"
    kind: str  # INPUT, OUTPUT or CHECKPOINTS
    # normalised: s3://bucket/prefix, file:///abs, or a sink config's output_ref()
    uri: str

    def describe(self) -> str:
        return f"{self.spec_file} ({self.pipeline}) {self.field} {self.uri}"


def _uri(path: str) -> str | None:
    return None if storage_uri_problem(path) is not None else normalized_uri(path)


def _output(sink: SinkSpec) -> str | None:
    ref, path = sink.output_ref(), sink.storage_path()
    if ref is not None:
        return ref
    return _uri(path) if path else None  # None: a plugin, no location Sluice knows of


def locations(spec: PipelineSpec, spec_file: str | Path) -> list[Location]:
    """Every location ``spec`` reads or writes (an invalid path is left to spec validation)."""
    spec_file = str(spec_file)
    found: list[Location] = []

    def add(field: str, kind: str, uri: str | None) -> None:
        if uri is not None:
            found.append(Location(spec_file, spec.name, field, kind, uri))

    for named in spec.sources.values():
        field, read = f"{named.field}.path", named.source.storage_path()
        if read:
            add(field, INPUT, _uri(read))
    for sink in spec.sinks:
        add(f"sinks.{sink.name}", OUTPUT, _output(sink))
    for side in (spec.late_records, spec.dead_letters):
        if side is not None:
            add(side.name, OUTPUT, _output(side))
    storage = _uri(spec.checkpoint.storage)
    add("checkpoint", CHECKPOINTS, f"{storage}/{spec.name}" if storage else None)
    return found


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def clashes(specs: Sequence[tuple[PipelineSpec, str | Path]]) -> list[str]:
    """One line per pair of locations of two different pipelines that may not meet."""
    every = [loc for spec, path in specs for loc in locations(spec, path)]
    found = []
    for a, b in combinations(every, 2):
        if a.pipeline == b.pipeline:
            continue
        reason = _APART.get(frozenset({a.kind, b.kind}))
        if reason is None or not _overlap(a.uri, b.uri):
            continue
        where = f"both at {a.uri}" if a.uri == b.uri else f"{a.uri} and {b.uri} overlap"
        found.append(
            f"{a.spec_file} ({a.pipeline}) {a.field} and {b.spec_file} ({b.pipeline}) "
            f"{b.field}: {where} ({reason})"
        )
    return found


def check_apart(specs: Sequence[tuple[PipelineSpec, str | Path]]) -> None:
    """Raise :class:`PipelineClash` listing every clash of :func:`clashes`."""
    found = clashes(specs)
    if not found:
        return
    hint = ""
    if os.environ.get("SLUICE_DATA"):
        hint = (
            f" SLUICE_DATA={os.environ['SLUICE_DATA']!r} is set for every pipeline of this "
            "deployment: the shipped specs read it as ONE pipeline's folder. Unset it and set "
            "SLUICE_DATA_ROOT instead (each shipped spec keeps its own folder under it)."
        )
    raise PipelineClash(found, hint)

"""Messages as the monitor's pages show them: without the server's paths (docs/monitor.md).

Refusals are written without paths; :func:`public_text` is for what the monitor did not write
(an exception from storage, a refusal recorded by an older version): each location of the
pipeline is named (``the checkpoint store``, ``the source``, ``sink 'out'``, a spec by its
file name) and any other URI or absolute path becomes :data:`SERVER_PATH`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.spec import PipelineSpec

__all__ = ["SERVER_PATH", "public_text", "server_places"]

SERVER_PATH = "<server path>"  # what a message shows instead of a location it does not name
# Any URI (file://, s3://, a database's, an endpoint's) and any absolute local path of two or more
# segments; quotes, brackets, commas and semicolons end them, as they do in messages.
_URI = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{},;]*")
_PATH = re.compile(r"(?<![\w.~/:-])/[^\s'\"<>()\[\]{},;:/]+/[^\s'\"<>()\[\]{},;:]*")


def server_places(spec: PipelineSpec | None, folder: str | Path | None = None) -> dict[str, str]:
    """The server locations a pipeline's messages may name, each with the words a page says
    instead: its checkpoint store, its source, each sink (none without a ``spec``); ``folder``:
    the monitor's pipelines folder (a spec is then named by its file name)."""
    places = _spec_places(spec) if spec is not None else {}
    if folder is not None:
        for root in {str(folder), str(Path(folder).resolve())}:
            places[root + os.sep] = ""
            places[root] = "the pipelines folder"
    return places


def _spec_places(spec: PipelineSpec) -> dict[str, str]:
    places: dict[str, str] = {}
    if spec.checkpoint is not None:
        storage = spec.checkpoint.storage.rstrip("/")
        places[storage] = places[f"{storage}/{spec.name}"] = "the checkpoint store"
    if (source := spec.source.storage_path()) is not None:
        places[source] = "the source"
    for sink in (*spec.sinks, spec.late_records, spec.dead_letters):
        if (path := sink.storage_path()) is not None:
            places[path] = f"sink {sink.name!r}"
    return places


def public_text(text: str, places: Mapping[str, str] | None = None) -> str:
    """``text`` as a page shows it: each of ``places`` (see :func:`server_places`, longest
    first, as a URI and as a local path) by its name, then any other URI or absolute path as
    :data:`SERVER_PATH`. Keys relative to a location (``epochs/000000000003/plan.json``) stay."""
    named: dict[str, str] = {}
    for place, name in (places or {}).items():
        named[place] = name
        if place.startswith("file://"):
            named.setdefault(place.removeprefix("file://"), name)
    for place in sorted(named, key=len, reverse=True):
        if place:
            text = text.replace(place, named[place])
    return _PATH.sub(SERVER_PATH, _URI.sub(SERVER_PATH, text))

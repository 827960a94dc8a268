"""Object keys under ``<checkpoint storage>/<pipeline>/`` (docs/epoch-protocol.md)."""

from __future__ import annotations

import re

__all__ = [
    "EPOCHS",
    "attempt_key",
    "attempts_prefix",
    "checkpoint_key",
    "epoch_of",
    "lookup_copies",
    "lookup_copy_epoch",
    "lookup_copy_name",
    "plan_key",
    "retired_key",
    "savepoint_key",
    "sinks_committed_key",
    "source_folder",
    "state_prefix",
]

EPOCHS = "epochs/"
STATE = "state/"
RETIRED = "retired/"
# copies of database lookup tables taken at plan time (docs/joins.md), by lookup name
LOOKUPS = "lookups/"
SAVEPOINTS = "savepoints/"
# input handed back to its source once no checkpoint can replay it (protocol.release)
RELEASED = "released/"
# what a source keeps for itself (a files source: its sets of files read), by source name
SOURCES = "sources/"
# The last refused run request (kept for operators: the monitor shows it).
LAST_REFUSAL = "refusals/last.json"
_EPOCH_KEY = re.compile(r"^epochs/(\d{12})/")
_STATE_KEY = re.compile(r"^state/(\d{12})-")
_LOOKUP_COPY_KEY = re.compile(r"^lookups/[a-z0-9_]+/(\d{12})-[0-9a-f]{16}\.parquet$")
_RETIRED_KEY = re.compile(r"^retired/(\d{12})\.json$")
# a savepoint name: what a person types, safe as one object-key segment
SAVEPOINT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")  # "$" allows a final "\n"


def _epoch_dir(epoch: int) -> str:
    return f"{EPOCHS}{epoch:012d}/"


def plan_key(epoch: int) -> str:
    return _epoch_dir(epoch) + "plan.json"


def attempts_prefix(epoch: int) -> str:
    return _epoch_dir(epoch) + "attempts/"


def attempt_key(epoch: int, attempt: str) -> str:
    return f"{attempts_prefix(epoch)}{attempt}.json"


def checkpoint_key(epoch: int) -> str:
    return _epoch_dir(epoch) + "checkpoint.json"


def sinks_committed_key(epoch: int) -> str:
    return _epoch_dir(epoch) + "sinks-committed.json"


def state_prefix(epoch: int, attempt: str) -> str:
    return f"{STATE}{epoch:012d}-{attempt}/"


def epoch_of(key: str) -> int | None:
    match = _EPOCH_KEY.match(key)
    return int(match.group(1)) if match else None


def state_epoch_of(key: str) -> int | None:
    match = _STATE_KEY.match(key)
    return int(match.group(1)) if match else None


def retired_key(below: int) -> str:
    """The retention mark "every epoch below ``below`` is retired" (see protocol.retention)."""
    return f"{RETIRED}{below:012d}.json"


def retired_of(key: str) -> int | None:
    match = _RETIRED_KEY.match(key)
    return int(match.group(1)) if match else None


def source_folder(name: str) -> str:
    """Where source ``name`` keeps its own objects (a single-source pipeline's is
    ``source``, a join's sides are named in the spec)."""
    return f"{SOURCES}{name}/"


def savepoint_key(name: str) -> str:
    return f"{SAVEPOINTS}{name}.json"


def lookup_copies(lookup: str) -> str:
    """The folder of lookup ``lookup``'s table copies (a pin's files are named under it)."""
    return f"{LOOKUPS}{lookup}/"


def lookup_copy_name(epoch: int, digest: str) -> str:
    """The copy of a table the plan of ``epoch`` took, in :func:`lookup_copies` (``digest``:
    of its bytes; a later plan finding the same bytes pins this copy again)."""
    return f"{epoch:012d}-{digest[:16]}.parquet"


def lookup_copy_epoch(key: str) -> int | None:
    """The epoch whose plan took the lookup table copy ``key`` (None: not a copy's key)."""
    match = _LOOKUP_COPY_KEY.match(key)
    return int(match.group(1)) if match else None

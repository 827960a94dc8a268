"""The lookup table contract (the ground floor: imports nothing else from sluice;
docs/extending.md, "A new lookup kind").

A lookup join (docs/joins.md) reads a table as the epoch's plan pinned it. Each kind of table a
spec's lookup names (``table.type``: files, delta, postgres, iceberg, or one of your own) is a
:class:`LookupTable`, registered once by its type; the protocol decides when to pin, stores
the pins in the plans and keeps what kept plans pin, and asks the kind for the rest:

``pin``     the version a new plan joins, now: the files (with their fingerprints) a reader of
            that version needs, under one ``uri`` (:class:`~sluice.contracts.records.TablePin`);
            a table without a version raises :class:`sluice.exceptions.TableUnavailable`
``check``   the pinned files as they are now (their fingerprints; a missing key is gone): the
            join refuses a version whose files changed or are gone, before and after reading
``read``    the pinned version's rows as a Spark DataFrame (the join checks its columns, types
            and keys)
``label``   the version as a person reads it (``sluice checkpoints``, the monitor)
``copies``  whether its pins are copies it took into the checkpoint store (``lookups/<lookup>/``):
            retention deletes a copy once no kept plan pins it (``retained``: the keys a pin holds)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from sluice.contracts.records import TablePin

__all__ = ["LookupTable", "PinRequest"]


@dataclass(frozen=True)
class PinRequest:
    """What pinning a lookup's table for the plan of ``epoch`` may need."""

    pipeline: str
    epoch: int
    lookup: Any  # the lookup's spec (sluice.spec.model.LookupSpec)
    record_types: Mapping[str, str]  # the records' column types, for the key columns
    s3: Any  # the spec's S3 settings, to open the table's store
    connections: Mapping[str, str]  # connection URIs by id
    copies: Any  # the checkpoint store's lookups/<lookup>/ (an ObjectStore), for a copy
    before: TablePin | None  # this lookup's pin in the plan the new one starts from


class LookupTable(ABC):
    """One kind of lookup table (see the module docstring); stateless, shared by pipelines."""

    type: ClassVar[str]  # the spec's ``table.type``, which the pins store as their ``kind``
    copies: ClassVar[bool] = False

    @abstractmethod
    def pin(self, request: PinRequest) -> TablePin:
        """The version a new plan joins (raises :class:`sluice.exceptions.TableUnavailable`)."""

    @abstractmethod
    def check(self, pin: TablePin, s3: Any) -> Mapping[str, str]:
        """The fingerprint of each pinned file as it is now (a key missing: gone); more keys
        may be given (a folder's every file)."""

    @abstractmethod
    def read(self, spark: Any, pin: TablePin, s3: Any) -> Any:
        """The pinned version's rows (a DataFrame of ``spark``)."""

    def label(self, pin: TablePin) -> str:
        """The version in a few characters (default: the start of :attr:`TablePin.version`)."""
        return pin.version[:8]

    def retained(self, pin: TablePin) -> tuple[str, ...]:
        """The copies (keys under ``lookups/<lookup>/``) a plan pinning ``pin`` holds."""
        return tuple(key for key, _ in pin.files) if self.copies else ()

"""The leaf of the component configs: their base classes and the field types they share.

Every source, sink and window kind is a frozen pydantic model with a ``type`` discriminator
(:mod:`sluice.spec.registry` maps each ``type`` to its class) and a ``build(...)`` that makes
the runtime object, importing it (and PySpark) only then. A field type here raises a
:func:`problem` (what is wrong, and the fix) that :mod:`sluice.spec.problems` turns into a
:class:`~sluice.spec.exceptions.SpecProblem`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from sluice.spec.durations import parse_duration_us

if TYPE_CHECKING:
    pass

__all__ = [
    "NAME_RE",
    "SCHEMA_TYPES",
    "ComponentConfig",
    "Duration",
    "Flag",
    "PositiveInt",
    "Schema",
    "SinkConfig",
    "SourceConfig",
    "Text",
    "WindowConfig",
    "one_of",
    "problem",
    "several",
]

NAME_RE = re.compile(r"^[a-z0-9_]+\Z")  # \Z: "$" would accept a trailing newline
SCHEMA_TYPES = ("string", "int", "long", "double", "float", "boolean", "timestamp", "date")
PROBLEM = "sluice"  # the pydantic error type of a problem raised here
# validation context key: the value comes from a spec file (durations written ``5s``);
# without it (a config built in code) durations are microseconds
SPEC = "spec"


def problem(message: str, fix: str = "") -> PydanticCustomError:
    """A validation error carrying today's message and its fix."""
    return PydanticCustomError(PROBLEM, "{problem}", {"problem": message, "fix": fix})


def several(found: list[tuple[str, str, str]]) -> PydanticCustomError:
    """Several problems at once, each (field inside the value, problem, fix)."""
    _, message, fix = found[0]
    return PydanticCustomError(
        PROBLEM, "{problem}", {"problem": message, "fix": fix, "problems": found}
    )


def _flag(value: Any) -> Any:
    if not isinstance(value, bool):
        raise problem(f"{value!r} is not true/false", "write true or false")
    return value


def _text(value: Any) -> Any:
    if not isinstance(value, str):
        raise problem(f"{value!r} is not valid", "write a text value")
    if not value.strip():  # else "" would drop a sink or source without a word
        raise problem("is empty", "give it a value")
    return value


def one_of(choices: tuple[str, ...], hint: str = "") -> BeforeValidator:
    """A text value among ``choices`` (the message lists them, plus ``hint``)."""
    more = f" {hint}" if hint else ""

    def check(value: Any) -> Any:
        if not isinstance(value, str) or value not in choices:
            raise problem(f"{value!r} is not valid", f"use one of {list(choices)}{more}")
        return value

    return BeforeValidator(check)


def _positive_int(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise problem(f"{value!r} is not a positive whole number", "e.g. 10")
    return value


def _duration(positive: bool) -> Callable[[Any, ValidationInfo], int]:
    """A duration as a spec writes it (``5s``, ``1m``; see :data:`SPEC`), else microseconds."""

    def check(value: Any, info: ValidationInfo) -> int:
        try:
            if not (info.context or {}).get(SPEC):
                us = value if isinstance(value, int) and not isinstance(value, bool) else -1
                if us < 0:
                    raise ValueError(f"{value!r} is not a number of microseconds")
            else:
                us = parse_duration_us(value)
        except ValueError as exc:
            raise problem(str(exc), "write a duration like 500ms, 5s, 1m, 2h or 1d") from exc
        if positive and us <= 0:
            raise problem("must be greater than zero", "write a duration like 1m")
        return us

    return check


def _schema(value: Any) -> Any:
    if isinstance(value, tuple):  # built in code: already (column, type) pairs
        value = dict(value)
    if not isinstance(value, dict) or not value:
        raise problem(
            "must map each column to a type",
            f"e.g. {{user: string, ts: timestamp}}; types: {list(SCHEMA_TYPES)}",
        )
    found = []
    for column, kind in value.items():
        if not isinstance(column, str) or column.startswith("_"):
            found.append((str(column), "column names must not start with '_'",
                          "rename the column; names starting with '_' are Sluice's"))  # fmt: skip
        if kind not in SCHEMA_TYPES:
            found.append(
                (str(column), f"unknown type {kind!r}", f"use one of {list(SCHEMA_TYPES)}")
            )
    if found:
        raise several(found)
    return tuple((str(c), str(t)) for c, t in value.items())


Text = Annotated[str, BeforeValidator(_text)]
PositiveInt = Annotated[int, BeforeValidator(_positive_int)]
Duration = Annotated[int, BeforeValidator(_duration(positive=False))]
PositiveDuration = Annotated[int, BeforeValidator(_duration(positive=True))]
Schema = Annotated[tuple[tuple[str, str], ...], BeforeValidator(_schema)]
Flag = Annotated[bool, BeforeValidator(_flag)]


class ComponentConfig(BaseModel):
    """A frozen, validated config: unknown fields are refused, every problem collected."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True
    )

    # the fix suggested when a required field is missing, per field (YAML name)
    REQUIRED_FIX: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def field_names(cls) -> list[str]:
        """The fields as a spec writes them (their aliases)."""
        names = []
        for name, info in cls.model_fields.items():
            alias = info.validation_alias if isinstance(info.validation_alias, str) else None
            names.append(alias or info.alias or name)
        return [n for n in names if not n.startswith("_")]

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        """(problem, fix) for a field the class does not take."""
        allowed = sorted(cls.field_names())
        close = difflib.get_close_matches(key, allowed, n=1)
        return "unknown field", f"did you mean '{close[0]}'?" if close else f"allowed: {allowed}"

    @classmethod
    def required(cls, key: str) -> tuple[str, str]:
        """(problem, fix) for a required field left out."""
        return "is required", cls.REQUIRED_FIX.get(key, "add it (see README 'Spec')")

    def connection_ids(self) -> tuple[str, ...]:
        """The connection ids the component needs (docs/sinks.md, "Connections")."""
        return ()

    def problems(self) -> list[tuple[str, str, str]]:
        """What is wrong across fields: (field, problem, fix); a config with any is refused."""
        return []

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        found = self.problems()
        if found:
            raise several(found)
        return self


class SourceConfig(ComponentConfig):
    """Where the input comes from (plain data: :mod:`sluice.pipeline` opens the
    :class:`~sluice.contracts.sources.Source` it describes)."""

    type: str

    @property
    def schema(self) -> tuple[tuple[str, str], ...]:  # type: ignore[override]
        """The record columns, (name, type) in order (the ``columns`` field, as written
        ``schema:``; a source whose columns are fixed computes them)."""
        return getattr(self, "columns")  # noqa: B009 - a field of the subclasses

    def column_type(self, name: str) -> str:
        return dict(self.schema)[name]

    @property
    def plugin(self) -> bool:
        """A ``module:Class`` type: a user-defined class (docs/extending.md)."""
        return False

    @property
    def rereads_cheaply(self) -> bool:
        """Whether Spark may read an epoch's records again instead of caching them (only
        immutable Parquet files do: a column-pruned scan costs less than Spark's cache)."""
        return False

    def storage_path(self) -> str | None:
        """The storage location read (outputs and checkpoints must stay out of it)."""
        return None

    def describe(self) -> str:
        """One line for ``sluice validate`` and the DAG docs."""
        return self.type


class SinkConfig(ComponentConfig):
    """Where one output goes (plain data: :mod:`sluice.pipeline` opens the sink). ``keys``: an
    upsert sink's row identity (the pipeline's keys and window, filled in by the loader)."""

    name: str
    type: str
    mode: Annotated[Literal["append", "upsert"], one_of(("append", "upsert"))] = "append"
    # not a spec setting (its alias is no YAML key): the loader fills it in
    keys: tuple[str, ...] = Field(default=(), validation_alias="__keys__")

    @property
    def plugin(self) -> bool:
        return False

    def partitioned_by(self) -> tuple[str, ...]:
        """The partition columns (of the sink types that take ``partition_by``)."""
        return ()

    def storage_path(self) -> str | None:
        """The storage location written; None: not a path (a table, a plugin)."""
        return None

    def table_ref(self) -> tuple[str, str, str] | None:
        """(connection id, schema, table) of a database table written, else None."""
        return None

    def output_ref(self) -> str | None:
        """The output as a URI when it is not a storage path (a table behind a connection, a
        topic): Airflow's asset and the cross-pipeline clash check use it. None: the output
        is :meth:`storage_path` (or a plugin's, which Sluice does not know)."""
        return None

    def describe(self) -> str:
        return self.type


class WindowConfig(ComponentConfig):
    """One window kind: plain data (the runtime maps each config class to its strategy in
    :mod:`sluice.windows.kinds`)."""

    type: str
    # the fields that make up the state shape (checkpoints store and compare it)
    SHAPE: ClassVar[tuple[str, ...]] = ()

    def shape(self) -> dict[str, object]:
        return {"type": self.type, **{f: getattr(self, f) for f in self.SHAPE}}

    @property
    def counted(self) -> bool:
        """Windows of a number of records (``window_index`` identifies one), not of time
        (the result columns an upsert sink's keys name: sluice.spec.rules)."""
        return False

    def describe(self) -> str:
        raise NotImplementedError

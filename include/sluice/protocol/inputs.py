"""The epoch's input, one :class:`~sluice.contracts.operators.SourceInput` per source the
pipeline reads (docs/architecture.md, "One epoch, whatever the pipeline reads"): the process
step reads a join's two sources exactly as it reads a pipeline's one, each through
:meth:`~sluice.contracts.sources.Source.parts`, never asking which it is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.contracts.operators import SourceInput
from sluice.contracts.sources import RECORD_COLUMNS, RECORD_TYPES, SPARK_TYPES, Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.spec.model import PipelineSpec

__all__ = ["source_inputs"]


def source_inputs(
    spark: SparkSession, source: Source[Any, Any], range_data: dict[str, Any], spec: PipelineSpec
) -> dict[str, SourceInput]:
    """Each of the pipeline's sources' input to the epoch whose plan stored ``range_data``, by
    name (:meth:`Source.parts`): its records as that source reads them, with its waiting
    partitions and event-time hints (asked after the read: a files source takes them from the
    footers it read); a source with nothing new in the epoch reads as no rows of its columns."""
    named = spec.sources
    inputs = {}
    for part in source.parts(range_data):
        declared = named[part.name]
        if part.range is None:
            empty = _no_records(spark, declared.source.schema)
            inputs[part.name] = SourceInput(empty, part.source.location)
            continue
        records = part.source.read(spark, part.range)
        inputs[part.name] = SourceInput(
            records, part.source.location, part.source.waiting_partitions(part.range),
            part.source.before_hints(part.range, declared.event_time.column),
        )  # fmt: skip
    return inputs


def _no_records(spark: SparkSession, schema: tuple[tuple[str, str], ...]) -> DataFrame:
    """No rows, with the columns and types a source's ``read`` gives."""
    from sluice.jvm.udfs import select
    from sluice.operators.sqltext import quote

    types = (*zip(RECORD_COLUMNS, RECORD_TYPES, strict=True),
             *((c, SPARK_TYPES[kind]) for c, kind in schema))  # fmt: skip
    return select(spark.range(0), *(f"CAST(NULL AS {t}) AS {quote(c)}" for c, t in types))

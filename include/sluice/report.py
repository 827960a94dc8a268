"""What the CLI shows people: spec summaries, progress, checkpoint history, demo results."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sluice.spec.durations import format_duration
from sluice.spec.model import NamedSource, PipelineSpec
from sluice.words import count, noun

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sluice.contracts.records import AttemptRecord, TablePin
    from sluice.protocol import EpochOutcome, Runtime

__all__ = [
    "checkpoint_rows",
    "checkpoint_table",
    "describe_spec",
    "pending_by_source",
    "pending_units",
    "released_line",
    "run_demo",
    "run_with_progress",
]


def describe_spec(spec: PipelineSpec) -> Table:
    table = Table(title=f"pipeline {spec.name}: valid", show_header=False)
    for named in spec.sources.values():
        _describe_source(table, named)
    for lookup in spec.lookup:
        on = ", ".join(f"{c} = {t}" for c, t in lookup.on)
        added = ", ".join(f"{c}: {t}" for c, t in lookup.columns)
        where = lookup.describe()
        table.add_row(f"lookup {lookup.name}", f"{lookup.how} join {where} on {on} -> {added}")
    _DESCRIBE_OPERATOR[spec.operator](table, spec)
    for sink in (*spec.sinks, spec.late_records, spec.dead_letters):
        where = sink.describe()
        if spec.stateless and sink is spec.late_records:
            where += " (stays empty: no window, so nothing is late)"
        table.add_row(f"sink {sink.name}", where)
    table.add_row(
        "checkpoints",
        f"{spec.checkpoint.storage} every "
        f"{format_duration(spec.checkpoint.interval_us)}, qos {spec.qos}",
    )
    if spec.execution is not None:  # else the deployment's SLUICE_EXECUTION decides
        table.add_row("execution", f"{spec.execution} (the DAG's process step)")
    return table


def _describe_source(table: Table, named: NamedSource) -> None:
    """A pipeline's one ``source:`` (with the allowed lateness, the pipeline's), or one of
    its named sources (indented under its name, with its filter)."""
    et = named.event_time
    times = f"{et.column}, out-of-orderness {format_duration(et.max_out_of_orderness_us) or '0s'}"
    schema = ", ".join(f"{c}: {t}" for c, t in named.source.schema)
    if not named.declared:
        lateness = format_duration(et.allowed_lateness_us) or "0s"
        table.add_row("source", named.source.describe())
        table.add_row("schema", schema)
        table.add_row("event time", f"{times}, lateness {lateness}")
        return
    table.add_row(f"source {named.name}", named.source.describe())
    table.add_row("  schema", schema)
    table.add_row("  event time", times)
    if named.filter:
        table.add_row("  filter", named.filter)


def _describe_windows(table: Table, spec: PipelineSpec) -> None:
    keys = ", ".join(spec.key_by) or "(no key)"
    table.add_row("window", f"{spec.windowing.describe()} by {keys}, emit {spec.emit}")
    table.add_row("aggregates", ", ".join(f"{a.name} = {a.expression}" for a in spec.aggregates))


def _describe_process(table: Table, spec: PipelineSpec) -> None:
    proc = spec.process
    assert proc is not None
    keys = ", ".join(spec.key_by) or "(no key)"
    table.add_row("process", f"{proc.function} by {keys}" + (
        f", timers: {proc.on_timer}" if proc.on_timer else ""))  # fmt: skip
    table.add_row("state", ", ".join(f"{s.name}: {s.shape()}" for s in proc.state) or "-")
    table.add_row("output", ", ".join(f"{c}: {t}" for c, t in proc.output))


def _describe_join(table: Table, spec: PipelineSpec) -> None:
    join = spec.joining
    table.add_row("join", join.describe())
    table.add_row("output", ", ".join(f"{c} = {e}" for c, e in join.output))


def _describe_stateless(table: Table, spec: PipelineSpec) -> None:
    """What a stateless pipeline does with each record, in order (docs/stateless.md)."""
    table.add_row("operator", "stateless: every accepted record is appended as one row, no state")
    for name, expression in spec.select:
        table.add_row(f"select {name}", expression)
    table.add_row("filter", spec.filter or "- (every valid record)")
    picked = (
        ""
        if spec.output
        else " (schema + select + lookups)"
        if spec.lookup
        else " (schema + select)"
    )
    table.add_row("output", ", ".join(spec.output_columns()) + picked)


# The rows of each operator (spec ``operator``), after the sources and lookups.
_DESCRIBE_OPERATOR: dict[str, Callable[[Table, PipelineSpec], None]] = {
    "windows": _describe_windows,
    "process": _describe_process,
    "stateless": _describe_stateless,
    "join": _describe_join,
}


def run_with_progress(
    rt: Runtime,
    spark: SparkSession | Callable[[], SparkSession],
    console: Console,
    *,
    max_epochs: int | None = None,
    max_files: int | None = None,
    quiet: bool = False,
    allow_state_drop: bool = False,
) -> list[EpochOutcome]:
    """Run epochs until drained, with a progress bar over the input files."""
    from sluice.protocol import run_until_drained

    pending = pending_units(rt)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(rt.source.unit_name),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    out = rt.spec.output_noun  # counted: words.noun
    with Progress(*columns, console=console, disable=quiet, transient=False) as progress:
        task = progress.add_task(f"{rt.name}", total=pending, last="")

        def on_epoch(outcome: EpochOutcome) -> None:
            stats = outcome.checkpoint.result.stats
            progress.update(
                task,
                advance=stats.input_units,
                last=(
                    f"epoch {outcome.checkpoint.epoch}: {stats.records_read} in, "
                    f"{stats.windows_emitted} {noun(stats.windows_emitted, out)} out, "
                    f"{stats.late} late, {stats.dead} dead"
                ),
            )

        return run_until_drained(
            rt,
            spark,
            max_epochs=max_epochs,
            max_units=max_files,
            on_epoch=on_epoch,
            allow_state_drop=allow_state_drop,
        )


def pending_units(rt: Runtime) -> int | None:
    """Units after the next epoch's start: its stored plan's (a rewind starts further back),
    else the latest checkpoint's end."""
    return rt.source.pending_units(_next_start(rt))


def pending_by_source(rt: Runtime) -> dict[str, int | None]:
    """:func:`pending_units` of each source of a pipeline of several, by name (empty: one
    source). A source that cannot count its input (or fails to) is None."""
    if len(rt.spec.sources) == 1:
        return {}
    parts = rt.source.offset_parts(_next_start(rt))
    found: dict[str, int | None] = {}
    for name, (source, start) in parts.items():
        try:
            found[name] = source.pending_units(start)
        except Exception:  # the page still shows the others
            found[name] = None
    return found


def _next_start(rt: Runtime) -> Any:
    latest = rt.repo.latest_checkpoint()
    planned = rt.repo.plan((latest.epoch if latest else 0) + 1)
    if planned is not None:
        return rt.source.decode_offset(planned.start_offset)
    if latest is not None:
        return rt.source.decode_offset(latest.end_offset)
    return rt.source.initial_offset()


def checkpoint_rows(
    rt: Runtime,
    *,
    cached: Callable[[int], dict[str, Any] | None] | None = None,
    keep: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per stored epoch: status, offsets, counts, watermark and durations.

    ``cached(epoch)`` may return an epoch's row from an earlier call (the row of an epoch
    whose sinks committed never changes); ``keep(row)`` is offered every row read."""
    rows = []
    named: dict[int, list[str]] = {}
    for savepoint in rt.repo.savepoints():
        named.setdefault(savepoint.epoch, []).append(savepoint.name)
    released = _released_epochs(rt)
    for epoch, names in sorted(rt.repo.epochs().items()):
        row = cached(epoch) if cached else None
        if row is None:
            row = _epoch_row(rt, epoch, names)
            if keep:
                keep(dict(row))
        rows.append(row)
    # As Repository.rewinds() / rewound(), from the rows' plans (read once, above).
    # An epoch is retracted once its rewind committed; until then the rewind is pending.
    rewinds = {r["epoch"]: r["retract_after"] for r in rows if r.get("retract_after") is not None}
    done = {r["epoch"] for r in rows if r.get("committed_at") is not None}
    rewound: dict[int, int] = {}
    for first, after in rewinds.items():
        for epoch in range(after + 1, first):
            rewound.setdefault(epoch, first)
    for row in rows:
        epoch = row["epoch"]
        if epoch in named:
            row["savepoints"] = named[epoch]
        if epoch in rewinds:
            row["rewinds_to"] = rewinds[epoch]
        if epoch in rewound:
            row["rewound_by" if rewound[epoch] in done else "rewind_pending_by"] = rewound[epoch]
        if epoch in released:
            row["input_released"] = True
    return rows


def _released_epochs(rt: Runtime) -> set[int]:
    """The epochs whose input went back to the source (clean_source), if it cleans."""
    from sluice.protocol.release import released_summary

    if not rt.source.releases_input:
        return set()
    summary = released_summary(rt)
    return {e for first, last in summary["epochs"] for e in range(first, last + 1)}


def released_line(rt: Runtime) -> str | None:
    """One line on what ``clean_source`` did, for the history's caption (None: it is off)."""
    from sluice.protocol.release import released_summary

    if not rt.source.releases_input:
        return None
    summary = released_summary(rt)
    spans = ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in summary["epochs"]) or "none"
    cleans = {getattr(n.source, "clean_source", None) for n in rt.spec.sources.values()}
    clean = cleans.pop() if len(cleans) == 1 else None  # sources cleaned alike, or "cleaned"
    where = "cleaned"
    if clean is not None:
        where = f"archived to {clean.archive_path}" if clean.mode == "archive" else "deleted"
    waiting = summary["pending"]
    held = f"; epochs {', '.join(map(str, waiting))} wait (a savepoint can replay them)"
    return f"source files {where}: {summary['files']} (input of epochs {spans})" + (
        held if waiting else ""
    )


def savepoints_body(rt: Runtime) -> dict[str, Any]:
    """The savepoints, the retention setting and mark, and the retained checkpoints."""
    committed = rt.repo.committed_epochs()
    return {
        "pipeline": rt.name,
        "retained": rt.spec.checkpoint.retained if rt.spec.checkpoint else None,
        "retired_below": rt.repo.retired_below(),
        "checkpoints": committed,
        "savepoints": [s.to_dict() for s in rt.repo.savepoints()],
    }


def savepoint_table(rt: Runtime, body: dict[str, Any]) -> Table:
    checkpoints = body["checkpoints"]
    span = f"{checkpoints[0]}..{checkpoints[-1]}" if checkpoints else "none"
    table = Table(
        title=f"savepoints of {rt.name}",
        caption=f"checkpoints kept: {len(checkpoints)} ({span}); checkpoint.retained = "
        f"{body['retained']}; retired below epoch {body['retired_below'] or '-'}",
    )
    for header in ("name", "epoch", "created", "run", "note"):
        table.add_column(header, justify="right" if header == "epoch" else "left")
    for sp in body["savepoints"]:
        created = datetime.fromtimestamp(sp["created_at"], UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(sp["name"], str(sp["epoch"]), created, sp["run_id"] or "", sp["note"])
    return table


def _label(rt: Runtime, pin: TablePin) -> str:
    """A table version as its kind shows it (a kind no longer registered: the version)."""
    kind = rt.lookup_kinds.get(pin.kind)
    return kind.label(pin) if kind is not None else pin.version[:8]


def _epoch_row(rt: Runtime, epoch: int, names: set[str]) -> dict[str, Any]:
    plan = rt.repo.plan(epoch)
    checkpoint = rt.repo.checkpoint(epoch) if "checkpoint.json" in names else None
    marker = rt.repo.sinks_committed(epoch) if "sinks-committed.json" in names else None
    row: dict[str, Any] = {"epoch": epoch, "status": "planned"}
    if plan:
        row.update(
            start=_offset(rt, plan.start_offset),
            end=_offset(rt, plan.end_offset),
            plan_seconds=plan.plan_seconds,
            planned_at=plan.created_at,
            run_id=plan.run_id,
            retract_after=plan.retract_after,
        )
        if plan.tables:  # the lookup table versions the epoch joins (docs/joins.md)
            row["tables"] = {name: _label(rt, pin) for name, pin in plan.tables}
        remarks = rt.source.remarks(plan.source_range)
        if remarks:  # e.g. files changed since they were read (reported, not read again)
            row["input_remarks"] = list(remarks)
    if checkpoint is None:
        row.update(_attempts_summary(rt.repo.attempts(epoch)))
        return row
    result = checkpoint.result
    row.update(result.stats.to_dict())
    row.update(
        status="sinks committed" if marker else "committed",
        attempt=checkpoint.attempt,
        watermark=_iso(result.watermark_us),
        process_seconds=result.process_seconds,
        commit_seconds=marker.commit_seconds if marker else None,
        # where each sink holds the epoch (an Iceberg snapshot, a Kafka transaction), if it says
        published=dict(marker.published) if marker and marker.published else None,
        reconciles=result.stats.records_read
        == result.stats.accepted + result.stats.late + result.stats.dead + result.stats.filtered,
        run_id=checkpoint.run_id,
        committed_at=checkpoint.committed_at,
        # plan start -> sinks committed: the run as a user waits for it (Spark is process)
        run_seconds=(marker.committed_at if marker else checkpoint.committed_at)
        - (checkpoint.plan.created_at - checkpoint.plan.plan_seconds),
        watermark_us=result.watermark_us,
        # the largest event time read so far (any partition): what the watermark trails
        newest_event_us=max(result.watermark.max_event_time_us.values(), default=None),
        state_rows=result.state.rows,
    )
    return row


def _attempts_summary(attempts: list[AttemptRecord]) -> dict[str, Any]:
    """An uncommitted epoch's status is its latest attempt's (what happened last: a failure
    after a killed attempt's leftover ``started`` record is a failure), with the last error."""
    from sluice.contracts.records import AttemptStatus

    if not attempts:
        return {}
    rank = {AttemptStatus.ABORTED: 0, AttemptStatus.FAILED: 1, AttemptStatus.STARTED: 2,
            AttemptStatus.PREPARED: 3, AttemptStatus.COMMITTED: 4}  # fmt: skip
    last = max(attempts, key=lambda a: (max(a.started_at, a.updated_at), rank[a.status]))
    failed = sorted((a for a in attempts if a.error), key=lambda a: a.updated_at)
    names = {"prepared": "prepared", "started": "processing"}
    return {
        "status": names.get(last.status.value, last.status.value),
        "attempts": len(attempts),
        "failed_attempts": sum(1 for a in attempts if a.status == AttemptStatus.FAILED),
        "error": failed[-1].error if failed else None,
        "attempt_at": max(last.started_at, last.updated_at),
    }


def checkpoint_table(rt: Runtime, rows: list[dict[str, Any]]) -> Table:
    retained = rt.spec.checkpoint.retained if rt.spec.checkpoint else None
    below = rt.repo.retired_below()
    released = released_line(rt)
    table = Table(
        title=f"checkpoints of {rt.name}",
        caption=f"checkpoint.retained = {retained}"
        + (f"; epochs below {below} retired (savepoints kept)" if below else "")
        + (f"\n{released}" if released else ""),
    )
    headers: tuple[str, ...] = (
        "epoch",
        "status",
        "offsets (end)",
        "files",
        "read",
        "accepted",
        "late",
        "dead",
        "rows out" if rt.spec.stateless else "windows out",
        "open",
        "watermark",
        "plan s",
        "process s",
        "commit s",
    )
    receipts = any(r.get("published") for r in rows)
    if receipts:  # only when a sink says where it holds an epoch (Iceberg, Kafka)
        headers = (*headers, "published")
    lookups = any(r.get("tables") for r in rows)
    if lookups:  # the table versions each epoch joined
        headers = (*headers, "lookup tables")
    for header in headers:
        left = header in ("status", "offsets (end)", "published", "lookup tables")
        table.add_column(header, justify="left" if left else "right", no_wrap=header != "published")
    for r in rows:
        ok = "" if r.get("reconciles", True) else " [red](counts do not reconcile)[/]"
        saved = f" [cyan](savepoint {', '.join(r['savepoints'])})[/]" if r.get("savepoints") else ""
        if r.get("rewinds_to") is not None:
            saved += f" [magenta](rewind to {r['rewinds_to']})[/]"
        if r.get("rewound_by") is not None:
            saved += f" [dim](retracted by {r['rewound_by']})[/]"
        if r.get("rewind_pending_by") is not None:
            saved += f" [dim](rewind {r['rewind_pending_by']} will retract it)[/]"
        if r.get("input_released"):
            saved += " [dim](input files cleaned)[/]"
        for remark in r.get("input_remarks") or ():
            saved += f"\n[yellow]{escape(remark)}[/]"
        table.add_row(
            str(r["epoch"]),
            r["status"] + ok + saved,
            r.get("end", ""),
            _s(r, "input_units"),
            _s(r, "records_read"),
            _s(r, "accepted"),
            _s(r, "late"),
            _s(r, "dead"),
            _s(r, "windows_emitted"),
            _s(r, "windows_open"),
            r.get("watermark") or "",
            _f(r, "plan_seconds"),
            _f(r, "process_seconds"),
            _f(r, "commit_seconds"),
            *([_published(r)] if receipts else []),
            *([_tables(r)] if lookups else []),
        )
    return table


def _tables(row: dict[str, Any]) -> str:
    return "; ".join(f"{name} {label}" for name, label in (row.get("tables") or {}).items())


def _published(row: dict[str, Any]) -> str:
    return "; ".join(f"{sink}: {receipt}" for sink, receipt in (row.get("published") or {}).items())


def _s(row: dict[str, Any], key: str) -> str:
    return "" if row.get(key) is None else str(row[key])


def _f(row: dict[str, Any], key: str) -> str:
    return "" if row.get(key) is None else f"{row[key]:.2f}"


def _offset(rt: Runtime, data: dict[str, Any]) -> str:
    return rt.source.decode_offset(data).describe()


def _iso(us: int | None) -> str | None:
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1e6, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def run_demo(
    spec_path: str,
    console: Console,
    *,
    keep: bool,
    spark_factory: Callable[[Any], Any],
    runtime_factory: Callable[[str], Any],
) -> int:
    """Generate demo clicks, run the demo pipeline to the end, show results and history."""
    from sluice.demo import demo_stats, write_click_files

    data = Path(os.environ.setdefault("SLUICE_DATA", "data/demo"))
    if not keep and data.exists():
        shutil.rmtree(data)
    files = write_click_files(data / "in")
    stats = demo_stats()
    console.print(
        f"[bold]demo input:[/] {count(len(files), 'files')}, {count(stats.records, 'records')} "
        f"({stats.late} late, {stats.dead_letters} malformed) in {data / 'in'}"
    )
    rt = runtime_factory(spec_path)
    outcomes = run_with_progress(rt, spark_factory(rt), console)
    console.print(_results_table(rt))
    console.print(checkpoint_table(rt, checkpoint_rows(rt)))
    totals = [o.checkpoint.result.stats for o in outcomes]
    read = sum(s.records_read for s in totals)
    console.print(
        f"[bold]{count(len(outcomes), 'epochs')}:[/] {count(read, 'records')} read = "
        f"{sum(s.accepted for s in totals)} aggregated + {sum(s.late for s in totals)} late + "
        f"{count(sum(s.dead for s in totals), 'dead letters')}; "
        f"{count(sum(s.windows_emitted for s in totals), 'windows')} emitted, "
        f"{totals[-1].windows_open if totals else 0} still open."
    )
    console.print(f"results: {data / 'out'}  late: {data / 'late'}  dead letters: {data / 'dead'}")
    return 0


def _results_table(rt: Runtime, limit: int = 15) -> Table:
    import pyarrow.dataset as ds

    sink = rt.spec.sinks[0]
    path = sink.storage_path() or ""  # the demo writes files
    path = path.removeprefix("file://")
    rows = ds.dataset(path, format="parquet").to_table().to_pylist() if Path(path).exists() else []
    rows.sort(
        key=lambda r: (r["window_start"], str(r.get(rt.spec.key_by[0]) if rt.spec.key_by else ""))
    )
    table = Table(title=f"{sink.name}: {len(rows)} closed windows (first {min(limit, len(rows))})")
    columns = list(rows[0]) if rows else []
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows[:limit]:
        table.add_row(*[_cell(row[c]) for c in columns])
    return table


def _cell(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%H:%M")
    if isinstance(value, float):
        return f"{value:.2f}"
    return "" if value is None else str(value)

"""The ``sluice`` command line: validate, run, step-by-step protocol calls, checkpoints,
savepoints, compaction, the warm epoch server (``serve``), demo."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, get_args

from rich.console import Console
from rich.markup import escape

from sluice.exceptions import SluiceError

__all__ = ["add_request_options", "main", "request_conf"]

# Tables stay readable when piped (make run, CI logs): no 80-column squeeze off a terminal.
console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SluiceError as exc:
        # the message as text (a file name like "[x].jsonl" is not markup); soft_wrap: one
        # line per line of the message, however long (logs, grep)
        message = f"[bold red]error:[/] {escape(str(exc))}"
        errors.print(message, highlight=False, markup=True, soft_wrap=True)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description=__doc__)
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    cmd = sub.add_parser("validate", help="check a pipeline spec and print what it means")
    cmd.add_argument("spec")
    cmd.set_defaults(func=_validate)
    cmd = sub.add_parser("run", help="run epochs in-process until the source has nothing new")
    cmd.add_argument("spec")
    cmd.add_argument("--max-epochs", type=int, default=None)
    cmd.add_argument("--max-files", type=int, default=None, help="cap on files per epoch")
    cmd.add_argument("--quiet", action="store_true", help="no progress display")
    add_request_options(cmd)  # --restore-from, --epoch, ...: the trigger form's fields
    cmd.set_defaults(func=_run)
    for step in ("plan", "process", "commit"):
        cmd = sub.add_parser(step, help=f"run only the {step} step of the next epoch")
        cmd.add_argument("spec")
        cmd.add_argument("--json", action="store_true")
        if step == "plan":
            cmd.add_argument("--max-files", type=int, default=None)
            cmd.add_argument("--allow-state-drop", action="store_true")
        if step == "process":
            cmd.add_argument(
                "--epoch", type=int, default=None, help="must be the next epoch (the default)"
            )
        if step == "commit":
            cmd.add_argument("--epoch", type=int, default=None)
            cmd.add_argument("--attempt", default=None)
        cmd.set_defaults(func=_step, step=step)
    cmd = sub.add_parser("checkpoints", help="the checkpoint history as a table")
    cmd.add_argument("spec")
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(func=_checkpoints)
    cmd = sub.add_parser(
        "savepoint", help="take a named savepoint of a committed checkpoint (or --delete it)"
    )
    cmd.add_argument("spec")
    cmd.add_argument("name")
    cmd.add_argument("--epoch", type=int, default=None, help="default: the latest checkpoint")
    cmd.add_argument("--note", default="", help="free text kept with the savepoint")
    cmd.add_argument("--delete", action="store_true", help="delete the savepoint instead")
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(func=_savepoint)
    cmd = sub.add_parser("savepoints", help="list the savepoints and the retained checkpoints")
    cmd.add_argument("spec")
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(func=_savepoints)
    cmd = sub.add_parser(
        "state", help="the keyed state (open windows, user state, timers) of a checkpoint"
    )
    cmd.add_argument("spec")
    cmd.add_argument("--epoch", type=int, default=None, help="default: the latest checkpoint")
    cmd.add_argument("--savepoint", default=None, help="the checkpoint of this savepoint")
    cmd.add_argument(
        "--key", action="append", default=[], metavar="COLUMN=VALUE", help="repeatable"
    )
    cmd.add_argument("--format", choices=("table", "json", "parquet"), default="table")
    cmd.add_argument("--output", default=None, help="with --format parquet: where to write")
    cmd.add_argument("--limit", type=int, default=50, help="table rows shown (default 50)")
    cmd.set_defaults(func=_state)
    cmd = sub.add_parser(
        "restore",
        help="after damaged checkpoint storage: continue from an older retained checkpoint "
        "(quarantines damaged manifests, voids epochs that cannot commit, plans the rewind)",
    )
    cmd.add_argument("spec")
    cmd.add_argument("--epoch", type=int, required=True, help="the checkpoint to continue from")
    cmd.add_argument("--max-files", type=int, default=None, help="cap on the rewind's first epoch")
    cmd.set_defaults(func=_restore)
    cmd = sub.add_parser("compact", help="merge the small files of past epochs of a files sink")
    cmd.add_argument("spec")
    cmd.add_argument("--sink", required=True, help="name of a files sink")
    cmd.add_argument(
        "--up-to-epoch", type=int, default=None, help="default: the latest checkpoint's epoch - 1"
    )
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(func=_compact)
    cmd = sub.add_parser(
        "serve",
        help="warm execution: keep one Spark session and run the process step of planned "
        "epochs on HTTP request (docs/warm-execution.md)",
    )
    from sluice.serve.config import add_arguments

    add_arguments(cmd)
    cmd.add_argument("--verbose", action="store_true", help="log every HTTP request")
    cmd.set_defaults(func=_serve)
    cmd = sub.add_parser("demo", help="generate demo input, run the demo pipeline, show results")
    cmd.add_argument("--spec", default="include/pipelines/clicks_per_minute.yaml")
    cmd.add_argument("--keep", action="store_true", help="keep earlier demo output")
    cmd.set_defaults(func=_demo)
    return parser


def add_request_options(parser: argparse.ArgumentParser) -> None:
    """``sluice run``'s options for the run-request fields it offers (those with a ``cli``
    name in :class:`~sluice.protocol.request.RunRequest`, the one declaration)."""
    from sluice.protocol.request import RunRequest

    for name, field in RunRequest.fields().items():
        if field.cli is None:
            continue
        if RunRequest.model_fields[name].annotation is bool:
            parser.add_argument(field.cli, dest=name, action="store_true", help=field.cli_help)
            continue
        choices = _choices(RunRequest.model_fields[name].annotation)
        kind: Callable[[str], Any] = int if name == "epoch" else str
        parser.add_argument(field.cli, dest=name, type=kind, choices=choices,
                            default=None, help=field.cli_help)  # fmt: skip


def request_conf(pipeline: str, args: argparse.Namespace) -> dict[str, Any]:
    """The conf ``sluice run``'s options make (``--offsets`` is parsed as JSON)."""
    from sluice.protocol.exceptions import InvalidRunRequest
    from sluice.protocol.request import RunRequest

    conf = {name: getattr(args, name, None) for name, f in RunRequest.fields().items() if f.cli}
    if isinstance(text := conf.get("offsets"), str):
        try:
            conf["offsets"] = json.loads(text)
        except ValueError as exc:
            raise InvalidRunRequest(pipeline, [f"--offsets: not JSON ({exc})"]) from exc
    return conf


def _choices(annotation: Any) -> tuple[str, ...] | None:
    args = get_args(annotation)
    return args if args and all(isinstance(a, str) for a in args) else None


def _runtime(spec_path: str, *, sinks: bool = True) -> Any:
    from sluice.pipeline import open_pipeline

    return open_pipeline(spec_path, sinks=sinks)


def _spark(rt: Any) -> Any:
    from sluice.spark import spark_session

    return spark_session(f"sluice-{rt.name}", s3=rt.spec.s3)


def _plan_request(rt: Any, args: argparse.Namespace) -> None:
    """``sluice run --restore-from ...``: check the request like a trigger's conf, then plan
    the first epoch with it (the run then goes on from there)."""
    from sluice.protocol import RunRequest

    request = RunRequest.from_conf(rt.name, request_conf(rt.name, args))
    if not request.asks_anything:
        return
    options = request.resolve(rt)
    plan = options.plan(rt, max_units=args.max_files)
    if plan is not None and options.rewind_to is not None:
        rewound = plan.restored_from.rewound if plan.restored_from else ()
        console.print(
            f"epoch {plan.epoch} rewinds to checkpoint {options.rewind_to}: it replays from "
            f"there and retracts the output of epochs {', '.join(map(str, rewound))}"
        )


def _validate(args: argparse.Namespace) -> int:
    from sluice.report import describe_spec
    from sluice.spec import load_spec

    spec = load_spec(args.spec)
    console.print(describe_spec(spec))
    return 0


def _run(args: argparse.Namespace) -> int:
    from sluice.report import run_with_progress

    rt = _runtime(args.spec)
    _plan_request(rt, args)
    outcomes = run_with_progress(
        rt,
        lambda: _spark(rt),  # started at the first epoch with input: none when drained
        console,
        max_epochs=args.max_epochs,
        max_files=args.max_files,
        quiet=args.quiet,
        allow_state_drop=args.allow_state_drop,
    )
    console.print(f"{len(outcomes)} epoch(s) committed for pipeline [bold]{rt.name}[/]")
    return 0


def _step(args: argparse.Namespace) -> int:
    from sluice.protocol import commit_epoch, plan_epoch, process_epoch
    from sluice.protocol.process import refuse_beyond_next

    rt = _runtime(args.spec)
    result: Any
    if args.step == "plan":
        result = plan_epoch(rt, max_units=args.max_files, allow_state_drop=args.allow_state_drop)
    elif args.step == "process":
        if args.epoch is not None:  # refused before Spark starts (the attempt checks it too)
            refuse_beyond_next(rt.name, rt.repo, args.epoch)
        result = process_epoch(rt, _spark(rt), args.epoch)
    else:
        epoch = args.epoch or rt.repo.latest_epoch() + 1
        result = commit_epoch(rt, epoch, args.attempt)
    body = result.to_dict() if result is not None else None
    if args.json:
        console.print_json(json.dumps(body))
    elif body is None:
        console.print("nothing new to read: no epoch planned")
    else:
        console.print(f"{args.step}: epoch {body['epoch']} done")
    return 0


def _checkpoints(args: argparse.Namespace) -> int:
    from sluice.report import checkpoint_rows, checkpoint_table

    rt = _runtime(args.spec, sinks=False)  # reads checkpoints only: no sink connection needed
    rows = checkpoint_rows(rt)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        console.print(checkpoint_table(rt, rows))
    return 0


def _savepoint(args: argparse.Namespace) -> int:
    from sluice.protocol import delete_savepoint, take_savepoint

    rt = _runtime(args.spec)
    if args.delete:
        gone = delete_savepoint(rt, args.name)
        body = {"deleted": gone.to_dict()}
        text = f"deleted savepoint [bold]{gone.name}[/] (it pointed to epoch {gone.epoch})"
    else:
        taken = take_savepoint(rt, args.name, args.epoch, args.note)
        body = {"taken": taken.to_dict()}
        text = f"savepoint [bold]{taken.name}[/] -> checkpoint {taken.epoch} of {rt.name}"
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        console.print(text)
    return 0


def _savepoints(args: argparse.Namespace) -> int:
    from sluice.report import savepoint_table, savepoints_body

    rt = _runtime(args.spec, sinks=False)
    body = savepoints_body(rt)
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        console.print(savepoint_table(rt, body))
    return 0


def _state(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sluice.state_view import (
        StateViewError,
        parse_key_filters,
        resolve_checkpoint,
        rows_of,
        state_view,
    )

    rt = _runtime(args.spec)
    if args.format == "parquet" and not args.output:
        raise StateViewError(
            f"pipeline {rt.name}: --format parquet needs --output PATH", pipeline=rt.name
        )
    keys = parse_key_filters(rt.name, args.key)
    checkpoint = resolve_checkpoint(rt, args.epoch, args.savepoint)
    frame = state_view(_spark(rt), rt, checkpoint, keys)
    where = f"pipeline {rt.name}, checkpoint {checkpoint.epoch}"
    if args.format == "parquet":
        from sluice.storage import to_spark_uri

        if frame is not None:
            frame.write.mode("errorifexists").parquet(to_spark_uri(args.output))
        count = frame.count() if frame is not None else 0
        console.print(f"{where}: {count} state row(s) written to {args.output}")
        return 0
    if args.format == "json":
        rows = rows_of(frame) if frame is not None else []
        print(json.dumps({"epoch": checkpoint.epoch, "rows": rows}, indent=2, default=str))
        return 0
    total = frame.count() if frame is not None else 0
    rows = rows_of(frame, args.limit) if frame is not None else []
    watermark = checkpoint.result.watermark_us
    table = Table(
        title=f"state of {where}",
        caption=f"{total} row(s)"
        + (f", first {args.limit} shown" if total > args.limit else "")
        + (f"; watermark {_iso_us(watermark)}" if watermark is not None else ""),
    )
    columns = list(rows[0]) if rows else []
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*["" if row[c] is None else str(row[c]) for c in columns])
    console.print(table)
    return 0


def _iso_us(us: int) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)).isoformat()


def _restore(args: argparse.Namespace) -> int:
    from sluice.protocol.restore import restore_after_damage

    rt = _runtime(args.spec)
    report = restore_after_damage(rt, args.epoch, max_units=args.max_files)
    for key in report.quarantined:
        console.print(f"quarantined {rt.repo.store.uri(key)} (a copy under quarantine/)")
    for epoch in report.voided:
        console.print(f"epoch {epoch}: void (read nothing, published nothing)")
    if report.plan is None:
        console.print(f"checkpoint {args.epoch} is already the latest: nothing to restore")
    else:
        console.print(
            f"epoch {report.plan.epoch} rewinds to checkpoint {args.epoch}: it replays from "
            "there and retracts the output of every epoch after it; run the pipeline to "
            "process it (sluice run SPEC, or the next DAG run)"
        )
    return 0


def _compact(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sluice.sinks import FilesSink
    from sluice.sinks.compaction import CompactionError, compact

    rt = _runtime(args.spec)
    sink = next((r.sink for r in rt.sinks if r.sink.name == args.sink), None)
    if not isinstance(sink, FilesSink):
        files = sorted(r.sink.name for r in rt.sinks if isinstance(r.sink, FilesSink))
        raise CompactionError(
            args.spec, f"no files sink named {args.sink!r} (files sinks: {files})"
        )
    latest = rt.repo.latest_epoch()
    up_to = latest - 1 if args.up_to_epoch is None else args.up_to_epoch
    # a commit re-run (recovery) moves staged files to their names: never compact them away
    if up_to > latest or (up_to == latest and rt.repo.sinks_committed(latest) is None):
        raise CompactionError(sink.store.uri(), f"epoch {up_to}'s sink commit is not complete")
    report = compact(sink.store, sink.config.format, up_to_epoch=up_to)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    table = Table(title=f"compaction of {rt.name}.{sink.name} up to epoch {up_to}")
    for header in ("", "before", "after"):
        table.add_column(header, justify="left" if not header else "right")
    table.add_row("files (sink)", str(report.files_before), str(report.files_after))
    table.add_row("files (rewritten)", str(report.replaced), str(report.written))
    table.add_row("rows (rewritten)", str(report.rows), str(report.rows))
    table.add_row("bytes (rewritten)", str(report.bytes_before), str(report.bytes_after))
    console.print(table)
    if report.recovered:
        console.print(f"finished or cleaned up after a crash: {', '.join(report.recovered)}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from sluice.serve.config import config_from_args, configure_logging
    from sluice.serve.server import run

    configure_logging(args.verbose)
    return run(config_from_args(args))


def _demo(args: argparse.Namespace) -> int:
    from sluice.report import run_demo

    return run_demo(
        args.spec, console, keep=args.keep, spark_factory=_spark, runtime_factory=_runtime
    )


if __name__ == "__main__":
    sys.exit(main())

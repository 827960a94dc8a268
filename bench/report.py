"""The bench report: markdown tables (bench/results/latest.md) and a PNG chart next to it.

Every table row ends with the command, the machine and the date it was measured with.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.nexmark_joins import JOIN_QUERIES

__all__ = ["render"]

ENGINE_ORDER = ("DuckDB", "Spark batch", "Sluice qos 0", "Sluice qos 1", "Sluice qos 2",
                "Spark Structured Streaming", "PyFlink")  # fmt: skip


def render(report: Any, *, final: bool) -> str:
    from bench.nexmark import cpu_model, machine, today

    args = report.args
    where = f"{machine()} | {today()} | `{report.command}`"
    lines = [
        "# Nexmark: Sluice side by side with Spark Structured Streaming, PyFlink and DuckDB",
        "",
        f"{'' if final else '**PARTIAL (still running)** '}Command `{report.command}`; "
        f"{machine()} ({cpu_model()}); {today()}. {args.events:,} Nexmark events "
        f"({_bids(report):,} bids: the queries read bids only), epochs of "
        f"{args.epoch_events:,} events, files of {args.file_events:,} events. "
        "Speeds are bids read per second of wall time; per core = divided by the machine's "
        f"{os.cpu_count()} cores (every engine runs 2-way parallel: Spark local[2], Flink "
        "parallelism 2, DuckDB 2 threads). `check`: the engine's output compared row by row "
        "with DuckDB's (windows closed at the last bid's time).",
        "",
    ]
    lines += _targets(report)
    throughput = [
        r for r in report.rows if r.section in ("duckdb", "plain", "sluice", "sss", "flink")
    ]
    if throughput:
        lines += [
            "## Throughput",
            "",
            "| engine | query | format | bids | s | bids/s | per core | rows out | check | machine | date | command |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(
            throughput, key=lambda r: (_qorder(r.query), r.format != "parquet", _eorder(r.engine))
        ):
            lines.append(
                f"| {r.engine} | {r.query} | {r.format} | {r.events:,} | {r.seconds:.1f} | "
                f"{r.events_per_s:,.0f} | {r.events_per_s / (os.cpu_count() or 1):,.0f} | "
                f"{'' if r.rows_out is None else f'{r.rows_out:,}'} | {r.check} | {where} |"
            )
        lines.append("")
    sluice = [r for r in report.rows if r.section == "sluice"]
    if sluice:
        lines += [
            "## Sluice per epoch (medians)",
            "",
            "Overhead: the median epoch (plan + process + commit) against the same Spark query "
            "run once as a plain batch over one epoch's files (no state, no checkpoint). State: "
            "the snapshot written by each epoch (size after the last epoch; write time median).",
            "",
            "| query | format | qos | epochs | epoch s | plan s | process s | commit s | state write s | state size | state rows | plain batch s | overhead | machine | date | command |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sluice:
            x = r.extra
            base = "" if x["plain_epoch_s"] is None else f"{x['plain_epoch_s']:.2f}"
            over = "" if x["overhead"] is None else f"{x['overhead'] * 100:+.0f}%"
            lines.append(
                f"| {r.query} | {r.format} | {x['qos']} | {x['epochs']} | {x['epoch_s']:.2f} | "
                f"{x['plan_s']:.2f} | {x['process_s']:.2f} | {x['commit_s']:.2f} | "
                f"{x['state_write_s']:.2f} | {_size(x['state_bytes'])} | {x['state_rows']:,} | "
                f"{base} | {over} | {where} |"
            )
        lines.append("")
    lines += _work_table(report, where)
    sss = [r for r in report.rows if r.section == "sss"]
    if sss:
        lines += [
            "## Spark Structured Streaming micro-batches",
            "",
            "| query | format | batches (with data) | median batch s | state store | machine | date | command |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in sss:
            x = r.extra
            med = "" if x["epoch_s"] is None else f"{x['epoch_s']:.2f}"
            lines.append(
                f"| {r.query} | {r.format} | {x['batches']} ({x['data_batches']}) | {med} | "
                f"{x['state_store']} | {where} |"
            )
        lines.append("")
    flink = [r for r in report.rows if r.section == "flink"]
    if flink:
        lines += [
            "## PyFlink jobs",
            "",
            "| query | format | job s | startup s | checkpoints completed | Flink | machine | date | command |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in flink:
            x = r.extra
            start = "" if x.get("startup_s") is None else f"{x['startup_s']:.1f}"
            lines.append(
                f"| {r.query} | {r.format} | {r.seconds:.1f} | {start} | {x.get('checkpoints')} | "
                f"{x.get('version')} | {where} |"
            )
        lines.append("")
    fixed = [r for r in report.rows if r.section == "fixed"]
    if fixed:
        lines += [
            "## Fixed cost per epoch (one new 1-bid file, q5, qos 2; median)",
            "",
            "| mode | plan s | process s | commit s | total s | epochs | machine | date | command |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in fixed:
            x = r.extra
            lines.append(
                f"| {r.engine} | {x['plan_s']:.2f} | {x['process_s']:.2f} | {x['commit_s']:.2f} | "
                f"{r.seconds:.2f} | {x['repeats']} | {where} |"
            )
        lines.append("")
    state = [r for r in report.rows if r.section == "scaling-state"]
    if state:
        lines += [
            "## Scaling: total state (touched keys per epoch fixed)",
            "",
            "| state keys | touched keys | epoch s | process s | state write s | state size | first epoch s (loads the keys) | slowest later epoch s | machine | date | command |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in state:
            x = r.extra
            slowest = f"{x['slowest_s']:.2f}" if "slowest_s" in x else ""
            lines.append(
                f"| {x['state_keys']:,} | {x['touched_keys']:,} | {r.seconds:.2f} | "
                f"{x['process_s']:.2f} | {x['state_write_s']:.2f} | {_size(x['state_bytes'])} | "
                f"{x['first_epoch_s']:.1f} | {slowest} | {where} |"
            )
        lines.append("")
    cold = [r for r in report.rows if r.section == "scaling-state-cold"]
    if cold:
        lines += [
            "## Scaling: total state, cold (a spark-submit per epoch)",
            "",
            "| state keys | touched keys | epoch s | process s | slowest epoch s | first epoch s (loads the keys) | machine | date | command |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in cold:
            x = r.extra
            lines.append(
                f"| {x['state_keys']:,} | {x['touched_keys']:,} | {r.seconds:.2f} | "
                f"{x['process_s']:.2f} | {x['slowest_s']:.2f} | {x['first_epoch_s']:.1f} | {where} |"
            )
        lines.append("")
    epochs = [r for r in report.rows if r.section == "scaling-epoch"]
    if epochs:
        lines += [
            "## Scaling: events per epoch (q11, second epoch)",
            "",
            "| events/epoch | bids | epoch s | process s | bids/s | state rows | machine | date | command |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in epochs:
            x = r.extra
            lines.append(
                f"| {x['events_per_epoch']:,} | {r.events:,} | {r.seconds:.2f} | "
                f"{x['process_s']:.2f} | {r.events_per_s:,.0f} | {x['state_rows']:,} | {where} |"
            )
        lines.append("")
    data = [r for r in report.rows if r.section == "data"]
    if data:
        lines += [
            "## Input",
            "",
            "| format | events | files | size | generated in s |",
            "|---|---|---|---|---|",
        ]
        for r in data:
            lines.append(
                f"| {r.format} | {r.events:,} | {r.rows_out} | {_size(r.extra['bytes'])} | {r.seconds:.1f} |"
            )
        lines.append("")
    if report.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
    chart = _chart(report) if final else None
    if chart:
        lines += [f"![chart]({chart.name})", ""]
    return "\n".join(lines)


def _work_table(report: Any, where: str) -> list[str]:
    """Per steady epoch: the Spark work (bench/probe.py) of Sluice qos 2's process step, of one
    Structured Streaming micro-batch and of the plain batch over one epoch's files."""

    def work(section: str, engine: str, query: str, fmt: str) -> dict[str, Any] | None:
        for r in report.rows:
            if (r.section, r.engine, r.query, r.format) == (section, engine, query, fmt):
                return r.extra.get("work") or None
        return None

    keys = sorted(
        {
            (r.query, r.format)
            for r in report.rows
            if r.section in ("sluice", "sss") and r.extra.get("work")
        },
        key=lambda k: (_qorder(k[0]), k[1] != "parquet"),
    )
    if not keys:
        return []
    lines = [
        "## Per steady epoch: Spark work",
        "",
        "Counts that timing noise cannot move (bench/probe.py), medians over the steady epochs "
        "(every epoch but the first) / micro-batches (those with data but the first). **jobs**: "
        "Spark jobs started; **passes**: file scans of the input folder that ran (a cached "
        "relation read again is not a pass; the state snapshot's scans are not input); **Py4J**: "
        "calls from Python into the JVM; **CPU s**: executor CPU time summed over the jobs' "
        "stages (JVM task threads, no Python workers); **compiled**: classes Spark's code "
        "generator compiled (code it had not generated before: run cold by the JVM). Sluice: the process step (Py4J of plan + "
        "commit in brackets). Structured Streaming: one micro-batch; its Py4J figure is the whole "
        "run's (define, start, await): the batches themselves make none. Spark batch: the plain "
        "query over one epoch's files (Parquet only).",
        "",
        "| query | format | Sluice qos 2: jobs | passes | Py4J (plan+commit) | CPU s | compiled | SSS micro-batch: jobs | passes | Py4J (run) | CPU s | Spark batch: jobs | passes | Py4J | CPU s | machine | date | command |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for query, fmt in keys:
        s2 = work("sluice", "Sluice qos 2", query, fmt)
        sss = work("sss", "Spark Structured Streaming", query, fmt)
        plain = work("plain", "Spark batch (epoch)", query, fmt)
        cells: list[str] = []
        for w, extra in ((s2, "plan_py4j"), (sss, None), (plain, None)):
            width = 5 if extra else 4
            if not w:
                cells += [""] * width
                continue
            py4j = _count(w["py4j_calls"])
            if extra:
                py4j += f" ({_count(w[extra] + w['commit_py4j'])})"
            cells += [_count(w["jobs"]), _count(w["input_passes"]), py4j, f"{w['cpu_s']:.2f}"]
            if extra:
                cells.append(_count(w.get("compiled", 0)))
        lines.append(f"| {query} | {fmt} | {' | '.join(cells)} | {where} |")
    lines.append("")
    return lines


def _count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _targets(report: Any) -> list[str]:
    """Issues #23's and #35's acceptance, row by row, from this run."""
    rows = report.rows
    out: list[str] = []

    def find(section: str, engine: str, query: str, fmt: str = "parquet") -> Any:
        return next(
            (
                r
                for r in rows
                if (r.section, r.engine, r.query, r.format) == (section, engine, query, fmt)
            ),
            None,
        )

    def mark(ok: bool) -> str:
        return "met" if ok else "NOT met"

    for fmt in ("parquet", "jsonl"):
        for q in QUERIES_ORDER:
            s2 = find("sluice", "Sluice qos 2", q, fmt)
            sss = find("sss", "Spark Structured Streaming", q, fmt)
            if s2 and sss and sss.events_per_s:
                ratio = s2.events_per_s / sss.events_per_s
                out.append(
                    f"| Sluice qos 2 bids/s >= Structured Streaming, {q} {fmt} (aim 1.5x) | "
                    f"{s2.events_per_s:,.0f} vs {sss.events_per_s:,.0f} ({ratio:.2f}x) | "
                    f"{mark(ratio >= 1.0)} |"
                )
    for q in QUERIES_ORDER:  # #35: qos 0 at least as fast as qos 2
        s0, s2 = find("sluice", "Sluice qos 0", q), find("sluice", "Sluice qos 2", q)
        if s0 and s2 and s0.events_per_s and s2.events_per_s:
            ratio = s0.events_per_s / s2.events_per_s
            out.append(
                f"| Sluice qos 0 bids/s >= qos 2, {q} parquet | {s0.events_per_s:,.0f} vs "
                f"{s2.events_per_s:,.0f} ({ratio:.2f}x) | {mark(ratio >= 1.0)} |"
            )
    # over the same plain batch, "our overhead <= theirs" is "our epoch <= their micro-batch"
    for fmt in ("parquet", "jsonl"):
        for q in QUERIES_ORDER:
            s2 = find("sluice", "Sluice qos 2", q, fmt)
            sss = find("sss", "Spark Structured Streaming", q, fmt)
            if not (s2 and sss) or None in (s2.extra.get("epoch_s"), sss.extra.get("epoch_s")):
                continue
            ours, theirs = s2.extra["epoch_s"], sss.extra["epoch_s"]
            base = s2.extra.get("plain_epoch_s")
            over = (
                f" (over the plain batch: {ours - base:+.2f} vs {theirs - base:+.2f})"
                if base
                else ""
            )
            out.append(
                f"| epoch overhead <= Structured Streaming's per micro-batch, {q} {fmt} | "
                f"epoch {ours:.2f} s vs micro-batch {theirs:.2f} s{over} | {mark(ours <= theirs)} |"
            )
    q7 = find("sluice", "Sluice qos 2", "q7")
    work = q7.extra.get("work") if q7 else None
    if work:
        calls = work.get("py4j_calls")
        ok = work["jobs"] <= 2 and work["input_passes"] <= 1 and calls is not None and calls <= 150
        out.append(
            f"| q7 Parquet steady epoch: at most 2 Spark jobs, 150 Py4J calls, one pass (#35) | "
            f"{_count(work['jobs'])} jobs, {_count(calls or 0)} Py4J calls, "
            f"{_count(work['input_passes'])} pass(es) | {mark(ok)} |"
        )
    for section, mode in (("scaling-state", "warm"), ("scaling-state-cold", "cold")):
        state = sorted(
            (r for r in rows if r.section == section), key=lambda r: r.extra["state_keys"]
        )
        if len(state) < 2:
            continue
        small, big = state[0], state[-1]
        ratio = big.seconds / small.seconds
        out.append(
            f"| {mode}: epoch at {big.extra['state_keys']:,} keys of state <= 1.5x the epoch at "
            f"{small.extra['state_keys']:,} ({small.extra['touched_keys']:,} touched per epoch) | "
            f"{big.seconds:.2f} s vs {small.seconds:.2f} s ({ratio:.2f}x) | {mark(ratio <= 1.5)} |"
        )
    fixed = {r.engine: r for r in rows if r.section == "fixed"}
    warm = fixed.get("warm (long-lived session, in-process)")
    served = fixed.get("warm (sluice serve, one request per epoch)")
    if warm and served:
        out.append(
            f"| served epoch <= in-process + 0.3 s (near-empty epoch, q5) | "
            f"{served.seconds:.2f} s vs {warm.seconds:.2f} s | "
            f"{mark(served.seconds <= warm.seconds + 0.3)} |"
        )
    if not out:
        return []
    return ["## Targets", "", "| target | measured | |", "|---|---|---|", *out, ""]


QUERIES_ORDER = ("q0", "q5", "q7", "q11")


def _qorder(q: str) -> int:
    return QUERIES_ORDER.index(q) if q in QUERIES_ORDER else 99


def _eorder(engine: str) -> int:
    return next((i for i, e in enumerate(ENGINE_ORDER) if engine.startswith(e)), 99)


def _bids(report: Any) -> int:
    rows = [r for r in report.rows if r.section == "duckdb"]
    return rows[0].events if rows else 0


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def _chart(report: Any) -> Path | None:
    """Throughput per query and engine, the Sluice epoch split, and the two scaling curves."""
    rows = report.rows
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the scaling curves' row only when that section ran (a joins-only run has none)
    scaling = any(r.section.startswith("scaling") for r in rows)
    fig, axes = plt.subplots(2 if scaling else 1, 2, figsize=(14, 9 if scaling else 5),
                             squeeze=False)  # fmt: skip
    fig.suptitle(f"Nexmark, {report.args.events:,} events — {report.command}", fontsize=10)
    ax = axes[0][0]
    engine_sections = ("duckdb", "sluice", "sss", "flink")
    tp = [
        r
        for r in rows
        if r.section.removeprefix("join-") in engine_sections
        and r.format == "parquet"
        and r.check.startswith(("match", "reference"))
    ]
    # the queries this run measured, bid queries first, then the joins
    joins = JOIN_QUERIES
    queries = sorted({r.query for r in tp},
                     key=lambda q: (_qorder(q), joins.index(q) if q in joins else 99))  # fmt: skip
    engines = sorted({r.engine for r in tp}, key=_eorder)
    width = 0.8 / max(1, len(engines))
    for i, engine in enumerate(engines):
        xs, ys = [], []
        for r in tp:
            if r.engine == engine:
                xs.append(queries.index(r.query) + i * width)
                ys.append(r.events_per_s)
        ax.bar(xs, ys, width, label=engine)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(queries))], queries)
    ax.set_yscale("log")
    ax.set_ylabel("records/s (log): bids; q3/q8 persons + auctions")
    ax.set_title("Throughput, Parquet input (outputs checked)")
    ax.legend(fontsize=7)

    ax = axes[0][1]
    sl = [r for r in rows if r.section in ("sluice", "join-sluice")]
    labels = [f"{r.query} {r.format[:3]} q{r.extra['qos']}" for r in sl]
    bottom = [0.0] * len(sl)
    for part in ("plan_s", "process_s", "commit_s"):
        vals = [r.extra[part] for r in sl]
        ax.bar(labels, vals, bottom=bottom, label=part[:-2])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    plain = [r.extra.get("plain_epoch_s") for r in sl]
    if any(p is not None for p in plain):
        ax.scatter(
            labels,
            [p if p is not None else float("nan") for p in plain],
            color="black",
            marker="_",
            s=200,
            label="plain batch",
            zorder=3,
        )
    ax.set_ylabel("s per epoch (median)")
    ax.set_title("Sluice epoch: plan / process / commit")
    ax.tick_params(axis="x", labelrotation=70, labelsize=7)
    ax.legend(fontsize=7)

    curves = [
        (axes[1][0], "scaling-state", "state_keys", "Epoch time vs total state keys (touched fixed)"),
        (axes[1][1], "scaling-epoch", "events_per_epoch", "Epoch time vs events per epoch (q11)"),
    ] if scaling else []  # fmt: skip
    for ax, section, xkey, title in curves:
        pts = [r for r in rows if r.section == section]
        if pts:
            ax.plot(
                [r.extra[xkey] for r in pts], [r.seconds for r in pts], marker="o", label="epoch"
            )
            ax.plot(
                [r.extra[xkey] for r in pts],
                [r.extra["process_s"] for r in pts],
                marker=".",
                label="process",
            )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.legend(fontsize=7)
        ax.set_title(title)
        ax.set_xlabel(xkey.replace("_", " "))
        ax.set_ylabel("s")
    fig.tight_layout()
    path = report.out.with_suffix(".png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path

"""Bad input (issue #10, part 5): property-based tests of malformed records and specs.

Records: hypothesis writes JSON-lines files that mix valid click records with malformed ones
and runs real epochs over them (local Spark, one file per epoch). Whatever the mix, the run
goes on, every malformed line is exactly one dead letter naming its file, line and reason,
every valid line is accepted or late, and the per-epoch counts reconcile.

What counts as a record: every line of a file that holds a character other than ASCII
whitespace (space, tab, CR, LF, VT, FF). A line of only those is *blank*: not a record, not
counted, not a dead letter. A line of U+00A0 (no-break space) is a record (a malformed one):
Spark's ``\\S`` and Python's ``bytes.strip`` (the planner's record count) agree on this.

Specs: hypothesis mutates a valid spec; :func:`parse_spec` either accepts it or raises a
:class:`SpecError` whose problems name the mutated field, never anything else.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.protocol import run_until_drained
from sluice.spec import SpecError, parse_spec

from tests.fixtures.pipelines import Workspace, click_spec_dict, committed_rows, runtime

# -- records ---------------------------------------------------------------------------------

VALID, BAD, BLANK, EITHER = "valid", "bad", "blank", "either"

users = st.sampled_from(["ann", "bob", "cy", "dörte", "李"])
stamps = st.builds(
    lambda m, s: f"2024-01-01T00:{m:02d}:{s:02d}", st.integers(0, 20), st.integers(0, 59)
)
amounts = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


def _record(user: str, ts: str, amount: float, **more: Any) -> dict[str, Any]:
    return {"user": user, "url": "/x", "ts": ts, "amount": amount, **more}


valid_lines = st.one_of(
    st.builds(lambda u, t, a: json.dumps(_record(u, t, a)), users, stamps, amounts),
    st.builds(  # extra fields, nested values, no optional columns
        lambda u, t: json.dumps({"user": u, "ts": t, "extra": {"a": [1, None]}}), users, stamps
    ),
    st.builds(  # a very long line
        lambda u, t: json.dumps(_record(u, t, 1.0, url="/" + "x" * 100_000)), users, stamps
    ),
    st.builds(lambda u, t: f"  {json.dumps(_record(u, t, 2.0))}\t\r", users, stamps),
).map(lambda text: (text.encode(), VALID))

bad_texts = st.one_of(
    st.builds(lambda t: f'{{"user": "ann", "ts": "{t}", "amount": ', stamps),  # cut short
    st.sampled_from(["[1, 2]", "42", '"text"', "null", "true", "{", "}", "x", "\u00a0", "{]"]),
    st.builds(lambda t: json.dumps(_record("ann", t, 1.0) | {"amount": "lots"}), stamps),
    st.builds(lambda t: json.dumps(_record("ann", t, 1.0) | {"amount": [1]}), stamps),
    st.builds(lambda u: json.dumps({"user": u, "amount": 1.0}), users),  # no event time
    st.builds(lambda u: json.dumps({"user": u, "ts": None}), users),
    st.sampled_from(["yesterday", "2024-13-45T00:00:00", "", "1704067200", "2024-01-01T25:00"]).map(
        lambda t: json.dumps(_record("ann", t, 1.0))
    ),
    st.builds(lambda t: json.dumps(_record("ann", t, 1.0) | {"ts": 5}), stamps),
    # a double must be a finite number: bare, beyond the range, or as a string
    st.builds(lambda t: f'{{"user": "ann", "ts": "{t}", "amount": {{n}}}}', stamps).flatmap(
        lambda text: st.sampled_from(
            ["NaN", "Infinity", "-Infinity", "1e400", "9" * 400, '"NaN"', '"Infinity"',
             '"-Infinity"', '"1e400"']
        ).map(lambda n: text.replace("{n}", n))
    ),
    # a second value, or anything else, after the object
    st.builds(lambda t: json.dumps(_record("ann", t, 1.0)) + ' {"user": "bob"}', stamps),
    st.builds(lambda t: json.dumps(_record("ann", t, 1.0)) + " xyz", stamps),
)  # fmt: skip
bad_lines = st.one_of(
    bad_texts.map(lambda text: (text.encode(), BAD)),
    st.just((b'{"user": "\xff\xfe", "ts": ', BAD)),  # invalid UTF-8 in broken JSON
    st.builds(  # invalid UTF-8 in a record that is otherwise fine (a Latin-1 line)
        lambda t: (b'{"user": "u\xff\xfe1", "ts": "' + t.encode() + b'"}', BAD), stamps
    ),
)
# Lines whose fate the spec leaves open (Spark's JSON reader decides); each must still end
# in exactly one place.
either_lines = st.one_of(
    st.builds(lambda t: f'{{"user": "ann", "ts": "{t}", "amount": {{}}}}', stamps),
    st.builds(lambda t: f'{{"user": "a", "user": "b", "ts": "{t}"}}', stamps),  # duplicate
    st.builds(lambda t: "\ufeff" + json.dumps(_record("ann", t, 1.0)), stamps),  # BOM
).map(lambda text: (text.encode(), EITHER))
blank_lines = st.sampled_from(["", " ", "\t", "\r", " \t \r", "\x0b", "\x0c"]).map(
    lambda text: (text.encode(), BLANK)
)
lines = st.one_of(valid_lines, valid_lines, bad_lines, either_lines, blank_lines)


def files_strategy(max_files: int, max_lines: int) -> st.SearchStrategy[list[list[Any]]]:
    return st.lists(st.lists(lines, min_size=1, max_size=max_lines), min_size=1,
                    max_size=max_files)  # fmt: skip


def _run_and_check(spark: Any, root: Path, files: list[list[tuple[bytes, str]]]) -> None:
    ws = Workspace("local", root.as_uri())
    body = click_spec_dict(ws, name="badinput")
    body["source"]["max_files_per_epoch"] = 1
    (root / "in").mkdir(parents=True)
    kinds: dict[tuple[str, int], str] = {}
    raw: dict[tuple[str, int], bytes] = {}
    for number, content in enumerate(files):
        name = f"part-{number:03d}.jsonl"
        (root / "in" / name).write_bytes(b"\n".join(text for text, _ in content) + b"\n")
        for index, (text, kind) in enumerate(content):
            kinds[(name, index + 1)] = kind
            raw[(name, index + 1)] = text
    spec = parse_spec(body)
    rt = runtime(spec)
    outcomes = run_until_drained(rt, spark)  # must not raise
    assert [o.checkpoint.epoch for o in outcomes] == list(range(1, len(files) + 1))

    dead_rows = committed_rows(spec, "dead_letters")
    where = Counter((r["file"], r["line"]) for r in dead_rows)
    assert all(n == 1 for n in where.values()), [w for w, n in where.items() if n > 1]
    for row in dead_rows:
        key = (row["file"], row["line"])
        assert key in kinds and kinds[key] in (BAD, EITHER), (key, kinds.get(key), row)
        assert row["reason_code"] and row["reason"], row
        assert row["pipeline"] == "badinput" and row["source"].endswith("/in"), row
    missing = [k for k, kind in kinds.items() if kind == BAD and k not in where]
    assert not missing, [(k, raw[k][:80]) for k in missing]

    stats = [rt.repo.checkpoint(o.checkpoint.epoch).result.stats for o in outcomes]
    for s in stats:
        assert s.records_read == s.accepted + s.late + s.dead + s.filtered, s
    records = sum(1 for kind in kinds.values() if kind != BLANK)
    assert sum(s.records_read for s in stats) == records
    assert sum(s.dead for s in stats) == len(dead_rows)
    assert sum(s.filtered for s in stats) == 0
    kept = sum(1 for k, kind in kinds.items() if kind in (VALID, EITHER) and k not in where)
    assert sum(s.accepted + s.late for s in stats) == kept
    assert len(committed_rows(spec, "late_records")) == sum(s.late for s in stats)


@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(files=files_strategy(max_files=2, max_lines=60))
def test_malformed_records_end_in_dead_letters_and_the_counts_reconcile(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, files: Any
) -> None:
    _run_and_check(spark, tmp_path_factory.mktemp("badinput"), files)


@pytest.mark.slow
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(files=files_strategy(max_files=4, max_lines=400))
def test_malformed_records_at_scale(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, files: Any
) -> None:
    _run_and_check(spark, tmp_path_factory.mktemp("badinput"), files)


def test_blank_lines_are_not_records_but_a_no_break_space_is(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    good = json.dumps(_record("ann", "2024-01-01T00:00:01", 1.0)).encode()
    content = [(b"", BLANK), (good, VALID), (b" \t\r", BLANK), ("\u00a0".encode(), BAD)]
    _run_and_check(spark, tmp_path_factory.mktemp("blank"), [content])


# -- specs -----------------------------------------------------------------------------------

BASE = click_spec_dict(Workspace("local", "file:///tmp/sluice-badspec"), name="clicks")

garbage = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=20),
        st.sampled_from(["", "-1s", "5 parsecs", "1e999s", "0s", "${NO_SUCH_VAR_X}", "../..",
                         "sum(", "count(*", "max(nope)", "sum(user)", "Bad-Name", "a\n",
                         "s3://", "http://x/y", "9" * 40 + "d"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)  # fmt: skip


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


PATHS = _paths(BASE)


def _field(path: tuple[Any, ...]) -> str:
    """The spec loader's name for ``path``: ``sinks[0].path``, ``window.size``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


@st.composite
def mutated_specs(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    spec = copy.deepcopy(BASE)
    path = draw(st.sampled_from(PATHS[1:]))
    parent: Any = spec
    for part in path[:-1]:
        parent = parent[part]
    action = draw(st.sampled_from(["delete", "replace", "unknown_key"]))
    if action == "delete":
        del parent[path[-1]]
    elif action == "replace":
        parent[path[-1]] = draw(garbage)
    else:
        target = parent[path[-1]]
        if not isinstance(target, dict):
            parent[path[-1]] = draw(garbage)
        else:
            target[draw(st.text(min_size=1, max_size=8))] = draw(garbage)
    return spec, _field(path)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(mutated_specs())
def test_a_mutated_spec_is_accepted_or_refused_naming_the_field(case: Any) -> None:
    spec, field = case
    try:
        parse_spec(spec)
    except SpecError as exc:
        assert exc.problems and all(p.problem for p in exc.problems)
        fields = [p.field for p in exc.problems]
        assert any(_names(f, field) for f in fields), (field, fields)


# Fields whose problems show where a changed schema column was used.
USES_OF_SCHEMA = ("key_by", "aggregates", "event_time", "select")


def _names(problem_field: str, mutated: str) -> bool:
    """Whether a problem at ``problem_field`` names the ``mutated`` field (or a part of it, or,
    for a schema column, a place that uses it). A result sink is ``sinks[i]`` or
    ``sinks.<name>``."""
    top = mutated.split(".")[0].split("[")[0]
    if problem_field in ("", "(file)") or problem_field.startswith(top):
        return True
    if mutated.startswith("source.schema"):
        return problem_field.startswith(USES_OF_SCHEMA)
    return False


@pytest.mark.parametrize("value", [None, [], "x", 3, {"name": 1}])
def test_a_spec_that_is_not_a_mapping_is_refused(value: Any) -> None:
    with pytest.raises(SpecError):
        parse_spec(value)

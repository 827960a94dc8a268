"""The files source's spec fields of landing zones (docs/files-source-and-sink.md): what a
valid one gives, and each refusal naming its field."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.spec import SpecError, parse_spec

from tests.fixtures.pipelines import Workspace, click_spec_dict


def spec_with(ws: Workspace, **source: Any) -> Any:
    body = click_spec_dict(ws)
    body["source"] |= source
    return parse_spec(body)


def test_the_landing_fields_as_a_spec_writes_them(local_workspace: Workspace) -> None:
    spec = spec_with(
        local_workspace,
        include=["*.json.gz"],
        exclude="tmp/*",
        order="name",
        max_file_age="7d",
        layout={"time_prefix": "dt=%Y-%m-%d/hour=%H/", "lookback": "2h"},
        clean_source={"mode": "archive", "archive_path": local_workspace.uri("in/_archive")},
        changed_files="fail",
        partition_columns={"dt": "date"},
        notifications={"topic": "events", "bootstrap_servers": "127.0.0.1:9092"},
    )
    source = spec.source
    assert (source.include, source.exclude, source.order) == (("*.json.gz",), ("tmp/*",), "name")
    assert source.max_file_age == 7 * 86_400 * 10**6  # microseconds
    assert source.layout.lookback == 2 * 3600 * 10**6
    assert source.schema[-1] == ("dt", "date") and ("dt", "date") not in source.file_columns
    assert source.notifications.full_listing_every == 10


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"layout": {"time_prefix": "%H/%Y/", "lookback": "1h"}}, "source.layout.time_prefix"),
        ({"layout": {"time_prefix": "dt=%Y/%d/", "lookback": "1h"}}, "source.layout.time_prefix"),
        ({"layout": {"time_prefix": "%Y/"}}, "source.layout.lookback: is required"),
        ({"max_file_age": "soon"}, "source.max_file_age"),
        ({"order": "size"}, "source.order"),
        ({"include": [3]}, "source.include"),
        ({"clean_source": {"mode": "archive"}}, "source.clean_source.archive_path: is required"),
        ({"clean_source": {"mode": "delete", "archive_path": "/x"}}, "only used with mode"),
        ({"clean_source": {"mode": "move"}}, "source.clean_source.mode"),
        ({"notifications": {"topic": "t"}}, "source.notifications.connection"),
        ({"partition_columns": {"dt": "day"}}, "source.partition_columns"),
        ({"partition_columns": {"user": "int"}}, "source.partition_columns.user: is int here"),
        ({"changed_files": "reread"}, "source.changed_files"),
    ],
)
def test_each_refusal_names_its_field(
    local_workspace: Workspace, fields: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SpecError, match=problem.replace(".", r"\.")):
        spec_with(local_workspace, **fields)


@pytest.mark.parametrize(
    ("archive", "inside"),
    [("in", True), ("in/old", True), ("in/_archive", False), ("in/.done", False),
     ("in-archive", False), ("archive/in", False)],
)  # fmt: skip
def test_an_archive_inside_the_source_path_is_refused_unless_hidden(
    local_workspace: Workspace, archive: str, inside: bool
) -> None:
    clean = {"mode": "archive", "archive_path": local_workspace.uri(archive)}
    if not inside:
        assert spec_with(local_workspace, clean_source=clean).source.clean_source is not None
        return
    with pytest.raises(SpecError, match="is inside the source path"):
        spec_with(local_workspace, clean_source=clean)

"""The monitor's app in-process (sluice.airflow.monitor, no server, no browser, no Spark): values
reach the page escaped exactly once, and specs and runtimes are cached by spec file version.

Requests go through FastAPI's test client to the real app; Airflow's SimpleAuthManager decides
what the user may do. Only the user is given (``get_user`` overridden): signing in with
Airflow's session needs its metadata DB, and tests/airflow/test_monitor_ui.py checks that.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sluice.airflow.monitor import create_app

from tests.fixtures.pipelines import CLICK_SCHEMA, Workspace, click_spec_dict

ERROR_TEXT = "topic 'clicks' & co"
PIPELINES = 20
LAG_FILES = 3


class _Text(HTMLParser):
    """The text a browser shows, by element: ``data-card`` cards and ``data-pipeline`` rows."""

    def __init__(self) -> None:
        super().__init__()  # convert_charrefs: each entity is unescaped once, as a browser does
        self.cards: dict[str, list[str]] = {}
        self.rows: dict[str, list[str]] = {}
        self._into: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "div" and a.get("data-card"):
            self._into = self.cards.setdefault(a["data-card"] or "", [])
        elif tag == "tr" and a.get("data-pipeline"):
            self._into = self.rows.setdefault(a["data-pipeline"] or "", [])
        elif tag == "tr":
            self._into = None

    def handle_data(self, data: str) -> None:
        if self._into is not None and data.strip():
            self._into.append(data.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag == "div":
            self._into = None


def _text(page: str) -> _Text:
    parsed = _Text()
    parsed.feed(page)
    return parsed


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[Callable[[Path], TestClient]]:
    """A test client of the monitor's app over a folder of specs, as an Airflow admin."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    init_auth_manager()
    admin = SimpleAuthManagerUser(username="admin", role="admin")
    clients: list[TestClient] = []

    def open_monitor(folder: Path) -> TestClient:
        app = create_app(folder)
        app.dependency_overrides[get_user] = lambda: admin
        clients.append(TestClient(app))
        return clients[-1]

    yield open_monitor
    for client in clients:
        client.close()


def _write_spec(folder: Path, body: dict[str, Any]) -> Path:
    path = folder / f"{body['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _files_pipeline(root: Path, folder: Path, name: str) -> Path:
    """A files pipeline on local storage with LAG_FILES input files not read yet."""
    ws = Workspace("local", (root / name).as_uri())
    ws.put_files([(f"part-{i}.jsonl", b"") for i in range(LAG_FILES)])
    return _write_spec(folder, click_spec_dict(ws, name=name))


def test_an_error_from_the_source_reaches_the_page_verbatim(
    monitor: Callable[[Path], TestClient], tmp_path: Path
) -> None:
    """The lag card shows the source's error as the source wrote it: each character escaped
    once (``'`` as ``&#39;``, ``&`` as ``&amp;``), never twice."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    missing = tmp_path / f"{ERROR_TEXT}.db"  # the SQLite example source cannot open it
    body = click_spec_dict(Workspace("local", tmp_path.as_uri()), name="lagging")
    body["source"] = {
        "type": "sluice.examples:SqliteSource",
        "schema": dict(CLICK_SCHEMA),
        "options": {"path": str(missing), "table": "clicks"},
    }
    _write_spec(folder, body)

    page = monitor(folder).get("/pipelines/sluice__lagging")
    assert page.status_code == 200, page.text

    title, count, shown = _text(page.text).cards["lag"]
    assert (title, count) == ("lag", "-")  # no count: the source could not be asked
    assert shown.startswith("SqliteSourceError: sqlite://"), shown
    assert f"/{ERROR_TEXT}.db#clicks: OperationalError:" in shown, shown

    raw = re.search(r'data-card="lag">.*?</div>', page.text, re.S)
    assert raw is not None
    card = raw.group(0)
    assert "&amp;#" not in page.text and "&amp;amp;" not in page.text
    escaped_quotes = card.count("&#39;") + card.count("&#x27;")
    assert escaped_quotes == shown.count("'") and "'" not in card
    assert "topic &#39;clicks&#39; &amp; co" in card or "topic &#x27;clicks&#x27; &amp; co" in card


def test_the_overview_of_20_pipelines_loads_each_spec_and_builds_each_runtime_once(
    monitor: Callable[[Path], TestClient], tmp_path: Path
) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    specs = [_files_pipeline(tmp_path, folder, f"p{i:02d}") for i in range(PIPELINES)]
    client = monitor(folder)
    catalog = client.app.state.catalog  # type: ignore[attr-defined]

    with ThreadPoolExecutor(4) as pool:  # concurrent first requests: still one of each
        first, *others = pool.map(lambda _: client.get("/"), range(4))
    assert first.status_code == 200, first.text
    assert [o.text == first.text for o in others] == [True] * 3
    rows = _text(first.text).rows
    assert sorted(rows) == [f"p{i:02d}" for i in range(PIPELINES)]
    assert all(f"{LAG_FILES} files" in " ".join(cells) for cells in rows.values()), rows
    assert (catalog.spec_loads, catalog.runtime_builds) == (PIPELINES, PIPELINES)
    built = {dag: e.runtime for dag, e in catalog.pipelines().items()}

    # Same version, unreadable content: a monitor that parsed the specs again would drop them.
    for path in specs:
        _rewrite_keeping_version(path, b"{" * path.stat().st_size)
    second = client.get("/")
    assert second.status_code == 200, second.text
    assert _text(second.text).rows == rows
    assert (catalog.spec_loads, catalog.runtime_builds) == (PIPELINES, PIPELINES)
    assert all(e.runtime is built[dag] for dag, e in catalog.pipelines().items())


def test_a_touched_spec_rebuilds_its_runtime_only_and_changes_and_removals_show(
    monitor: Callable[[Path], TestClient], tmp_path: Path
) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    specs = {f"sluice__p{i}": _files_pipeline(tmp_path, folder, f"p{i}") for i in range(3)}
    client = monitor(folder)
    catalog = client.app.state.catalog  # type: ignore[attr-defined]
    assert client.get("/").status_code == 200
    built = {dag: e.runtime for dag, e in catalog.pipelines().items()}

    touched = specs["sluice__p1"]
    mtime_ns = touched.stat().st_mtime_ns + 1_000_000_000
    os.utime(touched, ns=(mtime_ns, mtime_ns))
    assert client.get("/").status_code == 200
    assert (catalog.spec_loads, catalog.runtime_builds) == (4, 4)
    now = {dag: e.runtime for dag, e in catalog.pipelines().items()}
    assert [dag for dag in specs if now[dag] is not built[dag]] == ["sluice__p1"]

    # A new interval in p0's spec shows on the next request; a removed spec is dropped.
    body = yaml.safe_load(specs["sluice__p0"].read_text())
    body["checkpoint"]["interval"] = "7m"
    _rewrite_keeping_version(specs["sluice__p0"], yaml.safe_dump(body).encode(), bump_s=2)
    specs["sluice__p2"].unlink()
    rows = _text(client.get("/").text).rows
    assert sorted(rows) == ["p0", "p1"] and rows["p0"][-1] == "7m", rows
    assert (catalog.spec_loads, catalog.runtime_builds) == (5, 5)
    assert client.get("/pipelines/sluice__p2").status_code == 404


def _rewrite_keeping_version(path: Path, data: bytes, bump_s: int = 0) -> None:
    """Write ``data`` to ``path`` and set its modification time back (plus ``bump_s``)."""
    mtime_ns = path.stat().st_mtime_ns + bump_s * 1_000_000_000
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_the_forms_are_the_run_requests_and_refuse_what_it_refuses_before_triggering(
    monitor: Callable[[Path], TestClient], tmp_path: Path
) -> None:
    """The action forms take their labels, help and the savepoint-name pattern from the run
    request model; a value the model refuses is refused by the monitor with the model's
    message, and nothing is triggered (no Airflow API server runs here: a trigger attempt
    would say so, not this message; tests/airflow/test_monitor_actions.py has the rest)."""
    from sluice.protocol.request import RunRequest

    folder = tmp_path / "pipelines"
    folder.mkdir()
    _files_pipeline(tmp_path, folder, "acts")
    client = monitor(folder)
    page = client.get("/pipelines/sluice__acts").text
    inputs = RunRequest.html_inputs()
    pattern = inputs["take_savepoint"]["pattern"]
    assert f'pattern="{pattern}"' in page
    assert re.fullmatch(pattern, "v2.0-rc_1") and not re.fullmatch(pattern, "../x")
    assert "take a savepoint named" in page  # restoring: once an epoch is committed

    origin = {"Origin": "http://testserver"}
    refused = [
        ("savepoint", {"name": "../x"}, "take_savepoint: '../x' is not a savepoint name"),
        ("restore", {"kind": "checkpoint", "epoch": "0"}, "epoch: 0 is not a whole number >= 1"),
    ]
    for action, form, expected in refused:
        answer = client.post(f"/pipelines/sluice__acts/{action}", data=form, headers=origin,
                             follow_redirects=False)  # fmt: skip
        assert answer.status_code == 422, answer.text  # the form again, with the reason
        assert "not triggered: " + expected in html.unescape(answer.text), answer.text[:3000]

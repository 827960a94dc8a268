"""The server's guards on their own (no Spark): the token and its file, bearer checks, the spec
roots, the request body, and redaction of connection secrets."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sluice.serve import AttemptRequest, ServeClient, ServeError, ServeUnavailable
from sluice.serve.model import BadRequest
from sluice.serve.security import (
    OutsideRoots,
    SpecRoots,
    bearer_matches,
    connection_secrets,
    load_token,
    redact,
)

from tests.fixtures.airflow import free_port


def test_a_token_file_is_created_private_and_reused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    token, source = load_token(state, environ={})
    path = state / "token"
    assert source == str(path) and token not in source
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert len(token) >= 32
    assert load_token(state, environ={}) == (token, str(path))  # a restart keeps it


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    load_token(tmp_path, environ={})
    os.chmod(tmp_path / "token", 0o644)
    with pytest.raises(ServeError, match=r"readable by others.*chmod 600"):
        load_token(tmp_path, environ={})


def test_the_environment_token_wins_and_must_be_long(tmp_path: Path) -> None:
    token = "e" * 20
    assert load_token(tmp_path, {"SLUICE_SERVE_TOKEN": token}) == (token, "$SLUICE_SERVE_TOKEN")
    assert not (tmp_path / "token").exists()
    with pytest.raises(ServeError, match="shorter than 16"):
        load_token(tmp_path, {"SLUICE_SERVE_TOKEN": "short"})


def test_bearer_matches_only_the_exact_token() -> None:
    token = "t0ken-" * 4
    assert bearer_matches(f"Bearer {token}", token)
    assert bearer_matches(f"bearer {token}", token)
    for header in (None, "", token, f"Basic {token}", f"Bearer {token}x", f"Bearer {token[:-1]}",
                   "Bearer ", f"Token {token}"):  # fmt: skip
        assert not bearer_matches(header, token), header


def test_spec_roots_resolve_links_and_dots(tmp_path: Path) -> None:
    root, other = tmp_path / "root", tmp_path / "other"
    (root / "sub").mkdir(parents=True)
    other.mkdir()
    (root / "sub" / "a.yaml").write_text("name: a")
    (other / "b.yaml").write_text("name: b")
    (root / "b.yaml").symlink_to(other / "b.yaml")
    (root / "c.yaml").symlink_to(root / "sub" / "a.yaml")
    roots = SpecRoots.of([root])
    assert roots.resolve(str(root / "sub" / "a.yaml")) == root / "sub" / "a.yaml"
    assert roots.resolve(str(root / "c.yaml")) == root / "sub" / "a.yaml"  # a link inside
    for bad in (other / "b.yaml", root / "b.yaml", root / "sub" / ".." / ".." / "other" / "b.yaml"):
        with pytest.raises(OutsideRoots, match="not under") as caught:
            roots.resolve(str(bad))
        assert str(bad) in str(caught.value) and str(root) in str(caught.value)
    with pytest.raises(ServeError, match="not a directory"):
        SpecRoots.of([tmp_path / "missing"])


def test_attempt_requests_name_each_problem_and_never_echo_a_uri() -> None:
    secret = "postgresql://u:hunter2-secret@db/x"
    request = AttemptRequest.from_dict(
        {"spec": "/p/a.yaml", "epoch": 3, "run_id": "r", "connections": {"pg": secret}}
    )
    assert request.connections == {"pg": secret}
    assert secret not in repr(request)
    with pytest.raises(BadRequest) as caught:
        AttemptRequest.from_dict({"epoch": True, "run_id": 5, "connections": {"bad id!": secret,
                                  "pg": ""}, "extra": 1})  # fmt: skip
    text = str(caught.value)
    for field in ("spec:", "epoch:", "run_id:", "'bad id!'", "connections.pg", "extra:"):
        assert field in text, field
    assert "hunter2" not in text


def test_connection_secrets_are_cut_out_of_messages() -> None:
    connections = {
        "pg": "postgresql://user:p%40ss-w0rd@db:5432/x",
        "kafka": 'kafka://u:kpass-123@b:9092/?__extra__={"sasl.password": "sasl-secret-9"}',
    }
    found = connection_secrets(connections)
    text = ("could not connect to postgresql://user:p%40ss-w0rd@db:5432/x with p@ss-w0rd; "
            "kafka auth kpass-123 sasl-secret-9 failed")  # fmt: skip
    cleaned = redact(text, found)
    for secret in ("p%40ss-w0rd", "p@ss-w0rd", "kpass-123", "sasl-secret-9"):
        assert secret not in cleaned
    assert "could not connect to ***" in cleaned


def test_the_client_says_when_no_server_listens() -> None:
    client = ServeClient(f"http://127.0.0.1:{free_port()}", "x" * 20, timeout=5)
    assert "x" * 20 not in repr(client)
    with pytest.raises(ServeUnavailable, match="GET /v1/health"):
        client.health()

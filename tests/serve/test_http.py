"""The server's HTTP layer without Spark: the real FastAPI app on a real uvicorn server (in a
thread, on a free loopback port), reached by the real client and by raw HTTP. Every request here
is refused before an attempt would start, so the attempt registry never needs its session."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sluice.serve import ServeClient, ServeRefused, ServeUnavailable
from sluice.serve.app import MAX_BODY_BYTES, ServeState
from sluice.serve.attempts import AttemptRegistry
from sluice.serve.config import ServeConfig
from sluice.serve.model import AttemptView, BadRequest, ErrorBody, RequestStatus, SparkJobs
from sluice.serve.security import SpecRoots
from sluice.serve.server import _bind, _Server, _uvicorn_config

from tests.fixtures.airflow import free_port
from tests.fixtures.pipelines import Workspace, click_spec_dict
from tests.serve.test_server import wait_until

TOKEN = "t" * 24
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextmanager
def serving(roots: Path, tls: tuple[str, str] | None = None) -> Iterator[ServeConfig]:
    """``sluice serve``'s app and uvicorn setup, in a thread; its registry has no Spark."""
    cert, key = tls or (None, None)
    config = ServeConfig("127.0.0.1", free_port(), (str(roots),), roots / "state",
                         tls_cert=cert, tls_key=key)  # fmt: skip
    registry = AttemptRegistry(cast(Any, None), executor_sluice="")
    state = ServeState(TOKEN, SpecRoots.of(config.pipelines_dirs), registry)
    server = _Server(_uvicorn_config(config, state), on_stop=registry.cancel_all)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [_bind(config)]}, daemon=True)
    thread.start()
    try:
        wait_until("uvicorn to start", lambda: server.started, timeout=60)
        yield config
    finally:
        server.should_exit = True
        thread.join(60)


def _raw(config: ServeConfig, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:  # fmt: skip
    """One exchange with exactly these headers (no Content-Length unless given)."""
    conn = http.client.HTTPConnection(config.host, config.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        conn.close()


def test_bodies_over_the_limit_without_length_or_not_json_are_refused(tmp_path: Path) -> None:
    with serving(tmp_path) as config:
        # Refused on the header alone: the client need not send its 1 MiB + 1 bytes.
        status, _, body = _raw(config, "POST", "/v1/attempts", None,
                               {**AUTH, "Content-Length": str(MAX_BODY_BYTES + 1)})  # fmt: skip
        assert status == 413
        assert (
            body["error"] == f"body of {MAX_BODY_BYTES + 1} bytes; at most {MAX_BODY_BYTES} (1 MiB)"
        )
        status, _, body = _raw(config, "POST", "/v1/attempts", b"3\r\n{}\n\r\n0\r\n\r\n",
                               {**AUTH, "Transfer-Encoding": "chunked"})  # fmt: skip
        assert status == 411 and "Content-Length" in body["error"]
        for raw, wanted in ((b"{spec", "the body is not JSON"), (b"[1]", "must be a JSON object")):
            status, headers, body = _raw(config, "POST", "/v1/attempts", raw,
                                         {**AUTH, "Content-Length": str(len(raw))})  # fmt: skip
            assert status == 400 and wanted in body["error"], raw
            assert headers["content-type"] == "application/json"
            assert headers["cache-control"] == "no-store"


def test_the_token_comes_before_the_route(tmp_path: Path) -> None:
    with serving(tmp_path) as config:
        for method, path in (("GET", "/v1/nothing"), ("PUT", "/v1/health"), ("GET", "/")):
            status, headers, body = _raw(config, method, path)
            assert status == 401 and "bearer token" in body["error"], path
            assert headers["www-authenticate"] == 'Bearer realm="sluice-serve"'
            status, _, body = _raw(config, method, path, headers=AUTH)
            assert status == 404 and body["error"] == f"no route {method} {path}"
        status, _, body = _raw(config, "GET", "/livez")
        assert (status, body) == (200, {"status": "ok"})
        with pytest.raises(ServeRefused, match="HTTP 401") as caught:
            ServeClient(f"http://127.0.0.1:{config.port}", "wrong-token-0123456789").status("x")
        assert caught.value.body == {"error": caught.value.message}


def test_a_malformed_request_names_its_field(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\n")
    with serving(tmp_path) as config:
        bad = {"spec": str(tmp_path / "a.yaml"), "epoch": "3", "connections": {"pg": ""}}
        raw = json.dumps(bad).encode()
        status, _, body = _raw(config, "POST", "/v1/attempts", raw,
                               {**AUTH, "Content-Length": str(len(raw))})  # fmt: skip
        assert status == 400
        assert body["error"] == ("bad attempt request: epoch: '3' is not a whole number >= 1; "
                                 "connections.pg: the URI must be a non-empty string")  # fmt: skip
        client = ServeClient(f"http://127.0.0.1:{config.port}", TOKEN)
        # The client builds the same model: it refuses before sending.
        with pytest.raises(BadRequest, match=r"epoch: 0 is not a whole number >= 1"):
            client.start(tmp_path / "a.yaml", 0)
        with pytest.raises(ServeRefused, match="HTTP 404") as caught:
            client.status("no-such-request", wait=5)
        assert "no attempt request 'no-such-request'" in caught.value.message


def _self_signed(folder: Path) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1)).add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return str(cert_path), str(key_path)


def test_tls_serves_https_and_the_client_verifies_the_certificate(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    with serving(tmp_path, tls=(cert, key)) as config:
        assert config.url.startswith("https://")
        trusting = ServeClient(config.url, TOKEN, ca_file=cert)
        with pytest.raises(ServeRefused, match="HTTP 404"):  # reached, over TLS, and answered
            trusting.status("x")
        with pytest.raises(ServeUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            ServeClient(config.url, TOKEN).status("x")  # the system CAs do not know it
        with pytest.raises(ServeUnavailable):
            ServeClient(f"http://127.0.0.1:{config.port}", TOKEN).status("x")  # plain HTTP


def test_a_refusal_carries_the_request_in_the_way_whole() -> None:
    """The 409 body's ``running`` is a full status (its nulls too), so the client's
    :class:`PipelineBusy` gets one it can parse and follow."""
    running = AttemptView(id="abc", pipeline="p", spec="/s/p.yaml", epoch=2, run_id=None,
                          status=RequestStatus.RUNNING, attempt=None, spark_job_group="g",
                          started_at=1.0, finished_at=None, seconds=0.5, cancel_requested=False,
                          spark_jobs=SparkJobs(active=1, started=3))  # fmt: skip
    body = ErrorBody(error="pipeline 'p': busy", running=running).to_dict()
    assert set(body) == {"error", "running"}  # no "spec": null
    assert body["running"]["finished_at"] is None and body["running"]["run_id"] is None
    parsed = ErrorBody.model_validate_json(json.dumps(body))
    assert parsed.running == running and parsed.to_dict() == body


def test_an_epoch_beyond_the_next_is_refused_before_it_starts(tmp_path: Path) -> None:
    """422 with the protocol's message (the attempt would refuse it too, but only once
    started); nothing is submitted."""
    body = click_spec_dict(Workspace("local", (tmp_path / "data").as_uri()), name="clicks")
    spec = tmp_path / "clicks.yaml"
    spec.write_text(yaml.safe_dump(body))
    message = (
        "pipeline clicks: epoch 3 cannot be processed: the next epoch is 1 (epochs run in "
        "order, each from the checkpoint before it). Process epoch 1 first (sluice process "
        "SPEC without --epoch takes the next one; sluice plan SPEC plans it if it has no plan); "
        "nothing was read or written"
    )
    with serving(tmp_path) as config:
        raw = json.dumps({"spec": str(spec), "epoch": 3}).encode()
        status, _, answer = _raw(config, "POST", "/v1/attempts", raw,
                                 {**AUTH, "Content-Length": str(len(raw))})  # fmt: skip
        assert (status, answer) == (422, {"error": message, "pipeline": "clicks",
                                          "next_epoch": 1})  # fmt: skip
        client = ServeClient(f"http://127.0.0.1:{config.port}", TOKEN)
        with pytest.raises(ServeRefused) as refused:
            client.start(spec, 2)
        assert refused.value.status == 422
        assert refused.value.message == message.replace("epoch 3 cannot", "epoch 2 cannot")
        assert client.attempts() == []

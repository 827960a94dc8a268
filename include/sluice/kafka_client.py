"""Kafka client settings, shared by the kafka source and the kafka sink (docs/kafka.md,
"Security"; docs/kafka-sink.md): a connection's settings, the spec's ``kafka:`` over them and
the spec's ``bootstrap_servers`` over both (:func:`client_settings`). It sits on a floor below
sources and sinks, which may not import each other, so that both read a connection the same way.

One set of settings, two clients on the source's side. The planner asks the broker for
offsets through librdkafka (``confluent-kafka``); the epoch reads with Spark's Java client.
Both read the same settings: the spec's ``source.kafka`` over the Airflow connection
``source.connection`` names (the sink's producers take librdkafka's form too). Airflow's
Kafka connection type keeps the client configuration in its extra, in librdkafka's names.
Where the two clients name a setting differently, users write librdkafka's form and the Java
form is derived from it:

* ``sasl.username`` + ``sasl.password`` (PLAIN, SCRAM-SHA-256/512) -> ``sasl.jaas.config``;
* ``sasl.mechanisms`` -> ``sasl.mechanism``;
* ``ssl.ca.location`` (a PEM file) -> ``ssl.truststore.type: PEM`` + ``ssl.truststore.location``.

Settings only the Java client knows (``sasl.jaas.config``, ``ssl.truststore.*``,
``ssl.keystore.*``, ``sasl.login.*``) go to Spark only; those only librdkafka knows go to the
planner only. Consumer settings Sluice owns (group, offsets, deserializers) are dropped from a
connection and refused in a spec.

Credentials belong in the connection, never in the spec (the spec loader refuses
:data:`SECRET_SETTINGS` there): connections are resolved when the pipeline runs and are not
written to plans, checkpoints or logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

from sluice.spec.components.kafka_source import OWNED_SETTINGS, SECRET_SETTINGS

__all__ = [
    "OWNED_SETTINGS",
    "SECRET_SETTINGS",
    "client_settings",
    "connection_settings",
    "planner_settings",
    "spark_settings",
]

_JAVA_ONLY = ("sasl.jaas.config", "ssl.truststore.", "ssl.keystore.", "sasl.login.",
              "sasl.client.callback.handler.class", "ssl.protocol",
              "ssl.enabled.protocols")  # fmt: skip
_LIBRDKAFKA_ONLY = ("sasl.username", "sasl.password", "sasl.mechanisms", "ssl.ca.location",
                    "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem",
                    "ssl.key.location", "ssl.key.pem", "enable.ssl.certificate.verification",
                    "debug")  # fmt: skip
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def connection_settings(uri: str) -> dict[str, str]:
    """Client settings from an Airflow connection's URI (``Connection.get_uri()``, or the
    ``AIRFLOW_CONN_<ID>`` forms): the extra's entries (query parameters, or the JSON of
    ``__extra__``), then host:port as ``bootstrap.servers`` and login / password as
    ``sasl.username`` / ``sasl.password`` where the extra does not set them."""
    parts = urlsplit(uri)
    settings: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "__extra__":
            extra = json.loads(value)
            if isinstance(extra, str):  # Airflow may store the extra as a JSON string
                extra = json.loads(extra)
            settings.update({str(k): _text(v) for k, v in dict(extra).items()})
        else:
            settings[name] = value
    host = parts.netloc.rpartition("@")[2]
    if host and "bootstrap.servers" not in settings:
        settings["bootstrap.servers"] = host
    if parts.username and "sasl.username" not in settings:
        settings["sasl.username"] = unquote(parts.username)
    if parts.password and "sasl.password" not in settings:
        settings["sasl.password"] = unquote(parts.password)
    return {k: v for k, v in settings.items() if k not in OWNED_SETTINGS}


def client_settings(
    connection: Mapping[str, str],
    spec: Mapping[str, str] | tuple[tuple[str, str], ...],
    bootstrap: str | None,
) -> dict[str, str]:
    """A client's settings: the connection's (:func:`connection_settings`), the spec's
    ``kafka:`` over them, the spec's ``bootstrap_servers`` over both. The caller refuses
    settings without ``bootstrap.servers`` in its own words (a source's error, a sink's)."""
    settings = {**connection, **dict(spec)}
    if bootstrap:
        settings["bootstrap.servers"] = bootstrap
    return settings


def planner_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings librdkafka gets (``sasl.mechanism`` is an alias it knows)."""
    return {k: v for k, v in settings.items() if not k.startswith(_JAVA_ONLY)}


def spark_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings Spark's Java client gets (each becomes a ``kafka.<name>`` option).

    Raises ValueError when a username and password come with a mechanism that has no
    derivable login module (then ``sasl.jaas.config`` must be given)."""
    out = {k: v for k, v in settings.items() if not k.startswith(_LIBRDKAFKA_ONLY)}
    mechanism = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
    if mechanism:
        out["sasl.mechanism"] = mechanism
    user, password = settings.get("sasl.username"), settings.get("sasl.password")
    if (user or password) and "sasl.jaas.config" not in settings:
        module = _LOGIN_MODULES.get((mechanism or "PLAIN").upper())
        if module is None:
            raise ValueError(
                f"sasl.username/sasl.password with sasl.mechanism {mechanism}: Spark's client "
                "needs sasl.jaas.config for that mechanism; put it in the connection's extra"
            )
        out["sasl.jaas.config"] = (
            f'{module} required username="{_jaas(user or "")}" password="{_jaas(password or "")}";'
        )
    ca = settings.get("ssl.ca.location")
    if ca and "ssl.truststore.location" not in settings:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = ca
    return out


def _jaas(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else json.dumps(value)

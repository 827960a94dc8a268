"""A PostgreSQL connection URI (libpq's ``postgresql://``), what psycopg2 and Spark's JDBC
writer are given of it, and a connection from it. The password goes to psycopg2 and to Spark's
JDBC properties only; messages carry :meth:`PostgresUrl.redacted`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import psycopg2

from sluice.sinks.exceptions import PostgresSinkError

__all__ = ["PostgresUrl", "connect"]

_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg2")
# libpq URI parameters Spark's JDBC driver (pgjdbc) also understands, under its own names
_JDBC_PARAMS = {
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "application_name": "ApplicationName",
    "connect_timeout": "connectTimeout",
    "options": "options",
}


@dataclass(frozen=True)
class PostgresUrl:
    """A parsed ``postgresql://user:password@host:port/dbname?params`` (libpq URI)."""

    host: str
    port: int
    dbname: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    params: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold secrets

    @classmethod
    def parse(cls, url: str) -> PostgresUrl:
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES:
            raise PostgresSinkError(
                f"not a postgresql:// URI (scheme {parts.scheme!r}); "
                "expected postgresql://user:password@host:port/dbname"
            )
        try:
            port = parts.port or 5432
        except ValueError:
            raise PostgresSinkError(
                "the postgresql:// URI has an invalid port (is the password percent-encoded?)"
            ) from None
        dbname = unquote(parts.path.lstrip("/"))
        if not dbname or "/" in dbname:
            raise PostgresSinkError("the postgresql:// URI names no database (…/dbname)")
        params = dict(parse_qsl(parts.query))
        # libpq also takes ?user=…&password=…; the netloc's win, as in libpq
        user, password = params.pop("user", None), params.pop("password", None)
        return cls(
            host=parts.hostname or "localhost",
            port=port,
            dbname=dbname,
            user=unquote(parts.username) if parts.username else user,
            password=unquote(parts.password) if parts.password is not None else password,
            params=tuple(params.items()),
        )

    def redacted(self, table: str | None = None) -> str:
        """``postgresql://host:port/db[/schema.table]``: no user, no password."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        suffix = f"/{table}" if table else ""
        return f"postgresql://{host}:{self.port}/{self.dbname}{suffix}"

    def connect_kwargs(self) -> dict[str, str | int]:
        """psycopg2.connect's keyword arguments."""
        kwargs: dict[str, str | int] = dict(self.params)
        kwargs.update(host=self.host, port=self.port, dbname=self.dbname)
        if self.user:
            kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password
        return kwargs

    def jdbc(self) -> tuple[str, dict[str, str]]:
        """Spark's JDBC URL (no secrets) and connection properties (user, password, driver)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        props = {_JDBC_PARAMS[k]: v for k, v in self.params if k in _JDBC_PARAMS}
        props.update(driver="org.postgresql.Driver", reWriteBatchedInserts="true")
        if self.user:
            props["user"] = self.user
        if self.password is not None:
            props["password"] = self.password
        return f"jdbc:postgresql://{host}:{self.port}/{self.dbname}", props

    def scrub(self, text: str) -> str:
        """``text`` with the password masked (for driver messages quoted in our errors)."""
        return text.replace(self.password, "***") if self.password else text


@contextmanager
def connect(url: PostgresUrl) -> Iterator[Any]:
    """A psycopg2 connection in UTC, closed on exit (transactions are the caller's)."""
    try:
        conn = psycopg2.connect(**url.connect_kwargs())
    except psycopg2.Error as exc:
        # from None: the driver's own exception could quote connection settings verbatim
        raise PostgresSinkError(
            f"cannot connect to {url.redacted()}: {url.scrub(str(exc)).strip()}"
        ) from None
    with closing(conn):
        with conn, conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
        yield conn

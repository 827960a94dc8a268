"""The server's guards: the bearer token, the spec roots, and redaction of secrets.

* The token comes from ``SLUICE_SERVE_TOKEN`` or a token file under the state directory,
  created with mode 0600 (a file others can read is refused). Requests compare it in constant
  time.
* Only spec files under the ``--pipelines-dir`` roots may be named (symlinks and ``..``
  resolved first), so a token holder cannot make the server load a YAML file, or import a
  process function, from anywhere else.
* Connection URIs (and their passwords) are cut out of every message the server logs or
  returns.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from sluice.serve.exceptions import OutsideRoots, ServeError

__all__ = [
    "TOKEN_ENV",
    "OutsideRoots",
    "SpecRoots",
    "bearer_matches",
    "connection_secrets",
    "load_token",
    "redact",
]

TOKEN_ENV = "SLUICE_SERVE_TOKEN"
TOKEN_FILE = "token"
MIN_TOKEN_CHARS = 16
REDACTED = "***"
_SECRET_KEYS = ("password", "secret", "token", "key")


def load_token(state_dir: Path, environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """``(token, where it came from)``: ``$SLUICE_SERVE_TOKEN``, else ``state_dir/token``
    (created, mode 0600, when missing). The second value names the source, never the token."""
    given = environ.get(TOKEN_ENV)
    if given:
        if len(given) < MIN_TOKEN_CHARS:
            raise ServeError(f"{TOKEN_ENV} is shorter than {MIN_TOKEN_CHARS} characters")
        return given, f"${TOKEN_ENV}"
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_dir / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_token_file(path), str(path)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    return _read_token_file(path), str(path)


def _read_token_file(path: Path) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ServeError(f"token file {path} is readable by others (mode {mode:04o}): chmod 600")
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ServeError(f"token file {path} holds fewer than {MIN_TOKEN_CHARS} characters")
    return token


def bearer_matches(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time."""
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


@dataclass(frozen=True)
class SpecRoots:
    """The folders whose spec files (``*.yaml`` / ``*.yml``) the server may load."""

    roots: tuple[Path, ...]

    @classmethod
    def of(cls, folders: Iterable[str | Path]) -> SpecRoots:
        roots = tuple(Path(f).resolve() for f in folders)
        missing = [str(r) for r in roots if not r.is_dir()]
        if not roots or missing:
            raise ServeError(f"--pipelines-dir: not a directory: {', '.join(missing) or '(none)'}")
        return cls(roots)

    def resolve(self, path: str) -> Path:
        """The real path of spec ``path`` (relative paths: from the server's working
        directory), or :class:`OutsideRoots` naming it."""
        real = Path(path).resolve()
        if not any(real.is_relative_to(root) for root in self.roots):
            raise OutsideRoots(path, "is not under the served pipelines directories", self.roots)
        if real.suffix not in (".yaml", ".yml"):
            raise OutsideRoots(path, "is not a .yaml / .yml spec file", self.roots)
        if not real.is_file():
            raise OutsideRoots(path, "does not exist", self.roots)
        return real


def connection_secrets(connections: Mapping[str, str]) -> list[str]:
    """The strings to cut out of messages: each URI, its password (raw and decoded) and any
    secret-looking setting in its query (a Kafka connection's ``__extra__`` JSON)."""
    found: list[str] = []
    for uri in connections.values():
        found.append(uri)
        parts = urlsplit(uri)
        if parts.password:
            found += [parts.password, unquote(parts.password)]
        for name, value in parse_qsl(parts.query):
            found += _secret_values(name, value)
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def _secret_values(name: str, value: str) -> list[str]:
    if any(k in name.lower() for k in _SECRET_KEYS):
        return [value]
    if not value.startswith("{"):
        return []
    try:
        data = json.loads(value)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    return [str(v) for k, v in data.items() if any(s in str(k).lower() for s in _SECRET_KEYS)]


def redact(text: str, secret_values: Iterable[str]) -> str:
    for value in secret_values:
        if value:
            text = text.replace(value, REDACTED)
    return text

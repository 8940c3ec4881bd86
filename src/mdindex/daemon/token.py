"""The API's bearer token: the systemd credential's, or a new one each start,
written 0600 beside the lock for the clients of the daemon's user."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TOKEN_CREDENTIAL = "http-token"


def load_token() -> str:
    """The token from the systemd credential when there is one, else a new one."""
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if creds:
        path = Path(creds) / TOKEN_CREDENTIAL
        if path.is_file():
            token = path.read_text(encoding="utf-8").strip()
            if token:
                return token
    return secrets.token_urlsafe(32)


def write_token(path: Path, token: str) -> None:
    """Written 0600, replaced atomically, so a reader never sees half a token."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, token.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)

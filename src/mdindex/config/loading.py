"""Where settings come from: flag > MDINDEX_* environment variable > TOML
config file > default (``load_settings``), and a refusal of any of them in one
line that names the key."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import EnvSettingsSource

from mdindex.config.settings import Settings
from mdindex.errors import ConfigError
from mdindex.outside import quoted

# Environment variables that are not settings keys but are still ours.
_EXTRA_ENV = {
    "MDINDEX_CONFIG",
    "MDINDEX_QDRANT_API_KEY",
    "MDINDEX_EMBEDDING_API_KEY",
    "MDINDEX_CRASH_POINT",
    "MDINDEX_RAY_KILL_ONCE",
}

# The test suite's own variables (MDINDEX_TEST_CORPUS, MDINDEX_TEST_INFINITY,
# MDINDEX_FAULTS=long): a CLI spawned by a test inherits them and must not refuse them.
_TEST_ENV = ("MDINDEX_TEST_", "MDINDEX_FAULTS")


# A config file is a few hundred bytes; /dev/zero as one was read until memory ran out.
MAX_CONFIG_BYTES = 1 << 20


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError as exc:
        raise ConfigError(f"config: file {path} not found; fix --config or MDINDEX_CONFIG") from exc
    except OSError as exc:  # a folder, no permission
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config: {path} is over {MAX_CONFIG_BYTES >> 20} MB")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"config: {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {path} is not valid TOML ({exc})") from exc
    except RecursionError:  # tomllib recurses into each [ or {
        raise ConfigError(f"config: {path} nests too deep") from None
    # Accept both a flat file and one with an [mdindex] table.
    if isinstance(data.get("mdindex"), dict) and len(data) == 1:
        data = data["mdindex"]
    return data


def _check_env() -> None:
    known = {f"MDINDEX_{name.upper()}" for name in Settings.model_fields} | _EXTRA_ENV
    for key in sorted(os.environ):
        if key.startswith("MDINDEX_") and key not in known and not key.startswith(_TEST_ENV):
            raise ConfigError(
                f"{key}: unknown setting; valid keys are MDINDEX_ plus one of "
                f"{', '.join(sorted(Settings.model_fields))}"
            )


def load_settings(overrides: dict[str, Any] | None = None, config: Path | None = None) -> Settings:
    """Build settings from flags (``overrides``), environment and config file."""
    _check_env()
    if config is None and os.environ.get("MDINDEX_CONFIG"):
        config = Path(os.environ["MDINDEX_CONFIG"])
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    # flag > environment > file: the file's values go in under the environment's.
    values = read_toml(config) if config is not None else {}
    values |= EnvSettingsSource(Settings)()
    values |= cli
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from exc


def describe_validation_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "settings"
    if err["type"] == "extra_forbidden":
        valid = ", ".join(sorted(Settings.model_fields))
        return f"{key}: unknown key; remove it (valid keys: {valid})"
    msg = err["msg"].removeprefix("Value error, ")
    if not err["loc"] and re.match(r"^[a-z_]+: ", msg):
        return msg  # a check across fields that names its own key
    got = err.get("input")
    # our own checks say what they got ("..., not 'cn'"); pydantic's do not
    said = ", not " in msg or (
        isinstance(got, str) and repr(got[:40].strip().lower()) in msg.lower()
    )
    shown = "" if isinstance(got, dict) or got is None or said else f" (got {quoted(got)})"
    return f"{key}: {msg}{shown}"

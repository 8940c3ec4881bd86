"""The shipped units pass systemd-analyze verify, and the daemon's exposure is at most 2.0."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[1] / "systemd"
ANALYZE = shutil.which("systemd-analyze")

# CI installs systemd (see .ci/run); elsewhere the check skips without it.
pytestmark = pytest.mark.skipif(
    ANALYZE is None and not os.environ.get("CI"), reason="systemd-analyze not installed"
)


@pytest.fixture
def units(tmp_path: Path) -> Path:
    # verify insists that ExecStart's program exists: point it at this install.
    mdindex = Path(sys.executable).with_name("mdindex")
    assert mdindex.exists(), "mdindex console script not installed next to the interpreter"
    for unit in UNITS.iterdir():
        if unit.suffix in (".service", ".timer"):
            text = unit.read_text().replace("/usr/local/bin/mdindex", str(mdindex))
            (tmp_path / unit.name).write_text(text)
    return tmp_path


def analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None, "systemd-analyze is required in CI"
    return subprocess.run([ANALYZE, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_units_verify(units: Path) -> None:
    names = sorted(p.name for p in units.iterdir())
    assert names == ["mdindex-backfill.service", "mdindex-backfill.timer", "mdindex.service"]
    result = analyze("verify", *[f"./{n}" for n in names], cwd=units)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


@pytest.mark.parametrize("unit", ["mdindex.service", "mdindex-backfill.service"])
def test_exposure_at_most_2(units: Path, unit: str) -> None:
    result = analyze("security", "--offline=true", f"./{unit}", cwd=units)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.0


def test_service_contract() -> None:
    text = (UNITS / "mdindex.service").read_text()
    for line in (
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "DynamicUser=yes",
        "StateDirectory=mdindex",
        "CacheDirectory=mdindex",
        "ProtectSystem=strict",
        "LoadCredential=qdrant-api-key:",
        "ReadOnlyPaths=",
    ):
        assert line in text
    from mdindex.config import load_settings

    config = load_settings({}, UNITS / "config.toml")  # every key in the example is valid
    assert config.http_port and config.roots == ["docs=/srv/docs"]


def test_both_units_share_one_user_and_keep_out_of_home() -> None:
    """They share the state folder: two dynamic users would chown it back and forth."""
    users = set()
    for name in ("mdindex.service", "mdindex-backfill.service"):
        lines = (UNITS / name).read_text().splitlines()
        users.add(
            (
                next(line for line in lines if line.startswith("User=")),
                next(line for line in lines if line.startswith("Group=")),
            )
        )
        assert "ProtectHome=yes" in lines and "UMask=0077" in lines
        assert "StateDirectoryMode=0700" in lines
    assert users == {("User=mdindex", "Group=mdindex")}

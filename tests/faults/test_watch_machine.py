"""A stateful property test: random file operations against a running `watch`.

After each example quiesces, the collection must equal a fresh backfill of
the final tree. Failing examples are kept in tests/faults/examples (a
Hypothesis example database committed with the suite) and replayed first on
local and long runs; each one found also becomes an explicit regression test
(see tests/daemon/test_watch.py), which CI runs along with a fixed set of
derandomized examples.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.conftest import TinyEmbedder, settings_for
from tests.daemon.running import Running, converges
from tests.faults.helpers import LONG

pytestmark = pytest.mark.slow  # a Hypothesis state machine over a running watch

EXAMPLES = DirectoryBasedExampleDatabase(str(Path(__file__).with_name("examples")))
CI = bool(os.environ.get("CI")) and not LONG
NAMES = ["a.md", "b.md", "c.md", "notes.md"]
DIRS = ["", "x", "y/z"]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]

paragraph = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
content = st.lists(paragraph, min_size=1, max_size=4).map(
    lambda ps: "# Title\n\n" + "\n\n".join(f"## {p.split()[0]}\n\n{p}." for p in ps) + "\n"
)
runs = {"examples": 0, "steps": 0}


class WatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="mdindex-machine-"))
        self.root = self.tmp / "root"
        self.root.mkdir()
        s = settings_for(self.tmp, [str(self.root)], quiet_period_ms=60)
        self.daemon = Running(s, TinyEmbedder()).start()
        runs["examples"] += 1

    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*.md") if p.is_file())

    def step(self) -> None:
        runs["steps"] += 1

    @rule(folder=st.sampled_from(DIRS), name=st.sampled_from(NAMES), text=content)
    def create(self, folder: str, name: str, text: str) -> None:
        path = self.root / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.step()

    @precondition(lambda self: self.files())
    @rule(data=st.data(), text=content)
    def modify(self, data: st.DataObject, text: str) -> None:
        data.draw(st.sampled_from(self.files())).write_text(text)
        self.step()

    @precondition(lambda self: self.files())
    @rule(data=st.data(), text=paragraph)
    def append(self, data: st.DataObject, text: str) -> None:
        with data.draw(st.sampled_from(self.files())).open("a") as fh:
            fh.write(f"\n{text}\n")
        self.step()

    @precondition(lambda self: self.files())
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        data.draw(st.sampled_from(self.files())).unlink()
        self.step()

    @precondition(lambda self: self.files())
    @rule(data=st.data(), folder=st.sampled_from(DIRS), name=st.sampled_from(NAMES))
    def rename(self, data: st.DataObject, folder: str, name: str) -> None:
        src = data.draw(st.sampled_from(self.files()))
        dest = self.root / folder / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)
        self.step()

    @precondition(lambda self: any(p.is_dir() for p in self.root.iterdir()))
    @rule(data=st.data(), name=st.sampled_from(["m", "n", "x", "y"]))
    def move_dir(self, data: st.DataObject, name: str) -> None:
        src = data.draw(st.sampled_from(sorted(p for p in self.root.iterdir() if p.is_dir())))
        dest = self.root / name
        if dest.exists() or dest == src:
            return
        shutil.move(str(src), str(dest))
        self.step()

    @precondition(lambda self: self.files())
    @rule(data=st.data(), text=content)
    def atomic_save(self, data: st.DataObject, text: str) -> None:
        target = data.draw(st.sampled_from(self.files()))
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
        self.step()

    @precondition(lambda self: self.files())
    @rule(data=st.data())
    def touch(self, data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(self.files()))
        now = time.time() + 1
        os.utime(path, (now, now))
        self.step()

    @invariant()
    def daemon_alive(self) -> None:
        assert self.daemon.thread.is_alive()

    def teardown(self) -> None:
        try:
            converges(self.daemon, self.tmp, self.root, timeout=30)
        finally:
            self.daemon.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)


MACHINE_SETTINGS = settings(
    max_examples=100 if LONG else 15,
    stateful_step_count=25 if LONG else 12,
    deadline=None,
    # CI replays a fixed set of examples (no database then); local and long runs
    # explore, and replay the failures they found first.
    database=None if CI else EXAMPLES,
    derandomize=CI,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.usefixtures("engine")  # what the daemon leaves in the store, on each engine
def test_watch_machine() -> None:
    """The machine's examples, then proof that they ran daemons and file operations."""
    runs.update(examples=0, steps=0)
    run_state_machine_as_test(WatchMachine, settings=MACHINE_SETTINGS)
    print(f"hypothesis watch machine: {runs['examples']} examples, {runs['steps']} file operations")
    assert runs["examples"] >= 5 and runs["steps"] > runs["examples"]

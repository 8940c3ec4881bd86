"""What the API's threads ask of the daemon's main loop: a request put, taken and
answered (or refused), a timeout, a daemon that stops meanwhile, and askers
that join one request."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from mdindex.daemon.mailbox import Mailbox
from mdindex.errors import ConfigError, StoreError


class Asker:
    """``mailbox.ask`` on a thread of its own, as an API thread asks."""

    def __init__(self, mailbox: Mailbox, kind: str, **args: Any) -> None:
        self.answer: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.took = 0.0
        self.thread = threading.Thread(target=self._ask, args=(mailbox, kind, args), daemon=True)
        self.thread.start()

    def _ask(self, mailbox: Mailbox, kind: str, args: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            self.answer = mailbox.ask(kind, **args)
        except BaseException as exc:
            self.error = exc
        self.took = time.monotonic() - started

    def done(self, timeout: float = 10) -> Asker:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the asking thread is still waiting"
        return self


def waiting(mailbox: Mailbox, n: int) -> None:
    """Until ``n`` requests were put (a wait, not a check)."""
    deadline = time.monotonic() + 10
    while mailbox._queue.qsize() < n:
        assert time.monotonic() < deadline, "the requests never arrived"
        time.sleep(0.01)


def never() -> bool:
    return False


def test_a_request_is_taken_and_answered() -> None:
    mailbox = Mailbox(stopping=never)
    assert not mailbox and mailbox.take() == []
    asker = Asker(mailbox, "reconcile", force=True)
    waiting(mailbox, 1)
    assert mailbox  # something waits
    [request] = mailbox.take()
    assert (request.kind, request.args) == ("reconcile", {"force": True})
    assert not mailbox and asker.thread.is_alive()  # taken, not answered yet
    request.reply({"files_changed": 2})
    assert asker.done().answer == {"files_changed": 2} and asker.error is None


def test_every_request_waiting_is_taken_in_order() -> None:
    mailbox = Mailbox(stopping=never)
    askers = []
    for i, kind in enumerate(("reconcile", "use", "drop")):
        askers.append(Asker(mailbox, kind, fingerprints=[str(i)]))
        waiting(mailbox, i + 1)
    requests = mailbox.take()
    assert [(r.kind, r.args["fingerprints"]) for r in requests] == [
        ("reconcile", ["0"]),
        ("use", ["1"]),
        ("drop", ["2"]),
    ]
    for i, request in enumerate(requests):
        request.reply({"n": i})
    assert [a.done().answer for a in askers] == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_the_main_loops_error_is_raised_to_the_asker() -> None:
    mailbox = Mailbox(stopping=never)
    asker = Asker(mailbox, "use", fingerprints=["nope"])
    waiting(mailbox, 1)
    refusal = ConfigError("versions: 'nope' names no version")
    mailbox.take()[0].reply(error=refusal)
    assert asker.done().error is refusal and asker.answer is None


@pytest.mark.serial
def test_a_request_not_answered_in_time_is_none() -> None:
    mailbox = Mailbox(stopping=never)
    started = time.monotonic()
    assert mailbox.ask("reconcile", timeout=0.3) is None
    assert 0.3 <= time.monotonic() - started < 1.5
    # nobody reads its answer, so the main loop never does it: status --wait
    # calls that time out while a long build runs must not queue a reconcile each
    assert mailbox.take() == []
    assert mailbox.ask("reconcile", timeout=0.3) is None
    asker = Asker(mailbox, "use", fingerprints=["a"])
    waiting(mailbox, 2)
    [request] = mailbox.take()  # the abandoned one skipped, the waited-for one kept
    assert request.kind == "use"
    request.reply({"ok": True})
    assert asker.done().answer == {"ok": True}


@pytest.mark.serial
@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_daemon_that_stops_refuses_what_waits(timeout: float | None) -> None:
    stopping = threading.Event()
    mailbox = Mailbox(stopping=stopping.is_set)
    asker = Asker(mailbox, "drop", timeout=timeout, fingerprints=[])
    waiting(mailbox, 1)
    stopping.set()
    error = asker.done(timeout=5).error
    assert isinstance(error, StoreError)
    assert str(error) == "the daemon is stopping; drop not done"
    assert asker.took < 3


def test_an_answer_adds_to_what_the_request_holds() -> None:
    mailbox = Mailbox(stopping=never)
    asker = Asker(mailbox, "reconcile")
    waiting(mailbox, 1)
    [request] = mailbox.take()
    request.answer["partial"] = True
    request.reply({"files_seen": 3})
    assert asker.done().answer == {"partial": True, "files_seen": 3} and asker.error is None


def test_askers_that_join_share_one_request_and_its_answer() -> None:
    """Found by a review: a verify asked again after a Ctrl-C, or by several
    clients, ran once for each, one after another, each holding an API slot.
    Joined, the same request (kind and arguments) is waited for: one answer
    for all; other arguments are another request."""
    mailbox = Mailbox(stopping=never)
    first = Asker(mailbox, "verify", join=True, repair=False, force=False)
    waiting(mailbox, 1)
    [running] = mailbox.take()  # under way on the main loop
    again = Asker(mailbox, "verify", join=True, repair=False, force=False)
    other = Asker(mailbox, "verify", join=True, repair=True, force=False)
    waiting(mailbox, 1)  # only the repair was put
    deadline = time.monotonic() + 10
    while running.waiting < 2:  # the second asker joined the first's request
        assert time.monotonic() < deadline
        time.sleep(0.01)
    running.reply({"in_sync": True})
    assert first.done().answer == again.done().answer == {"in_sync": True}
    [repair] = mailbox.take()
    assert repair.args == {"repair": True, "force": False} and other.thread.is_alive()
    repair.reply({"repaired": True})
    assert other.done().answer == {"repaired": True}
    # answered: the next one asked is a new request
    later = Asker(mailbox, "verify", join=True, repair=False, force=False)
    waiting(mailbox, 1)
    [new] = mailbox.take()
    assert new is not running
    new.reply({})
    assert later.done().answer == {}


@pytest.mark.serial
def test_a_joined_request_runs_while_one_asker_still_waits() -> None:
    """Abandoned only when every asker gave up: one asker's timeout left the
    request skipped while another waited for it without end."""
    mailbox = Mailbox(stopping=never)
    assert mailbox.ask("verify", timeout=0.2, join=True, repair=False, force=False) is None
    patient = Asker(mailbox, "verify", join=True, repair=False, force=False)
    deadline = time.monotonic() + 10
    while not patient.thread.is_alive() or mailbox._queue.qsize() < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.1)  # the patient asker has joined (or made a new one)
    [request] = mailbox.take()
    request.reply({"in_sync": True})
    assert patient.done().answer == {"in_sync": True}

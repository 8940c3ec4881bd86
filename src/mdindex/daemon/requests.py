"""What the API's threads asked through the mailbox, answered on the main loop:
a reconcile, a flush once a `status --wait` barrier passed, a verify, and
`versions use|drop`. The syncs themselves are ``work.Work``'s."""

from __future__ import annotations

import logging
from typing import Any

from mdindex.daemon import heap
from mdindex.daemon.mailbox import Request
from mdindex.daemon.shared import Shared
from mdindex.daemon.work import Work
from mdindex.errors import MdindexError, StoreError
from mdindex.index.summary import Summary

log = logging.getLogger(__name__)


class Requests:
    """The mailbox's requests, served between the main loop's other jobs."""

    def __init__(self, shared: Shared, work: Work) -> None:
        self.shared = shared
        self.work = work

    def serve(self) -> None:
        """One reconcile answers every reconcile request queued before it started:
        each asked after its changes reached the disk, and a reconcile sees the
        disk. A flush (asked once a barrier passed) syncs the paths waiting.
        `versions use|drop` are answered one by one."""
        requests = self.shared.mailbox.take()
        for kind, job in (("reconcile", self.reconcile), ("flush", self.flush)):
            asked = [r for r in requests if r.kind == kind]
            if not asked:
                continue
            summary = job(asked)
            for r in asked:
                if summary is None:
                    r.reply(error=StoreError(self.shared.health.reason or f"{kind} failed"))
                else:
                    r.reply(summary.as_dict())
        for r in requests:
            if r.kind == "verify":
                self.verify(r)
            elif r.kind not in ("reconcile", "flush"):
                self.versions(r)

    def reconcile(self, asked: list[Request]) -> Summary | None:
        work = self.work
        work.force_next = work.force_next or any(r.args.get("force") for r in asked)
        return work.reconcile("requested")

    def flush(self, asked: list[Request]) -> Summary | None:
        """Every path waiting now, and the folders the kernel does not watch,
        synced at once: a barrier passed, so every event from before it is here.
        Events lost meanwhile (an overflow) leave only a whole reconcile."""
        if self.shared.check_roots() or self.shared.watcher.overflowed.is_set():
            self.shared.watcher.overflowed.clear()
            return self.work.reconcile("rescan")
        self.shared.drain(timeout=0)
        batch = self.shared.debouncer.take_all()
        from_events = bool(batch.dirs)
        batch.dirs += self.shared.watcher.unwatched
        return self.work.process(batch, events=from_events) if batch else Summary()

    def verify(self, request: Request) -> None:
        """`mdindex verify [--repair]` while the daemon holds the store: its live
        version's points against the files, as the command does without a
        daemon; events wait meanwhile, as for a reconcile. A refused repair, a
        store that fails or a fault of ours is that verify's answer alone."""
        from mdindex.index.verify import verify

        indexer = self.shared.builds.live
        assert indexer is not None
        self.shared.health.status("verifying")
        try:
            report = verify(indexer, **request.args, stop=lambda: self.shared.should_exit)
            log.info("verify: %s", report.line())
            if report.repaired:
                self.work.update_gauges()
            request.reply(report.as_dict())
        except MdindexError as exc:
            request.reply(error=exc)
        except Exception as exc:  # a fault of our own: this verify fails, never the daemon
            log.error("verify failed", exc_info=exc)
            request.reply(error=StoreError(f"verify failed: {type(exc).__name__}: {exc}"))
        finally:
            self.shared.health.status("watching")
            heap.give_back()  # its groups' plans, freed but held by malloc

    def versions(self, request: Request) -> None:
        fingerprints = request.args["fingerprints"]
        try:
            if request.kind == "use":
                answer: dict[str, Any] = self.shared.builds.use(fingerprints)
            else:
                answer = self.shared.builds.drop(fingerprints)
        except MdindexError as exc:
            request.reply(error=exc)
            return
        self.work.update_gauges()
        request.reply(answer)

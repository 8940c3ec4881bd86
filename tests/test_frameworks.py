"""LangChain's and LlamaIndex's own Qdrant vector stores over a collection mdindex built.

The real packages (the `frameworks` extra), the real model, a real embedded
store. Only the query embedding is an adapter over mdindex's own model, so
no second copy of the model loads; the README shows the same lines with the
frameworks' Hugging Face embeddings.
"""

from __future__ import annotations

import gc
import warnings
from pathlib import Path
from typing import Any

import pytest

from mdindex.embedding.embedder import ModelEmbedder
from mdindex.runtime import make_models
from tests.conftest import rollout_for, settings_for

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, ModelEmbedder]:
    tmp_path = tmp_path_factory.mktemp("frameworks")
    root = tmp_path / "docs"
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "keys.md").write_text(
        "---\ntitle: Keys\n---\n# Keys\n\nKeys open the API.\n\n## Rotate\n\n"
        "Rotate API keys every ninety days from the console.\n"
    )
    (root / "otters.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    # qdrant-client's local mode: the embedded store the frameworks can read
    s = settings_for(tmp_path, [root], base_url="https://docs.example", store="client")
    models = make_models(s)
    # as `mdindex backfill` does: the configured name is an alias of the live
    # version, which the frameworks are given; closed again after (an embedded
    # store opens in one process at a time)
    rollout_for(s, models.embedder).backfill()
    return s, root, models.embedder


QUESTION = "how often should API keys be rotated"


def test_langchain_retriever_over_an_mdindex_collection(indexed: Any) -> None:
    from langchain_core.embeddings import Embeddings
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    s, root, embedder = indexed

    class Model(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return embedder.embed(texts).tolist()  # type: ignore[no-any-return]

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    client = QdrantClient(path=str(s.store_path))
    try:
        store = QdrantVectorStore(
            client=client,
            collection_name=s.collection,
            embedding=Model(),
            content_payload_key="text",
            metadata_payload_key="metadata",
        )
        docs = store.as_retriever(search_kwargs={"k": 2}).invoke(QUESTION)
    finally:
        client.close()
    top = docs[0]
    assert top.page_content == "## Rotate\n\nRotate API keys every ninety days from the console."
    meta = top.metadata
    assert (meta["doc_path"], meta["section"], meta["url"]) == (
        "guide/keys.md",
        "Rotate",
        "https://docs.example/guide/keys/#rotate",
    )
    lines = (
        (root / "guide/keys.md").read_text().split("\n")[meta["line_start"] - 1 : meta["line_end"]]
    )
    assert "\n".join(lines) == top.page_content


def test_llamaindex_retriever_over_an_mdindex_collection(indexed: Any) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    s, _, embedder = indexed

    class Model(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embedder.embed([query])[0].tolist()  # type: ignore[no-any-return]

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._get_query_embedding(text)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

    client = QdrantClient(path=str(s.store_path))
    try:
        store = QdrantVectorStore(client=client, collection_name=s.collection)
        index = VectorStoreIndex.from_vector_store(store, embed_model=Model())
        nodes = index.as_retriever(similarity_top_k=2).retrieve(QUESTION)
    finally:
        client.close()
    top = nodes[0].node
    assert top.get_content() == "## Rotate\n\nRotate API keys every ninety days from the console."
    assert (top.metadata["doc_path"], top.metadata["section"]) == ("guide/keys.md", "Rotate")
    assert top.metadata["url"] == "https://docs.example/guide/keys/#rotate"
    assert top.metadata["line_start"] == 8  # the "## Rotate" line, after the frontmatter


def test_a_framework_app_meets_a_clear_error_while_the_daemon_holds_the_store(
    indexed: Any,
) -> None:
    from qdrant_client import QdrantClient

    s, _, _ = indexed
    holder = QdrantClient(path=str(s.store_path))  # as the daemon holds it
    # qdrant-client leaves the refused client's lock file to the collector
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            with pytest.raises(RuntimeError, match="already accessed by another instance"):
                QdrantClient(path=str(s.store_path))
        finally:
            holder.close()
            gc.collect()

"""qdrant-client: its embedded local mode, or a Qdrant server or cluster
(``store.QdrantStore``), with the clients it shares, how collections are
created (``collection``) and how searches are asked (``query``)."""

from mdindex.sinks.qdrant.collection import ClusterSpec
from mdindex.sinks.qdrant.store import QdrantStore

__all__ = ["ClusterSpec", "QdrantStore"]

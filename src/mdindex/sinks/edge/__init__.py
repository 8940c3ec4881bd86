"""qdrant-edge: Qdrant's own engine embedded in this process, one shard folder
per collection (``store.EdgeStore``), how searches are asked (``query``) and
how its search index is built out of the way (``optimize``)."""

from mdindex.sinks.edge.store import EdgeStore

__all__ = ["EdgeStore"]

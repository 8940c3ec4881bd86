"""Sinks: where points go and are read back from. The sync core talks to a
``Store``, never to a Qdrant library; a sink is also read back (search,
scroll, vectors by ID), so it is the only copy of the index that counts.

- ``QdrantStore``: qdrant-client, in embedded local mode or against a server.
- ``EdgeStore``: qdrant-edge, Qdrant's own engine embedded in the process.

The engines are imported where a store is made (``runtime.make_store``), not
here: ``import qdrant_client`` alone takes 1.6 s on a 2-core Xeon, which a
cold search on edge never needs.
"""

from mdindex.sinks.base import Hit, Point, Store

__all__ = ["Hit", "Point", "Store"]

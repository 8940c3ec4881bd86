"""Where points are stored. The sync core talks to a Store, never to a Qdrant library.

- ``QdrantStore``: qdrant-client, in embedded local mode or against a server.
- ``EdgeStore``: qdrant-edge, Qdrant's own engine embedded in the process.
"""

from mdindex.stores.base import Hit, Point, Store
from mdindex.stores.edge import EdgeStore
from mdindex.stores.qdrant import QdrantStore

__all__ = ["EdgeStore", "Hit", "Point", "QdrantStore", "Store"]

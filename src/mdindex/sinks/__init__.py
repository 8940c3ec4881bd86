"""Where points are stored. The sync core talks to a Sink, never to a Qdrant library.

- ``QdrantSink``: qdrant-client, in embedded local mode or against a server.
- ``EdgeSink``: qdrant-edge, Qdrant's own engine embedded in the process.
"""

from mdindex.sinks.base import Hit, Point, Sink
from mdindex.sinks.edge import EdgeSink
from mdindex.sinks.qdrant import QdrantSink

__all__ = ["EdgeSink", "Hit", "Point", "QdrantSink", "Sink"]

"""Where points are stored. The sync core talks to a sink, never to qdrant-client."""

from mdindex.sinks.qdrant import Hit, Point, QdrantSink

__all__ = ["Hit", "Point", "QdrantSink"]

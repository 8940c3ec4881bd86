"""mdindex: keep a Qdrant vector index identical to a folder of markdown files."""

__version__ = "0.1.0"

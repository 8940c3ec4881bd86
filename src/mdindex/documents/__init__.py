"""Documents: which files are documents (the path filter and the tree scan),
reading one safely (confined to its root, checked after it is opened),
decoding and parsing it (frontmatter, outline), the time budget of parsing,
and the small value types (``Document``, ``Chunk``). Nothing here knows of a
model, a store or the state."""

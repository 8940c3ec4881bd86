"""The sync core: ``indexer.Indexer`` (what backfill, watch, verify and the Ray
driver call), change detection (``changes``), planning (a file's text to its
points, pure: ``planning``), the payload's schema (``payload``), writing
(``writer``), the local state and the writer lock, the guard on deletions,
verify and search. What builds it from the settings is ``mdindex.runtime``,
above it; the Ray driver is ``mdindex.distributed``."""

"""The sync core: ``indexer.Indexer`` (what backfill, watch, verify and the Ray
driver call), change detection (``changes``), planning (a file's text to its
points, pure: ``planning``), writing (``writer``), the local state and the
writer lock, the guard on deletions, verify, search, and ``runtime`` (building
the model, store and state the settings name)."""

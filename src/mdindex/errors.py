"""One exception tree for mdindex; third-party errors are translated at the boundary.

MdindexError
├── ConfigError            bad key, value or combination        (exit 2)
├── LockError              another writer holds the state       (exit 2)
├── PruneRefused           a guarded prune would go too far     (exit 2)
├── RepairRefused          most sampled vectors disagree: the embedder is suspect (exit 2)
├── SpaceRefused           a new version would not fit on the disk (exit 2)
├── FreshnessUnknown       `status --wait` with nothing that can tell      (exit 4)
├── InputError             one file cannot be indexed; the run goes on
│   ├── FileTooLarge
│   ├── BinaryFile
│   ├── DecodeError
│   ├── UnreadableFile
│   └── FileTimeout        parsing and chunking it ran over its time budget
├── EmbeddingError         the model cannot load, failed or gave non-finite vectors (exit 3)
│   └── EmbeddingUnavailable  the embedding server unreachable after retries (exit 3)
├── StateError             the local state refuses writes (disk full, read-only) (exit 3)
└── StoreError             Qdrant refused an operation
    ├── StoreMismatch      existing collection has other vector settings  (exit 2)
    │   ├── LayoutMismatch the collection lacks the sparse vector its version has
    │   └── ModelMismatch  its points were made by another model (a forged catalog)
    ├── CollectionMissing  the live version has no collection in the store (exit 2)
    └── StoreUnavailable   unreachable or refusing writes after retries   (exit 3)

At the command line's boundary, an OSError from outside this tree (a state dir
that cannot be created) exits 2 and anything else unexpected exits 3, each with
one line on stderr; the traceback only with --log-level DEBUG.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_USAGE = 2
EXIT_STORE = 3
EXIT_DRIFT = 4
EXIT_PENDING = EXIT_DRIFT  # `status --wait`: changes still pending at the timeout


class MdindexError(Exception):
    exit_code = EXIT_USAGE


class ConfigError(MdindexError):
    exit_code = EXIT_USAGE


class SpaceRefused(MdindexError):
    exit_code = EXIT_USAGE


class FreshnessUnknown(MdindexError):
    """No daemon and no roots: whether the index is caught up cannot be known."""

    exit_code = EXIT_PENDING


class LockError(MdindexError):
    exit_code = EXIT_USAGE


class PruneRefused(MdindexError):
    exit_code = EXIT_USAGE


class RepairRefused(MdindexError):
    """`verify --repair` found most sampled vectors disagreeing with their text:
    a changed embedder, not a damaged index, is the likelier cause."""

    exit_code = EXIT_USAGE


class InputError(MdindexError):
    """A single file could not be indexed; ``reason`` is the one-line explanation."""

    exit_code = EXIT_PARTIAL


class FileTooLarge(InputError):
    pass


class BinaryFile(InputError):
    pass


class DecodeError(InputError):
    pass


class UnreadableFile(InputError):
    pass


class FileTimeout(InputError):
    pass


class EmbeddingError(MdindexError):
    # The whole run failed: exit 1 would read as "some files failed", which
    # mdindex-backfill.service counts as success.
    exit_code = EXIT_STORE


class EmbeddingUnavailable(EmbeddingError):
    """The embedding server did not answer within the retry budget: like a store
    that is down, the daemon keeps the paths and tries again later."""


class StateError(MdindexError):
    exit_code = EXIT_STORE


class StoreError(MdindexError):
    exit_code = EXIT_STORE


class StoreMismatch(StoreError):
    exit_code = EXIT_USAGE


class LayoutMismatch(StoreMismatch):
    """An older collection without the sparse vector: the sync core rebuilds it."""


class ModelMismatch(StoreMismatch):
    """The store's points record another model than the configured one: the
    catalog names a model that did not build the version. Never repaired."""


class CollectionMissing(StoreError):
    """The catalog's live version has no collection in the store (deleted by
    hand, another store path): a read-only command says so and creates nothing."""

    exit_code = EXIT_USAGE


class StoreUnavailable(StoreError):
    exit_code = EXIT_STORE

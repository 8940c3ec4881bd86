"""One exception tree for mdindex; third-party errors are translated at the boundary.

MdindexError
├── ConfigError            bad key, value or combination        (exit 2)
├── LockError              another writer holds the state       (exit 2)
├── PruneRefused           a guarded prune would go too far     (exit 2)
├── InputError             one file cannot be indexed; the run goes on
│   ├── FileTooLarge
│   ├── BinaryFile
│   ├── DecodeError
│   └── UnreadableFile
├── EmbeddingError         the model failed or gave non-finite vectors (exit 1)
├── StateError             the local state refuses writes (disk full, read-only) (exit 3)
└── StoreError             Qdrant refused an operation
    ├── StoreMismatch      existing collection has other vector settings  (exit 2)
    └── StoreUnavailable   unreachable or refusing writes after retries   (exit 3)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_USAGE = 2
EXIT_STORE = 3
EXIT_DRIFT = 4


class MdindexError(Exception):
    exit_code = EXIT_USAGE


class ConfigError(MdindexError):
    exit_code = EXIT_USAGE


class LockError(MdindexError):
    exit_code = EXIT_USAGE


class PruneRefused(MdindexError):
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


class EmbeddingError(MdindexError):
    exit_code = EXIT_PARTIAL


class StateError(MdindexError):
    exit_code = EXIT_STORE


class StoreError(MdindexError):
    exit_code = EXIT_STORE


class StoreMismatch(StoreError):
    exit_code = EXIT_USAGE


class StoreUnavailable(StoreError):
    exit_code = EXIT_STORE

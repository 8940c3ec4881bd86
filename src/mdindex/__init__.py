"""mdindex: keep a Qdrant vector index identical to a folder of markdown files.

From Python (docs/python.md)::

    from mdindex import Index

    with Index(["docs"], state_dir=".mdindex") as index:
        index.sync()
        for hit in index.search("how do I install it"):
            print(f"{hit.score:.3f} {hit.doc_path}:{hit.line_start} {hit.section}")

Errors are ``mdindex.errors.MdindexError`` and its subclasses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "Dropped",
    "Hit",
    "Index",
    "MdindexError",
    "Status",
    "Summary",
    "Switch",
    "Version",
    "__version__",
]

if TYPE_CHECKING:
    from mdindex.api import Dropped, Hit, Index, Status, Summary, Switch, Version
    from mdindex.errors import MdindexError


def __getattr__(name: str) -> Any:
    # Imported on first use: `import mdindex.errors` in a worker process (Ray,
    # the model's ONNX export) stays as light as that module alone.
    if name == "MdindexError":
        from mdindex.errors import MdindexError

        return MdindexError
    if name in __all__:
        from mdindex import api

        return getattr(api, name)
    raise AttributeError(f"module 'mdindex' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

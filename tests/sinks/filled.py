"""Five points whose roots, paths and frontmatter every filter test asks about,
in either embedded engine: point i has the vector e_i (+ a little of e_0) and
the sparse term i + 1."""

from __future__ import annotations

import uuid
from typing import Any

from mdindex.embedding.sparse import Sparse
from mdindex.sinks import Point, Store

# (root, doc_path, meta) of each point
DOCS: list[tuple[str, str, dict[str, Any]]] = [
    ("docs", "guide/a.md", {"draft": True, "tags": ["x", "y"]}),
    ("docs", "guide/b.md", {"draft": 1, "tags": "x"}),
    ("docs", "index.md", {"draft": False, "nested": {"level": "deep"}}),
    ("wiki", "guide/a.md", {"draft": "true", "tags": ["z"]}),
    ("wiki", "guide/a.md.bak", {"nested": {"level": "shallow"}}),
]
DIM = len(DOCS)


def pid(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


def vector(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i] = 1.0
    v[0] += 0.1
    return v


def fill(store: Store) -> None:
    """Open ``store`` and write the five points into it."""
    store.open()
    store.ensure_collection(DIM)
    store.upsert(
        [
            Point(pid(i), vector(i), {"root": r, "doc_path": p, "meta": m}, Sparse([i + 1], [1.0]))
            for i, (r, p, m) in enumerate(DOCS)
        ]
    )

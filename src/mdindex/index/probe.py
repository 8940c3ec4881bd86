"""One stored vector checked against the model when a store opens.

A catalog edited so that a version names another model, with its fingerprint
recomputed and its folders renamed to match, passes every check of the
catalog: the daemon then embeds with the wrong model, and a repair rewrites
every point. So before a sync embeds its first text (``Indexer.check_model``)
the first stored point whose document is still as it was is planned again
from its file and embedded with the configured model; its vector must be the
stored one. One chunk: tens of milliseconds. A run that embeds nothing (every
vector reused) does not probe, and writes no vector of the wrong model.
"""

from __future__ import annotations

import itertools

from mdindex.config import Settings
from mdindex.documents.files import FileRef, stat_file
from mdindex.errors import ModelMismatch
from mdindex.index.changes import Detector
from mdindex.index.groups import Groups
from mdindex.index.summary import Summary
from mdindex.index.vectors import Vectors

# all-MiniLM-L6-v2 against its own stored vector: cosine 1.000 (torch, ONNX,
# bf16 all above 0.9999); against another model of the same size (a
# stand-in, tests/index/test_probe.py) well under 0.5. verify's bar is 0.98.
PROBE_COSINE = 0.99
# Points looked at for one whose document is unchanged on disk.
PROBE_POINTS = 8
# What the model reads of a point: planned again, the same keys give the same input.
EMBEDDED = ("title", "heading_path", "text")


def probe_model(
    settings: Settings, detector: Detector, groups: Groups, vectors: Vectors
) -> float | None:
    """The cosine between a stored vector and the configured model's vector of
    the same text; ModelMismatch below PROBE_COSINE. None when no stored point
    can be planned again (an empty store, documents changed since)."""
    import numpy as np

    roots = {r.label: r for r in settings.root_list()}
    wanted = ["root", "doc_path", "model", *EMBEDDED]
    points = vectors.store.scroll(payload=wanted, with_vectors=True, page=PROBE_POINTS)
    for pid, payload, vector in itertools.islice(points, PROBE_POINTS):
        root = roots.get(str(payload.get("root")))
        if root is None or vector is None:
            continue
        ref = stat_file(root, str(payload.get("doc_path")), detector.accept, detector.follow)
        if not isinstance(ref, FileRef):
            continue
        summary = Summary()
        loaded = list(groups.read([ref], lambda _: "", summary, None))
        works = groups.plan(loaded[0], summary) if loaded else []
        planned = [
            p
            for w in works
            for p in w.points
            if p.id == pid and all(p.payload.get(k) == payload.get(k) for k in EMBEDDED)
        ]
        if not planned:
            continue  # the document changed since: its points are not this text's
        new = np.asarray(vectors.embed(planned[:1])[0], dtype=np.float32)
        old = np.asarray(vector, dtype=np.float32)
        cosine = float(old @ new) / (float(np.linalg.norm(old) * np.linalg.norm(new)) or 1.0)
        if cosine < PROBE_COSINE:
            raise ModelMismatch(
                f"the store's vectors were not made by {settings.model}: a stored "
                f"point (made by {payload.get('model') or 'an unknown model'}) embedded "
                f"again gives cosine {cosine:.3f}; the versions catalog names the wrong "
                "model (edited?): restore it, or build a new version; nothing was repaired"
            )
        return cosine
    return None

"""The store's model checked against the configured one when a store opens.

A versions catalog edited so that a version names another model, with its
fingerprint recomputed and its folders renamed to match, passes every check of
the catalog: a sync would then embed new texts with the wrong model into the
old collection, and a repair would rewrite its points. Every point records the
model that made its vector (payload ``model``), so the first stored point is
read when a store opens and its model must be the configured one. One point's
payload, no embedding: a sync that changes nothing still gives the model no
text (an earlier probe that embedded a stored point again cost every changed
sync one text; the fault tests count the texts).
"""

from __future__ import annotations

import itertools

from mdindex.errors import ModelMismatch
from mdindex.sinks import Store


def check_model(store: Store, model: str) -> None:
    """ModelMismatch when the store's first point was made by another model than
    ``model`` (the name a planned point's payload records). An empty store, or
    a point without the key (written before it was recorded), passes."""
    for _, payload, _ in itertools.islice(store.scroll(payload=["model"], page=1), 1):
        made_by = payload.get("model")
        if isinstance(made_by, str) and made_by and made_by != model:
            raise ModelMismatch(
                f"the store's vectors were made by {made_by}, not by the configured "
                f"model {model}: the versions catalog names the wrong model (edited?); "
                "restore it, or build a new version; nothing was written"
            )

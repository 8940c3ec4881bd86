"""An embedding server's answer, read as hostile: vectors come back only where
the answer holds exactly one finite vector per text, each text's index once.

A hostile review found that ``"index": Infinity`` raised OverflowError out of
this (the daemon exited) and that duplicate indices stored text 0's vector for
text 1, silently."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mdindex.errors import EmbeddingError
from mdindex.outside import integer, shown

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# The widest model mdindex knows gives 4,096-d vectors; wider is not an embedding.
MAX_DIMENSION = 65_536


def parse_vectors(where: str, data: Any, count: int) -> NDArray[np.float32]:
    """The ``count`` vectors of an OpenAI-style answer ({"data": [{"index": i,
    "embedding": [...]}, ...]}), in the order of the texts; EmbeddingError in one
    line naming the server otherwise."""
    import numpy as np

    def refused(why: str) -> EmbeddingError:
        return EmbeddingError(f"embedding server {where} answered without vectors: {shown(why)}")

    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise refused('no "data" list of objects')
    if len(rows) != count:
        raise EmbeddingError(
            f"embedding server {where} returned {len(rows)} vectors for {count} texts"
        )
    # Every row names its text: rows without an index, taken in order, stored a
    # shuffled answer's vectors under the wrong texts (a generated answer found it).
    try:
        indices = [integer(r.get("index"), "index", 0, count - 1) for r in rows]
    except ValueError as exc:
        raise refused(str(exc)) from None
    if len(set(indices)) != count:
        raise refused(f"the indices are not each of 0 to {count - 1} once")
    rows = [row for _, row in sorted(zip(indices, rows, strict=True), key=lambda p: p[0])]
    embeddings = [r.get("embedding") for r in rows]
    if not all(isinstance(e, list) and 0 < len(e) <= MAX_DIMENSION for e in embeddings):
        raise refused(f"an embedding is not a list of 1 to {MAX_DIMENSION} numbers")
    if len({len(e) for e in embeddings}) != 1:
        raise refused("the embeddings are not all of one size")
    # numpy would take "0.5" and true as numbers; 0.03 s for 2,048 x 1,024 values
    if not {type(x) for e in embeddings for x in e} <= {int, float}:
        raise refused("an embedding holds something other than numbers")
    with np.errstate(over="ignore"):  # past float32's range: inf, refused as non-finite
        try:
            return np.asarray(embeddings, dtype=np.float32)
        except OverflowError:  # an int past float64's range
            raise refused("a number past any float's range") from None

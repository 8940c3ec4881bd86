"""``quantization = "auto"``, the default: a store quantized once it is large.

A version is laid out by the size of the live version before it. On edge,
once the live version holds ``AUTO_INT8_POINTS`` points, the settings ask
for a version with int8 copies of the vectors in RAM and the originals on
disk (``on_disk_vectors``, unless it is set); it is built beside the live
one, taking its vectors (nothing is embedded again), and switched to, as
after any change of settings. A quantized live version stays quantized
under "auto", so a store that shrinks below the size is not built again
(``quantization = "none"`` asks for the unquantized layout). Below the
size, on a server, and in qdrant-client's local mode, "auto" is "none".

Why by size: int8 keeps 384 bytes a point in RAM instead of 1,536, and the
sparse index and keyword indexes go to disk with the originals; what it
costs is a build beside the live version, once (AUTO_INT8_POINTS has the
figures).
"""

from __future__ import annotations

from typing import Any

from mdindex.config import Settings

# The live version's points from which "auto" asks for int8 with the originals on
# disk. bench/layouts.py at 200,000 points (bench/scale.py's stand-in vectors;
# Intel Xeon with AMX, 2 cores): peak RSS 387 MB against 642, hybrid p50 8.5 /
# 4.9 ms new / warm against 11.7 / 9.4, recall@10 against exact 0.979 against
# 0.982 hybrid; at 545,994 points 686 MB against 1,470. Below, the memory saved
# (under 255 MB) does not pay for building the store again.
AUTO_INT8_POINTS = 200_000


def decided(settings: Settings, live_points: int, live_quantization: str) -> Settings:
    """``settings`` with "auto" decided for the version they build now, after a
    live version of ``live_points`` points laid out as ``live_quantization``."""
    if settings.quantization != "auto":
        return settings
    large = live_quantization == "int8" or live_points >= AUTO_INT8_POINTS
    quantization = "int8" if large and settings.storage.edge else "none"
    return settings.model_copy(
        update={"quantization": quantization, **layout(settings, quantization)}
    )


def layout(settings: Settings, quantization: str) -> dict[str, Any]:
    """The layout settings a version quantized as ``quantization`` is made with
    when ``settings`` leave it to "auto": int8's originals on disk."""
    auto = settings.quantization == "auto" and "on_disk_vectors" not in settings.model_fields_set
    return {"on_disk_vectors": True} if auto and quantization == "int8" else {}

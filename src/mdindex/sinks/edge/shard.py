"""A qdrant-edge shard on disk: loaded, created with its vector settings, and
checked against the model's (its ``edge_config.json`` records how it was made)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdindex.embedding.sparse import SPARSE_NAME
from mdindex.errors import LayoutMismatch, LockError, StoreError, StoreMismatch
from mdindex.jsonfile import load_json, private_dir
from mdindex.sinks.base import FULL_SCAN_KB, INDEXED_KEYS, MIN_FREE_BYTES, Point, free_bytes
from mdindex.sinks.edge.optimize import has_graph, unindexed

if TYPE_CHECKING:
    from qdrant_edge import EdgeShard

log = logging.getLogger(__name__)

CONFIG_FILE = "edge_config.json"
# Scalar quantization maps the 0.99 quantile of the values to int8's range (as
# on a server, sinks.qdrant.collection), so that outliers do not flatten the rest.
QUANTILE = 0.99
# The dense vectors' HNSW graph: edges per node and candidates while building.
# bench/edge_hnsw.py at 100k points (stand-in vectors, Intel Xeon with AMX, 2
# cores): hybrid recall@10 against exact 0.988 with hnsw_ef 1,024 at 7.2 ms of
# CPU, where Qdrant's default graph (16, 100) needed 2,048 and 9.6 ms; with 512,
# 0.984 against 0.954. It takes 2.3x as long to build (783 s against 345).
HNSW_M = 32
HNSW_EF_CONSTRUCT = 256


def load(path: Path) -> EdgeShard:
    """An existing shard; LockError when another process has it open."""
    from qdrant_edge import EdgeShard

    try:
        return EdgeShard.load(str(path))
    except Exception as exc:
        if "WouldBlock" in str(exc):
            raise LockError(
                f"edge store {path} is open in another process; "
                "stop it or ask the running daemon (mdindex search/status use it)"
            ) from exc
        raise


def create(
    path: Path,
    dimension: int,
    sparse: bool,
    indexing_threshold_kb: int,
    quantization: str = "none",
    on_disk_vectors: bool = False,
    segment_points: int = 0,
) -> EdgeShard:
    """A new shard of ``dimension``-d cosine vectors, with the sparse vector when
    ``sparse`` (IDF applied by the engine at query time, see embedding.sparse).
    ``quantization = "int8"``: the optimizer keeps an int8 copy of each vector
    in RAM beside the original, which searches rescore with (``query.plan``);
    ``on_disk_vectors``: the originals, and the sparse vectors' inverted index
    (in RAM by default: about 8 bytes a term of every chunk), are read from
    disk as searches need them. ``segment_points``: the optimizer merges
    segments up to this many points, no more (0: without a bound), and
    ``optimize.seal_due`` builds them as they fill."""
    from qdrant_edge import (
        Distance,
        EdgeConfig,
        EdgeOptimizersConfig,
        EdgeShard,
        EdgeSparseVectorParams,
        EdgeVectorParams,
        HnswIndexConfig,
        Memory,
        Modifier,
        ScalarQuantizationConfig,
        ScalarType,
    )

    quantized = (
        ScalarQuantizationConfig(type=ScalarType.Int8, quantile=QUANTILE, memory=Memory.Pinned)
        if quantization == "int8"
        else None
    )
    config = EdgeConfig(
        vectors=EdgeVectorParams(
            size=dimension,
            distance=Distance.Cosine,
            memory=Memory.Cold if on_disk_vectors else None,
        ),
        sparse_vectors=(
            {
                SPARSE_NAME: EdgeSparseVectorParams(
                    modifier=Modifier.Idf, memory=Memory.Cold if on_disk_vectors else None
                )
            }
            if sparse
            else None
        ),
        hnsw_config=HnswIndexConfig(
            m=HNSW_M, ef_construct=HNSW_EF_CONSTRUCT, full_scan_threshold=FULL_SCAN_KB
        ),
        quantization_config=quantized,
        optimizers=EdgeOptimizersConfig(
            indexing_threshold=indexing_threshold_kb,
            # Qdrant's unit: KB of the largest vector's data in a segment
            max_segment_size=segment_points * dimension * 4 // 1024 or None,
        ),
    )
    private_dir(path.parent)  # 0700 whatever the umask: the engine's files take it
    return EdgeShard.create(str(path), config)


def quantization_of(config: dict[str, Any]) -> str:
    """ "int8" when the shard was created with scalar quantization, else "none"."""
    return "int8" if config.get("quantization_config") else "none"


def read_config(path: Path) -> dict[str, Any]:
    """The shard's own record of how it was created."""
    try:  # the bounded reader: a FIFO there held status, '[' * 100000 recursed
        config = load_json(path / CONFIG_FILE)
    except (OSError, ValueError, RecursionError) as exc:
        raise StoreError(f"edge store {path}: unreadable {CONFIG_FILE}") from exc
    if not isinstance(config, dict):
        raise StoreError(f"edge store {path}: unreadable {CONFIG_FILE}")
    return config


def check_existing(config: dict[str, Any], path: Path, dimension: int, sparse: bool) -> bool:
    """The shard's vectors must be the model's (else StoreMismatch), with the
    sparse vector when ``sparse`` (else LayoutMismatch); True when it has it."""
    vectors = config.get("vectors")
    params = vectors.get("") if isinstance(vectors, dict) else None
    if not isinstance(vectors, dict) or not isinstance(params, dict) or len(vectors) != 1:
        raise StoreMismatch(f"edge store {path} uses named vectors; choose another collection")
    if params.get("size") != dimension or params.get("distance") != "Cosine":
        raise StoreMismatch(
            f"edge store {path} has {params.get('size')}-d "
            f"{params.get('distance')} vectors but the model gives {dimension}-d Cosine; "
            "use another --collection or delete that one"
        )
    has_sparse = SPARSE_NAME in (config.get("sparse_vectors") or {})
    if sparse and not has_sparse:
        raise LayoutMismatch(f"edge store {path} has no {SPARSE_NAME!r} sparse vector")
    return has_sparse


def ensure_indexes(shard: EdgeShard, call: Callable[..., Any], on_disk: bool = False) -> None:
    """The keyword payload indexes filters use, created where missing (``call``:
    the store's retry loop, as ``call(what, fn)``). ``on_disk``: read from disk
    as filters need them, not held in RAM: with the vectors and the sparse
    index on disk they were most of what the store holds in a process that
    opens it (bench/store_memory.py, AMD EPYC: 38 MB of anonymous memory at
    60,000 points with them in RAM, 10 MB on disk, 79 MB in the default
    layout; from 20,000 points, +21 MB with them in RAM, +1 MB on disk)."""
    from qdrant_edge import KeywordIndexParams, Memory, PayloadSchemaType, UpdateOperation

    have = set(call("info", lambda: shard.info().payload_schema))
    schema = KeywordIndexParams(memory=Memory.Cold) if on_disk else PayloadSchemaType.Keyword
    for key in INDEXED_KEYS:
        if key not in have:
            op = UpdateOperation.create_field_index(key, schema)
            call(f"payload index {key}", lambda op=op: shard.update(op))


def vector_of(point: Point, has_sparse: bool) -> Any:
    """A point's vectors as the bindings take them: dense, and sparse when kept."""
    from qdrant_edge import SparseVector

    dense = point.vector if isinstance(point.vector, list) else list(point.vector)
    if point.sparse is None or not has_sparse:
        return dense
    return {"": dense, SPARSE_NAME: SparseVector(point.sparse.indices, point.sparse.values)}


def update(shard: EdgeShard, path: Path, op: Any) -> None:
    """One update of the shard at ``path``. Edge writes through memory maps: on a
    full disk a write does not fail, the kernel kills the process with SIGBUS.
    So a nearly full disk is refused here, as an error the retry loop understands."""
    free = free_bytes(path)
    if free is not None and free < MIN_FREE_BYTES:
        raise OSError(
            errno.ENOSPC,
            f"No space left on device: under {MIN_FREE_BYTES >> 20} MB free for the edge store",
        )
    shard.update(op)


EXACT = "exact scan (no index yet: one is built when the store is large enough to need it)"


def shard_info(shard: EdgeShard, config: dict[str, Any], path: Path) -> dict[str, Any]:
    """What status shows of an open shard; nothing when it cannot tell (status
    must answer even when the store cannot). ``indexed_points``: those in the
    dense vectors' index (``optimize.unindexed``; edge's own count adds the
    sparse vectors). ``dense_search`` says how a search finds the nearest
    vectors: a newcomer's 11 points read ``indexed_points: 0`` as nothing
    indexed, when a store that small is searched exactly on purpose."""
    try:
        info = shard.info()
        points = int(info.points_count)
        return {"segments": info.segments_count, **index_info(config, path, points)}
    except Exception as exc:
        log.debug("edge info: %s", exc)
        return {}


def closed_info(path: Path, points: int) -> dict[str, Any]:
    """``shard_info`` of a closed shard from its files, for ``points`` known
    otherwise: offline status opens no store when its state has the count
    (loading 1.09M points took 3.4 s and 0.9 GB of RSS, AMD EPYC)."""
    try:
        segments = len(list((path / "segments").glob("*/segment.json")))
        return {"segments": segments, **index_info(read_config(path), path, points)}
    except (OSError, StoreError) as exc:
        log.debug("edge info: %s", exc)
        return {}


def index_info(config: dict[str, Any], path: Path, points: int) -> dict[str, Any]:
    return {
        "indexed_points": points - unindexed(path, points),
        "dense_search": "HNSW index" if has_graph(path) else EXACT,
        "quantization": quantization_of(config),
        # the originals read from disk (on_disk_vectors, or "auto" with int8)
        "on_disk_vectors": (config.get("vectors") or {}).get("", {}).get("memory") == "cold",
    }

"""`mdindex backfill --ray [ADDRESS]`: the same backfill, with reading, chunking and
embedding spread over a Ray cluster (the optional extra ``mdindex[ray]``).

::

    driver                   Ray Data                                driver
    scan, state,       ->    read + chunk     ->  embed              ->  pending marks,
    what changed,            (CPU actors,         (actor pool, one       upsert, deletes,
    prune guard              map_batches)         model each, a GPU      state commit
                                                  each when present)     (streamed batches)

Deciding what changed, the prune guard, writing and the state stay on the
driver, in the same code as a local backfill (``Indexer.backfill`` with this
module's runner), and the workers plan points with the same ``Planner``: the
result is the same point IDs and payloads as a local backfill. Vectors the
store already holds are not embedded again: the embedders skip the vector
keys the state knows, and the driver fetches those from the store.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mdindex.config import Settings
from mdindex.documents.files import Failure, FileRef
from mdindex.documents.links import Graph
from mdindex.documents.reading import load_document
from mdindex.documents.types import Document
from mdindex.errors import ConfigError
from mdindex.index.changes import Changes
from mdindex.index.indexer import Indexer
from mdindex.index.planning import DocWork, Planned, now_iso
from mdindex.index.summary import Summary
from mdindex.index.vectors import reusable

log = logging.getLogger(__name__)

CHUNK_BATCH = 32  # documents per chunking call
EMBED_BATCH = 16  # documents per embedding call (about 80 chunks)
# Set by the fault tests: the first chunking task to see it exits its worker
# process once, mid-run, so Ray has to retry it elsewhere.
KILL_ONCE_ENV = "MDINDEX_RAY_KILL_ONCE"

EmbedderFactory = Callable[[Settings], Any]


def real_embedder(settings: Settings) -> Any:
    """One model per embedding actor, on the GPU Ray gave it, if any."""
    from mdindex.runtime import make_models

    return make_models(settings).embedder


class _Chunk:
    """Reads, parses and chunks documents, and plans their points (a Ray actor)."""

    def __init__(self, settings: Settings) -> None:
        from mdindex.runtime import make_models

        self.settings = settings
        self.planner = make_models(settings).planner

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        marker = os.environ.get(KILL_ONCE_ENV)
        if marker and not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)  # a worker dies mid-run; Ray must retry the task
        rows = [
            dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)
        ]
        # reason: why the file failed ("" when it did not); unchanged: touched only
        out: dict[str, list[Any]] = {
            k: [] for k in ("root", "rel", "reason", "unchanged", "doc_hash", "points", "graph")
        }
        loaded: list[tuple[FileRef, Document]] = []
        results: list[Document | Failure | None] = []
        for row in rows:
            ref = FileRef.from_row(row)
            result = load_document(ref, self.settings, str(row["old_hash"]))
            results.append(result)
            if isinstance(result, Document):
                loaded.append((ref, result))
        planned = iter(self.planner.plan(loaded))
        for row, result in zip(rows, results, strict=True):
            item = next(planned) if isinstance(result, Document) else result
            out["root"].append(row["root"])
            out["rel"].append(row["rel"])
            out["reason"].append(item.reason if isinstance(item, Failure) else "")
            out["unchanged"].append(item is None)
            work = item if isinstance(item, DocWork) else None
            out["doc_hash"].append(work.doc_hash if work else "")
            points = [dataclasses.asdict(p) for p in work.points] if work else []
            out["points"].append(json.dumps(points, ensure_ascii=False))
            graph = work.graph.as_dict() if work and work.graph else None
            out["graph"].append(json.dumps(graph, ensure_ascii=False))
        return out


class _Embed:
    """Embeds the vector keys the store lacks, one model per actor (a Ray actor).

    Every document leaves with the vectors of all its keys the store lacks; a
    key this actor embedded before (a chunk repeated across documents) comes
    from its cache instead of the model.
    """

    CACHE = 50_000  # vectors; about 75 MB at 384 dimensions

    def __init__(
        self, settings: Settings, factory: EmbedderFactory, known: set[str], threads: int
    ) -> None:
        import torch

        # Ray pins OMP threads to whole CPUs only; the actor's share decides here.
        torch.set_num_threads(threads)
        self.embedder = factory(settings)
        self.known = known
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        docs = [json.loads(points) for points in batch["points"]]
        todo: dict[str, tuple[str, list[int] | None]] = {}
        for points in docs:
            for p in points:
                key = p["vector_key"]
                if key not in self.known and key not in self.cache:
                    todo.setdefault(key, (p["embed_input"], p["token_ids"]))
        if todo:
            matrix = np.asarray(
                self.embedder.embed(
                    [text for text, _ in todo.values()], token_ids=[ids for _, ids in todo.values()]
                ),
                dtype=np.float32,
            )
            if len(self.cache) + len(todo) > self.CACHE:
                self.cache.clear()
            self.cache.update(zip(todo, matrix, strict=True))
        keys_out, vectors_out = [], []
        for points in docs:
            mine = list(dict.fromkeys(p["vector_key"] for p in points))
            mine = [key for key in mine if key in self.cache]
            keys_out.append(json.dumps(mine))
            vectors_out.append(np.stack([self.cache[k] for k in mine]).tobytes() if mine else b"")
        fresh = [len(todo)] + [0] * (len(docs) - 1) if docs else []
        return {**batch, "embedded_keys": keys_out, "vectors": vectors_out, "fresh": fresh}


def _row_vectors(batch: dict[str, Any], i: int) -> dict[str, list[float]]:
    keys = json.loads(batch["embedded_keys"][i])
    if not keys or not len(batch["vectors"][i]):
        return {}
    matrix = np.frombuffer(batch["vectors"][i], dtype=np.float32).reshape(len(keys), -1)
    return dict(zip(keys, matrix.tolist(), strict=True))


class _Write:
    """Writes each document's points to a Qdrant server from the worker (a Ray
    actor, server mode only). Vectors the store already has come from the
    point itself (an unchanged chunk) or a donor with the same vector key (a
    rename). A document it cannot complete is left to the driver."""

    def __init__(self, settings: Settings, donors: dict[str, str]) -> None:
        from mdindex.runtime import make_store

        self.store = make_store(settings)
        self.store.open()
        self.donors = donors

    def close(self) -> None:
        self.store.close()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        stamp = now_iso()
        written = [
            _planned(batch, i) and self._write(batch, i, stamp) for i in range(len(batch["rel"]))
        ]
        # The driver needs vectors only for what it must write itself.
        vectors = [b"" if w else batch["vectors"][i] for i, w in enumerate(written)]
        return {**batch, "written": written, "vectors": vectors}

    def _write(self, batch: dict[str, np.ndarray], i: int, stamp: str) -> bool:
        planned = [Planned.from_dict(p) for p in json.loads(batch["points"][i])]
        vectors = _row_vectors(batch, i)
        missing = {p.vector_key for p in planned if p.vector_key not in vectors}
        if missing:
            wanted = {p.id: p.vector_key for p in planned if p.vector_key in missing}
            wanted |= {self.donors[k]: k for k in missing if k in self.donors}
            vectors = reusable(self.store, wanted) | vectors
        if any(p.vector_key not in vectors for p in planned):
            return False
        self.store.upsert([p.point(vectors[p.vector_key], stamp) for p in planned])
        return True


def _planned(batch: dict[str, Any], i: int) -> bool:
    """Whether row ``i`` came out of chunking with points to write."""
    return not batch["reason"][i] and not batch["unchanged"][i]


def work_items(indexer: Indexer, changes: Changes) -> list[dict[str, str]]:
    """One row per candidate file; its old hash lets a worker skip a file only touched."""
    return [{**f.as_row(), "old_hash": indexer.known_hash(f, changes.rows)} for f in changes.files]


def ray_runner(
    indexer: Indexer, factory: EmbedderFactory, embed_actors: int, gpus_per_actor: float
) -> Callable[[Changes, Summary], None]:
    """The sync step of a backfill, run on Ray; the driver writes what comes back."""

    def run(changes: Changes, summary: Summary) -> None:
        import ray

        candidates = changes.files
        if candidates:
            items = work_items(indexer, changes)
            cpus = float(_resources().get("CPU", 1))
            # Chunking is a few percent of the work; embedding gets the rest of the CPUs
            # (or a GPU each).
            chunk_cpus = 0.5
            embed_cpus = 1.0 if gpus_per_actor else max(0.5, (cpus - chunk_cpus) / embed_actors)
            ds: Any = ray.data.from_items(
                items, override_num_blocks=max(1, len(items) // CHUNK_BATCH)
            )
            ds = ds.map_batches(
                _Chunk,
                fn_constructor_kwargs={"settings": indexer.settings},
                batch_size=CHUNK_BATCH,
                compute=ray.data.ActorPoolStrategy(min_size=1, max_size=max(1, int(cpus))),
                num_cpus=chunk_cpus,
            )
            donors = indexer.vector_donors()
            ds = ds.map_batches(
                _Embed,
                fn_constructor_kwargs={
                    "settings": indexer.settings,
                    "factory": factory,
                    "known": set(donors),
                    "threads": max(1, round(embed_cpus)),
                },
                batch_size=EMBED_BATCH,
                compute=ray.data.ActorPoolStrategy(size=embed_actors),
                num_cpus=embed_cpus,
                num_gpus=gpus_per_actor,
            )
            if indexer.settings.qdrant_url:
                # A server takes writes from every worker. Until the driver commits a
                # document, its point IDs are known only to the store: mark them in
                # flight, so a crash leaves them findable (Indexer._recover_inflight).
                indexer.state.mark_inflight(f.key for f in candidates)
                ds = ds.map_batches(
                    _Write,
                    fn_constructor_kwargs={"settings": indexer.settings, "donors": donors},
                    batch_size=EMBED_BATCH,
                    compute=ray.data.ActorPoolStrategy(min_size=1, max_size=max(1, int(cpus))),
                    num_cpus=chunk_cpus,
                )
            refs = {f.key: f for f in candidates}
            for batch in ds.iter_batches(batch_size=EMBED_BATCH, batch_format="numpy"):
                write_batch(indexer, batch, refs, summary)
        indexer.writer.delete_docs(changes.deleted, summary)

    return run


def _resources() -> dict[str, float]:
    import ray

    return dict(ray.cluster_resources())  # type: ignore[no-untyped-call]


def write_batch(
    indexer: Indexer,
    batch: dict[str, np.ndarray],
    refs: dict[tuple[str, str], FileRef],
    summary: Summary,
) -> None:
    """The driver's half of a streamed batch: what workers wrote is committed;
    the rest is written here, with the usual pending marks, then committed."""
    todo: list[DocWork] = []
    done: list[DocWork] = []
    vectors: dict[str, list[float]] = {}
    summary.chunks_embedded += int(sum(batch["fresh"]))
    written = batch.get("written")
    for i in range(len(batch["rel"])):
        ref = refs[(str(batch["root"][i]), str(batch["rel"][i]))]
        if batch["reason"][i]:
            summary.fail(Failure(ref.root, ref.rel, str(batch["reason"][i])))
            continue
        if batch["unchanged"][i]:  # touched, not changed
            indexer.writer.touch(ref)
            summary.files_unchanged += 1
            continue
        graph = json.loads(batch["graph"][i])
        work = DocWork(
            ref,
            str(batch["doc_hash"][i]),
            [Planned.from_dict(p) for p in json.loads(batch["points"][i])],
            Graph.from_dict(graph) if graph else None,
        )
        if written is not None and written[i]:
            done.append(work)
        else:
            todo.append(work)
            vectors.update(_row_vectors(batch, i))
    indexer.writer.write_docs(done, {}, summary, prewritten=True)
    indexer.writer.write_docs(todo, vectors, summary)
    indexer.seal()  # an edge store's segment these writes filled is built before more
    indexer.state.clear_inflight(
        (str(r), str(p)) for r, p in zip(batch["root"], batch["rel"], strict=True)
    )


def on_cluster(address: str | None) -> Callable[[Indexer, bool, bool], Summary]:
    """A rollout's ``run(indexer, prune, force)``: the backfill on Ray at ``address``."""

    def run(indexer: Indexer, prune: bool, force: bool) -> Summary:
        return backfill(indexer, address, prune=prune, force=force)

    return run


def backfill(
    indexer: Indexer,
    address: str | None,
    *,
    prune: bool = True,
    force: bool = False,
    factory: EmbedderFactory = real_embedder,
    embed_actors: int | None = None,
) -> Summary:
    """A backfill on Ray: the cluster at ``address``, or a local instance."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "--ray needs the ray extra: pip install 'mdindex[ray]' (with torch pinned first)"
        ) from exc
    started_here = not ray.is_initialized()
    if started_here:
        env = {
            "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        try:
            ray.init(
                address=address or None,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                runtime_env={"env_vars": env},
            )
        except Exception as exc:  # ray raises ConnectionError and others
            raise ConfigError(f"--ray: cannot reach a Ray cluster at {address}: {exc}") from exc
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        logging.getLogger("ray").setLevel(logging.WARNING)
        gpus = _resources().get("GPU", 0)
        actors = embed_actors or (int(gpus) if gpus else 1)
        runner = ray_runner(indexer, factory, actors, 1.0 if gpus else 0.0)
        return indexer.backfill(prune=prune, force=force, runner=runner)
    finally:
        if started_here:
            ray.shutdown()

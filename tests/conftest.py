from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import mcp.client.stdio  # noqa: F401  (see below)
import numpy as np
import pytest
from hypothesis import settings as hypothesis_settings

from mdindex.config import DEFAULT_MODEL, Settings, load_settings
from mdindex.embedding import onnx_export
from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.model import load_counter, resolve_model
from mdindex.embedding.tokens import TokenCounter
from mdindex.index.indexer import Indexer
from mdindex.index.state import State
from mdindex.runtime import collection_of, make_models, make_store, state_path

# mcp.client.stdio binds sys.stderr as stdio_client's errlog when it is first
# imported. A first import inside a capsys test (an in-process `mdindex`
# command) bound pytest's in-memory stream, which has no fileno, and every
# later stdio client in that worker failed to start its server
# ("io.UnsupportedOperation: fileno"; two MCP tests in one CI run). Imported
# here, at collection, it binds a real stream.
from mdindex.versions.rollout import Rollout

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
# pytest-xdist's worker ("gw0", "gw1", ...), or "main" in a run without it.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
# One model cache for the run (and the processes its tests start), not one per
# test's state folder: the xdist workers inherit the controller's ("main"). The
# ONNX export in it is made once under a lock (cli_helper.ensure_export): two
# workers exporting into one folder at once replaced each other's model.onnx.
os.environ.setdefault("MDINDEX_CACHE_DIR", str(REPO / ".pytest_cache" / "mdindex-cache" / WORKER))
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
# Where `serial` tests take their turn (flocks: nothing is left held after a run).
LOCKS = REPO / ".pytest_cache" / "mdindex-serial"
if WORKERS > 1:
    # Each worker has a core: torch's (and numpy's) thread pools at the machine's
    # width, in every worker and the processes it starts, would fight over them.
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

# CI replays the same examples every run, so a red build is reproducible;
# local runs and the long fault mode keep exploring new ones.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

ENGINES = ["edge", "client"]
CORPUS = Path(os.environ.get("MDINDEX_TEST_CORPUS", REPO.parent / "shared" / "corpus"))


def corpus_files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(CORPUS.rglob("*.md"))


needs_corpus = pytest.mark.skipif(not corpus_files(), reason=f"corpus not found at {CORPUS}")


class TinyEmbedder:
    """Deterministic bag-of-words vectors: shared words give similar vectors."""

    dimension = 32

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.texts_embedded = 0

    def vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimension, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            h = hashlib.blake2b(word.encode(), digest_size=8).digest()
            v[h[0] % self.dimension] += 1.0 + h[1] / 255
        if not v.any():
            v[0] = 1.0
        return v / np.linalg.norm(v)

    def embed(self, texts: Sequence[str], token_ids: Any = None) -> np.ndarray:
        self.calls.append(list(texts))
        self.texts_embedded += len(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.vector(t) for t in texts])

    def load(self, run: tuple[int, int] | None = None) -> None:
        return None

    def lookahead(self) -> int:
        return 0

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def describe(self) -> dict[str, Any]:
        return {"name": "tiny", "reason": "a test's deterministic embedder"}


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The embedded engine a reliability test runs on, for it and the processes
    it starts (MDINDEX_STORE, as for users): what a store holds after a crash, a
    kill -9, a store fault or hostile input depends on the engine. The fault
    suites take it with ``pytestmark = pytest.mark.usefixtures("engine")``."""
    monkeypatch.setenv("MDINDEX_STORE", request.param)
    return str(request.param)


@pytest.hookimpl(trylast=True)  # after xdist's own, which names the groups too early
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that assert a time or a bound run one after another on one xdist
    worker (``--dist loadgroup``), never beside each other. Under xdist the
    slow tests go first, so no worker is left with a long one at the end."""
    for item in items:
        if item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.xdist_group("serial"))
    if getattr(config.option, "loadgroup", False):  # an xdist worker under loadgroup
        for item in items:
            _name_group(item)
    if WORKERS > 1:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _name_group(item: pytest.Item) -> None:
    """The test's xdist group as loadgroup reads it, a suffix of its id
    (``path::name@group``). xdist 3.8 writes it to ``item._nodeid``, which
    pytest 9.2 no longer reads (an id is ``item._id``): no group was kept,
    the `serial` tests ran on every worker, and each worker that ran a test of
    an embedding server started one of its own."""
    names = sorted(
        {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
         for m in item.iter_markers("xdist_group")}
    )  # fmt: skip
    if not names:
        return
    named = item.nodeid
    if "@" in named.rsplit("]", 1)[-1]:  # xdist's own suffix, where it took
        named = named[: named.rindex("@")]
    named += "@" + "_".join(names)
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        setattr(item, "_id", NodeId.parse(named))  # noqa: B010 (pytest's own attribute)
    else:
        setattr(item, "_nodeid", named)  # noqa: B010


def _serial(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("serial") is not None


# The room this worker holds: shared for one test, or exclusive from a `serial`
# test to the last of the `serial` tests that follow it in this worker's queue.
_room: Any = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under xdist a `serial` test runs with no other test beside it, on a
    machine as quiet as a run without xdist gave it: the other workers finish
    the test they run and wait. Two flocks: a waiting `serial` test holds the
    turnstile, so no new test slips into the room before it.

    The `serial` tests (one xdist group) keep the room from the first to the
    last in a row: taken for each one, the other worker ran one test alone
    between every two of them, half the machine idle for 170 s of a 780 s run."""
    global _room
    if WORKERS < 2:
        yield
        return
    if _room is None:
        LOCKS.mkdir(parents=True, exist_ok=True)
        with open(LOCKS / "turnstile", "a") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            _room = open(LOCKS / "room", "a")  # noqa: SIM115 (held past this block)
            fcntl.flock(_room, fcntl.LOCK_EX if _serial(item) else fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        yield
    finally:
        if not (_serial(item) and _serial(nextitem)):
            fcntl.flock(_room, fcntl.LOCK_UN)
            _room.close()
            _room = None


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """`mdindex.cli.main` points the root logger at the sys.stderr of its call,
    which pytest replaces per test: later tests must not log to a closed one."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    return load_counter(resolve_model(DEFAULT_MODEL))


@pytest.fixture(scope="session")
def real_embedder() -> ModelEmbedder:
    return ModelEmbedder(resolve_model(DEFAULT_MODEL), device="cpu", batch_size=32)


@pytest.fixture
def tiny() -> TinyEmbedder:
    return TinyEmbedder()


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """Files and folders made inside take ``mask`` (the Python API leaves the
    caller's umask alone; the command line sets 077)."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def settings_for(tmp_path: Path, roots: Sequence[str | Path], **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "roots": [str(r) for r in roots],
        "state_dir": str(tmp_path / "state"),
        "retry_budget_s": 0.5,
    }
    values.update(overrides)
    return load_settings(values)


def build_indexer(settings: Settings, embedder: Any, **options: Any) -> Indexer:
    """The sync core on the settings' store and state, with ``embedder`` instead of
    the model (for embedding and semantic chunking); ``options`` as Indexer takes them."""
    models = make_models(settings)
    models.chunker.embed = embedder
    return Indexer(
        settings,
        planner=models.planner,
        embedder=embedder,
        store=options.pop("store", None) or make_store(settings),
        state=State(state_path(settings)),
        **options,
    )


def small_edge_store(settings: Settings, **options: Any) -> Any:
    """The settings' edge store with tiny thresholds, so that a store of a few
    dozen points gets an HNSW index: from 10 points, in segments over 1 KB of
    vectors; ``options`` as EdgeStore takes them (``segment_points``)."""
    from mdindex.sinks.edge import EdgeStore

    collection = collection_of(settings)
    return EdgeStore(
        collection,
        path=settings.store_path / collection,
        index_min_points=10,
        indexing_threshold_kb=1,
        **options,
    )


def run_backfill(settings: Settings, embedder: Any, **kwargs: Any) -> dict[str, Any]:
    with build_indexer(settings, embedder) as indexer:
        return indexer.backfill(**kwargs).as_dict()


def rollout_for(settings: Settings, embedder: Any, **options: Any) -> Rollout:
    """The versions of the settings' collection, every version synced with ``embedder``."""

    def factory(version_settings: Settings, **kw: Any) -> Indexer:
        return build_indexer(version_settings, embedder, **(kw | options))

    return Rollout(settings, factory).open()


def run_rollout(settings: Settings, embedder: Any, **kwargs: Any) -> dict[str, Any]:
    """What `mdindex backfill` does: the live version synced, or another built and switched to."""
    return rollout_for(settings, embedder).backfill(**kwargs).as_dict()


def stored_points(settings: Settings, vectors: bool = False) -> dict[str, dict[str, Any]]:
    """Every point in the collection: id -> payload (indexed_at removed), optionally
    with its dense vector and its sparse one (None where it has none)."""
    store = make_store(settings)
    try:
        store.open()
        out = {}
        for pid, payload, vec in store.scroll(payload=True, with_vectors=vectors):
            payload.pop("indexed_at", None)
            if vectors:
                payload["_vector"] = vec
            out[pid] = payload
        if vectors:
            sparse = store.sparse_vectors(list(out))
            for pid, payload in out.items():
                payload["_sparse"] = sparse.get(pid)
        return out
    finally:
        store.close()


def same_points(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> bool:
    """Same IDs and payloads, and vectors equal to float32 precision (the store
    normalizes every vector it is given, so a reused one moves by about 1e-8)."""
    if got.keys() != want.keys():
        return False
    for pid, point in got.items():
        a, b = dict(point), dict(want[pid])
        va, vb = a.pop("_vector", None), b.pop("_vector", None)
        sa, sb = a.pop("_sparse", None), b.pop("_sparse", None)
        if a != b or (va is None) != (vb is None) or (sa is None) != (sb is None):
            return False
        if va is not None and not np.allclose(va, vb, atol=1e-5):
            return False
        if sa is not None and (
            sa.indices != sb.indices or not np.allclose(sa.values, sb.values, atol=1e-6)
        ):
            return False
    return True


def assert_same(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> None:
    assert same_points(got, want), differences(got, want)


def differences(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> str:
    """What ``same_points`` found, for an assertion message."""
    missing = sorted({p["doc_path"] for k, p in want.items() if k not in got})
    extra = sorted({p["doc_path"] for k, p in got.items() if k not in want})
    changed = sorted(
        {
            p["doc_path"]
            for k, p in got.items()
            if k in want and not same_points({k: p}, {k: want[k]})
        }
    )
    return f"missing {missing}, extra {extra}, differing (payload or vector) {changed}"


@pytest.fixture
def docs_tree(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guide").mkdir(parents=True)
    (root / "index.md").write_text(
        "---\ntitle: Home\n---\n\n# Welcome\n\nHello there, reader.\n\n## Install\n\n"
        "Run the installer and wait.\n"
    )
    (root / "guide" / "a.md").write_text(
        "# Alpha\n\nAlpha text about apples.\n\n## More\n\nMore apples.\n"
    )
    (root / "guide" / "b.md").write_text("# Beta\n\nBeta text about bananas.\n")
    return root


@pytest.fixture(scope="session")
def export() -> onnx_export.Export:
    """The run's ONNX export of the model (MDINDEX_CACHE_DIR), made here if no
    test made it yet."""
    from tests.cli_helper import ensure_export

    return ensure_export()


@pytest.fixture(scope="session")
def _built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[Path, str], Path]:
    """Folders indexed once this session (per xdist worker): (source, engine)
    -> a folder holding its copy (named as the source, so its root label is
    the same) and ``state``."""
    return {}


@pytest.fixture
def indexed_copy(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    _built: dict[tuple[Path, str], Path],
) -> Callable[[Path], tuple[Path, Path]]:
    """``indexed_copy(source)``: this test's own copy of ``source`` and of its
    index (`mdindex backfill` with the default settings, made once a session),
    as tmp_path/<name> and tmp_path/state: the state says what it would had
    the backfill run there (the store's place, the root's folder and
    identity), so a sync of the copy finds nothing to do."""
    import json
    import shutil

    from mdindex.index.graph import ROOT_FOLDERS_KEY
    from mdindex.index.guard import STATE_KEY, identity
    from tests.cli_helper import mdindex

    def copy(source: Path) -> tuple[Path, Path]:
        key = (source, os.environ.get("MDINDEX_STORE", ""))  # the engine fixture's
        if key not in _built:
            base = tmp_path_factory.mktemp(f"built-{source.name}")
            shutil.copytree(source, base / source.name)
            done = mdindex("backfill", base / source.name, "--state-dir", base / "state")
            assert done.returncode == 0, done.stderr
            _built[key] = base
        base = _built[key]
        root, state = tmp_path / source.name, tmp_path / "state"
        shutil.copytree(base / source.name, root)
        shutil.copytree(base / "state", state, symlinks=True)
        for path in state.glob("*.sqlite3"):  # one state a version
            recorded = State(path)
            try:
                for name in ("store", ROOT_FOLDERS_KEY):  # absolute paths under base
                    value = recorded.get(name) or ""
                    recorded.put(name, value.replace(f"{base}/", f"{tmp_path}/"))
                recorded.put(STATE_KEY, json.dumps({source.name: identity(root)}))
            finally:
                recorded.close()
        return root, state

    return copy


@pytest.fixture
def onnx_cache(tmp_path: Path, export: onnx_export.Export) -> Path:
    """A cache folder of this test's own holding the export (linked) and no
    measurement."""
    folder = tmp_path / "cache" / "onnx" / export.path.parent.name
    folder.mkdir(parents=True)
    for name in ("meta.json", "model.onnx"):
        (folder / name).symlink_to(export.path.parent / name)
    return tmp_path / "cache"


# What a measurement on a CPU like the CI's records: torch takes seconds to load
# and the export a fraction of one, at half torch's speed.
SLOW_TORCH = {"torch-fp32": 7.0, "torch-bf16": 7.0, "onnx-fp32": 0.2}
SPEED = {"torch-fp32": 9_000.0, "torch-bf16": 8_000.0, "onnx-fp32": 4_500.0}


def plant_measurement(cache: Path, load_s: dict[str, float], speed: dict[str, float]) -> str:
    """Figures as a measurement on this CPU would record them (``speed`` in
    tokens a second), under the key a run on this machine looks for (the
    default settings); returns the fastest's name."""
    from mdindex.embedding import calibration
    from mdindex.embedding.loading import weights_sha
    from mdindex.embedding.model import CPU_BATCH, native_bf16

    info = resolve_model(DEFAULT_MODEL)
    names = calibration.candidates("cpu", "auto", "auto", native_bf16=native_bf16(), onnx=True)
    key = calibration.machine_key(
        model_sha256=weights_sha(info, cache), device="cpu", batch_size=CPU_BATCH, names=names
    )
    passed = {"mean_cosine": 1.0, "top10_agreement": 1.0, "passed": True}
    fastest = max(names, key=lambda n: speed[n])
    backend, precision = fastest.split("-")
    choice = calibration.Choice(
        backend,
        precision,
        "planted",
        chunks_per_s={n: speed[n] / 100 for n in names},
        gate={n: dict(passed) for n in names},
        source="measured",
        measured_at="2026-12-02T00:00:00+00:00",
        load_s={n: load_s[n] for n in names},
        tokens_per_s={n: speed[n] for n in names},
    )
    calibration.save(cache, key, choice)
    return fastest


Factory = Callable[..., Settings]


@pytest.fixture
def make_settings(tmp_path: Path) -> Iterator[Factory]:
    def factory(*roots: str | Path, **overrides: Any) -> Settings:
        return settings_for(tmp_path, roots, **overrides)

    yield factory


def tiny_factory(settings: Settings) -> TinyEmbedder:
    """What a Ray embedding actor builds in the logic tests (pickled by reference)."""
    return TinyEmbedder()


def _ci_skips(config: Any) -> list[str]:
    """In CI a skipped test is a test that did not run. Only the shared corpus
    may be missing (a checkout without ../shared)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not os.environ.get("CI") or reporter is None:
        return []
    return [
        r.nodeid
        for r in reporter.stats.get("skipped", [])
        if "corpus not found" not in str(r.longrepr)
    ]


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if _ci_skips(session.config) and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    skipped = _ci_skips(config)
    if skipped:
        terminalreporter.write_line(
            f"CI: {len(skipped)} skipped tests fail the run; every test must run here: "
            + ", ".join(skipped),
            red=True,
        )


class FakeTime:
    """A clock that only sleeping moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """Time for ``mdindex.retry``: moved only by its sleeps, with no jitter."""
    from mdindex import retry

    fake = FakeTime()
    monkeypatch.setattr(retry.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(retry.time, "sleep", fake.sleep)
    monkeypatch.setattr(retry.random, "random", lambda: 0.5)
    return fake

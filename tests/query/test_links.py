"""`mdindex links`, the broken-link report, the MCP tool ``related`` and the
link graph kept by a running daemon: on the Obsidian-style vault in
``tests/vault`` with the real model, and on the shared corpus (Hugo docs and
the Rust book) against a second, independent parser."""

from __future__ import annotations

import asyncio
import collections
import http.client
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from mdindex.documents.links import graph_of, is_external
from mdindex.documents.parsing import parse_document
from mdindex.index import graph
from mdindex.index.state import DocRow, State
from mdindex.query.daemon import DaemonClient, _UnixConnection
from mdindex.query.links import broken_in, broken_text
from mdindex.runtime import state_path
from tests.cli_helper import in_process, mcp_server, mdindex
from tests.conftest import CORPUS, needs_corpus, settings_for
from tests.daemon.test_as_a_process import ENV, start, stop

VAULT = Path(__file__).resolve().parents[1] / "vault"

# What `links --broken` says of the vault, and nothing else.
VAULT_BROKEN = [
    ("Home.md", 7, "Not Written Yet", "no note named 'Not Written Yet'"),
    ("daily/2026-12-01.md", 3, "Project Alpha", "has no heading #No Such Heading"),
    ("guides/setup.md", 7, "guides/setup.md", "has no heading #nope"),
    ("guides/setup.md", 7, "../../etc/passwd", "it points outside the root"),
    ("guides/setup.md", 8, "attachments/gone.png", "no file at attachments/gone.png"),
]


def as_json(r: Any) -> Any:
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def broken_rows(found: list[dict[str, Any]]) -> list[tuple[str, int, str, str]]:
    rows = []
    for b in found:
        reason = b["reason"]
        if "has no heading" in reason:
            reason = reason[reason.index("has no heading") :]
        rows.append((b["path"], b["line"], b["target"], reason))
    return rows


@pytest.mark.slow
@pytest.mark.model
def test_links_backlinks_tags_and_the_broken_report_of_a_vault(
    tmp_path: Path, indexed_copy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    vault, _ = indexed_copy(VAULT)

    def cli(*args: str) -> Any:  # what the commands print: main() here, no spawn
        return in_process(capsys, *args, env=ENV)

    state = ["--state-dir", str(tmp_path / "state")]
    assert cli("backfill", str(vault), *state).returncode == 0
    # no config and no --root: the file is found under the folder backfill indexed
    home = as_json(cli("links", str(vault / "Home.md"), "--json", *state))
    assert (home["root"], home["path"], home["title"]) == ("vault", "Home.md", "Home")
    assert home["tags"] == ["home", "inbox"]
    out = [(e["target"], e["path"], e.get("section")) for e in home["outgoing"]]
    assert out == [
        ("Project Alpha", "projects/Project Alpha.md", ""),
        ("Project Alpha", "projects/Project Alpha.md", "Budget"),
        ("Meeting 2026-11-30", "Meeting 2026-11-30.md", ""),
        ("Not Written Yet", None, None),
        ("diagram.png", None, None),
        ("guides/setup.md", "guides/setup.md", "Install"),
    ]
    attachment = home["outgoing"][4]
    assert attachment["attachment"] is True and attachment["problem"] == ""  # found on disk
    assert [e["target"] for e in home["unresolved"]] == ["Not Written Yet"]
    back = [(b["path"], b["line"], b["section"]) for b in home["backlinks"]]
    assert back == [
        ("guides/setup.md", 3, "Setup"),
        ("projects/Project Alpha.md", 8, "Project Alpha"),
    ]
    assert "Back to [home](../Home.md)" in home["backlinks"][0]["context"]

    alpha = as_json(cli("links", str(vault / "projects/Project Alpha.md"), "--json", *state))
    sharing = [(s["path"], s["tags"]) for s in alpha["sharing_tags"]]
    assert sharing == [
        ("Meeting 2026-11-30.md", ["work"]),
        ("daily/2026-12-01.md", ["project/alpha"]),
        ("people/Ada.md", ["work"]),
    ]
    text = cli("links", str(vault / "projects/Project Alpha.md"), *state)
    assert text.returncode == 0 and "backlinks (7):" in text.stdout
    daily = as_json(cli("links", "vault:daily/2026-12-01.md", "--json", *state))  # ROOT:PATH
    assert [e["problem"] for e in daily["outgoing"]] == [
        "",
        "",
        "no heading #No Such Heading there",
    ]
    assert daily["unresolved"] == []  # the note is there; its heading is not
    shown = cli("links", str(vault / "daily/2026-12-01.md"), *state).stdout
    assert "#No Such Heading  Project Alpha  ✗ no heading #No Such Heading there" in shown

    report = cli("links", "--broken", "--json", *state)
    assert report.returncode == 1
    assert broken_rows(json.loads(report.stdout)) == VAULT_BROKEN
    lines = cli("links", "--broken", *state)
    assert lines.returncode == 1 and lines.stderr.strip().endswith("5 broken links")
    assert "vault:guides/setup.md:8: attachments/gone.png: no file at" in lines.stdout
    assert "vault:daily/2026-12-01.md:3: [[Project Alpha#No Such Heading]]: " in lines.stdout

    status = as_json(cli("status", str(vault), "--json", *state))
    assert status["unresolved_links"] == 2  # Not Written Yet, and ../../etc/passwd

    for args, reason in [
        (("links", *state), "give a FILE, or --broken"),
        (("links", "--broken", str(vault / "Home.md"), *state), "not both"),
        (("links", str(vault), *state), "is a folder; give one of its documents"),
        (("links", str(vault / "nope.md"), *state), "is not an indexed document"),
        (("links", str(tmp_path / "elsewhere.md"), *state), "is not an indexed document"),
        (("links", "--broken", "--state-dir", str(tmp_path / "empty")), "nothing is indexed"),
    ]:
        r = cli(*args)
        assert r.returncode == 2 and reason in r.stderr.strip().splitlines()[-1], (args, r.stderr)

    # the missing notes written: they resolve, and the report shrinks to what is left
    (vault / "Not Written Yet.md").write_text("# Not written yet\n\nNow it is.\n")
    (vault / "attachments/gone.png").write_bytes(b"\x89PNG")
    assert cli("backfill", str(vault), *state).returncode == 0
    found = broken_rows(as_json(cli("links", "--broken", "--json", *state)))
    assert found == [VAULT_BROKEN[1], VAULT_BROKEN[2], VAULT_BROKEN[3]]
    assert as_json(cli("status", str(vault), "--json", *state))["unresolved_links"] == 1


@pytest.mark.slow
@pytest.mark.model
def test_verify_checks_the_graph_and_repair_restores_it(
    tmp_path: Path, indexed_copy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    vault, _ = indexed_copy(VAULT)

    def cli(*args: str) -> Any:  # what the commands print: main() here, no spawn
        return in_process(capsys, *args, env=ENV)

    state = ["--state-dir", str(tmp_path / "state")]
    assert cli("backfill", str(vault), *state).returncode == 0
    r = cli("verify", str(vault), "--json", *state)
    assert r.returncode == 0 and json.loads(r.stdout)["graph"] == []
    before = as_json(cli("links", str(vault / "Home.md"), "--json", *state))
    path = state_path(settings_for(tmp_path, [vault], state_dir=str(tmp_path / "state")))
    db = sqlite3.connect(path)
    with db:  # the graph drifts from the files: a document's lost, a tag made up
        db.execute("DELETE FROM links WHERE path='Home.md'")
        db.execute("DELETE FROM nodes WHERE path='Home.md'")
        db.execute("INSERT INTO tags VALUES ('vault', 'people/Ada.md', 'made-up')")
        db.execute("UPDATE nodes SET digest='x' WHERE path='people/Ada.md'")
    db.close()
    r = cli("verify", str(vault), "--json", *state)
    assert r.returncode == 4
    drift = json.loads(r.stdout)
    assert [(g["doc_path"], g["reason"]) for g in drift["graph"]] == [
        ("Home.md", "links and tags not recorded"),
        ("people/Ada.md", "links or tags differ"),
        ("guides/setup.md", "a link resolves elsewhere now"),  # to Home.md, not recorded
    ]
    assert drift["in_sync"] is False and drift["missing"] == drift["stale"] == []
    r = cli("verify", str(vault), "--repair", "--json", *state)
    assert r.returncode == 0, r.stderr
    assert as_json(cli("links", str(vault / "Home.md"), "--json", *state)) == before
    ada = as_json(cli("links", str(vault / "people/Ada.md"), "--json", *state))
    assert ada["tags"] == ["person", "work"]


def test_the_report_shows_each_link_on_its_own_line_and_looks_nowhere_outside(
    tmp_path: Path,
) -> None:
    """A hostile review: a target decoded from %0d%0a printed a forged
    `FILE:LINE:` line, %1b an escape sequence; and the attachment check looked
    at /etc/passwd through a link before refusing it."""
    root = tmp_path / "vault"
    (root / "inside").mkdir(parents=True)
    (root / "inside" / "pic.png").write_bytes(b"png")
    os.symlink("/etc", root / "etclink")
    os.symlink("inside", root / "alias")
    os.symlink("../../../../../../etc/hosts", root / "inside" / "up.png")
    text = (
        "[esc](%0d%0avault:FAKE.md:1:%20evil%0d) [e2](%1b[31mred.md) [[x\u202eevil]]\n"
        "![a](etclink/passwd) ![b](alias/pic.png) ![c](inside/up.png) ![d](inside/pic.png)\n"
    )
    (root / "a.md").write_text(text)
    state = State(tmp_path / "s.db")
    g = graph_of(parse_document(text, "a.md"), "a.md")
    state.commit_docs(
        [("vault", "a.md", DocRow(1, 1, "h", "f"), [])], "now", {("vault", "a.md"): g}
    )
    found = broken_in(state.db, {"vault": root})
    state.close()
    reasons = {b["target"]: b["reason"] for b in found}
    assert reasons["etclink/passwd"] == "etclink/passwd leads outside the root (a symbolic link)"
    assert reasons["inside/up.png"] == "inside/up.png leads outside the root (a symbolic link)"
    assert "alias/pic.png" not in reasons and "inside/pic.png" not in reasons  # found
    shown = broken_text(found)
    assert len(shown.splitlines()) == len(found) == 5
    assert all(line.startswith("vault:a.md:") for line in shown.splitlines())
    assert "\x1b" not in shown and "\u202e" not in shown and "\\u000d\\u000avault:FAKE" in shown


def _metric(daemon: DaemonClient, name: str) -> float:
    assert daemon.socket
    conn = _UnixConnection(daemon.socket, 10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {daemon.token}"})
        body = conn.getresponse().read().decode()
    except (OSError, http.client.HTTPException) as exc:
        raise AssertionError(f"metrics: {exc}") from exc
    finally:
        conn.close()
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in the metrics")


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.model
def test_a_rename_in_a_running_daemon_moves_backlinks_and_embeds_nothing(
    tmp_path: Path, indexed_copy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def cli(*args: str) -> Any:  # what the commands print: main() here, no spawn
        return in_process(capsys, *args, env=ENV)

    vault, state = indexed_copy(VAULT)
    common = ["--state-dir", str(state)]
    proc, daemon = start(vault, state)
    try:
        r = cli("status", "--wait", "--timeout", "120", "--json", *common)
        assert r.returncode == 0, r.stderr
        home = as_json(cli("links", str(vault / "Home.md"), "--json", *common))
        assert home["outgoing"][0]["path"] == "projects/Project Alpha.md"
        embedded = _metric(daemon, "mdindex_chunks_embedded_total")
        # rename the note: [[Project Alpha]] now names the archived draft, and
        # [[Not Written Yet]] the renamed note
        os.rename(vault / "projects/Project Alpha.md", vault / "projects/Not Written Yet.md")
        started = time.monotonic()
        r = cli("status", "--wait", "--timeout", "120", "--json", *common)
        assert r.returncode == 0 and json.loads(r.stdout)["caught_up"] is True, r.stderr
        took = time.monotonic() - started
        home = as_json(cli("links", str(vault / "Home.md"), "--json", *common))
        assert [e["path"] for e in home["outgoing"][:4]] == [
            "archive/old/Project Alpha.md",
            "archive/old/Project Alpha.md",
            "Meeting 2026-11-30.md",
            "projects/Not Written Yet.md",
        ]
        ada = as_json(cli("links", str(vault / "people/Ada.md"), "--json", *common))
        assert {b["path"] for b in ada["backlinks"]} == {
            "projects/Not Written Yet.md",  # the renamed note's own links moved with it
            "Meeting 2026-11-30.md",
            "daily/2026-12-01.md",
        }
        assert _metric(daemon, "mdindex_chunks_embedded_total") == embedded  # vectors reused
        assert took < 30, took  # the usual save-to-searchable wait, not a rescan
        setup = as_json(cli("links", str(vault / "guides/setup.md"), "--json", *common))
        assert [e["target"] for e in setup["unresolved"]] == [
            "projects/Project Alpha.md",  # a path, not a name: it names the old path
            "../../etc/passwd",
        ]
        assert as_json(cli("status", "--json", *common))["unresolved_links"] == 2
    finally:
        code, _ = stop(proc)
    assert code == 0


@pytest.mark.slow
@pytest.mark.model
def test_an_assistant_asks_for_related_notes_over_mcp(tmp_path: Path, indexed_copy: Any) -> None:
    from mcp import Client

    vault, state = indexed_copy(VAULT)
    assert mdindex("backfill", str(vault), "--state-dir", str(state), env=ENV).returncode == 0

    async def body() -> dict[str, Any]:
        params = mcp_server(vault, "--state-dir", state)
        out: dict[str, Any] = {}
        async with Client(params) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            out["schema"] = tools["related"].input_schema
            call = client.call_tool
            out["ada"] = await call("related", {"root": "vault", "path": "people/Ada.md"})
            out["tagged"] = await call("search", {"query": "budget", "tag": ["project/alpha"]})
            for name, args in {
                "escape": {"root": "vault", "path": "../secret.md"},
                "env": {"root": "vault", "path": ".env"},
                "root": {"root": "x" * 100_000, "path": "a.md"},
                "type": {"root": "vault", "path": 7},
                "missing": {"path": "Home.md"},
                "nul": {"root": "vault", "path": "a\x00.md"},
            }.items():
                out[name] = await call("related", args)
            out["tag_text"] = await call("search", {"query": "budget", "tag": "project/alpha"})
        return out

    out = asyncio.run(body())
    assert out["schema"]["required"] == ["root", "path"]
    ada = out["ada"].structured_content
    assert ada["tags"] == ["person", "work"]
    assert [(e["target"], e["path"]) for e in ada["outgoing"]] == [
        ("Project Alpha", "projects/Project Alpha.md")
    ]
    assert {b["path"] for b in ada["backlinks"]} == {
        "projects/Project Alpha.md",
        "Meeting 2026-11-30.md",
        "daily/2026-12-01.md",
    }
    hits = out["tagged"].structured_content["hits"]
    assert hits and {h["path"] for h in hits} <= {
        "projects/Project Alpha.md",
        "daily/2026-12-01.md",
    }
    assert out["type"].content[0].text == "related: path: Input should be a valid string"
    assert out["missing"].content[0].text == "related: root: Field required"
    assert not out["tag_text"].is_error  # one tag as a string, not a list
    for name in ("escape", "env", "root", "nul"):
        result = out[name]
        assert result.is_error, name
        line = result.content[0].text
        assert "\n" not in line and len(line) < 400 and "not an indexed document" in line, line


# -- the shared corpus ----------------------------------------------------------

# Where the second parser (markdown-it, CommonMark, no extensions) counts
# otherwise, and why: each is a file of the corpus and the counts each gives.
EXPLAINED = {
    ("rust-book", "ch08-03-hash-maps.md"): (
        3,
        4,
        "a footnote's text, [^siphash]: [url](url), is a link definition to CommonMark "
        "without footnotes, so its parser counts a local link to '[url](url)'; the "
        "footnote's own link is external",
    ),
}


def _second_parser_count(text: str, body_start: int) -> int:
    """Local links and images as markdown-it, an independent CommonMark parser, finds them."""
    from markdown_it import MarkdownIt

    count = 0

    def walk(tokens: Any) -> None:
        nonlocal count
        for t in tokens:
            target = t.attrGet("href") if t.type == "link_open" else t.attrGet("src")
            if t.type in ("link_open", "image") and not is_external(str(target or "")):
                count += 1
            if t.children:
                walk(t.children)

    walk(MarkdownIt("commonmark").parse(text[body_start:]))
    return count


@pytest.mark.slow
@needs_corpus
def test_every_local_link_of_the_corpus_is_resolved_or_reported(tmp_path: Path) -> None:
    state = State(tmp_path / "state.db")
    roots = {p.name: p for p in sorted(CORPUS.iterdir()) if p.is_dir() and p.name != "licenses"}
    disagree = {}
    for label, root in roots.items():
        for path in sorted(root.rglob("*.md")):
            rel = path.relative_to(root).as_posix()
            doc = parse_document(path.read_text(), rel)
            g = graph_of(doc, rel)
            ours = sum(link.kind in ("link", "image") for link in g.links)
            theirs = _second_parser_count(doc.text, doc.body_start)
            if ours != theirs:
                disagree[(label, rel)] = (ours, theirs)
            state.commit_docs([(label, rel, DocRow(1, 1, "h", "f"), [])], "now", {(label, rel): g})
    assert {k: v for k, v in disagree.items()} == {k: v[:2] for k, v in EXPLAINED.items()}
    links = list(graph.every_link(state.db))
    broken = {(b["root"], b["path"], b["line"], b["target"]) for b in broken_in(state.db, roots)}
    unexplained = [
        link
        for link in links
        if (link.to_path is None and not link.asset)
        and (link.root, link.path, link.line, link.target) not in broken
    ]
    assert unexplained == []
    reasons = collections.Counter(
        b["reason"].split(" ", 1)[1].split(" ")[0] for b in broken_in(state.db, roots)
    )
    resolved = sum(link.to_path is not None for link in links)
    print(
        f"\ncorpus: {len(links)} local links, {resolved} resolved, "
        f"{sum(link.asset for link in links)} attachments, {len(broken)} reported "
        f"({dict(reasons)})"
    )
    assert len(links) > 4000 and resolved > 3500
    state.close()


@pytest.mark.slow
@pytest.mark.model
def test_related_over_mcp_is_capped_like_read(tmp_path: Path) -> None:
    """Found by a hostile review: `related` returned 8.3 MB (a note of
    thousands of long unresolved links); `read` is capped at 2 MB. Now every list is cut to
    fit, and ``truncated`` says how many of each were left out."""
    from mcp import Client

    from mdindex.query.documents import MAX_READ_BYTES

    notes = tmp_path / "notes"
    notes.mkdir()
    links = "\n".join(f"[[{'x' * 100}{i}]]" for i in range(6000))  # 4 MB of entries
    (notes / "hub.md").write_text(f"# Hub\n\n{links}\n")
    state = tmp_path / "state"
    assert mdindex("backfill", str(notes), "--state-dir", str(state), env=ENV).returncode == 0

    async def body() -> Any:
        params = mcp_server(notes, "--state-dir", state)
        async with Client(params) as client:
            return await client.call_tool("related", {"root": "notes", "path": "hub.md"})

    out = asyncio.run(body())
    assert not out.is_error, out
    answer = out.structured_content
    assert len(json.dumps(answer)) <= MAX_READ_BYTES
    left_out = answer["truncated"]
    assert left_out and all(n > 0 for n in left_out.values())
    for key, n in left_out.items():
        assert len(answer[key]) + n == 6000, key


def test_a_wiki_embed_by_a_link_outside_the_root_is_not_found(tmp_path: Path) -> None:
    """Found by a hostile review: `![[x.png]]`, x.png a symbolic link outside the
    root, was reported "found", where `![x](x.png)` says it leads outside."""
    from mdindex.query.links import related
    from tests.conftest import TinyEmbedder, run_backfill, settings_for

    outside = tmp_path / "secret.png"
    outside.write_bytes(b"\x89PNG")
    root = tmp_path / "notes"
    root.mkdir()
    (root / "x.png").symlink_to(outside)
    (root / "inside.png").write_bytes(b"\x89PNG")
    (root / "n.md").write_text("# N\n\n![[x.png]] ![x](x.png) ![[inside.png]]\n")
    s = settings_for(tmp_path, [str(root)])
    run_backfill(s, TinyEmbedder())
    out = related(s, "notes", "n.md")["outgoing"]
    assert [e["problem"] for e in out] == [
        "x.png leads outside the root (a symbolic link)",
        "x.png leads outside the root (a symbolic link)",
        "",
    ], out

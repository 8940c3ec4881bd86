"""Reading and planning what changed, in groups bounded by documents and
characters; a file only touched is only touched, and what fails or warns goes
into the summary."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from mdindex.chunking import Chunker
from mdindex.config import Root, Settings
from mdindex.documents.files import FileRef, PathFilter, scan
from mdindex.documents.parsing import parse_document
from mdindex.documents.types import Chunk, Document
from mdindex.index.groups import Groups, Loaded
from mdindex.index.planning import Planner
from mdindex.index.summary import Summary
from mdindex.runtime import make_models
from tests.conftest import Factory, TinyEmbedder, build_indexer, run_backfill

OLD = 1_600_000_000  # an mtime far from any scan: never racy


def tree(root: Path, sizes: list[int]) -> list[FileRef]:
    """Documents n0.md, n1.md, ... of about these many characters, as the scan sees them."""
    root.mkdir(parents=True, exist_ok=True)
    for i, size in enumerate(sizes):
        head = f"# Note {i}\n\n"
        (root / f"n{i}.md").write_text(head + "x" * max(0, size - len(head) - 1) + "\n")
    return refs(root)


def refs(root: Path) -> list[FileRef]:
    found = scan(Root("docs", root), PathFilter(["**/*.md"]))
    return sorted((r for r in found if isinstance(r, FileRef)), key=lambda r: r.rel)


def groups_of(settings: Settings, **options: Any) -> Groups:
    models = make_models(settings)
    models.chunker.embed = TinyEmbedder()
    return Groups(settings, models.planner, **options)


def names(groups: list[Loaded]) -> list[list[str]]:
    return [[ref.rel for ref, _ in group] for group in groups]


def test_groups_are_bounded_by_documents(tmp_path: Path, make_settings: Factory) -> None:
    files = tree(tmp_path / "docs", [100] * 5)
    progress: list[int] = []
    groups = groups_of(make_settings(), docs=2, on_progress=progress.append)
    summary = Summary()
    read = list(groups.read(files, lambda ref: "", summary, None))
    assert names(read) == [["n0.md", "n1.md"], ["n2.md", "n3.md"], ["n4.md"]]
    assert [doc.text for group in read for _, doc in group] == [f.path.read_text() for f in files]
    assert progress == [1, 2, 3, 4, 5]  # files read so far, for the daemon's status
    assert summary.files_unchanged == 0 and summary.errors == []


def test_groups_are_bounded_by_characters(tmp_path: Path, make_settings: Factory) -> None:
    files = tree(tmp_path / "docs", [100, 100, 300, 50, 50, 50])
    groups = groups_of(make_settings(), chars=200)
    read = list(groups.read(files, lambda ref: "", Summary(), None))
    # a group closes once it reaches the bound; a large file makes a group alone
    assert [g for g in names(read) if g] == [
        ["n0.md", "n1.md"],
        ["n2.md"],
        ["n3.md", "n4.md", "n5.md"],
    ]


def test_a_touched_file_is_only_touched(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    for path in docs_tree.rglob("*.md"):  # stamps old enough to be trusted
        os.utime(path, (OLD - 100, OLD - 100))
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    touched = docs_tree / "guide" / "a.md"
    edited = docs_tree / "guide" / "b.md"
    os.utime(touched, (OLD, OLD))
    edited.write_text(edited.read_text() + "\nOne more line.\n")
    os.utime(edited, (OLD, OLD))
    with build_indexer(s, tiny) as indexer:
        changes = indexer.changes()
        assert sorted(r.rel for r in changes.files) == ["guide/a.md", "guide/b.md"]
        known = partial(indexer.known_hash, rows=changes.rows)
        groups = groups_of(s)
        # a dry run reads the same and writes nothing
        dry = Summary(dry_run=True)
        read = list(groups.read(changes.files, known, dry, None))
        assert names(read) == [["guide/b.md"]] and dry.files_unchanged == 1
        assert indexer.state.docs()[("docs", "guide/a.md")].mtime_ns == (OLD - 100) * 10**9
        summary = Summary()
        read = list(groups.read(changes.files, known, summary, indexer.writer.touch))
        assert names(read) == [["guide/b.md"]]  # only the edited one is read to be planned
        assert summary.files_unchanged == 1
        rows = indexer.state.docs()
        assert rows[("docs", "guide/a.md")].mtime_ns == OLD * 10**9  # its new stamp
        assert rows[("docs", "guide/b.md")].mtime_ns == (OLD - 100) * 10**9  # not written yet
        # the next look at the files passes it by
        assert [r.rel for r in indexer.changes().files] == ["guide/b.md"]


class Fragile(Chunker):
    """A chunker with a bug that only one document's text brings out."""

    def chunk_many(self, docs: Sequence[Document]) -> list[list[Chunk]]:
        if any("BOOM" in doc.text for doc in docs):
            raise RuntimeError("a chunker bug")
        return super().chunk_many(docs)


def test_failures_and_warnings_go_into_the_summary(tmp_path: Path, make_settings: Factory) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "bad.md").write_bytes(b"# Bad\n\xff\xfe\n")
    (root / "boom.md").write_text("# Boom\n\nBOOM.\n")
    (root / "list.md").write_text("---\n- a\n- b\n---\n# List\n\nFrontmatter that is a list.\n")
    (root / "ok.md").write_text("# Ok\n\nFine.\n")
    s = make_settings(root)
    models = make_models(s)
    fragile = Fragile(models.counter, "heading")
    groups = Groups(s, Planner(s, s.index.params(), models.info, models.counter, fragile))
    summary = Summary()
    [loaded] = list(groups.read(refs(root), lambda ref: "", summary, None))
    # what cannot be read fails here; a warning still reads the file
    assert [ref.rel for ref, _ in loaded] == ["boom.md", "list.md", "ok.md"]
    assert summary.files_failed == 1
    assert [(e["path"], "invalid UTF-8" in e["reason"]) for e in summary.errors] == [
        ("bad.md", True)
    ]
    [warning] = summary.warnings
    assert warning["path"] == "list.md" and "not a mapping" in warning["reason"]
    # what cannot be chunked fails when the group is planned; the others are planned
    works = groups.plan(loaded, summary)
    assert [w.ref.rel for w in works] == ["list.md", "ok.md"]
    assert all(w.points for w in works)
    assert summary.files_failed == 2 and [f.rel for f in summary.failures] == ["bad.md", "boom.md"]
    assert summary.errors[1] == {
        "path": "boom.md",
        "root": "docs",
        "reason": "internal error while chunking: RuntimeError: a chunker bug",
    }
    assert groups.plan([], summary) == []


def test_a_group_is_detected_together_as_each_document_alone(
    tmp_path: Path, make_settings: Factory
) -> None:
    """Languages are detected a group at a time; each document gets what parsing
    it alone gives, frontmatter still first, and a named language stays."""
    root = tmp_path / "docs"
    root.mkdir()
    texts = {
        "de.md": "# Notizen\n\nWir haben am Wochenende die Notizen zum Projekt geordnet.\n",
        "ru.md": "# Заметки\n\nМы собрали заметки о проекте и обсудили следующие шаги.\n",
        "zh.md": "# 笔记\n\n我们在周末整理了项目的笔记，并且讨论了下一步的计划。\n",
        "fm.md": "---\nlang: fr\n---\n# Notes\n\nWe tidied the notes over the weekend.\n",
        "short.md": "# T\n\nSee [x][].\n",
    }
    for name, text in texts.items():
        (root / name).write_text(text)
    for setting in ("auto", "de"):
        settings = make_settings(language=setting)
        read = list(groups_of(settings, docs=2).read(refs(root), lambda ref: "", Summary(), None))
        got = {ref.rel: doc.lang for group in read for ref, doc in group}
        alone = {
            name: parse_document(text, name, language=setting).lang for name, text in texts.items()
        }
        assert got == alone
    assert alone["fm.md"] == "fr" and alone["ru.md"] == "de"
    auto = make_settings(language="auto")
    read = list(groups_of(auto, docs=2).read(refs(root), lambda ref: "", Summary(), None))
    got = {ref.rel: doc.lang for group in read for ref, doc in group}
    assert got == {"de.md": "de", "ru.md": "ru", "zh.md": "zh", "fm.md": "fr", "short.md": ""}

"""Links and tags of one document, from its text (``mdindex.documents.links``):
on the Obsidian-style vault in ``tests/vault``, on hand-made cases, and on
generated hostile text, with every failing example kept in
``examples/links/`` and replayed first."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdindex.documents.links import (
    MAX_LINKS,
    Graph,
    graph_of,
    markdown_target,
)
from mdindex.documents.parsing import parse_document
from mdindex.documents.tags import MAX_TAGS

VAULT = Path(__file__).resolve().parents[1] / "vault"
EXAMPLES = Path(__file__).with_name("examples") / "links"


def graph(text: str, rel: str = "notes/a.md") -> Graph:
    return graph_of(parse_document(text, rel), rel)


def kinds_and_targets(g: Graph) -> list[tuple[str, str, str]]:
    return [(link.kind, link.target, link.anchor) for link in g.links]


def test_every_kind_of_link_with_its_target_anchor_and_line() -> None:
    rel = "guides/setup.md"
    text = (VAULT / rel).read_text()
    g = graph(text, rel)
    assert kinds_and_targets(g) == [
        ("link", "Home.md", ""),
        ("link", "projects/Project Alpha.md", ""),  # reference-style, %20 decoded
        ("link", "guides/setup.md", "nope"),  # #anchor alone: this document
        ("link", "../../etc/passwd", ""),
        ("image", "attachments/diagram.png", ""),
        ("image", "attachments/gone.png", ""),
    ]
    outside = g.links[3]
    assert outside.problem == "it points outside the root" and outside.line == 7
    assert [link.line for link in g.links] == [3, 3, 7, 7, 8, 8]
    assert g.links[1].label == "the project" and g.links[1].section == "Setup"
    for link in g.links:  # the offsets are the link as written
        assert text[link.start : link.end].lstrip("!").startswith("[")
        assert link.context in text.splitlines()[link.line - 1]


def test_wiki_links_embeds_headings_and_aliases() -> None:
    g = graph((VAULT / "Home.md").read_text(), "Home.md")
    assert kinds_and_targets(g) == [
        ("wiki", "Project Alpha", ""),
        ("wiki", "Project Alpha", "Budget"),
        ("wiki", "Meeting 2026-11-30", ""),
        ("wiki", "Not Written Yet", ""),
        ("embed", "diagram.png", ""),
        ("link", "guides/setup.md", "install"),
    ]
    assert g.links[1].label == "the budget"
    assert g.tags == ["home", "inbox"]


def test_nothing_in_code_blocks_inline_code_or_escapes_is_a_link() -> None:
    text = (
        "# T\n\n```\n[[Fake]] [a](b.md) #codetag\n```\n\n"
        "    [indented](code.md)\n\n"
        "Inline `[[Fake2]]` and ``[x](y.md)`` and \\[esc](no.md) and \\[[nowiki]].\n"
        "A real [one](one.md) after ``` `` ``` spans.\n"
    )
    assert kinds_and_targets(graph(text)) == [("link", "notes/one.md", "")]


def test_reference_links_need_their_definition() -> None:
    text = (
        "Full [text][Ref], collapsed [ref][], shortcut [REF], and [undefined][nope], "
        '[task x], [x].\n\n[ref]: ../other.md#part "Title"\n'
    )
    g = graph(text)
    assert kinds_and_targets(g) == [("link", "other.md", "part")] * 3
    assert [link.label for link in g.links] == ["text", "ref", "REF"]


def test_external_links_are_kept_apart_and_never_in_a_chunks_links() -> None:
    text = "[a](https://x.org/#f) <mailto:me@x.org> [b](//cdn.x.org/a.md) [c](c.md)\n"
    g = graph(text)
    assert [link.kind for link in g.links] == ["external", "external", "external", "link"]
    assert g.chunk_links(0, len(text)) == ["notes/c.md"]


@pytest.mark.parametrize(
    ("source", "dest", "want"),
    [
        ("a/b.md", "c.md", ("a/c.md", "", "")),
        ("a/b.md", "../c.md#x", ("c.md", "x", "")),
        ("a/b.md", "/c/d/", ("c/d", "", "")),
        ("a/b.md", "#only", ("a/b.md", "only", "")),
        ("a/b.md", "./", ("a", "", "")),
        ("b.md", ".", ("", "", "")),
        ("a/b.md", "x%20y.md?raw=1#h%C3%A9", ("a/x y.md", "hé", "")),
        ("a/b.md", "../../c.md", ("../../c.md", "", "it points outside the root")),
        ("b.md", "/../c.md", ("/../c.md", "", "it points outside the root")),
    ],
)
def test_markdown_targets_are_root_relative(
    source: str, dest: str, want: tuple[str, str, str]
) -> None:
    assert markdown_target(source, dest) == want


def test_tags_from_frontmatter_and_prose_not_headings_code_or_urls() -> None:
    text = (
        "---\ntags: [Project/Alpha, '#Work']\ntag: solo, duo\n---\n"
        "# Heading #notatag\n\n"
        "Body #Real-Tag and #nested/Sub, not #123, x#no, a.com/#frag, (#paren), `#code`.\n"
        "[link](#anchor) and &#39; too.\n"
    )
    g = graph(text)
    assert g.tags == ["project/alpha", "work", "solo", "duo", "real-tag", "nested/sub"]
    assert g.tag_filter_values() == [
        "project",
        "project/alpha",
        "work",
        "solo",
        "duo",
        "real-tag",
        "nested",
        "nested/sub",
    ]


def test_a_chunks_links_are_the_targets_in_its_span() -> None:
    text = "# A\n\n[x](x.md) [[Y]]\n\n# B\n\n[z](z.md) [x](x.md)\n"
    g = graph(text, "a.md")
    b = text.index("# B")
    assert g.chunk_links(0, b) == ["x.md", "[[Y]]"]
    assert g.chunk_links(b, len(text)) == ["z.md", "x.md"]


@pytest.mark.serial
def test_100000_links_in_one_file_keep_10000_and_say_so() -> None:
    text = "# Many\n\n" + " ".join(f"[l{i}](p{i}.md)" for i in range(100_000)) + "\n"
    started = time.monotonic()
    g = graph(text)
    assert time.monotonic() - started < 30  # linear: about 2 s here; quadratic would be hours
    assert len(g.links) == MAX_LINKS
    assert g.links[-1].target == f"notes/p{MAX_LINKS - 1}.md"
    assert g.warnings == [f"100000 links; the first {MAX_LINKS} are kept"]


def test_links_in_deeply_nested_lists_and_quotes_are_found_on_their_lines() -> None:
    depth = 60
    items = [("  " * i) + f"- level {i}: [l{i}](l{i}.md) [[w{i}]] #t{i}" for i in range(depth)]
    quotes = [("> " * i) + f"[q{i}](q{i}.md)" for i in range(1, depth)]
    text = "\n".join(items) + "\n\n" + "\n".join(quotes) + "\n"
    g = graph(text)
    links = {link.target: link.line for link in g.links}
    assert all(links[f"notes/l{i}.md"] == i + 1 and links[f"w{i}"] == i + 1 for i in range(depth))
    assert sum(target.startswith("notes/q") for target in links) == depth - 1
    assert g.tags[:3] == ["t0", "t1", "t2"]


def test_too_many_or_too_long_tags_are_dropped_with_a_reason() -> None:
    tags = ", ".join(f"t{i}" for i in range(MAX_TAGS + 50))
    g = graph(f"---\ntags: '{tags}, {'x' * 101}'\n---\nbody\n")
    assert len(g.tags) == MAX_TAGS
    assert g.warnings == [
        "1 tags dropped (over 100 characters or an empty part); 250 tags; the first 200 are kept"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000,
        "[[" * 100_000 + "]]",
        "](" * 100_000,
        "[a](" + "(" * 200_000,
        "`" * 1000 + "a" + "``" * 50_000,
        "\\" * 200_000 + "[a](b)",
        "- " * 50_000 + "[a](b.md)",
        "> " * 20_000 + "[[x]]",
        "#a " * 100_000,
        "[x]" * 60_000 + "\n\n[x]: y.md\n",
        "<a:" + "b" * 200_000,
        ("[a]" + "(" * 10 + " ") * 20_000,
        # found by a hostile review: each took hours at 1 MB (a pattern restarted
        # at every escaped bracket and read to the end of the paragraph)
        "\\[" * 500_000,
        "\\[" * 500_000 + "\n\n[x]: y.md\n",
        "[" + "\\[" * 500_000,
        "![\\[" * 200_000,
        "[a](\\(" * 150_000,
        '[a](b "' * 150_000,
    ],
    ids=lambda t: repr(t[:12]),
)
@pytest.mark.serial
def test_pathological_text_parses_in_linear_time(text: str) -> None:
    """Each of these is 200,000 to 1,000,000 characters: a pattern that rescans
    (backtracking, or a link check against every link before it) takes minutes."""
    started = time.monotonic()
    graph(text)
    assert time.monotonic() - started < 20


def _check(text: str) -> None:
    """What must hold of any text: no crash; each link where its offsets say,
    on its line, within the document; targets root-relative or flagged."""
    doc = parse_document(text, "d/n.md")
    g = graph_of(doc, "d/n.md")
    for link in g.links:
        assert 0 <= link.start < link.end <= len(text)
        assert doc.line_of(link.start) == link.line
        written = text[link.start : link.end]
        assert written[:1] in ("[", "!", "<")
        if link.kind in ("link", "image") and not link.problem:
            assert not link.target.startswith(("/", "../")) and link.target != ".."
    for tag in g.tags:
        assert tag == tag.casefold() and tag.strip("/") == tag and 0 < len(tag) <= 100
    json.dumps(g.as_dict())  # Ray passes it as JSON
    assert Graph.from_dict(json.loads(json.dumps(g.as_dict()))).digest() == g.digest()


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.json"))


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.stem)
def test_found_examples_stay_fixed(path: Path) -> None:
    _check(json.loads(path.read_text())["text"])


_PIECES = st.sampled_from(
    [
        "[", "]", "(", ")", "[[", "]]", "![", "![[", "#", "|", "\\", "`", "``", "<", ">",
        "\n", "\n\n", "    ", "- ", "> ", "# ", "```\n", "---\n", "http://", "a:", "/",
        "../", "..", "%", "%2e%2e/", "\x00", "\u2028", "é", "🙂", "x.md", "tag", "[x]: y\n",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=60).map("".join))
def test_generated_hostile_text(text: str) -> None:
    try:
        _check(text)
    except Exception:
        EXAMPLES.mkdir(parents=True, exist_ok=True)
        name = f"{abs(hash(text)) % 10**10:010d}.json"
        (EXAMPLES / name).write_text(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        raise

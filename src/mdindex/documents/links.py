"""The links and tags of one parsed document, from its text alone (pure).

Links found in prose and headings, never in code blocks or inline code:

- inline links and images: ``[text](dest "title")``, ``![alt](dest)``;
- reference links: ``[text][label]``, ``[label][]`` and ``[label]``, each with
  the ``[label]: dest`` definition it names (a label nothing defines is text,
  as in CommonMark);
- wiki links and embeds: ``[[Name]]``, ``[[Name#Heading|alias]]``, ``![[file.png]]``;
- autolinks ``<https://...>``, which are external.

A markdown link's destination is made root-relative here (``target``), as the
file's folder or the root (a leading ``/``) gives it; one that climbs out of
the root keeps a ``problem`` and is never looked for. A wiki link keeps the
name it gives: which document has that name is the index's question
(``index.graph``), as are links to documents not written yet.

Tags (``documents.tags``): frontmatter ``tags`` or ``tag`` and inline
``#tag/subtag`` in prose (not in headings, code or URLs). Every pattern here
scans forward without nested repetition, so a file of any shape costs time
linear in its size.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from mdindex.documents.budget import check
from mdindex.documents.tags import block_tags, frontmatter_tags, normalized_tags
from mdindex.documents.types import Document

# Kept per document: a page of 100,000 links is kept to its first 10,000 (and
# says so); a chunk's payload lists at most MAX_CHUNK_LINKS distinct targets.
MAX_LINKS = 10_000
MAX_CHUNK_LINKS = 100
MAX_TARGET_CHARS = 1024
MAX_LABEL_CHARS = 200
CONTEXT_CHARS = 240
MARKDOWN_SUFFIXES = (".md", ".markdown")

# kind: what the link is, as written
LINK, IMAGE, WIKI, EMBED, EXTERNAL = "link", "image", "wiki", "embed", "external"


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{1,31}:")
_BACKTICKS = re.compile(r"`+")
# A link starts at a "[" with no backslash before it, and its parts repeat
# possessively (*+): from a "[" before half a million escaped "\[", the
# pattern backtracked, then started again at the next one, and a 1 MB file
# took hours; now each start fails at the first bracket it cannot use.
_WIKI = re.compile(r"(!?)(?<!\\)\[\[([^\[\]\n|#]*+)(?:#([^\[\]\n|]*+))?(?:\|([^\[\]\n]*+))?\]\]")
# link text: plain characters, escapes, or one level of balanced brackets
_TEXT = r"(?:[^\[\]\\]|\\.|\[[^\[\]\n]*+\])*+"
_DEST = r"<[^<>\n]*+>|(?:[^\s()\\]|\\.|\([^\s()]*+\))*+"
_TITLE = r"(?:\s+(?:\"[^\"]*+\"|'[^']*+'|\([^()]*+\)))?"
_INLINE = re.compile(rf"(?s)(!?)(?<!\\)\[({_TEXT})\]\(\s*({_DEST}){_TITLE}\s*\)")
_REF_USE = re.compile(rf"(?s)(!?)(?<!\\)\[({_TEXT})\](?:\[((?:[^\[\]\\]|\\.)*+)\])?")
_REF_DEF = re.compile(r"(?m)^ {0,3}\[((?:[^\[\]\\]|\\.)+)\]:[ \t]*\n?[ \t]*(<[^<>\n]*>|\S+)")
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>")


@dataclass(frozen=True, slots=True)
class Link:
    """One link as the file writes it."""

    kind: str  # link, image, wiki, embed or external
    target: str  # root-relative path (markdown), the name (wiki), or the URL (external)
    anchor: str  # the heading it names ("" for none)
    label: str  # the link's text or alias
    start: int  # char offsets of the link in the document text
    end: int
    line: int
    section: str  # the heading the link sits under
    context: str  # the text around it, on its line
    problem: str = ""  # why it can never resolve (outside the root, too long)


@dataclass(slots=True)
class Graph:
    """One document's part of the link graph: its links, tags and headings."""

    title: str = ""
    links: list[Link] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    anchors: dict[str, str] = field(default_factory=dict)  # anchor: heading text
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The graph as JSON values (Ray passes plans as JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Graph:
        return cls(**{**d, "links": [Link(**link) for link in d.get("links", [])]})

    def digest(self) -> str:
        """What the state records of this graph, as one hash (verify compares it)."""
        facts: list[Any] = [self.title, sorted(self.tags), sorted(self.anchors.items())]
        facts += [
            [k.kind, k.target, k.anchor, k.label, k.line, k.section, k.problem] for k in self.links
        ]
        return hashlib.sha256(
            json.dumps(facts, ensure_ascii=False).encode("utf-8", "surrogatepass")
        ).hexdigest()[:32]

    def chunk_links(self, start: int, end: int) -> list[str]:
        """The distinct local targets of the links in ``[start, end)`` (a
        chunk's payload key ``links``): paths for markdown links, ``[[name]]``
        for wiki links."""
        out: dict[str, None] = {}
        first = bisect.bisect_left(self.links, start, key=lambda link: link.start)
        for link in itertools.islice(self.links, first, None):
            if link.start >= end:
                break
            if link.target and link.kind != EXTERNAL and not link.problem:
                out.setdefault(f"[[{link.target}]]" if link.kind in (WIKI, EMBED) else link.target)
                if len(out) >= MAX_CHUNK_LINKS:
                    break
        return list(out)

    def tag_filter_values(self) -> list[str]:
        """Every tag, and each parent of a nested one (``a/b`` also matches ``a``)."""
        out: dict[str, None] = {}
        for tag in self.tags:
            parts = tag.split("/")
            for i in range(1, len(parts) + 1):
                out.setdefault("/".join(parts[:i]))
        return list(out)


def graph_of(doc: Document, rel: str) -> Graph:
    """The links, tags and heading anchors of ``doc`` (the file at ``rel``)."""
    graph = Graph(title=doc.title, anchors={h.anchor: h.text for h in doc.headings})
    defs = _definitions(doc)
    found: list[Link] = []
    inline_tags: list[str] = []
    text = doc.text
    for block in doc.blocks:
        if block.kind == "code":
            continue
        check()
        segment = text[block.start : block.end]
        has_links = "[" in segment or "<" in segment
        has_tags = block.kind == "prose" and "#" in segment
        if not (has_links or has_tags):
            continue  # most blocks: nothing to look for
        spans = _code_spans(text, block.start, block.end) if "`" in segment else []
        if has_links:
            found.extend(_block_links(doc, rel, block.start, block.end, defs, spans))
        if has_tags:
            inline_tags.extend(block_tags(text, block.start, block.end, _Taken(spans).free))
    found.sort(key=lambda link: link.start)
    if len(found) > MAX_LINKS:
        graph.warnings.append(f"{len(found)} links; the first {MAX_LINKS} are kept")
        found = found[:MAX_LINKS]
    graph.links = found
    tags = frontmatter_tags(doc.meta) + inline_tags
    graph.tags, dropped = normalized_tags(tags)
    if dropped:
        graph.warnings.append(dropped)
    return graph


def markdown_target(source: str, dest: str) -> tuple[str, str, str]:
    """A markdown link's destination as (root-relative path, anchor, problem);
    the path is ``source`` itself for ``#anchor`` alone, and problem says why
    it can never resolve ("" when it may)."""
    path, _, anchor = dest.partition("#")
    path = unquote(path.partition("?")[0])
    anchor = unquote(anchor)
    if len(path) > MAX_TARGET_CHARS or "\x00" in path:
        return "", anchor, "the path is too long or holds a NUL"
    if not path:
        return source, anchor, ""
    if path.startswith("/"):
        joined = path.lstrip("/")
    else:
        joined = posixpath.join(posixpath.dirname(source), path)
    normal = posixpath.normpath(joined) if joined else "."
    if normal == ".." or normal.startswith("../"):
        return path[:200], anchor, "it points outside the root"
    return ("" if normal == "." else normal), anchor, ""


def is_external(dest: str) -> bool:
    return dest.startswith("//") or bool(_SCHEME.match(dest))


# -- finding links -----------------------------------------------------------


def _code_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Inline code spans of ``text[start:end]``: a run of n backticks up to the
    next run of exactly n (runs indexed by length, so this is linear)."""
    runs: dict[int, list[int]] = {}
    order: list[tuple[int, int]] = []
    for m in _BACKTICKS.finditer(text, start, end):
        n = m.end() - m.start()
        runs.setdefault(n, []).append(len(order))
        order.append((m.start(), n))
    spans: list[tuple[int, int]] = []
    used_to = -1
    nxt: dict[int, int] = {}  # per length: position in runs[n] to look from
    for i, (pos, n) in enumerate(order):
        if pos < used_to:
            continue
        same = runs[n]
        j = nxt.get(n, 0)
        while j < len(same) and same[j] <= i:
            j += 1
        nxt[n] = j
        if j < len(same):
            close = order[same[j]][0]
            spans.append((pos, close + n))
            used_to = close + n
    return spans


class _Taken:
    """Spans of a block already taken (code, links found), none overlapping
    another: a check or an addition is a binary search, not a scan, so a
    paragraph of 100,000 links stays linear."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.starts = [s for s, _ in spans]
        self.ends = [e for _, e in spans]

    def free(self, start: int, end: int) -> bool:
        i = bisect.bisect_left(self.starts, end) - 1
        return i < 0 or self.ends[i] <= start

    def holds(self, pos: int) -> bool:
        """Whether ``pos`` is inside a span."""
        i = bisect.bisect_right(self.starts, pos) - 1
        return i >= 0 and pos < self.ends[i]

    def add(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        self.starts.insert(i, start)
        self.ends.insert(i, end)


def _escaped(text: str, pos: int) -> bool:
    n = 0
    while pos - n - 1 >= 0 and text[pos - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def _label_key(label: str) -> str:
    return " ".join(label.split()).casefold()


def _definitions(doc: Document) -> dict[str, str]:
    """``[label]: dest`` definitions of the document's prose; the first wins."""
    defs: dict[str, str] = {}
    text = doc.text
    for block in doc.blocks:
        if block.kind != "prose" or "]:" not in text[block.start : block.end]:
            continue
        for m in _REF_DEF.finditer(text, block.start, block.end):
            if not m.group(1).startswith("^"):  # [^1]: a footnote's text
                defs.setdefault(_label_key(m.group(1)), m.group(2).strip("<>"))
    return defs


def _block_links(
    doc: Document,
    rel: str,
    start: int,
    end: int,
    defs: dict[str, str],
    spans: list[tuple[int, int]],
) -> list[Link]:
    """The links of one block; ``spans``: its inline code."""
    text = doc.text
    code = _Taken(spans)
    taken = _Taken([])  # links found so far: one cannot start inside another
    out: list[Link] = []

    def take(m: re.Match[str], inner: int) -> bool:
        """Whether the match is a link: not escaped, its brackets not in inline
        code (code inside its text is fine), and not inside another link.
        ``inner``: where its text's closing bracket is."""
        if _escaped(text, m.start()) or not taken.free(m.start(), m.end()):
            return False
        if any(code.holds(at) for at in (m.start(), inner, m.end() - 1)):
            return False
        taken.add(m.start(), m.end())
        return True

    for m in _WIKI.finditer(text, start, end):
        if take(m, m.end() - 2):
            name = m.group(2).strip()
            heading = (m.group(3) or "").split("#")[-1].strip()
            kind = EMBED if m.group(1) else WIKI
            out.append(_link(doc, kind, name, heading, m.group(4) or name, m.start(), m.end()))
    for m in _INLINE.finditer(text, start, end):
        if take(m, m.end(2)):
            out.append(_markdown(doc, rel, m, m.group(3).strip("<>")))
            # an image inside a link's text: [![alt](img.png)](page.md)
            for inner in _INLINE.finditer(text, m.start(2), m.end(2)):
                if inner.group(1) and not _escaped(text, inner.start()):
                    out.append(_markdown(doc, rel, inner, inner.group(3).strip("<>")))
    if defs:
        for m in _REF_USE.finditer(text, start, end):
            shortcut = m.group(3) is None
            if shortcut and text[m.end() : m.end() + 1] in ("(", ":"):
                continue  # [label]: a definition; [label](...) an inline link gone wrong
            label = m.group(3) or m.group(2)
            if label.startswith("^"):
                continue  # [^1]: a footnote
            dest = defs.get(_label_key(label))
            if dest is not None and take(m, m.end(2)):
                out.append(_markdown(doc, rel, m, dest))
    if "<" in text[start:end]:
        for m in _AUTOLINK.finditer(text, start, end):
            if take(m, m.start()):
                out.append(_link(doc, EXTERNAL, m.group(1), "", m.group(1), m.start(), m.end()))
    return out


def _markdown(doc: Document, rel: str, m: re.Match[str], dest: str) -> Link:
    label = m.group(2)
    if is_external(dest):
        return _link(doc, EXTERNAL, dest[:MAX_TARGET_CHARS], "", label, m.start(), m.end())
    target, anchor, problem = markdown_target(rel, dest.replace("\\", ""))
    kind = IMAGE if m.group(1) else LINK
    return _link(doc, kind, target, anchor, label, m.start(), m.end(), problem)


def _link(
    doc: Document,
    kind: str,
    target: str,
    anchor: str,
    label: str,
    start: int,
    end: int,
    problem: str = "",
) -> Link:
    text = doc.text
    if len(target) > MAX_TARGET_CHARS:
        target, problem = target[:MAX_TARGET_CHARS], "the target is too long"
    line = doc.line_of(start)
    line_start = doc.line_starts[line - 1]
    line_end = text.find("\n", start)
    line_end = len(text) if line_end < 0 else line_end
    # the link's line, cut to CONTEXT_CHARS around the link
    lo = max(line_start, start - CONTEXT_CHARS // 2)
    hi = min(line_end, max(end, lo + CONTEXT_CHARS))
    heading = doc.heading_at(start)
    return Link(
        kind=kind,
        target=target,
        anchor=anchor[:MAX_LABEL_CHARS],
        label=" ".join(label.split())[:MAX_LABEL_CHARS],
        start=start,
        end=end,
        line=line,
        section=heading.text if heading is not None else "",
        context=text[lo:hi].strip()[: CONTEXT_CHARS * 2],
        problem=problem,
    )

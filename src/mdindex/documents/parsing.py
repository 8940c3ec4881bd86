"""Parsing one decoded document: frontmatter, the outline (headings with their
anchors, blocks, code ranges), the title and the URL."""

from __future__ import annotations

import functools
import re
from pathlib import PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import quote

from mdindex.documents.budget import check
from mdindex.documents.frontmatter import split_frontmatter
from mdindex.documents.language import language_of
from mdindex.documents.types import Block, Document, Heading

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

# Matched against the end of an already stripped heading only: searched over
# the whole line, its leading \s* made a heading of 40k spaces take 5 s.
_CUSTOM_ID = re.compile(r"\{#([A-Za-z0-9_:.-]+)\}")
_SLUG_DROP = re.compile(r"[^\w\- ]", re.UNICODE)
# A folder's own page: its URL is the folder's, and a link to the folder finds it.
INDEX_STEMS = frozenset({"index", "_index", "readme"})
# Every chunk's payload carries its title, section and heading path (twice, for
# the frameworks' metadata key), and its embedded text starts with them: a
# 200,000-character heading made a 602 KB file a 462 MB store. Past this,
# a heading or title is cut (its text in the chunk itself stays whole).
MAX_HEADING_CHARS = 1024


# markdown-it and PyYAML are imported on the first document parsed, not by a
# no-op run that parses none (together 70 ms of its 1 s).
@functools.cache
def _parsers() -> tuple[MarkdownIt, MarkdownIt]:
    """Block structure only, and inline: inline parsing is the costly part of
    markdown-it and only heading text needs it, which is done separately."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").disable("inline"), MarkdownIt("commonmark")


def custom_id(heading: str) -> tuple[str, str]:
    """Split ``Title {#id}`` into the title and the id ("" when none), in linear time."""
    stripped = heading.rstrip()
    if not stripped.endswith("}"):
        return heading, ""
    open_at = stripped.rfind("{#")
    if open_at < 0 or not _CUSTOM_ID.fullmatch(stripped, open_at):
        return heading, ""
    return stripped[:open_at].rstrip(), stripped[open_at + 2 : -1]


def github_slug(text: str) -> str:
    return _SLUG_DROP.sub("", text.strip().lower()).replace(" ", "-")


def _plain_inline(source: str) -> str:
    parts: list[str] = []
    for token in _parsers()[1].parseInline(source):
        for child in token.children or []:
            if child.type in ("text", "code_inline"):
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
    return "".join(parts).strip()


def line_starts_of(text: str) -> list[int]:
    starts = [0]
    find = text.find
    pos = find("\n")
    while pos != -1:
        starts.append(pos + 1)
        pos = find("\n", pos + 1)
    return starts


def _outline(
    text: str, body_start: int, line_starts: list[int]
) -> tuple[list[Heading], list[Block], list[tuple[int, int]]]:
    first_line = len(line_starts) - 1 if body_start >= len(text) else line_starts.index(body_start)
    n_lines = len(line_starts)

    def offset(body_line: int) -> int:
        line = first_line + body_line
        return line_starts[line] if line < n_lines else len(text)

    tokens: list[Token] = _parsers()[0].parse(text[body_start:])
    headings: list[Heading] = []
    blocks: list[Block] = []
    code: list[tuple[int, int]] = []
    used: set[str] = set()
    suffix: dict[str, int] = {}  # base slug -> the suffix it took last
    stack: list[tuple[int, str]] = []
    for i, tok in enumerate(tokens):
        check()
        if tok.map is None:
            continue
        start, end = offset(tok.map[0]), offset(tok.map[1])
        if tok.type == "heading_open":
            level = int(tok.tag[1])
            raw, custom = custom_id(tokens[i + 1].content)
            plain = _plain_inline(raw)[:MAX_HEADING_CHARS]
            base = custom or github_slug(plain)
            # The smallest free suffix of a base only grows, so the search goes
            # on from the last one: from 0 each time, 25,000 "# a" took 11.8 s.
            n = suffix.get(base, 0)
            anchor = f"{base}-{n}" if n else base
            while anchor in used:
                n += 1
                anchor = f"{base}-{n}"
            used.add(anchor)
            suffix[base] = n
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, plain))
            path = tuple(t for _, t in stack)
            headings.append(Heading(level, plain, anchor, start, end, path))
            blocks.append(Block(start, end, "heading"))
        elif tok.type in ("fence", "code_block"):
            code.append((start, end))
            blocks.append(Block(start, end, "code"))
        elif tok.type == "html_block":
            blocks.append(Block(start, end, "code"))
        elif tok.type == "paragraph_open":
            blocks.append(Block(start, end, "prose"))
    blocks.sort(key=lambda b: b.start)
    return headings, _fill_gaps(text, body_start, blocks), code


def _fill_gaps(text: str, body_start: int, blocks: list[Block]) -> list[Block]:
    """Cover text the parser emitted no block for (link definitions, rules, ...)."""
    out: list[Block] = []
    pos = body_start
    for block in blocks:
        if block.start > pos and text[pos : block.start].strip():
            out.append(Block(pos, block.start, "prose"))
        if block.start < pos:  # nested (e.g. fence inside a list item) already covered
            if block.end > pos:
                out.append(Block(pos, block.end, block.kind))
                pos = block.end
            continue
        out.append(block)
        pos = block.end
    if pos < len(text) and text[pos:].strip():
        out.append(Block(pos, len(text), "prose"))
    return out


def document_url(base_url: str, url_style: str, rel: str, fm_url: str) -> str:
    base = base_url.rstrip("/")
    if fm_url:
        if re.match(r"^[a-z][a-z0-9+.-]*://", fm_url, re.IGNORECASE) or not base:
            return fm_url
        return f"{base}/{fm_url.lstrip('/')}"
    if not base:
        return ""
    path = PurePosixPath(rel)
    if url_style == "path":
        mapped = str(path)
    else:
        stem_path = path.with_suffix("")
        is_index = path.stem.lower() in INDEX_STEMS
        if url_style == "pretty":
            parent = str(stem_path.parent) if is_index else str(stem_path)
            mapped = "" if parent == "." else parent + "/"
        else:
            mapped = str(path.with_name("index.html") if is_index else path.with_suffix(".html"))
    return f"{base}/{quote(mapped)}"


def parse_document(
    text: str,
    rel: str,
    *,
    base_url: str = "",
    url_style: str = "pretty",
    language: str = "auto",
    detecting: bool = True,
) -> Document:
    """Parse normalised text into a Document with frontmatter, outline, line index
    and language (``language``: "auto" to detect, or the code to assume;
    ``detecting=False``: detection is the caller's, ``language.detect_languages``)."""
    meta, body_start, warnings = split_frontmatter(text)
    line_starts = line_starts_of(text)
    headings, blocks, code = _outline(text, body_start, line_starts)
    fm_title = meta.pop("title", None)
    fm_url = meta.pop("url", None)
    h1 = next((h.text for h in headings if h.level == 1), None)
    title = fm_title.strip() if isinstance(fm_title, str) and fm_title.strip() else None
    title = (title or h1 or PurePosixPath(rel).stem)[:MAX_HEADING_CHARS]
    url = document_url(base_url, url_style, rel, fm_url if isinstance(fm_url, str) else "")
    doc = Document(
        text=text,
        body_start=body_start,
        title=title,
        url=url,
        meta=meta,
        headings=headings,
        blocks=blocks,
        code_ranges=code,
        line_starts=line_starts,
        warnings=warnings,
    )
    doc.lang, problem = language_of(doc, language, detecting)
    if problem:
        doc.warnings.append(problem)
    return doc

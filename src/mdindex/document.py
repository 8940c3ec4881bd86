"""Reading and parsing one markdown document, shared by every chunking strategy."""

from __future__ import annotations

import codecs
import datetime as dt
import errno
import functools
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from mdindex.budget import check

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token
from mdindex.errors import BinaryFile, DecodeError, FileTooLarge, UnreadableFile
from mdindex.files import FileRef
from mdindex.models import Block, Document, Heading

FRONTMATTER_MAX_BYTES = 64 * 1024
_FM_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)
# Matched against the end of an already stripped heading only: searched over
# the whole line, its leading \s* made a heading of 40k spaces take 5 s.
_CUSTOM_ID = re.compile(r"\{#([A-Za-z0-9_:.-]+)\}")
_SLUG_DROP = re.compile(r"[^\w\- ]", re.UNICODE)
_INDEX_STEMS = {"index", "_index", "readme"}


# markdown-it and PyYAML are imported on the first document parsed, not by a
# no-op run that parses none (together 70 ms of its 1 s).
@functools.cache
def _parsers() -> tuple[MarkdownIt, MarkdownIt]:
    """Block structure only, and inline: inline parsing is the costly part of
    markdown-it and only heading text needs it, which is done separately."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").disable("inline"), MarkdownIt("commonmark")


@functools.cache
def _yaml() -> tuple[Any, Any]:
    """PyYAML and libyaml's C loader when PyYAML was built with it: pure-Python
    YAML was the largest cost of parsing the Hugo docs' frontmatter."""
    import yaml

    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@contextmanager
def open_checked(path: Path, max_bytes: int, ref: FileRef | None = None) -> Iterator[int]:
    """Open a regular file for reading, refusing FIFOs and devices and anything
    over ``max_bytes``; yields the descriptor.

    With ``ref`` (what the scan or a check saw), the opened file must still be
    that file and inside its root: a link swapped in afterwards is never
    followed when links are not, and a followed one must still land inside
    the root. What is checked is the open file itself, so nothing can be
    swapped between the check and the read.
    """
    # O_NONBLOCK so a FIFO named .md cannot hang the open; fstat then rejects it.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if ref is not None and ref.root_dir and not ref.follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise UnreadableFile("vanished before it could be read") from exc
    except PermissionError as exc:
        raise UnreadableFile("permission denied") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP and flags & os.O_NOFOLLOW:
            raise UnreadableFile("became a symlink after the scan; not followed") from exc
        if exc.errno == errno.ELOOP:
            raise UnreadableFile("symlink loop") from exc
        raise UnreadableFile(f"cannot open: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile("not a regular file")
        if ref is not None and ref.root_dir:
            _check_opened(fd, st, ref)
        if st.st_size > max_bytes:
            raise FileTooLarge(f"{st.st_size} bytes is over max_file_bytes ({max_bytes})")
        yield fd
    except OSError as exc:
        raise UnreadableFile(f"read failed: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _pieces(fd: int, limit: int) -> Iterator[bytes]:
    """The file's bytes in pieces of at most 1 MB, ``limit`` at most."""
    remaining = limit
    while remaining > 0:
        piece = os.read(fd, min(remaining, 1 << 20))
        if not piece:
            return
        remaining -= len(piece)
        yield piece


def read_bytes(
    path: Path, max_bytes: int, ref: FileRef | None = None, head: int | None = None
) -> bytes:
    """A regular file's bytes (see ``open_checked``); with ``head``, only that
    many from its start."""
    with open_checked(path, max_bytes, ref) as fd:
        data = b"".join(_pieces(fd, max_bytes + 1 if head is None else head))
    if head is None and len(data) > max_bytes:
        raise FileTooLarge(f"grew past max_file_bytes ({max_bytes}) while being read")
    return data


def text_digest(path: Path, max_bytes: int, ref: FileRef | None = None) -> str:
    """``digest(decode(read_bytes(...)))``, streamed: a search's stale check of a
    file grown to gigabytes holds one piece of it in memory, not the whole."""
    h = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    first, carry_cr, total = True, False, 0
    with open_checked(path, max_bytes, ref) as fd:
        for piece in _pieces(fd, max_bytes + 1):
            total += len(piece)
            if b"\x00" in piece:
                raise BinaryFile("contains NUL bytes; binary file?")
            try:
                text = decoder.decode(piece)
            except UnicodeDecodeError as exc:
                at = total - len(piece) + exc.start
                raise DecodeError(f"invalid UTF-8 near byte {at}") from exc
            if first and text:
                text, first = text.removeprefix("\ufeff"), False
            if carry_cr:
                text = "\r" + text
            carry_cr = text.endswith("\r")
            if carry_cr:
                text = text[:-1]
            h.update(text.replace("\r\n", "\n").replace("\r", "\n").encode("utf-8"))
    if total > max_bytes:
        raise FileTooLarge(f"grew past max_file_bytes ({max_bytes}) while being read")
    try:
        tail = decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise DecodeError("invalid UTF-8 at the end") from exc
    h.update((tail + ("\n" if carry_cr else "")).encode("utf-8"))
    return h.hexdigest()


def _check_opened(fd: int, st: os.stat_result, ref: FileRef) -> None:
    """The open file is the one the scan saw, at a place inside its root."""
    if ref.ino and (st.st_dev, st.st_ino) != (ref.dev, ref.ino):
        raise UnreadableFile("replaced since the scan (another file or a link); will be read again")
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: the path as it resolves now (racier, still checked)
        real = os.path.realpath(ref.path)
    root = ref.root_dir
    if ref.follow_symlinks:
        inside = real == root or real.startswith(root.rstrip("/") + "/")
    else:  # no component may be a link: the real path is the root plus the relative path
        inside = real == os.path.join(root, ref.rel)
    if not inside:
        raise UnreadableFile("resolves outside its root through a symlink; not read")


def decode(data: bytes, cut: bool = False) -> str:
    """UTF-8 without BOM, with CRLF and CR normalised to LF. ``cut``: the bytes
    are the start of a longer file, so a character cut at their end is left
    out rather than refused."""
    if b"\x00" in data:
        raise BinaryFile(f"contains NUL bytes at offset {data.index(0)}; binary file?")
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=not cut)
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 at byte {exc.start}") from exc
    text = text.removeprefix("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


class _FrontmatterProblem(Exception):
    pass


def _load_yaml_mapping(source: str) -> dict[str, Any]:
    # Aliases and anchors are refused outright: they are what alias bombs are made of.
    yaml, loader = _yaml()
    try:
        for event in yaml.parse(source, Loader=loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise _FrontmatterProblem("uses YAML anchors or aliases, which are not allowed")
        data = yaml.load(source, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise _FrontmatterProblem(f"malformed YAML{where}: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _FrontmatterProblem(f"is a YAML {type(data).__name__}, not a mapping")
    return data


# What a frontmatter value may be once it is a payload value. Every store must
# take it and read it back: qdrant-edge accepted a 130-deep list and then could
# not read its own WAL again (serde's recursion limit, about 125 levels), and
# refused NaN and infinities outright.
MAX_DEPTH = 8  # containers inside containers, the frontmatter mapping counting as 1
MAX_KEYS = 512  # keys in all the mappings together
MAX_STRING = 16_384  # characters in one string (key or value)
MAX_META_BYTES = FRONTMATTER_MAX_BYTES  # the whole meta object as JSON
INT64 = (-(2**63), 2**63 - 1)


def payload_meta(data: dict[Any, Any]) -> tuple[dict[str, Any], list[str]]:
    """Frontmatter as payload values every store takes and reads back, and a line
    for each thing that did not fit: nested deeper than MAX_DEPTH (stringified),
    NaN or infinite (dropped), an integer beyond 64 bits (stringified), a string
    over MAX_STRING or with lone surrogates, a key past MAX_KEYS, the whole over
    MAX_META_BYTES (the largest keys dropped)."""
    problems: list[str] = []
    keys = [0]

    def clean(value: Any, where: str, depth: int) -> tuple[bool, Any]:
        if isinstance(value, dict):
            if depth >= MAX_DEPTH:
                problems.append(f"{where} is nested over {MAX_DEPTH} levels; stored as text")
                return True, _text(value, where, problems)
            out: dict[str, Any] = {}
            for k, v in value.items():
                keys[0] += 1
                if keys[0] > MAX_KEYS:
                    problems.append(f"{where} has keys past the first {MAX_KEYS}; dropped")
                    break
                key = _text(k, f"a key of {where}", problems)
                if key in out:
                    problems.append(f"{where}.{key[:40]} is given twice; the last one kept")
                keep, item = clean(v, f"{where}.{key[:40]}", depth + 1)
                if keep:
                    out[key] = item
            return True, out
        if isinstance(value, list | tuple | set | frozenset):
            if depth >= MAX_DEPTH:
                problems.append(f"{where} is nested over {MAX_DEPTH} levels; stored as text")
                return True, _text(value, where, problems)
            items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
            cleaned = [clean(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(items)]
            return True, [item for keep, item in cleaned if keep]
        if isinstance(value, bool) or value is None:
            return True, value
        if isinstance(value, int):
            if INT64[0] <= value <= INT64[1]:
                return True, value
            problems.append(f"{where} is an integer beyond 64 bits; stored as text")
            return True, str(value)
        if isinstance(value, float):
            if math.isfinite(value):
                return True, value
            problems.append(f"{where} is {value} (not a finite number); dropped")
            return False, None
        if isinstance(value, dt.date | dt.datetime | dt.time):
            return True, value.isoformat()
        if isinstance(value, bytes):
            return True, _text(value.decode("utf-8", "replace"), where, problems)
        return True, _text(value, where, problems)

    _, meta = clean(data, "frontmatter", 0)
    size = len(json.dumps(meta, ensure_ascii=False))
    if size > MAX_META_BYTES:
        for key in sorted(meta, key=lambda k: -len(json.dumps(meta[k], ensure_ascii=False))):
            size -= len(json.dumps({key: meta.pop(key)}, ensure_ascii=False)) - 2
            problems.append(f"frontmatter.{key[:40]} is too large; dropped (over {MAX_META_BYTES})")
            if size <= MAX_META_BYTES:
                break
    return meta, problems


def _text(value: Any, where: str, problems: list[str]) -> str:
    """A value as a string a store can hold: valid UTF-8, at most MAX_STRING."""
    text = value if isinstance(value, str) else _as_text(value)
    if len(text) > MAX_STRING:
        problems.append(f"{where} is over {MAX_STRING} characters; cut")
        text = text[:MAX_STRING]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        problems.append(f"{where} holds lone surrogates; replaced")
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _as_text(value: Any) -> str:
    if isinstance(value, dict | list | tuple | set | frozenset):
        # compact JSON of the part that would not nest, bounded before it is cut
        return json.dumps(value, ensure_ascii=False, default=str)[: MAX_STRING + 1]
    return str(value)


def split_frontmatter(text: str) -> tuple[dict[str, Any], int, list[str]]:
    """Return (frontmatter mapping, body start offset, warnings)."""
    if not (text.startswith("---\n") or text == "---"):
        return {}, 0, []
    window = text[: 4 + FRONTMATTER_MAX_BYTES]
    close = _FM_CLOSE.search(window, 4)
    if close is None:
        if len(text) > len(window):
            return (
                {},
                0,
                [f"frontmatter larger than {FRONTMATTER_MAX_BYTES} bytes; treated as body text"],
            )
        return {}, 0, ["unterminated frontmatter; treated as body text"]
    source = text[4 : close.start()]
    try:
        meta, problems = payload_meta(_load_yaml_mapping(source))
    except _FrontmatterProblem as exc:
        return {}, 0, [f"frontmatter {exc}; treated as body text"]
    body_start = min(close.end() + 1, len(text))
    return meta, body_start, problems


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
            plain = _plain_inline(raw)
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
        is_index = path.stem.lower() in _INDEX_STEMS
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
) -> Document:
    """Parse normalised text into a Document with frontmatter, outline and line index."""
    meta, body_start, warnings = split_frontmatter(text)
    line_starts = line_starts_of(text)
    headings, blocks, code = _outline(text, body_start, line_starts)
    fm_title = meta.pop("title", None)
    fm_url = meta.pop("url", None)
    h1 = next((h.text for h in headings if h.level == 1), None)
    title = fm_title.strip() if isinstance(fm_title, str) and fm_title.strip() else None
    title = title or h1 or PurePosixPath(rel).stem
    url = document_url(base_url, url_style, rel, fm_url if isinstance(fm_url, str) else "")
    return Document(
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

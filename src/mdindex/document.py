"""Reading and parsing one markdown document, shared by every chunking strategy."""

from __future__ import annotations

import datetime as dt
import errno
import functools
import os
import re
import stat
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


def read_bytes(path: Path, max_bytes: int, ref: FileRef | None = None) -> bytes:
    """Read a regular file, refusing FIFOs and devices and anything over ``max_bytes``.

    With ``ref`` (what the scan saw), the opened file must still be that file
    and inside its root: a link swapped in after the scan is never followed
    when links are not, and a followed one must still land inside the root.
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
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            piece = os.read(fd, min(remaining, 1 << 20))
            if not piece:
                break
            chunks.append(piece)
            remaining -= len(piece)
        data = b"".join(chunks)
    except OSError as exc:
        raise UnreadableFile(f"read failed: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise FileTooLarge(f"grew past max_file_bytes ({max_bytes}) while being read")
    return data


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


def decode(data: bytes) -> str:
    """UTF-8 without BOM, with CRLF and CR normalised to LF."""
    if b"\x00" in data:
        raise BinaryFile(f"contains NUL bytes at offset {data.index(0)}; binary file?")
    try:
        text = data.decode("utf-8")
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
    return {str(k): _jsonable(v) for k, v in data.items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, str | int | float | bool):
        return value
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
        meta = _load_yaml_mapping(source)
    except _FrontmatterProblem as exc:
        return {}, 0, [f"frontmatter {exc}; treated as body text"]
    body_start = min(close.end() + 1, len(text))
    return meta, body_start, []


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
            anchor, n = base, 0
            while anchor in used:
                n += 1
                anchor = f"{base}-{n}"
            used.add(anchor)
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

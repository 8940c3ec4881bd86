"""Reading one document's bytes, safely: a regular file, confined to its root,
checked after it is opened (so nothing can be swapped in between), bounded in
size; and decoding them to the text every offset refers to."""

from __future__ import annotations

import codecs
import errno
import hashlib
import logging
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mdindex.config import Settings
from mdindex.documents.budget import budget
from mdindex.documents.files import Failure, FileRef
from mdindex.documents.parsing import parse_document
from mdindex.documents.types import Document, digest
from mdindex.errors import (
    BinaryFile,
    DecodeError,
    FileTooLarge,
    InputError,
    UnreadableFile,
)

log = logging.getLogger(__name__)


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


def load_document(
    ref: FileRef, settings: Settings, known_hash: str = "", detecting: bool = True
) -> Document | Failure | None:
    """Read, decode and parse one file, within its time budget; None when its text
    still hashes to ``known_hash`` (touched, not changed). A file that cannot be
    read, or that breaks the parser, is a Failure with its one-line reason.
    ``detecting=False``: its language is detected by the caller, with others."""
    try:
        text = decode(read_bytes(ref.path, settings.max_file_bytes, ref))
        if known_hash and known_hash == digest(text):
            return None
        with budget(settings.file_time_budget_s):
            return parse_document(
                text,
                ref.rel,
                base_url=settings.base_url,
                url_style=settings.url_style,
                language=settings.language,
                detecting=detecting,
            )
    except InputError as exc:
        return Failure(ref.root, ref.rel, str(exc))
    except Exception as exc:  # a parser bug must cost one file, not the run
        log.debug("parsing %s failed", ref.rel, exc_info=True)
        return Failure(ref.root, ref.rel, f"internal error while parsing: {describe(exc)}")


def describe(exc: BaseException) -> str:
    """An unexpected exception in one line: its type and the start of its message."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"

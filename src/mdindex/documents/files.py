"""Which files are documents: the path filter and the tree scan shared by backfill and watch."""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from mdindex.config import Root

log = logging.getLogger(__name__)


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob where ``**`` spans folders and ``*`` stays within one."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _any_of(globs: Sequence[str]) -> re.Pattern[str] | None:
    """One pattern matching what any of ``globs`` matches; None for none."""
    if not globs:
        return None
    return re.compile("|".join(f"(?:{glob_regex(g).pattern})" for g in globs), re.DOTALL)


class PathFilter:
    """Decides from a root-relative POSIX path whether it is a document.

    Hidden files and folders (``.git``, ``.obsidian``, editor locks like
    ``.#notes.md``) never are; then the path must match an include glob and
    no exclude glob. Editor debris such as ``notes.md~``, ``.notes.md.swp``
    or vim's ``4913`` fails the default include globs.
    """

    def __init__(self, include: Sequence[str], exclude: Sequence[str] = ()) -> None:
        # Each list as one pattern, its globs as alternatives: one match a path
        # (a scan of 200,000 files spent 1.2 of its 6.1 profiled seconds here).
        self.include = _any_of(include)
        self.exclude = _any_of(exclude)

    def __call__(self, rel: str) -> bool:
        # a part that is empty ("a//b", "/a", "a/") or hidden (".git/x", "a/.b")
        if not rel or rel[0] in "./" or rel[-1] == "/" or "/." in rel or "//" in rel:
            return False
        if self.include is None or not self.include.match(rel):
            return False
        return self.exclude is None or not self.exclude.match(rel)

    def may_contain(self, rel_dir: str) -> bool:
        """Whether a folder can hold documents at all (hidden folders cannot)."""
        return not any(p.startswith(".") for p in rel_dir.split("/") if p)


@dataclass(frozen=True, slots=True)
class FileRef:
    """A document as the scan saw it: enough to open exactly that file again."""

    root: str  # root label
    rel: str  # POSIX path relative to the root
    path: Path
    size: int
    mtime_ns: int
    # The file's identity and where it must be, checked again once it is open:
    # a file swapped for a link (or a folder for a link) after the scan is refused.
    dev: int = 0
    ino: int = 0
    root_dir: str = ""  # the root, resolved; "" when not confined (tests, `mdindex chunk`)
    follow_symlinks: bool = False
    seen_ns: int = 0  # wall-clock time the stat was taken

    @property
    def key(self) -> tuple[str, str]:
        return self.root, self.rel

    def as_row(self) -> dict[str, Any]:
        """Plain values, for a Ray row."""
        return {
            name: str(getattr(self, name)) if name == "path" else getattr(self, name)
            for name in self.__dataclass_fields__
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> FileRef:
        return cls(
            str(row["root"]),
            str(row["rel"]),
            Path(str(row["path"])),
            int(row["size"]),
            int(row["mtime_ns"]),
            int(row["dev"]),
            int(row["ino"]),
            str(row["root_dir"]),
            bool(row["follow_symlinks"]),
            int(row["seen_ns"]),
        )

    @property
    def racy(self) -> bool:
        """Modified so close to the stat that a later edit may keep the same mtime
        (coarse timestamps): its size and mtime cannot vouch for its content."""
        return self.mtime_ns >= self.seen_ns - RACY_WINDOW_NS


# Filesystems with coarse timestamps (FAT 2 s, ext3 and HFS+ 1 s, ext4's coarse
# clock some ms) keep the mtime of an edit made within the same tick: git's
# "racy" rule, with the widest of those ticks.
RACY_WINDOW_NS = 2_000_000_000


@dataclass(frozen=True, slots=True)
class Failure:
    """A file (or folder) that could not be indexed, and why: the one record of a
    failure, from the scan, the reader, the chunker or a Ray worker."""

    root: str  # root label
    rel: str
    reason: str
    folder: bool = False  # a folder that could not be listed: covers everything below it

    @property
    def key(self) -> tuple[str, str]:
        return self.root, self.rel


# Recorded instead of the mtime of a file modified too close to its stat: no
# file has it, so the next run reads and hashes the file instead of trusting it.
UNTRUSTED_MTIME = -1


def trusted_mtime(ref: FileRef) -> int:
    """The mtime to record for the fast path (racy-git rule, see FileRef.racy)."""
    return UNTRUSTED_MTIME if ref.racy else ref.mtime_ns


def locate(roots: Sequence[Root], path: str) -> tuple[Root, str] | None:
    """The root holding an absolute path, and the path relative to it."""
    p = Path(path)
    for root in roots:
        try:
            rel = p.relative_to(root.path)
        except ValueError:
            try:
                rel = p.relative_to(root.path.resolve())
            except ValueError:
                continue
        return root, rel.as_posix() if str(rel) != "." else ""
    return None


def under_failed_folder(key: tuple[str, str], folders: Sequence[tuple[str, str]]) -> bool:
    """Whether a document lies below a folder that could not be listed (its
    points must stay: the folder may only be unreadable for now)."""
    root, rel = key
    return any(
        root == f_root and (f_rel in ("", ".") or rel.startswith(f_rel + "/"))
        for f_root, f_rel in folders
    )


def printable(path: str) -> str:
    """A path safe for one log line: control, format and line-break characters
    and undecodable bytes escaped; printable letters of any script kept as they
    are (кофе.md, not \\xd0\\xba\\xd0\\xbe\\xd1\\x84\\xd0\\xb5.md)."""
    if path.isprintable():  # the common case, in C
        return path
    return "".join(c if c.isprintable() else _escaped(c) for c in path)


def _escaped(char: str) -> str:
    return (
        char.encode("utf-8", "backslashreplace")
        .decode("ascii", "backslashreplace")
        .translate({i: f"\\x{i:02x}" for i in [*range(32), 127]})
    )


def storable(rel: str) -> bool:
    """Whether a path can be a document's name: valid UTF-8 (a name with
    undecodable bytes reaches Python with surrogates, which no payload holds)."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def stat_file(
    root: Root, rel: str, accept: Callable[[str], bool], follow_symlinks: bool, root_dir: str = ""
) -> FileRef | Failure | None:
    """Check one candidate path; None when a rule skips it silently. ``root_dir``
    is the root resolved, when the caller has it (a scan resolves it once)."""
    if not accept(rel):
        return None
    path = root.path / rel
    try:
        lst = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return Failure(root.label, rel, f"cannot stat: {exc.strerror}")
    if not storable(rel):
        return Failure(root.label, printable(rel), "file name is not valid UTF-8")
    st = lst
    if stat.S_ISLNK(lst.st_mode):
        if not follow_symlinks:
            log.debug("skipped symlink %s (follow_symlinks is off)", printable(rel))
            return None
        try:
            target = path.resolve(strict=True)
            st = target.stat()
        except RuntimeError:
            return Failure(root.label, rel, "symlink loop")
        except OSError as exc:
            if exc.errno == 40:
                return Failure(root.label, rel, "symlink loop")
            return Failure(root.label, rel, "dangling symlink")
        if not target.is_relative_to(root_dir or root.path.resolve()):
            return Failure(root.label, rel, "symlink points outside its root; not followed")
    if not stat.S_ISREG(st.st_mode):
        return Failure(root.label, rel, "not a regular file")
    return FileRef(
        root.label,
        rel,
        path,
        st.st_size,
        st.st_mtime_ns,
        st.st_dev,
        st.st_ino,
        root_dir or str(root.path.resolve()),
        follow_symlinks,
        time.time_ns(),
    )


def scan(
    root: Root,
    accept: PathFilter,
    follow_symlinks: bool = False,
    under: str = "",
    folders: dict[tuple[int, int], str] | None = None,
) -> Iterator[FileRef | Failure]:
    """Every document below ``root`` (or below its subfolder ``under``): a folder's
    files by name, then its subfolders by name. ``folders`` gets each folder
    listed, by device and inode: its path."""
    base = root.path.resolve()
    seen_dirs: dict[tuple[int, int], str] = {} if folders is None else folders
    stack = [under.strip("/")]
    while stack:
        rel_dir = stack.pop()
        folder = root.path / rel_dir if rel_dir else root.path
        try:
            st = folder.stat()
            if (st.st_dev, st.st_ino) in seen_dirs:
                continue  # a followed link led back to a folder already scanned
            seen_dirs[(st.st_dev, st.st_ino)] = str(folder)
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            reason = f"cannot list folder: {exc.strerror}; its documents are kept"
            yield Failure(root.label, rel_dir or ".", reason, folder=True)
            continue
        subdirs: list[str] = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=follow_symlinks)
            except OSError:
                is_link, is_dir = False, False
            if is_dir:
                if not accept.may_contain(rel):
                    continue
                if is_link:
                    try:
                        target = Path(entry.path).resolve(strict=True)
                    except (OSError, RuntimeError):
                        yield Failure(root.label, rel, "symlink loop")
                        continue
                    if not target.is_relative_to(base):
                        yield Failure(
                            root.label, rel, "symlink points outside its root; not followed"
                        )
                        continue
                subdirs.append(rel)
                continue
            result = stat_file(root, rel, accept, follow_symlinks, str(base))
            if result is not None:
                yield result
        stack.extend(reversed(subdirs))

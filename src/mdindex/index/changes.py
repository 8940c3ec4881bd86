"""Change detection: what differs between the files and the state.

Two halves. Looking at the files, a whole tree or the paths and folders a
watcher names, gives ``Seen``; comparing that with the state's rows gives
``Changes``, the one result backfill, watch and status get back. A file is a
candidate when its size, mtime or the settings' fingerprint moved; whether its
text did is decided when it is read. The state is only read here.
"""

from __future__ import annotations

import gc
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from mdindex.config import Root
from mdindex.documents.files import (
    Failure,
    FileRef,
    PathFilter,
    locate,
    printable,
    scan,
    stat_file,
    storable,
    under_failed_folder,
)
from mdindex.index.state import DocRow, State

Key = tuple[str, str]  # (root label, path relative to the root)
UNNAMEABLE = "file name is not valid UTF-8"

_held = 0  # looks holding full collections off now, in every thread
_held_lock = threading.Lock()
_thresholds = gc.get_threshold()  # the program's, while a look holds them


@contextmanager
def full_collections_held() -> Iterator[None]:
    """Python's full garbage collections held off while a look builds its lists.
    Each file leaves objects that outlive the look (its FileRef, its row, its
    key), and each full collection walks every object the process holds: the
    daemon's rescan took 2.65 s held and 3.66 s not at 100,000 files, 4.81 and
    5.99 at 200,000 (medians of 5, Intel Xeon with AMX). Young collections go on,
    so cycles other threads make meanwhile are still freed. A threshold the
    program sets while a look runs is replaced by the one from before it."""
    global _held, _thresholds
    with _held_lock:
        if _held == 0:
            _thresholds = gc.get_threshold()
            gc.set_threshold(_thresholds[0], _thresholds[1], 1 << 30)
        _held += 1
    try:
        yield
    finally:
        with _held_lock:
            _held -= 1
            if _held == 0:
                gc.set_threshold(*_thresholds)


def _forked() -> None:
    """A child forked during a look has no thread to let go: it starts afresh."""
    global _held, _held_lock
    if _held:
        gc.set_threshold(*_thresholds)
    _held, _held_lock = 0, threading.Lock()


os.register_at_fork(after_in_child=_forked)


@dataclass
class Changes:
    """What change detection found, for a whole tree or for some paths."""

    files: list[FileRef] = field(default_factory=list)  # new, or changed in size, mtime or settings
    deleted: list[Key] = field(default_factory=list)  # indexed, and gone from the files
    failures: list[Failure] = field(default_factory=list)
    seen: int = 0  # documents found, failed ones included (not the paths found gone)
    unchanged: int = 0
    new: int = 0  # files seen that the state does not know (for paths: less failed ones gone)
    missing_roots: list[str] = field(default_factory=list)  # a watched root that is gone
    rows: dict[Key, DocRow] = field(default_factory=dict, repr=False)  # state rows of what was seen
    # What was looked at: failures recorded before for these are cleared. None: everything.
    scope: set[Key] | None = field(default=None, repr=False)
    refused: str = ""  # deletions the guard left out, and why (mdindex.index.guard)
    # files per root label when the whole tree was scanned; None for some paths
    present: dict[str, int] | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return bool(self.files or self.deleted)


@dataclass
class Seen:
    """The file-system half of change detection, before the state is asked."""

    present: dict[Key, FileRef] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    seen: int = 0
    missing_roots: list[str] = field(default_factory=list)
    # Where deletions are looked for: (label, rel, is_folder); None for the whole tree.
    scope: list[tuple[str, str, bool]] | None = None

    @property
    def unlisted(self) -> list[Key]:
        """Folders that could not be listed: everything known below them is kept."""
        return [f.key for f in self.failures if f.folder]


class Detector:
    """Looks at the roots through a path filter, and compares with the state."""

    def __init__(
        self,
        roots: Sequence[Root],
        accept: PathFilter,
        follow_symlinks: bool,
        fingerprint: str,
    ) -> None:
        self.roots = list(roots)
        self.accept = accept
        self.follow = follow_symlinks
        self.fingerprint = fingerprint  # of the settings a state row must have been written with
        # the folders the last look listed, by device and inode (the daemon
        # checks the kernel watches each of them)
        self.folders: dict[tuple[int, int], str] = {}

    def tree(self) -> Seen:
        """Every file under every root."""
        seen = Seen()
        self.folders = {}
        with full_collections_held():
            for root in self.roots:
                if not root.path.is_dir():
                    seen.missing_roots.append(root.label)
                self._scan_into(seen, root, "")
        return seen

    def paths(self, paths: Iterable[str], folders: Iterable[str]) -> Seen:
        """What is at these absolute paths now (files), and below these folders."""
        seen = Seen(scope=[])
        assert seen.scope is not None
        self.folders = {}
        located = [loc for loc in (locate(self.roots, p) for p in folders) if loc is not None]
        scanned = [(r, f) for r, f in located if storable(f) and r.path.is_dir()]
        for path in paths:
            loc = locate(self.roots, path)
            if loc is None or not loc[1]:
                continue
            root, rel = loc
            if any(
                r.label == root.label and (not f or rel.startswith(f + "/")) for r, f in scanned
            ):
                continue  # the folder's scan below sees it (it counted twice: "2 files")
            if not storable(rel):  # never a document: say why, and look no further
                # ... when it is there and the filter takes it, as a scan does:
                # an image or an editor's temporary file with such a name (or
                # one already gone) was a failure and a file seen
                if stat_file(root, rel, self.accept, self.follow) is not None:
                    seen.seen += 1
                    seen.failures.append(Failure(root.label, printable(rel), UNNAMEABLE))
                continue
            seen.scope.append((root.label, rel, False))
            found = stat_file(root, rel, self.accept, self.follow)
            # Only what is a document, or fails as one, is a file seen: the
            # temporary file of an editor's atomic save (its move's first
            # path) made the daemon log "2 files: 1 changed, 0 unchanged".
            if isinstance(found, FileRef):
                seen.seen += 1
                seen.present[found.key] = found
            elif isinstance(found, Failure):
                seen.seen += 1
                seen.failures.append(found)
        for root, rel in located:
            if not storable(rel):
                seen.failures.append(Failure(root.label, printable(rel), UNNAMEABLE, folder=True))
            elif (root, rel) not in scanned:  # its root is gone
                seen.missing_roots.append(root.label)
            else:
                seen.scope.append((root.label, rel, True))
                self._scan_into(seen, root, rel)
        return seen

    def _scan_into(self, seen: Seen, root: Root, under: str) -> None:
        for item in scan(root, self.accept, self.follow, under, self.folders):
            seen.seen += 1
            if isinstance(item, Failure):
                seen.failures.append(item)
            else:
                seen.present[item.key] = item

    def compare(self, seen: Seen, state: State, prune: bool = True) -> Changes:
        """The state's half: candidates, deletions (when ``prune``), and counts."""
        with full_collections_held():
            return self._compare(seen, state, prune)

    def _compare(self, seen: Seen, state: State, prune: bool) -> Changes:
        was_failed: set[Key] = set()  # failures recorded before, keyed as the state keeps them
        if seen.scope is None:
            rows = state.docs()
            in_scope = state.known_docs()
        else:
            in_scope, rows = set(), {}
            for label, rel, is_folder in seen.scope:
                # A folder covers what lies below it; a file path only itself.
                known, found = state.under(label, rel)
                in_scope |= {key for key in known if is_folder or key[1] == rel}
                rows.update(found)
                failed_before = state.failed_under(label, rel)
                was_failed |= {k for k in failed_before if is_folder or k[1] == printable(rel)}
        failed = {f.key for f in seen.failures}
        unlisted = seen.unlisted
        deleted = (
            sorted(
                key
                for key in in_scope
                if key not in seen.present
                and key not in failed
                and not under_failed_folder(key, unlisted)
            )
            if prune
            else []
        )
        files = [f for f in seen.present.values() if not self.is_fresh(f, rows)]
        scope = None
        if seen.scope is not None:
            # failures before below a folder too: a failed file deleted stayed listed
            scope = in_scope | seen.present.keys() | failed | was_failed
            scope |= {(label, rel) for label, rel, is_dir in seen.scope if not is_dir}
        return Changes(
            files=files,
            deleted=deleted,
            failures=list(seen.failures),
            seen=seen.seen,
            unchanged=len(seen.present) - len(files),
            new=self.new_seen(seen.present.keys() | failed, in_scope, was_failed)
            if seen.scope is not None
            else len((seen.present.keys() | failed) - in_scope),
            missing_roots=list(seen.missing_roots),
            rows=rows,
            scope=scope,
            present=Counter(label for label, _ in seen.present) if seen.scope is None else None,
        )

    @staticmethod
    def new_seen(now: set[Key], known: set[Key], was_failed: set[Key]) -> int:
        """How many more files there are to see after a watcher's batch: those
        neither a document nor a failure before, less the failed ones now gone (a
        file that failed and was then fixed or deleted once counted twice or never
        went; 9 files seen of 7 after two fixes)."""
        shown = {(label, printable(rel)) for label, rel in now}
        known_shown = {(label, printable(rel)) for label, rel in known}
        return len(shown - known_shown - was_failed) - len(was_failed - shown - known_shown)

    def is_fresh(self, ref: FileRef, rows: dict[Key, DocRow]) -> bool:
        row = rows.get(ref.key)
        return (
            row is not None
            and row.size == ref.size
            and row.mtime_ns == ref.mtime_ns
            and row.fingerprint == self.fingerprint
        )

    def known_hash(self, ref: FileRef, rows: dict[Key, DocRow]) -> str:
        """The hash a file must still have to count as only touched; "" if none."""
        row = rows.get(ref.key)
        if row is None or row.fingerprint != self.fingerprint:
            return ""
        return row.doc_hash

"""No index is deleted on a guess.

A document that is gone from the files looks the same as a document on a disk
that is not mounted, a root given with a typo, or a folder swapped for an empty
one. So deletions go through one guard, shared by backfill's prune, the
daemon's events and rescans, and ``verify --repair``. It refuses, with one
line, the deletions of a root that is:

- not among the roots given any more (left out of the command or the config);
- missing, or not a folder;
- another folder than the one indexed (its device and inode changed: replaced,
  or a different disk mounted there) while some of its documents would go;
- after a whole scan, empty of markdown or about to lose more than half of its
  indexed documents. A scan that does not see a file cannot tell deleted from
  unreachable; a file event can: the kernel saw that path deleted or moved
  away, so the daemon's events are held to the three rules above only, and a
  user who deletes notes one by one, or a folder of them, sees them go.

``--force`` lets them go. The identity each root had is recorded in the state
after a sync that was not refused, so a folder replaced by one holding the same
documents is accepted on its first sync, and one holding fewer is not.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from mdindex.config import Root
from mdindex.errors import PruneRefused
from mdindex.index.changes import Changes, Key
from mdindex.index.state import State
from mdindex.jsonfile import parse_json

log = logging.getLogger(__name__)
STATE_KEY = "root_identity"  # the state's meta key: {label: "dev:ino"}


def identity(path: Path) -> str | None:
    """A folder's device and inode, or None when it is no folder (missing, a file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not os.path.isdir(path):
        return None
    return f"{st.st_dev}:{st.st_ino}"


def identities(roots: Iterable[Root]) -> dict[str, str]:
    """Each root that is a folder now, by label."""
    out = {}
    for root in roots:
        found = identity(root.path)
        if found is not None:
            out[root.label] = found
    return out


def not_a_folder(roots: Iterable[Root]) -> str:
    """Why a run over these roots must not start ("" when it may): one is missing or
    not a folder (a typo, an unmounted disk)."""
    for root in roots:
        if not root.path.is_dir():
            return (
                f"root {root.label!r}: {root.path} is not a folder; fix the path, or pass "
                "--force to go on without it (its indexed documents are pruned)"
            )
    return ""


def parse_recorded(raw: str | None) -> dict[str, str]:
    """The identities a state recorded; {} when none or unreadable."""
    try:
        data = parse_json(raw or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items()}


def refusal(
    roots: Sequence[Root],
    deleted: Iterable[Key],
    indexed: dict[str, int],
    recorded: dict[str, str],
    present: dict[str, int] | None = None,
) -> str:
    """Why these deletions must not go ("" when they may). ``indexed``: documents
    the state holds per root label; ``recorded``: the identities it saw last;
    ``present``: the files a whole scan found per root; None for paths that
    file events named."""
    gone = Counter(label for label, _ in deleted)
    configured = {root.label for root in roots}
    for label in sorted(gone.keys() - configured):
        return (
            f"root {label!r} is indexed but not among the roots given; refusing to delete "
            f"its {gone[label]} documents (give it again, or pass --force to drop them)"
        )
    for root in roots:
        count = gone.get(root.label, 0)
        if not count:
            continue
        where = f"root {root.label!r} ({root.path})"
        now = identity(root.path)
        if now is None:
            return (
                f"{where} is missing or not a folder; refusing to delete its {count} indexed "
                "documents (is a disk unmounted? fix the path, or pass --force if intended)"
            )
        before = recorded.get(root.label)
        if before is not None and before != now:
            return (
                f"{where} is another folder than the one indexed (replaced, or another disk "
                f"mounted there); refusing to delete {count} of its documents (pass --force "
                "if intended)"
            )
        if present is None:
            continue
        if not present.get(root.label):
            return (
                f"{where} has no markdown files; refusing to prune its {count} documents "
                "(is a disk unmounted? pass --force if that is intended, or --no-prune)"
            )
        known = indexed.get(root.label, 0)
        if count > known / 2:
            return (
                f"{where}: {count} of its {known} indexed documents would be deleted; "
                "refusing to prune more than half (pass --force if that is intended)"
            )
    return ""


def refusal_in(
    state: State,
    roots: Sequence[Root],
    deleted: Sequence[Key],
    present: dict[str, int] | None = None,
) -> str:
    """``refusal`` with what the state records: its documents per root and the
    identities it saw last."""
    if not deleted:
        return ""
    indexed = state.doc_count_by_root()
    gone = Counter(label for label, _ in deleted)
    if present is not None and any(n > indexed.get(k, 0) / 2 for k, n in gone.items()):
        # documents known only by their points count too (a state rebuilt
        # from the store has no rows yet); costlier, so only when it matters
        indexed = state.doc_count_by_root(with_points=True)
    recorded = parse_recorded(state.get(STATE_KEY))
    return refusal(roots, deleted, indexed, recorded, present)


def withheld(changes: Changes, reason: str, keep_going: bool) -> Changes:
    """The changes without the deletions ``reason`` refuses: PruneRefused, or,
    with ``keep_going`` (the daemon), the rest of the changes and the reason."""
    if not reason:
        return changes
    if not keep_going:
        raise PruneRefused(reason)
    log.error("not deleting: %s", reason)
    return replace(changes, deleted=[], refused=reason)

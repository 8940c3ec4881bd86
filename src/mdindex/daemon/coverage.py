"""Which folders the kernel really watches.

watchdog adds one inotify watch per folder, and when the user's watches run
out (``fs.inotify.max_user_watches``) it skips the folders left without a
word: edits there would never be seen. The kernel's own list of this
process's watches (``/proc/self/fdinfo``) against the folders a scan listed
says which are not watched; the daemon rescans those instead, says so in one
line, and shows ``degraded`` until the limit is raised.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

LIMIT_FILE = Path("/proc/sys/fs/inotify/max_user_watches")
PROC_SELF = Path("/proc/self")


def watched_inodes(proc: Path = PROC_SELF) -> set[tuple[int, int]] | None:
    """(device, inode) of every inotify watch this process holds; None where the
    kernel does not say (no /proc, no inotify instance)."""
    found: set[tuple[int, int]] = set()
    instances = 0
    try:
        fds = os.listdir(proc / "fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if "inotify" not in os.readlink(proc / "fd" / fd):
                continue
            text = (proc / "fdinfo" / fd).read_text()
        except OSError:  # closed meanwhile
            continue
        instances += 1
        for line in text.splitlines():
            if not line.startswith("inotify wd:"):
                continue
            fields = dict(f.split(":", 1) for f in line.split()[1:] if ":" in f)
            try:
                ino, sdev = int(fields["ino"], 16), int(fields["sdev"], 16)
            except (KeyError, ValueError):
                continue
            # the kernel's dev_t: major in the bits above 20, minor below
            found.add((os.makedev(sdev >> 20, sdev & 0xFFFFF), ino))
    return found if instances else None


def limit() -> int | None:
    """The user's inotify watch limit, where the kernel says."""
    try:
        return int(LIMIT_FILE.read_text().strip())
    except (OSError, ValueError):
        return None


def uncovered(
    folders: dict[tuple[int, int], str], watched: set[tuple[int, int]], roots: Iterable[str]
) -> list[str]:
    """The topmost of ``folders`` that are not watched (a rescan of each covers
    what lies below it).

    Matched by inode: the kernel names a watch's device by its superblock, which
    is not what ``stat`` says on btrfs subvolumes or overlayfs, so a device
    compare would find no folder watched there. (Two folders of one tree on
    two filesystems with one inode number would pass for each other: rare, and
    the periodic rescan still covers them.) Folders the watcher could not
    watch for another reason are left out: one this process may not list, and
    one reached through a link (watchdog follows none; the periodic rescan
    covers them, as before)."""
    inodes = {ino for _, ino in watched}
    tops = [str(r).rstrip("/") for r in roots]
    return topmost(
        path
        for (_, ino), path in folders.items()
        if ino not in inodes and os.access(path, os.R_OK | os.X_OK) and not _linked(path, tops)
    )


def _linked(path: str, roots: list[str]) -> bool:
    """Whether ``path`` is reached through a symbolic link below its root."""
    root = next((r for r in roots if path == r or path.startswith(r + "/")), None)
    if root is None:
        return True
    at = root
    for part in path[len(root) :].strip("/").split("/"):
        if not part:
            continue
        at = f"{at}/{part}"
        if os.path.islink(at):
            return True
    return False


def topmost(paths: Iterable[str]) -> list[str]:
    """The paths with none of the others above them."""
    out: list[str] = []
    # by components, so a folder's descendants come right after it ("a", "a/b", "a-b")
    for path in sorted(set(paths), key=lambda p: p.split("/")):
        if out and path.startswith(out[-1].rstrip("/") + "/"):
            continue
        out.append(path)
    return out


def reason(count: int, watch_limit: int | None, every_s: float) -> str:
    """Why folders are not watched (rescanned every ``every_s``), and what to do,
    in one line."""
    now = f" (now {watch_limit})" if watch_limit is not None else ""
    return (
        f"inotify watch limit reached: {count} folder(s) not watched, rescanned every "
        f"{every_s:.0f}s; raise fs.inotify.max_user_watches{now}: "
        "sudo sysctl fs.inotify.max_user_watches=524288 (and in /etc/sysctl.d/ to keep it)"
    )

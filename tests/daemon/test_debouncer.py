"""The debouncer on a fake clock (real files for its size and mtime checks)."""

from __future__ import annotations

from pathlib import Path

from mdindex.daemon.debouncer import Change, Debouncer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_path_goes_once_quiet_and_not_before(tmp_path: Path) -> None:
    clock = Clock()
    d = Debouncer(0.3, clock=clock)
    f = tmp_path / "a.md"
    f.write_text("a")
    d.add(Change(str(f)))
    assert d.oldest() == 100.0 and d.next_deadline() == 100.3
    clock.now += 0.29
    assert not d.ready() and len(d) == 1
    clock.now += 0.02
    batch = d.ready()
    assert batch.files == [str(f)] and batch.dirs == [] and len(d) == 0
    assert d.oldest() is None and d.next_deadline() is None


def test_events_coalesce_and_both_ends_of_a_move_go_together(tmp_path: Path) -> None:
    clock = Clock()
    d = Debouncer(0.3, clock=clock)
    old, new = tmp_path / "old.md", tmp_path / "new.md"
    for _ in range(5):
        d.add(Change(str(old)))
        clock.now += 0.1
    d.add(Change(str(new)))
    d.add(Change(str(tmp_path / "sub"), is_dir=True))
    clock.now += 0.1
    assert not d.ready()  # the last event was 0.1 s ago
    clock.now += 0.3
    batch = d.ready()
    assert sorted(batch.files) == [str(new), str(old)] and batch.dirs == [str(tmp_path / "sub")]


def test_a_path_waiting_max_wait_goes_while_others_keep_changing(tmp_path: Path) -> None:
    clock = Clock()
    d = Debouncer(0.3, max_wait=2.0, clock=clock)
    first = tmp_path / "first.md"
    d.add(Change(str(first)))
    clock.now += 0.4
    busy = tmp_path / "busy.md"
    released: list[str] = []
    for _ in range(20):  # an event every 0.2 s: never quiet for 0.3 s
        d.add(Change(str(busy)))
        clock.now += 0.2
        released += d.ready().files
    assert released == [str(first)]
    # the busy file itself is still being written: it waits, and status sees its age
    assert len(d) == 1 and d.oldest() == 100.4


def test_a_file_still_being_written_waits_another_quiet_period(tmp_path: Path) -> None:
    clock = Clock()
    d = Debouncer(0.3, clock=clock)
    f = tmp_path / "slow.md"
    f.write_text("part one")
    d.add(Change(str(f)))
    clock.now += 0.5
    f.write_text("part one, part two")  # no event reached us for this write
    assert not d.ready() and len(d) == 1
    clock.now += 0.5
    assert d.ready().files == [str(f)]


def test_a_path_queued_again_waits_its_delay(tmp_path: Path) -> None:
    clock = Clock()
    d = Debouncer(0.3, clock=clock)
    d.add_path(str(tmp_path / "retry.md"), False, delay=5.0)
    clock.now += 4.9
    assert not d.ready()
    clock.now += 0.2
    assert d.ready().files == [str(tmp_path / "retry.md")]


def test_a_batch_is_bounded(tmp_path: Path) -> None:
    clock = Clock()
    d = Debouncer(0.1, clock=clock)
    for i in range(25):
        d.add(Change(str(tmp_path / f"{i}.md")))
    clock.now += 1
    assert len(d.ready(limit=10).files) == 10 and len(d) == 15


def test_take_all_hands_on_every_path_due_or_not(tmp_path: Path) -> None:
    clock = Clock()
    d = Debouncer(0.3, clock=clock)
    d.add(Change(str(tmp_path / "a.md")))
    d.add(Change(str(tmp_path / "sub"), is_dir=True))
    assert not d.ready()  # not quiet yet
    batch = d.take_all()
    assert batch.files == [str(tmp_path / "a.md")] and batch.dirs == [str(tmp_path / "sub")]
    assert len(d) == 0


def test_the_ends_of_a_move_go_together_when_one_is_due_before_the_other(
    tmp_path: Path,
) -> None:
    """A note edited, then moved while other files kept changing: its old path
    had waited max_wait and went alone, its new path a batch later, so the
    sync core deleted its points before it saw the new path and embedded the
    file again. A chain of moves (a to b, b to c) goes as one group."""
    clock = Clock()
    d = Debouncer(0.3, max_wait=2.0, clock=clock)
    a, b, c = (str(tmp_path / f"{n}.md") for n in "abc")
    busy = str(tmp_path / "busy.md")
    d.add_event((Change(a),))  # the edit
    released: list[list[str]] = []
    for step in range(15):  # an event every 0.2 s: never quiet for 0.3 s
        d.add_event((Change(busy),))
        if step == 9:
            d.add_event((Change(a), Change(b)))  # the move, 1.8 s after the edit
        if step == 10:
            d.add_event((Change(b), Change(c)))  # and on again
        clock.now += 0.2
        if batch := d.ready().files:
            released.append(sorted(batch))
    [group] = [r for r in released if a in r]
    assert {a, b, c} <= set(group)  # due: a (waited max_wait); b and c with it
    assert not d.moves and all(p not in d.pending for p in (a, b, c))


def test_a_bounded_batch_keeps_a_moves_ends_together(tmp_path: Path) -> None:
    clock = Clock()
    d = Debouncer(0.3, clock=clock)
    paths = [str(tmp_path / f"{i}.md") for i in range(5)]
    for p in paths[:3]:
        d.add_event((Change(p),))
    d.add_event((Change(paths[3]), Change(paths[4])))
    clock.now += 1
    first = d.ready(limit=4)  # the limit falls between the move's two ends
    assert sorted(first.files) == sorted(paths) and not d.pending

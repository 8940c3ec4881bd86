"""The debouncer on a fake clock (real files for its size and mtime checks)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mdindex.daemon.debouncer import Batch, Change, Debouncer
from tests.regressions import found, kept, load


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
    """A group goes whole: first in the next batch when the room left is too
    small, alone (past the bound) when larger than a whole batch."""
    clock = Clock()
    d = Debouncer(0.3, clock=clock)
    paths = [str(tmp_path / f"{i}.md") for i in range(5)]
    for p in paths[:3]:
        d.add_event((Change(p),))
    d.add_event((Change(paths[3]), Change(paths[4])))
    clock.now += 1
    assert sorted(d.ready(limit=4).files) == paths[:3]
    assert sorted(d.ready(limit=4).files) == paths[3:] and not d.pending
    chain = [str(tmp_path / f"c{i}.md") for i in range(6)]
    for a, b in itertools.pairwise(chain):  # renumbered: c0 to c1, c1 to c2, ...
        d.add_event((Change(a), Change(b)))
    clock.now += 1
    assert sorted(d.ready(limit=2).files) == chain and not d.moves


def test_the_other_end_still_being_written_holds_the_move(tmp_path: Path) -> None:
    """Appended to after its move: the new path is not released half-written
    with the old one; the group waits until both are settled."""
    clock = Clock()
    d = Debouncer(0.3, max_wait=2.0, clock=clock)
    old, new = tmp_path / "old.md", tmp_path / "new.md"
    new.write_text("# New\n")
    d.add_event((Change(str(old)), Change(str(new))))
    clock.now += 0.5
    with open(new, "a") as f:  # no event has reached the debouncer yet
        f.write("more text, and more\n")
    assert not d.ready() and len(d) == 2  # the size moved: another quiet period
    clock.now += 0.5
    assert sorted(d.ready().files) == sorted([str(old), str(new)])


def test_clear_and_requeue_keep_the_groups_right(tmp_path: Path) -> None:
    """A root replaced forgets the moves with the paths; a batch the store
    refused comes back as one group, kept whole when one of its paths changes
    again during the backoff."""
    clock = Clock()
    d = Debouncer(0.3, max_wait=1.0, clock=clock)
    a, b = str(tmp_path / "a.md"), str(tmp_path / "b.md")
    d.add_event((Change(a), Change(b)))
    d.clear()
    assert not d.pending and not d.moves
    d.requeue(Batch(files=[a, b]), delay=1.0)
    clock.now += 1.0
    d.add_event((Change(b),))  # an edit during the backoff
    clock.now += 0.1
    assert not d.ready()  # a is due (waited max_wait), b not settled: both wait
    clock.now += 0.3
    assert sorted(d.ready().files) == [a, b] and not d.moves


PATHS = [f"/nowhere/{c}.md" for c in "abcdef"]
PROGRAM = st.lists(
    st.one_of(
        st.tuples(st.just("event"), st.sampled_from(PATHS)),
        st.tuples(st.just("move"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
        st.tuples(st.just("tick"), st.floats(0.01, 3.0)),
        st.tuples(st.sampled_from(["ready", "requeue"]), st.integers(1, 4)),
        st.tuples(st.just("all")),
    ).map(list),
    max_size=40,
)
EXAMPLES = Path(__file__).with_name("examples") / "debouncer"


def run_program(program: list[list[Any]]) -> None:
    """Events, moves (chains and cycles), time, bounded batches, a store's
    refusals and `status --wait`: every batch holds each path once, only paths
    that waited, never one end of a move without the other; the groups name
    only paths waiting."""
    clock = Clock()
    d = Debouncer(0.2, max_wait=2.0, clock=clock)
    moves: list[tuple[str, str]] = []  # both ends waiting, not yet released
    for step in program:
        if step[0] == "event":
            d.add_event((Change(step[1]),))
        elif step[0] == "move":
            d.add_event((Change(step[1]), Change(step[2])))
            moves += [(step[1], step[2])] if step[1] != step[2] else []
        elif step[0] == "tick":
            clock.now += step[1]
        else:
            waiting = set(d.pending)
            batch = d.take_all() if step[0] == "all" else d.ready(step[1])
            out = batch.files + batch.dirs
            assert len(out) == len(set(out)) and set(out) <= waiting
            for src, dst in list(moves):
                assert (src in out) == (dst in out), f"{src} -> {dst} split: {out}"
                if src in out:
                    moves.remove((src, dst))
            if step[0] == "requeue" and out:  # the store refused it: back, as one
                d.requeue(batch, delay=step[1] / 4)
                moves += [(out[0], p) for p in out[1:]]
        assert set(d.moves) <= set(d.pending)


def test_no_path_is_lost_doubled_or_split_from_its_move() -> None:
    """Random programs (a review's probe, kept), the failing ones kept in
    examples/debouncer and replayed first."""
    for path in found(EXAMPLES):
        run_program(load(path))

    @settings(max_examples=500, deadline=None, database=None)
    @given(PROGRAM)
    def generated(program: list[list[Any]]) -> None:
        with kept(EXAMPLES, program):
            run_program(program)

    generated()

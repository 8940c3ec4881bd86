"""The per-file time budget: ``check`` raises once it is spent, time in ``paused``
does not count, budgets nest, and each thread has its own."""

from __future__ import annotations

import threading
import time

import pytest

from mdindex.documents.budget import budget, check, paused
from mdindex.errors import EXIT_PARTIAL, FileTimeout


def test_without_a_budget_check_never_raises() -> None:
    time.sleep(0.01)
    check()
    with budget(None):
        time.sleep(0.02)
        check()


def test_a_spent_budget_raises_a_file_timeout_naming_the_setting() -> None:
    with budget(0.05):
        check()  # within it
        time.sleep(0.1)
        with pytest.raises(FileTimeout) as caught:
            check()
    assert "took over 0.05 s" in str(caught.value)
    assert "file_time_budget_s" in str(caught.value)
    # one file is skipped, the run goes on: a partial run's exit code
    assert caught.value.exit_code == EXIT_PARTIAL


def test_the_budget_ends_with_its_block_even_when_it_raised() -> None:
    with pytest.raises(FileTimeout), budget(0.01):
        time.sleep(0.05)
        check()
    check()  # no budget any more


def test_time_paused_is_not_counted() -> None:
    with budget(0.5):
        with paused():
            time.sleep(0.7)  # the model's time, not the file's
        check()  # about nothing of the 0.5 s spent
        time.sleep(0.7)
        with pytest.raises(FileTimeout):
            check()


def test_paused_outside_a_budget_sets_none() -> None:
    with paused():
        time.sleep(0.01)
    time.sleep(0.01)
    check()


def test_an_inner_budget_gives_the_outer_one_back() -> None:
    with budget(0.05):
        with budget(None):
            time.sleep(0.1)
            check()  # the inner block has none
        with pytest.raises(FileTimeout):
            check()  # the outer one, spent meanwhile
    with budget(None):
        with budget(0.01):
            time.sleep(0.05)
            with pytest.raises(FileTimeout, match=r"0\.01 s"):
                check()
        check()


def test_each_thread_has_its_own_budget() -> None:
    spent = threading.Event()
    done = threading.Event()
    errors: list[BaseException] = []

    def other() -> None:
        try:
            check()  # the main thread's budget is not this thread's
            spent.set()
            with budget(10):
                done.wait(5)
                check()
        except BaseException as exc:
            errors.append(exc)

    with budget(0.01):
        time.sleep(0.05)
        thread = threading.Thread(target=other)
        thread.start()
        spent.wait(5)
        with pytest.raises(FileTimeout):
            check()
        done.set()
        thread.join()
    assert errors == []

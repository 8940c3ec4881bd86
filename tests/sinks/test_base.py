"""The store retrier: backoff within a budget, and one error tree at the boundary."""

from __future__ import annotations

import pytest

from mdindex.errors import LockError, StoreError, StoreUnavailable
from mdindex.sinks.base import Retrier
from tests.conftest import FakeTime


def transient(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionError)


def flaky(failures: int, exc: BaseException) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise exc
        return "done"

    return calls, call


def test_transient_failures_are_retried_with_doubling_delays(clock: FakeTime) -> None:
    retry = Retrier("qdrant", "http://h:6333", 30.0, transient)
    calls, call = flaky(4, ConnectionError("refused"))
    assert retry("upsert", call) == "done"  # type: ignore[arg-type]
    assert len(calls) == 5
    assert clock.sleeps == pytest.approx([0.2, 0.4, 0.8, 1.6])


def test_delays_are_capped_and_the_budget_ends_the_retries(clock: FakeTime) -> None:
    # stores hand the retrier their place already redacted (QdrantStore.where)
    retry = Retrier("qdrant", "http://***@h:6333", 30.0, transient)
    calls, call = flaky(10**6, ConnectionError("refused by http://admin:pw@h:6333/points"))
    with pytest.raises(StoreUnavailable) as exc:
        retry("upsert", call)  # type: ignore[arg-type]
    assert max(clock.sleeps) <= 10.0 and sum(clock.sleeps) == pytest.approx(30.0)
    message = str(exc.value)
    assert f"after {len(calls)} attempts over 30s" in message and "during upsert" in message
    assert "pw" not in message  # credentials in the library's text are masked
    assert exc.value.exit_code == 3


def test_other_errors_are_translated_at_once(clock: FakeTime) -> None:
    retry = Retrier("qdrant-edge", "/var/lib/mdindex/edge", 30.0, transient)
    calls, call = flaky(1, ValueError("wrong vector size"))
    with pytest.raises(StoreError) as exc:
        retry("upsert", call)  # type: ignore[arg-type]
    assert type(exc.value) is StoreError and len(calls) == 1 and clock.sleeps == []
    assert str(exc.value) == (
        "qdrant-edge upsert failed at /var/lib/mdindex/edge: wrong vector size"
    )


def test_our_own_errors_pass_through_untouched(clock: FakeTime) -> None:
    retry = Retrier("qdrant", "here", 30.0, lambda exc: True)
    for err in (LockError("held"), StoreError("mismatch")):
        calls, call = flaky(1, err)
        with pytest.raises(type(err)) as exc:
            retry("open", call)  # type: ignore[arg-type]
        assert exc.value is err and len(calls) == 1
    assert clock.sleeps == []

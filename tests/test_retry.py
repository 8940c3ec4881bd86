"""The retry loop the stores and the embedding server share: backoff within a
budget, and every failure leaving it as one of mdindex's errors."""

from __future__ import annotations

import pytest

from mdindex.errors import ConfigError, EmbeddingError, MdindexError
from mdindex.retry import retry, short
from tests.conftest import FakeTime


def failing(times: int, exc: BaseException) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise exc
        return "ok"

    return calls, call


def run(call: object, budget: float = 30.0) -> str:
    return retry(
        call,  # type: ignore[arg-type]
        what="embed",
        budget_s=budget,
        transient=lambda exc: isinstance(exc, TimeoutError),
        failed=lambda exc: EmbeddingError(f"lasting: {short(exc)}"),
        gave_up=lambda exc, n: EmbeddingError(f"gave up after {n}: {short(exc)}"),
    )


def test_transient_failures_wait_longer_each_time_until_the_budget(clock: FakeTime) -> None:
    calls, call = failing(3, TimeoutError("slow"))
    assert run(call) == "ok" and len(calls) == 4
    assert clock.sleeps == pytest.approx([0.2, 0.4, 0.8])
    calls, call = failing(10**6, TimeoutError("slow"))
    with pytest.raises(EmbeddingError, match=r"gave up after \d+: slow"):
        run(call, budget=20.0)
    assert max(clock.sleeps) <= 10.0


def test_a_lasting_failure_is_translated_at_once_and_ours_pass(clock: FakeTime) -> None:
    calls, call = failing(1, ValueError("bad\nrequest to http://u:secret@h/"))
    with pytest.raises(EmbeddingError) as exc:
        run(call)
    assert len(calls) == 1 and clock.sleeps == []
    assert "secret" not in str(exc.value) and "\n" not in str(exc.value)
    calls, call = failing(1, ConfigError("wrong model"))
    with pytest.raises(ConfigError):
        run(call)
    assert isinstance(ConfigError("x"), MdindexError)

from __future__ import annotations

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import DEFAULT_POLICY, ResiliencePolicy, retry_before_effect


def test_the_default_policy_has_the_deadlines_of_the_spec() -> None:
    p = DEFAULT_POLICY
    assert (p.connect_timeout, p.first_token_timeout, p.idle_timeout) == (5.0, 8.0, 15.0)


def test_backoff_grows_exponentially_up_to_its_cap() -> None:
    p = ResiliencePolicy(backoff_initial=0.25, backoff_multiplier=2.0, backoff_max=1.0)
    assert [p.backoff(a) for a in range(1, 6)] == [0.0, 0.25, 0.5, 1.0, 1.0]


def test_a_policy_rejects_non_positive_deadlines() -> None:
    with pytest.raises(ConfigError, match="idle_timeout"):
        ResiliencePolicy(idle_timeout=0)


async def test_only_failures_that_prove_no_effect_are_retried() -> None:
    clock = SimClock()
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ProviderError("x", ProviderErrorKind.SERVER, "overloaded", status=529)
        return "ok"

    assert await retry_before_effect(clock, ResiliencePolicy(max_attempts=3), flaky) == "ok"
    assert len(calls) == 3

    timeouts: list[int] = []

    async def slow() -> str:
        timeouts.append(1)
        raise ProviderError("x", ProviderErrorKind.TIMEOUT, "first token")

    with pytest.raises(ProviderError):
        await retry_before_effect(clock, ResiliencePolicy(max_attempts=3), slow)
    assert len(timeouts) == 1


async def test_a_rate_limit_waits_its_retry_after_within_the_backoff_cap() -> None:
    clock = SimClock()
    attempts: list[float] = []

    async def limited() -> str:
        attempts.append(clock.now())
        if len(attempts) == 1:
            raise ProviderError("x", ProviderErrorKind.RATE_LIMITED, "slow down", status=429, retry_after=3.0)
        return "ok"

    await retry_before_effect(clock, ResiliencePolicy(backoff_max=4.0), limited)
    assert attempts[1] - attempts[0] == pytest.approx(3.0)


async def test_a_background_task_that_fails_unexpectedly_is_reported_as_a_protocol_error() -> None:
    from brisvox.providers.resilient import guarded

    reported: list[ProviderError] = []

    async def report(error: ProviderError) -> None:
        reported.append(error)

    async def broken() -> None:
        raise RuntimeError("bug")

    async def vendor() -> None:
        raise ProviderError("v", ProviderErrorKind.SERVER, "down")

    await guarded("x", broken(), report)
    await guarded("x", vendor(), report)
    assert [e.kind for e in reported] == [ProviderErrorKind.PROTOCOL, ProviderErrorKind.SERVER]
    assert "RuntimeError" in str(reported[0])

from __future__ import annotations

from brisvox.core.errors import BrisvoxError
from brisvox.providers.errors import ProviderError, ProviderErrorKind


def test_a_provider_error_is_a_brisvox_error_that_names_provider_kind_and_status() -> None:
    err = ProviderError("deepgram", ProviderErrorKind.AUTH, "key rejected", status=401)
    assert isinstance(err, BrisvoxError)
    assert str(err) == "deepgram: auth: key rejected (status 401)"
    assert not err.retryable


def test_transient_kinds_are_retryable_and_permanent_ones_are_not() -> None:
    retryable = {k for k in ProviderErrorKind if k.retryable}
    assert retryable == {
        ProviderErrorKind.CONNECT,
        ProviderErrorKind.TIMEOUT,
        ProviderErrorKind.RATE_LIMITED,
        ProviderErrorKind.SERVER,
        ProviderErrorKind.CLOSED,
    }


def test_a_rate_limit_carries_the_delay_the_provider_asked_for() -> None:
    err = ProviderError("openai", ProviderErrorKind.RATE_LIMITED, "slow down", status=429, retry_after=2.5)
    assert err.retry_after == 2.5 and err.retryable

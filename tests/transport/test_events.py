import pytest

from brisvox.core.errors import InvalidInput
from brisvox.transport import CallInfo, CallRates


def test_call_info_parses_the_sample_rate_key_into_call_rates() -> None:
    assert CallInfo(call_id="a").sample_rate() is None
    assert CallInfo(call_id="a", metadata={"sample_rate": "8000"}).sample_rate() == CallRates.symmetric(8000)
    both = CallInfo(call_id="a", metadata={"sample_rate": "16000", "output_sample_rate": "24000"})
    assert both.sample_rate() == CallRates(16000, 24000)
    with pytest.raises(InvalidInput, match="sample_rate"):
        CallInfo(call_id="a", metadata={"sample_rate": "fast"}).sample_rate()
    with pytest.raises(InvalidInput, match="12345"):
        CallInfo(call_id="a", metadata={"sample_rate": "12345"}).sample_rate()


def test_the_sample_rate_key_is_pinned() -> None:
    assert CallInfo.SAMPLE_RATE_KEY == "sample_rate"

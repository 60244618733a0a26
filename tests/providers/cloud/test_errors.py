"""Vendor error texts are cut and masked before they become a ProviderError (and so a log line)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.secret import Secret, install_log_masking
from brisvox.providers.cloud._errors import MAX_VENDOR_TEXT, vendor_message, vendor_text
from brisvox.providers.cloud.openai_compat import OpenAiCompatLlm, OpenAiCompatOptions
from brisvox.providers.llm import LlmError, LlmRequest
from brisvox.providers.resilient import ResiliencePolicy

from ._fake_http import FakeHttpServer, RecordedRequest, Response

KEY = "sk-proj-echoed-by-the-vendor-0042"


@pytest.fixture
def masked_logs() -> Iterator[None]:
    """The server's log setup (install_log_masking), undone after the test."""
    before = logging.getLogRecordFactory()
    install_log_masking()
    yield
    logging.setLogRecordFactory(before)


async def test_a_vendor_echoing_the_key_in_its_error_body_never_puts_the_key_in_the_log(
    masked_logs: None, caplog: pytest.LogCaptureFixture
) -> None:
    async def echo_the_key(request: RecordedRequest, response: Response) -> None:
        await response.json_error(401, {"error": {"message": f"Invalid header: {request.headers['authorization']}; "
                                                             f"key {KEY} is not valid", "type": "invalid_request"}})

    async with FakeHttpServer(echo_the_key) as server:
        options = OpenAiCompatOptions.preset("openai", model="m", api_key=Secret(KEY), base_url=server.base_url,
                                             policy=ResiliencePolicy(max_attempts=1))
        llm = OpenAiCompatLlm(options, SimClock())
        async with llm.stream(LlmRequest(messages=())) as stream:
            events = [e async for e in stream]
        await llm.aclose()
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the vendor did get it, and echoed it
    error = events[-1]
    assert isinstance(error, LlmError)
    assert KEY not in str(error.error) and "Bearer ***" in str(error.error)
    with caplog.at_level(logging.INFO):
        logging.getLogger("brisvox.engine").error("turn failed: %s", error.error)
        try:
            raise RuntimeError(f"the vendor said {KEY}")
        except RuntimeError:
            logging.getLogger("brisvox.engine").exception("crashed with key %s", KEY)
    assert "turn failed" in caplog.text and "crashed with key ***" in caplog.text
    assert KEY not in caplog.text
    assert all(KEY not in r.getMessage() and KEY not in (r.exc_text or "") for r in caplog.records)


def test_vendor_text_masks_credentials_the_process_never_held_and_is_cut() -> None:
    assert vendor_text("Authorization: Bearer abc.def-123 rejected") == "Authorization: Bearer *** rejected"
    assert vendor_text('{"api_key": "zz-foreign-key"}') == '{"api_key": "***"}'
    assert vendor_text("Incorrect API key provided: sk-live-*****1234.") == "Incorrect API key provided: ***"
    assert vendor_text("token expired") == "token expired"
    assert len(vendor_text("x" * 5000)) == MAX_VENDOR_TEXT
    assert vendor_message(b'{"error": {"message": "bad key Bearer sk-abcdefgh1"}}') == "bad key Bearer ***"

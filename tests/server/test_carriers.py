"""The carriers' REST call control against local fake Twilio and Telnyx APIs: the exact requests."""

from __future__ import annotations

import asyncio
import base64
import logging
from urllib.parse import parse_qs

import pytest

from brisvox.core.clock import SystemClock
from brisvox.core.secret import Secret
from brisvox.engine.phone import Carrier, CarrierError, PhoneLine
from brisvox.server.agent_file import AgentFileError, parse_agent_file
from brisvox.server.call import phone_plan
from brisvox.server.carriers import (
    NoCarrier,
    TelephonySettings,
    TelnyxCalls,
    TwilioCalls,
    call_control,
    check_destination,
)
from brisvox.server.tools import ToolSet
from tests.providers.cloud._fake_http import FakeHttpServer, RecordedRequest, Response

SID, TOKEN, CALL = "AC0123456789abcdef0123456789abcdef", "twilio-auth-token-0123", "CA99"
KEY, CCID = "KEYtelnyx-api-key-0123", "v3:abc_DEF-1"


async def ok(request: RecordedRequest, response: Response) -> None:
    await response.json_error(200, {"ok": True})


async def refuse(request: RecordedRequest, response: Response) -> None:
    await response.json_error(500, {"message": f"token {TOKEN} echoed back"})


async def hang(request: RecordedRequest, response: Response) -> None:
    await asyncio.sleep(3600)


def line(control: object, timeout: float = 5.0) -> PhoneLine:
    async def play(epoch: int, pcm: bytes) -> None:
        raise AssertionError("nothing plays in band here")

    return PhoneLine(control, SystemClock(), out_rate=8000, play=play, timeout=timeout)  # type: ignore[arg-type]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_twilio_hang_up_updates_the_call_to_completed_with_basic_auth() -> None:
    async with FakeHttpServer(ok) as api:
        await line(TwilioCalls(api.base_url, SID, Secret(TOKEN), CALL)).hang_up()
    [req] = api.requests
    assert req.method == "POST" and req.path == f"/2010-04-01/Accounts/{SID}/Calls/{CALL}.json"
    assert req.headers["authorization"] == basic(SID, TOKEN)
    assert req.headers["content-type"] == "application/x-www-form-urlencoded"
    assert parse_qs(req.body.decode()) == {"Status": ["completed"]}


async def test_twilio_transfer_replaces_the_twiml_with_a_dial() -> None:
    async with FakeHttpServer(ok) as api:
        await line(TwilioCalls(api.base_url, SID, Secret(TOKEN), CALL)).transfer("+14155550100")
    [req] = api.requests
    assert req.path == f"/2010-04-01/Accounts/{SID}/Calls/{CALL}.json"
    assert parse_qs(req.body.decode()) == {"Twiml": ["<Response><Dial>+14155550100</Dial></Response>"]}


async def test_telnyx_actions_post_json_with_the_bearer_key() -> None:
    async with FakeHttpServer(ok) as api:
        phone = line(TelnyxCalls(api.base_url, Secret(KEY), CCID))
        await phone.hang_up()
        await phone.transfer("sip:desk@pbx.example.com")
        await phone.send_dtmf("12#", epoch=1)
    paths = [r.path for r in api.requests]
    base = f"/v2/calls/{CCID.replace(':', '%3A')}/actions/"
    assert paths == [base + "hangup", base + "transfer", base + "send_dtmf"]
    assert all(r.method == "POST" and r.headers["authorization"] == f"Bearer {KEY}" for r in api.requests)
    assert [r.json() for r in api.requests] == [
        {}, {"to": "sip:desk@pbx.example.com"}, {"digits": "12#", "duration_millis": 250}]
    assert phone.stats.hangups == 1 and phone.stats.transfers == 1 and phone.stats.dtmf_carrier == 1


async def test_a_carrier_error_is_raised_logged_and_counted_without_the_credentials(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeHttpServer(refuse) as api:
        phone = line(TwilioCalls(api.base_url, SID, Secret(TOKEN), CALL))
        with pytest.raises(CarrierError, match=r"twilio transfer.*HTTP 500"):
            await phone.transfer("+14155550100")
        await phone.hang_up()  # a failed hang-up is logged and counted, not raised
    assert phone.stats.carrier_failures == 2 and phone.stats.hangups == 0
    assert "carrier request failed" in caplog.text and TOKEN not in caplog.text


async def test_a_hanging_carrier_fails_at_the_lines_timeout() -> None:
    async with FakeHttpServer(hang) as api:
        phone = line(TelnyxCalls(api.base_url, Secret(KEY), CCID), timeout=0.2)
        with pytest.raises(CarrierError, match=r"no answer within 0\.2 s"):
            await phone.transfer("+14155550100")
    assert phone.stats.carrier_timeouts == 1


async def test_the_control_comes_from_the_call_metadata_and_the_named_variables() -> None:
    settings = TelephonySettings(twilio_account_sid_env="SID", twilio_auth_token_env="TOK",
                                 telnyx_api_key_env="TELNYX")
    env = {"SID": SID, "TOK": TOKEN, "TELNYX": KEY}
    assert isinstance(call_control({"carrier": "twilio", "carrier_call_id": CALL}, settings, env), TwilioCalls)
    assert isinstance(call_control({"carrier": "telnyx", "carrier_call_id": CCID}, settings, env), TelnyxCalls)
    assert isinstance(call_control({"transport": "websocket"}, settings, env), NoCarrier)
    assert isinstance(call_control({"carrier": "twilio", "carrier_call_id": CALL}, None, env), NoCarrier)
    with pytest.raises(CarrierError, match="TOK"):
        call_control({"carrier": "twilio", "carrier_call_id": CALL}, settings, {"SID": SID})


async def test_without_a_carrier_a_transfer_is_refused_and_a_hang_up_sends_nothing() -> None:
    phone = line(NoCarrier())
    assert phone.carrier is Carrier.NONE
    await phone.hang_up()
    with pytest.raises(CarrierError, match="no phone carrier"):
        await phone.transfer("+14155550100")


async def test_a_transfer_outside_the_allowed_destinations_is_refused_before_any_request() -> None:
    async with FakeHttpServer(ok) as api:
        phone = PhoneLine(TwilioCalls(api.base_url, SID, Secret(TOKEN), CALL), SystemClock(), out_rate=8000,
                          play=lambda e, p: asyncio.sleep(0), transfer_to=("+14155550100",))
        with pytest.raises(CarrierError, match="not a destination"):
            await phone.transfer("+19005550199")
    assert api.requests == []


@pytest.mark.parametrize("to", ["+14155550100", "sip:desk@pbx.example.com", "sips:a.b@host:5061"])
def test_destinations_are_e164_numbers_or_sip_uris(to: str) -> None:
    assert check_destination(to) is None


@pytest.mark.parametrize("to", ["", "14155550100", "+0123", "+1 415 555", "tel:+1415", "sip:@host", "<x>"])
def test_other_destinations_are_refused_with_a_reason(to: str) -> None:
    assert check_destination(to) is not None


TELEPHONY_FILE = """\
[agent]
name = "phone"
prompt = "Answer the phone."
tools = ["end_call", "transfer_call"]

[telephony]
twilio_account_sid_env = "TWILIO_SID"
twilio_auth_token_env = "TWILIO_TOKEN"
twilio_api_base = "http://127.0.0.1:9"
timeout = 2.5
transfer_to = ["+14155550100"]
"""


def test_an_agent_file_names_the_credential_variables_in_its_telephony_table() -> None:
    d = parse_agent_file(TELEPHONY_FILE, available_tools=ToolSet())
    assert d.telephony == TelephonySettings(twilio_account_sid_env="TWILIO_SID", twilio_auth_token_env="TWILIO_TOKEN",
                                            twilio_api_base="http://127.0.0.1:9", timeout=2.5,
                                            transfer_to=("+14155550100",))
    plan = phone_plan(d, {"carrier": "twilio", "carrier_call_id": CALL}, {"TWILIO_SID": SID, "TWILIO_TOKEN": TOKEN},
                      None)
    assert plan is not None and isinstance(plan.control, TwilioCalls) and plan.timeout == 2.5
    assert plan.transfer_to == ("+14155550100",)
    # unset variables: no line (logged), the call still runs
    assert phone_plan(d, {"carrier": "twilio", "carrier_call_id": CALL}, {}, None) is None


def test_bad_telephony_settings_are_reported_at_their_keys() -> None:
    text = TELEPHONY_FILE.replace('"TWILIO_SID"', '"lower-case"').replace('"+14155550100"', '"555"')
    with pytest.raises(AgentFileError) as info:
        parse_agent_file(text, available_tools=ToolSet(), environ={})
    found = "\n".join(f"{p.key}: {p.message}" for p in info.value.problems)
    assert "telephony.twilio_account_sid_env: expected an environment variable name" in found
    assert "telephony.twilio_auth_token_env: environment variable TWILIO_TOKEN is not set" in found
    assert "telephony.transfer_to[0]: expected an E.164 number" in found


def test_an_agent_without_telephony_tools_gets_no_phone_line() -> None:
    d = parse_agent_file(TELEPHONY_FILE.replace('tools = ["end_call", "transfer_call"]', ""),
                         available_tools=ToolSet())
    assert phone_plan(d, {"carrier": "twilio", "carrier_call_id": CALL}, {}, None) is None


def test_the_python_agent_takes_the_telephony_tools_and_settings() -> None:
    from brisvox.server.agent import Agent, AgentError
    from brisvox.server.phone_tools import end_call, send_dtmf

    settings = TelephonySettings(telnyx_api_key_env="TELNYX_KEY", timeout=3.0)
    agent = Agent(prompt="Answer the phone.", tools=[end_call, send_dtmf], telephony=settings)
    d = agent.definition()
    assert d.tools == ("end_call", "send_dtmf") and d.telephony == settings
    plan = phone_plan(d, {"carrier": "telnyx", "carrier_call_id": CCID}, {"TELNYX_KEY": KEY}, None)
    assert plan is not None and isinstance(plan.control, TelnyxCalls) and plan.timeout == 3.0
    with pytest.raises(AgentError, match="environment variable TELNYX_KEY is not set"):
        agent.check({})

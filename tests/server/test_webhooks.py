"""The incoming-call webhooks: signatures (Twilio's own validator, a real Ed25519 key), limits, answers."""

from __future__ import annotations

import base64
import re
from urllib.parse import urlencode
from xml.etree import ElementTree

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.testclient import TestClient
from twilio.request_validator import RequestValidator

from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret
from brisvox.server.auth import CallClaims, verify_call_token
from brisvox.server.settings import Settings
from brisvox.server.webhooks import WebhookStats, stream_token_check, webhook_routes
from brisvox.transport.telephony.webhook import (
    MAX_BODY_BYTES,
    check_telnyx,
    check_twilio,
    parse_form,
    stream_texml,
    stream_twiml,
)
from brisvox.transport.twilio.protocol import StreamStart

NOW = 1_800_000_000.0
TWILIO_TOKEN = "0123456789abcdef0123456789abcdef"
SECRET = "k" * 40
HOOK = "https://voice.example.com/twilio/voice"
TELNYX_HOOK = "https://voice.example.com/telnyx/voice"
FORM = {"CallSid": "CA123", "AccountSid": "AC9", "From": "+14155550100", "To": "+14155550199"}
PRIVATE = Ed25519PrivateKey.generate()
PUBLIC = PRIVATE.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def settings(**extra: object) -> Settings:
    env = {
        "BRISVOX_AUTH": "signed", "BRISVOX_AUTH_SECRET": SECRET,
        "BRISVOX_TWILIO_AUTH_TOKEN": TWILIO_TOKEN, "BRISVOX_TWILIO_PUBLIC_URL": "wss://voice.example.com/twilio",
        "BRISVOX_TWILIO_WEBHOOK_URL": HOOK,
        "BRISVOX_TELNYX_WEBHOOK_URL": TELNYX_HOOK, "BRISVOX_TELNYX_PUBLIC_KEY": base64.b64encode(PUBLIC).decode(),
        "BRISVOX_TELNYX_PUBLIC_URL": "wss://voice.example.com/telnyx",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return Settings.from_env({k: v for k, v in env.items() if v != "None"})


def client(stats: WebhookStats, **extra: object) -> TestClient:
    app = Starlette(routes=webhook_routes(settings(**extra), "front-desk", lambda: NOW, stats))
    return TestClient(app, base_url="https://voice.example.com")


def twilio_post(c: TestClient, form: dict[str, str], signature: str | None = None) -> object:
    sig = signature if signature is not None else RequestValidator(TWILIO_TOKEN).compute_signature(HOOK, form)
    return c.post("/twilio/voice", content=urlencode(form), headers={
        "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": sig})


def telnyx_post(c: TestClient, body: bytes, timestamp: float = NOW, key: Ed25519PrivateKey = PRIVATE) -> object:
    ts = str(int(timestamp))
    sig = base64.b64encode(key.sign(ts.encode() + b"|" + body)).decode()
    return c.post("/telnyx/voice", content=body, headers={
        "content-type": "application/x-www-form-urlencoded", "telnyx-signature-ed25519": sig, "telnyx-timestamp": ts})


def test_a_signed_twilio_call_is_answered_with_a_stream_carrying_the_agent_and_its_call_token() -> None:
    stats = WebhookStats()
    answer = twilio_post(client(stats), FORM)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/xml")
    xml = answer.text
    assert '<Connect><Stream url="wss://voice.example.com/twilio">' in xml
    assert '<Parameter name="agent" value="front-desk" />' in xml
    token = re.search(r'name="token" value="([^"]+)"', xml)
    assert token is not None
    claims = verify_call_token(token.group(1), SECRET, now=NOW + 5, agent="front-desk")
    assert isinstance(claims, CallClaims) and claims.subject == "CA123" and claims.expires == NOW + 120
    assert stats.answered == {"twilio": 1}


@pytest.mark.parametrize(("signature", "reason"), [("", "bad_signature"), ("AAAA", "bad_signature")])
def test_a_wrong_twilio_signature_is_refused_with_403(signature: str, reason: str) -> None:
    stats = WebhookStats()
    answer = twilio_post(client(stats), FORM, signature)
    assert answer.status_code == 403 and answer.text.startswith(reason) and stats.refused == {reason: 1}


def test_a_twilio_signature_over_other_form_values_is_refused() -> None:
    sig = RequestValidator(TWILIO_TOKEN).compute_signature(HOOK, FORM)
    answer = twilio_post(client(WebhookStats()), {**FORM, "To": "+19005550100"}, sig)
    assert answer.status_code == 403


def test_oversized_non_form_and_malformed_bodies_get_their_own_4xx() -> None:
    stats = WebhookStats()
    c = client(stats)
    big = c.post("/twilio/voice", content=b"a=" + b"x" * MAX_BODY_BYTES,
                 headers={"content-type": "application/x-www-form-urlencoded"})
    assert big.status_code == 413
    json_body = c.post("/twilio/voice", json=FORM)
    assert json_body.status_code == 415 and "x-www-form-urlencoded" in json_body.text
    no_sid = twilio_post(c, {"From": "+14155550100"})
    assert no_sid.status_code == 400 and no_sid.text.startswith("no_call_sid")
    assert stats.refused == {"too_large": 1, "not_a_form": 1, "no_call_sid": 1}


def test_a_signed_telnyx_call_is_answered_with_bidirectional_texml() -> None:
    stats = WebhookStats()
    answer = telnyx_post(client(stats), urlencode(FORM).encode())
    assert answer.status_code == 200
    assert ('<Stream url="wss://voice.example.com/telnyx" bidirectionalMode="rtp" bidirectionalCodec="PCMU">'
            in answer.text)
    assert '<Parameter name="agent" value="front-desk" />' in answer.text
    assert 'name="token"' not in answer.text  # the Telnyx stream reads no parameters: no token travels


def test_telnyx_refuses_a_stale_timestamp_another_key_and_a_changed_body() -> None:
    stats = WebhookStats()
    c = client(stats)
    body = urlencode(FORM).encode()
    assert telnyx_post(c, body, timestamp=NOW - 301).status_code == 403
    assert telnyx_post(c, body, key=Ed25519PrivateKey.generate()).status_code == 403
    ts = str(int(NOW))
    sig = base64.b64encode(PRIVATE.sign(ts.encode() + b"|" + body)).decode()
    changed = c.post("/telnyx/voice", content=body + b"&x=1", headers={
        "content-type": "application/x-www-form-urlencoded", "telnyx-signature-ed25519": sig, "telnyx-timestamp": ts})
    assert changed.status_code == 403
    assert stats.refused == {"stale_timestamp": 1, "bad_signature": 2}


def test_no_route_without_its_signature_check_and_no_token_without_a_signing_key() -> None:
    env = {"BRISVOX_TWILIO_AUTH_TOKEN": TWILIO_TOKEN, "BRISVOX_TWILIO_PUBLIC_URL": "wss://voice.example.com/twilio",
           "BRISVOX_TWILIO_WEBHOOK_URL": HOOK}
    routes = webhook_routes(Settings.from_env(env), "a", lambda: NOW)
    assert [r.path for r in routes] == ["/twilio/voice"]  # no Telnyx key: no Telnyx route
    answer = TestClient(Starlette(routes=routes), base_url="https://voice.example.com").post(
        "/twilio/voice", content=urlencode(FORM), headers={
            "content-type": "application/x-www-form-urlencoded",
            "x-twilio-signature": RequestValidator(TWILIO_TOKEN).compute_signature(HOOK, FORM)})
    assert answer.status_code == 200 and 'name="token"' not in answer.text


def test_a_webhook_url_without_its_check_stops_the_start() -> None:
    with pytest.raises(ConfigError, match="BRISVOX_TWILIO_WEBHOOK_URL is set but BRISVOX_TWILIO_AUTH_TOKEN"):
        Settings.from_env({"BRISVOX_TWILIO_WEBHOOK_URL": HOOK})
    with pytest.raises(ConfigError, match="BRISVOX_TELNYX_PUBLIC_KEY"):
        Settings.from_env({"BRISVOX_TELNYX_WEBHOOK_URL": TELNYX_HOOK})
    with pytest.raises(ConfigError, match="Ed25519"):
        Settings.from_env({"BRISVOX_TELNYX_PUBLIC_KEY": base64.b64encode(b"short").decode()})


def _start(call_sid: str, **params: str) -> StreamStart:
    return StreamStart(stream_sid="MZ1", call_sid=call_sid, account_sid="AC9", tracks=("inbound",),
                       custom_parameters=params)


def test_the_twilio_stream_admits_only_its_own_calls_token() -> None:
    from brisvox.server.auth import issue_call_token

    admit = stream_token_check(Secret(SECRET), "front-desk", lambda: NOW)
    token = issue_call_token(SECRET, now=NOW, ttl=120, agent="front-desk", subject="CA123")
    assert admit(_start("CA123", token=token)) is None
    assert admit(_start("CA999", token=token)) == "the call token is for another call"
    assert admit(_start("CA123")) == "no call token in the stream's parameters"
    assert admit(_start("CA123", token=token + "x")) == "call token refused (invalid_token)"
    later = stream_token_check(Secret(SECRET), "front-desk", lambda: NOW + 300)
    assert later(_start("CA123", token=token)) == "call token refused (expired_token)"


def test_answers_escape_their_attribute_values() -> None:
    tricky = 'a"\'<&>'
    stream = ElementTree.fromstring(stream_twiml("wss://h/t?x=1&y=2", {"agent": tricky}))[0][0]
    assert stream.get("url") == "wss://h/t?x=1&y=2" and stream[0].get("value") == tricky
    assert 'bidirectionalCodec="PCMA"' in stream_texml("wss://h/t", "PCMA", {})


@given(st.binary(max_size=600))
def test_the_form_parser_answers_every_body_with_fields_or_a_4xx(body: bytes) -> None:
    form = parse_form(body)
    assert isinstance(form, dict) or 400 <= form.status < 500


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=8), st.text(max_size=40))
def test_the_twilio_check_never_raises_and_refuses_what_it_did_not_sign(form: dict[str, str], sig: str) -> None:
    refusal = check_twilio(TWILIO_TOKEN, HOOK, form, sig)
    expected = RequestValidator(TWILIO_TOKEN).compute_signature(HOOK, form)
    assert (refusal is None) == (sig == expected)


@given(st.binary(max_size=200), st.one_of(st.none(), st.text(max_size=100)), st.one_of(st.none(), st.text(max_size=16)))
def test_the_telnyx_check_never_raises_on_any_headers(body: bytes, sig: str | None, ts: str | None) -> None:
    refusal = check_telnyx(PUBLIC, body, sig, ts, NOW)
    assert refusal is not None and refusal.status == 403

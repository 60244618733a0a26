"""Carrier call control over REST: what the telephony tools send to Twilio and Telnyx.

* Twilio (``POST {base}/2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json``, form body,
  HTTP basic auth with the account SID and auth token): hang-up is ``Status=completed``;
  a transfer replaces the call's TwiML with ``<Response><Dial>{to}</Dial></Response>``
  (``Twiml=``), which also ends the media stream.  Twilio has no REST command that sends
  digits into a live call without replacing its TwiML, so ``send_dtmf`` plays the tones
  in band on Twilio calls.
* Telnyx (``POST {base}/v2/calls/{call_control_id}/actions/{hangup,transfer,send_dtmf}``,
  JSON body, ``Authorization: Bearer <API key>``).

The credentials come only from environment variables the agent file names
(``[telephony]``: :class:`TelephonySettings`), read when a call starts; they are
:class:`~brisvox.core.secret.Secret` and never reach a log.  The base URLs are settings so
tests point them at local fakes.  An answer other than 2xx is a
:class:`~brisvox.engine.phone.CarrierError` naming the status (the body is not logged: it
may echo the request).  The timeout is the :class:`~brisvox.engine.phone.PhoneLine`'s, on
the injected clock; httpx's own timeout is a looser backstop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote
from xml.sax.saxutils import escape

from brisvox.core.secret import Secret
from brisvox.engine.phone import CARRIER_TIMEOUT, Carrier, CarrierError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "TELNYX_API",
    "TWILIO_API",
    "NoCarrier",
    "TelephonySettings",
    "TelnyxCalls",
    "TwilioCalls",
    "call_control",
    "check_destination",
]

TWILIO_API: Final = "https://api.twilio.com"
TELNYX_API: Final = "https://api.telnyx.com"
_BACKSTOP: Final = 30.0  # httpx's own timeout; the line's (injected clock) is the real bound
DTMF_DURATION_MS: Final = 250
_DESTINATION = re.compile(r"\+[1-9][0-9]{6,14}|sips?:[A-Za-z0-9._~+\-]{1,64}@[A-Za-z0-9.\-]{1,253}(:[0-9]{1,5})?")


def check_destination(to: str) -> str | None:
    """Why ``to`` is not a transfer destination (an E.164 number or a sip: URI); None when it is."""
    if _DESTINATION.fullmatch(to) is None:
        return "expected an E.164 number such as +14155550100 or a sip:user@host URI"
    return None


@dataclass(frozen=True, slots=True)
class TelephonySettings:
    """The agent file's ``[telephony]``: the names of the variables that hold the carriers'
    credentials, the API base URLs, the request timeout and the allowed transfer destinations
    (empty: any valid one)."""

    twilio_account_sid_env: str | None = None
    twilio_auth_token_env: str | None = None
    telnyx_api_key_env: str | None = None
    twilio_api_base: str = TWILIO_API
    telnyx_api_base: str = TELNYX_API
    timeout: float = CARRIER_TIMEOUT
    transfer_to: tuple[str, ...] = field(default_factory=tuple)


class TwilioCalls:
    """One Twilio call's control (see the module docs)."""

    carrier = Carrier.TWILIO

    def __init__(self, base: str, account_sid: str, auth_token: Secret, call_sid: str) -> None:
        self._url = f"{base.rstrip('/')}/2010-04-01/Accounts/{quote(account_sid, safe='')}/Calls/" \
                    f"{quote(call_sid, safe='')}.json"
        self._account_sid = account_sid
        self._auth_token = auth_token

    async def hang_up(self) -> None:
        await self._update({"Status": "completed"})

    async def transfer(self, to: str) -> None:
        await self._update({"Twiml": f"<Response><Dial>{escape(to)}</Dial></Response>"})

    async def send_dtmf(self, keys: str) -> bool:
        return False  # no REST command for it (see the module docs): the line plays the tones

    async def _update(self, form: dict[str, str]) -> None:
        import httpx

        async with httpx.AsyncClient(timeout=_BACKSTOP) as client:
            answer = await client.post(self._url, data=form, auth=(self._account_sid, self._auth_token.reveal()))
        _check(answer, "Twilio")


class TelnyxCalls:
    """One Telnyx call's control (see the module docs)."""

    carrier = Carrier.TELNYX

    def __init__(self, base: str, api_key: Secret, call_control_id: str) -> None:
        self._base = f"{base.rstrip('/')}/v2/calls/{quote(call_control_id, safe='')}/actions/"
        self._api_key = api_key

    async def hang_up(self) -> None:
        await self._action("hangup", {})

    async def transfer(self, to: str) -> None:
        await self._action("transfer", {"to": to})

    async def send_dtmf(self, keys: str) -> bool:
        # Telnyx takes 0-9, A-D, *, # and w (a 0.5 s pause), as our keys.
        await self._action("send_dtmf", {"digits": keys, "duration_millis": DTMF_DURATION_MS})
        return True

    async def _action(self, action: str, body: dict[str, Any]) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {self._api_key.reveal()}"}
        async with httpx.AsyncClient(timeout=_BACKSTOP) as client:
            answer = await client.post(self._base + action, json=body, headers=headers)
        _check(answer, "Telnyx")


class NoCarrier:
    """The generic WebSocket: no REST API; ending the stream ends the call, DTMF goes in band."""

    carrier = Carrier.NONE

    async def hang_up(self) -> None:
        return None

    async def transfer(self, to: str) -> None:
        raise CarrierError("this call has no phone carrier, so it cannot be transferred")

    async def send_dtmf(self, keys: str) -> bool:
        return False


def _check(answer: httpx.Response, carrier: str) -> None:
    if not 200 <= answer.status_code < 300:
        raise CarrierError(f"{carrier} answered HTTP {answer.status_code}")


def call_control(metadata: Mapping[str, str], settings: TelephonySettings | None,
                 environ: Mapping[str, str]) -> TwilioCalls | TelnyxCalls | NoCarrier:
    """The control of the call whose metadata is ``metadata`` (``carrier``, ``carrier_call_id``):
    the carrier's REST API when the agent names its credentials, else :class:`NoCarrier`
    (raises :class:`CarrierError` when a carrier call's credentials are named but unset)."""
    carrier, call_id = metadata.get("carrier"), metadata.get("carrier_call_id")
    if settings is None or carrier is None or not call_id:
        return NoCarrier()
    if carrier == Carrier.TWILIO.value and settings.twilio_account_sid_env and settings.twilio_auth_token_env:
        sid = _env(environ, settings.twilio_account_sid_env)
        token = _env(environ, settings.twilio_auth_token_env)
        return TwilioCalls(settings.twilio_api_base, sid, Secret(token), call_id)
    if carrier == Carrier.TELNYX.value and settings.telnyx_api_key_env:
        return TelnyxCalls(settings.telnyx_api_base, Secret(_env(environ, settings.telnyx_api_key_env)), call_id)
    return NoCarrier()


def _env(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name)
    if not value:
        raise CarrierError(f"environment variable {name} (named in [telephony]) is not set")
    return value

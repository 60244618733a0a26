"""The thin WebSocket shell shared by the speech-to-speech adapters.

An adapter gives a pure encoder (our calls to vendor JSON) and a pure decoder (one vendor
message to a list of :data:`~brisvox.providers.s2s.S2sEvent`); this shell opens the socket
under the connect deadline, sends the setup and waits for the vendor's acceptance under the
first-token deadline, then runs one reader task.  Every send is bounded by the idle
deadline on the injected clock.  Reads are not: a conversation is legitimately silent for
minutes, and a dead connection ends the read with a close.  A close becomes a fatal
:class:`S2sError` by its close code; a message the decoder cannot read becomes a
non-fatal one of kind ``protocol``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from brisvox.core.clock import Clock, deadline
from brisvox.core.errors import DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.providers.cloud._ws import close_error, close_ws, open_ws
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import ResiliencePolicy, guarded, timeout_error
from brisvox.providers.s2s import S2sError, S2sEvent, S2sReady
from brisvox.providers.session import SessionBase

__all__ = ["Decoder", "S2sWsProvider", "S2sWsSession", "decode_pcm", "load_object", "protocol_error"]

log = logging.getLogger(__name__)

Decoder = Callable[[str | bytes], list[S2sEvent]]


def protocol_error(provider: str, what: str) -> S2sError:
    return S2sError(ProviderError(provider, ProviderErrorKind.PROTOCOL, what), fatal=False)


def load_object(provider: str, raw: str | bytes) -> dict[str, Any] | S2sError:
    """One vendor message as a JSON object, or the protocol error saying why not."""
    try:
        msg = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return protocol_error(provider, "a message is not JSON")
    if not isinstance(msg, dict):
        return protocol_error(provider, "a message is not a JSON object")
    return msg


def decode_pcm(provider: str, data: object) -> bytes | S2sError:
    """Base64 PCM16 audio from a vendor message, or the protocol error saying why not."""
    if not isinstance(data, str):
        return protocol_error(provider, "an audio chunk without its data")
    try:
        pcm = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return protocol_error(provider, "an audio chunk is not base64")
    if len(pcm) % 2:
        return protocol_error(provider, "an audio chunk is not whole PCM16 samples")
    return pcm


class S2sWsProvider:
    """What the S2S providers share: their options, the injected clock, a name and a repr without the key."""

    provider = "s2s"

    def __init__(self, options: Any, clock: Clock) -> None:
        self._options = options
        self._clock = clock

    @property
    def name(self) -> str:
        return self.provider

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._options.model!r}, base_url={self._options.base_url!r})"


class S2sWsSession(SessionBase[S2sEvent]):
    """One S2S conversation over one WebSocket (no reconnect: the model's state lives in the connection)."""

    def __init__(self, provider: str, decode: Decoder, clock: Clock, policy: ResiliencePolicy) -> None:
        super().__init__(name=f"{provider} s2s")
        self.provider = provider
        self._decode = decode
        self._clock = clock
        self._policy = policy
        self._ws: ClientConnection | None = None
        self._scope = TaskScope(provider)

    async def _open(self, url: str, headers: Mapping[str, str], setup: list[dict[str, Any]]) -> None:
        """Connect, send the setup messages and wait for the vendor's acceptance; raises ProviderError."""
        ws = await open_ws(self.provider, url, headers, self._clock, self._policy)
        self._ws = ws
        try:
            for message in setup:
                await self._send(message)
            await self._await_ready(ws)
        except BaseException:
            self._ws = None
            await close_ws(ws, self._clock, self._policy)
            raise
        self._scope.spawn(self._reader(ws), name="reader")

    async def _reader(self, ws: ClientConnection) -> None:
        # The read coroutine is made here, so a session closed before its reader ran leaves none unawaited.
        await guarded(self.provider, self._read(ws), self._fatal)

    async def _await_ready(self, ws: ClientConnection) -> None:
        seconds = self._policy.first_token_timeout
        try:
            async with deadline(self._clock, seconds, "s2s setup"):
                async for raw in ws:
                    for event in self._decode(raw):
                        if isinstance(event, S2sReady):
                            return
                        if isinstance(event, S2sError):
                            raise event.error
                raise ProviderError(self.provider, ProviderErrorKind.CLOSED, "closed before the setup was accepted")
        except DeadlineExceeded:
            raise timeout_error(self.provider, "the setup", seconds) from None
        except ConnectionClosed as exc:
            raise close_error(self.provider, exc) from None

    async def _fatal(self, error: ProviderError) -> None:
        await self._emit(S2sError(error, fatal=True))
        self._finish()

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                for event in self._decode(raw):
                    await self._emit(event)
        except ConnectionClosed as exc:
            await self._fatal(close_error(self.provider, exc))
            return
        self._finish()

    async def _send(self, message: dict[str, Any]) -> None:
        self._check_open()
        ws = self._ws
        if ws is None:
            raise ProviderError(self.provider, ProviderErrorKind.CLOSED, "the session is not connected")
        seconds = self._policy.idle_timeout
        try:
            async with deadline(self._clock, seconds, "s2s send"):
                await ws.send(json.dumps(message, ensure_ascii=False))
        except DeadlineExceeded:
            raise timeout_error(self.provider, "a send", seconds) from None
        except ConnectionClosed as exc:
            raise close_error(self.provider, exc) from None

    async def _shutdown(self) -> None:
        ws = self._ws
        self._ws = None
        self._scope.cancel()
        # The reader reports its own failure through guarded() (a fatal S2sError event): ignoring its
        # re-raise here avoids a second report, as the other WebSocket sessions do.
        with contextlib.suppress(Exception):
            await self._scope.aclose()
        if ws is not None:
            await close_ws(ws, self._clock, self._policy)

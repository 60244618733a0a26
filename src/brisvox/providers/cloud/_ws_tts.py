"""The shared machinery of the multiplexed WebSocket TTS adapters (Cartesia, ElevenLabs).

Both vendors speak many *contexts* over one socket: each of our context ids maps to a
vendor context id (``"<generation>-<id>"``, the generation counting reconnects, so an id is
never reused on a socket), text goes out as JSON messages, audio comes back as base64 in
JSON messages tagged with the vendor context id.  A subclass supplies the messages
(:meth:`_text_messages`, :meth:`_flush_messages`, :meth:`_cancel_message`) and the parser
(:meth:`_parse`); this base does the rest:

* **Deadlines** (injected clock): a context that was flushed must produce its first audio
  within ``first_token_timeout`` and then some message every ``idle_timeout`` until it is
  done; a context that misses one gets a non-fatal ``TtsError`` of kind ``timeout`` and is
  cancelled at the vendor.
* **Reconnect**: when the socket drops, every context in flight gets a non-fatal
  ``TtsError`` of kind ``closed`` (it is never replayed: part of it may have been heard),
  and the session reconnects with the policy's backoff; new contexts go to the new socket.
  When the attempts run out the session ends with a fatal error.
* **Cancel** is synchronous (the base class purges queued events at once); the vendor's
  cancel message goes out from a task of the session.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from brisvox.core.clock import Clock, deadline
from brisvox.core.errors import DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.providers.cloud._ws import close_error, close_ws, open_ws
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import ResiliencePolicy, guarded
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsError, TtsEvent, TtsFlushed, TtsSessionBase

__all__ = ["ContextState", "WsTtsSession", "decode_audio"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ContextState:
    """One context of ours on the current socket."""

    id: int
    wire_id: str
    opened: bool = False  # a first message went out
    flushed: bool = False
    audio_seconds: float = 0.0  # audio received so far (word timings are offset by it where relative)
    deadline: float | None = None  # when the next message must have arrived
    got_audio: bool = False
    scratch: Any = None  # the subclass's per-context parser state


def decode_audio(provider: str, data: Any) -> bytes:
    if not isinstance(data, str):
        raise ProviderError(provider, ProviderErrorKind.PROTOCOL, "an audio message has no base64 data")
    try:
        return base64.b64decode(data, validate=False)
    except ValueError:
        raise ProviderError(provider, ProviderErrorKind.PROTOCOL, "an audio message is not base64") from None


class WsTtsSession(TtsSessionBase):
    """Base of a multiplexed WebSocket TTS session; see the module docs."""

    provider = "tts"

    def __init__(
        self, url: str, headers: Mapping[str, str], config: TtsConfig, clock: Clock, policy: ResiliencePolicy
    ) -> None:
        super().__init__(name=f"{self.provider} tts")
        self._url = url
        self._headers = dict(headers)
        self._config = config
        self._clock = clock
        self._policy = policy
        self._ws: ClientConnection | None = None
        self._generation = 0
        self._contexts: dict[int, ContextState] = {}
        self._by_wire: dict[str, ContextState] = {}
        self._scope = TaskScope(f"{self.provider} tts")
        self._wake = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self.reconnects = 0

    # --- subclass hooks ----------------------------------------------------------------------

    def _text_messages(self, ctx: ContextState, text: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _flush_messages(self, ctx: ContextState) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _cancel_message(self, ctx: ContextState) -> dict[str, Any] | None:
        raise NotImplementedError

    def _parse(self, message: dict[str, Any]) -> tuple[ContextState | None, list[TtsEvent], bool]:
        """(its context, the events it carries, whether the context is done) for one vendor message."""
        raise NotImplementedError

    def _close_socket_message(self) -> dict[str, Any] | None:
        return None

    # --- lifecycle ---------------------------------------------------------------------------

    async def _start(self) -> None:
        self._ws = await open_ws(self.provider, self._url, self._headers, self._clock, self._policy)
        self._scope.spawn(guarded(self.provider, self._read(), self._fatal), name="reader")
        self._scope.spawn(guarded(self.provider, self._watch(), self._fatal), name="deadlines")

    async def _fatal(self, error: ProviderError) -> None:
        await self._emit(TtsError(error=error, fatal=True))
        self._finish()

    def _context(self, context_id: int) -> ContextState:
        ctx = self._contexts.get(context_id)
        if ctx is None:
            ctx = ContextState(context_id, f"{self._generation}-{context_id}")
            self._contexts[context_id] = ctx
            self._by_wire[ctx.wire_id] = ctx
        return ctx

    def _lookup(self, wire_id: Any) -> ContextState | None:
        return self._by_wire.get(wire_id) if isinstance(wire_id, str) else None

    async def send_text(self, context_id: int, text: str) -> None:
        self._check_open()
        if self.is_cancelled(context_id) or not text:
            return
        ctx = self._context(context_id)
        if ctx.flushed:
            return
        await self._send(self._text_messages(ctx, text))
        ctx.opened = True

    async def flush(self, context_id: int) -> None:
        self._check_open()
        if self.is_cancelled(context_id):
            return
        ctx = self._context(context_id)
        if ctx.flushed:
            return
        ctx.flushed = True
        if not ctx.opened:
            # Nothing was said in this context: there is nothing to wait for.
            self._drop(ctx)
            await self._emit(TtsFlushed(context_id=context_id))
            return
        ctx.deadline = self._clock.now() + (self._policy.idle_timeout if ctx.got_audio else self._policy.first_token_timeout)
        self._wake.set()
        await self._send(self._flush_messages(ctx))

    def _on_cancel(self, context_id: int) -> None:
        ctx = self._contexts.get(context_id)
        if ctx is None:
            return
        self._drop(ctx)
        if ctx.opened:
            message = self._cancel_message(ctx)
            if message is not None and self._ws is not None:
                with contextlib.suppress(Exception):
                    self._scope.spawn(self._send([message]), name=f"cancel {context_id}")

    def _drop(self, ctx: ContextState) -> None:
        self._contexts.pop(ctx.id, None)
        self._by_wire.pop(ctx.wire_id, None)

    async def _send(self, messages: list[dict[str, Any]]) -> None:
        ws = self._ws
        if ws is None:
            return
        try:
            async with self._send_lock:
                for message in messages:
                    await ws.send(json.dumps(message, ensure_ascii=False, separators=(",", ":")))
        except ConnectionClosed:
            return  # the reader sees the close and reconnects

    async def _shutdown(self) -> None:
        ws = self._ws
        self._ws = None
        if ws is not None:
            bye = self._close_socket_message()
            if bye is not None:
                with contextlib.suppress(Exception):
                    await ws.send(json.dumps(bye))
        self._scope.cancel()
        with contextlib.suppress(Exception):
            await self._scope.aclose()
        if ws is not None:
            await close_ws(ws, self._clock, self._policy)

    # --- reading -----------------------------------------------------------------------------

    async def _read(self) -> None:
        while True:
            ws = self._ws
            assert ws is not None
            try:
                async for raw in ws:
                    await self._handle(raw)
                error = ProviderError(self.provider, ProviderErrorKind.CLOSED, "the vendor closed the websocket")
            except ConnectionClosed as exc:
                error = close_error(self.provider, exc)
            except ProviderError as exc:
                error = exc
            except (ValueError, TypeError, KeyError) as exc:
                error = ProviderError(self.provider, ProviderErrorKind.PROTOCOL, f"unreadable message ({type(exc).__name__})")
            self._ws = None
            await close_ws(ws, self._clock, self._policy)  # after a vendor error the socket is still open
            await self._fail_in_flight(error)
            if not error.retryable or not await self._reconnect():
                await self._emit(TtsError(error=error, fatal=True))
                self._finish()
                return

    async def _handle(self, raw: str | bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            raise ProviderError(self.provider, ProviderErrorKind.PROTOCOL, "a message is not JSON") from None
        if not isinstance(message, dict):
            raise ProviderError(self.provider, ProviderErrorKind.PROTOCOL, "a message is not a JSON object")
        ctx, events, done = self._parse(message)
        if ctx is None or self.is_cancelled(ctx.id):
            return
        for event in events:
            if isinstance(event, TtsAudio):
                ctx.got_audio = True
                ctx.audio_seconds += event.duration
            await self._emit(event)
        if ctx.flushed:
            ctx.deadline = None if done else self._clock.now() + self._policy.idle_timeout
        if done:
            self._drop(ctx)
            if not any(isinstance(e, TtsError) for e in events):
                await self._emit(TtsFlushed(context_id=ctx.id))

    async def _fail_in_flight(self, error: ProviderError) -> None:
        in_flight = [c for c in self._contexts.values() if c.opened]
        self._contexts.clear()
        self._by_wire.clear()
        for ctx in in_flight:
            if not self.is_cancelled(ctx.id):
                failed = ProviderError(self.provider, error.kind, f"context lost with the connection: {error}")
                await self._emit(TtsError(error=failed, context_id=ctx.id, fatal=False))

    async def _reconnect(self) -> bool:
        policy = self._policy
        if self.reconnects >= policy.max_reconnects:
            return False
        for attempt in range(2, policy.max_attempts + 1):
            await self._clock.sleep(policy.backoff(attempt))
            try:
                ws = await open_ws(self.provider, self._url, self._headers, self._clock, policy)
            except ProviderError as exc:
                if not exc.retryable:
                    return False
                continue
            self._generation += 1
            self._ws = ws
            self.reconnects += 1
            log.info("%s: reconnected (attempt %d)", self.provider, attempt)
            return True
        return False

    # --- deadlines ---------------------------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            self._wake.clear()
            pending = [c.deadline for c in self._contexts.values() if c.deadline is not None]
            if not pending:
                await self._wake.wait()
                continue
            first = min(pending)
            now = self._clock.now()
            if now < first:
                with contextlib.suppress(DeadlineExceeded):
                    async with deadline(self._clock, first - now, "tts context deadlines"):
                        await self._wake.wait()
                continue
            for ctx in [c for c in self._contexts.values() if c.deadline is not None and c.deadline <= now]:
                seconds = self._policy.idle_timeout if ctx.got_audio else self._policy.first_token_timeout
                what = "the next audio" if ctx.got_audio else "the first audio"
                error = ProviderError(self.provider, ProviderErrorKind.TIMEOUT, f"{what} took longer than {seconds:g} s")
                self._drop(ctx)
                message = self._cancel_message(ctx)
                if message is not None:
                    await self._send([message])
                await self._emit(TtsError(error=error, context_id=ctx.id, fatal=False))

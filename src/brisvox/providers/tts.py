"""Text-to-speech: the provider interface, its configuration and its events.

A :class:`TtsProvider` opens one :class:`TtsSession` per call (``connect``).  Speech is
organized in *contexts*: one context is one utterance of the bot (the engine uses the
utterance number as the context id).  For each context the engine sends text segments
(``send_text``) and then ``flush`` (no more text: speak the rest).  The session yields,
per context, :class:`TtsAudio` chunks and :class:`TtsWords` timestamps in order, then one
:class:`TtsFlushed` after the context's last audio.

``cancel(context_id)`` is the priority path of a barge-in: it is synchronous, never waits
behind queued text or unread audio, and takes effect at once for the reader.  Events of
that context still queued are dropped; the session yields one :class:`TtsCancelled` for
it and nothing else of it afterwards (text sent to a cancelled context is ignored).
Other contexts are untouched.

Word timings are seconds from the context's first audio sample.  A provider that has no
timestamps sends no :class:`TtsWords`; the engine then estimates what was heard from the
text (14 chars/s).

Channels: ``send_text`` and ``flush`` apply backpressure; events are buffered up to a fixed
capacity, then the provider's reader waits.  Leaving ``async with`` (or ``aclose``) cancels
every context and closes the connection.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

from brisvox.core.channel import Channel
from brisvox.core.errors import ChannelClosed
from brisvox.core.frames import WordTiming
from brisvox.core.tasks import TaskScope
from brisvox.providers.errors import ProviderError
from brisvox.providers.session import DEFAULT_EVENT_CAPACITY, SessionBase

__all__ = [
    "FlushInput",
    "QueuedTtsSession",
    "TextInput",
    "TtsAudio",
    "TtsCancelled",
    "TtsConfig",
    "TtsError",
    "TtsEvent",
    "TtsFlushed",
    "TtsInput",
    "TtsProvider",
    "TtsSession",
    "TtsSessionBase",
    "TtsWords",
    "even_word_timings",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TtsConfig:
    """How to speak.  Adapters reject what they cannot do (ConfigError naming the field)."""

    sample_rate: int = 24_000
    voice: str | None = None  # the adapter's default voice when None
    language: str = "en"
    speed: float = 1.0
    model: str | None = None
    word_timestamps: bool = True  # ask for them where the provider makes them optional


@dataclass(frozen=True, slots=True, kw_only=True)
class TtsAudio:
    """A chunk of PCM16 little-endian mono audio of one context."""

    context_id: int
    pcm: bytes
    sample_rate: int

    @property
    def duration(self) -> float:
        return len(self.pcm) / (2 * self.sample_rate)

    def __repr__(self) -> str:
        return f"TtsAudio(context={self.context_id}, <{len(self.pcm)} bytes>, {self.sample_rate} Hz)"


@dataclass(frozen=True, slots=True, kw_only=True)
class TtsWords:
    """Timestamps of words of one context, in seconds from the context's first sample."""

    context_id: int
    words: tuple[WordTiming, ...]

    def __repr__(self) -> str:
        return f"TtsWords(context={self.context_id}, <{len(self.words)} words>)"


@dataclass(frozen=True, slots=True, kw_only=True)
class TtsFlushed:
    """Every audio chunk and timestamp of the context was delivered."""

    context_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TtsCancelled:
    """The context was cancelled; no event of it follows."""

    context_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TtsError:
    """The provider failed for one context (``context_id``) or for the session (None).

    After a ``fatal`` error the session yields nothing more.
    """

    error: ProviderError
    context_id: int | None = None
    fatal: bool = True


TtsEvent = TtsAudio | TtsWords | TtsFlushed | TtsCancelled | TtsError


@dataclass(frozen=True, slots=True)
class TextInput:
    """Queued input of a session: text for a context (for adapters that queue their input)."""

    context_id: int
    text: str

    def __repr__(self) -> str:
        return f"TextInput(context={self.context_id}, <{len(self.text)} chars>)"


@dataclass(frozen=True, slots=True)
class FlushInput:
    """Queued input of a session: the end of a context's text."""

    context_id: int


TtsInput = TextInput | FlushInput


class TtsSession(Protocol):
    """One synthesis connection; an async iterator of :data:`TtsEvent` and an async context manager."""

    async def send_text(self, context_id: int, text: str) -> None:
        """Append text to a context (opening it on first use)."""
        ...

    async def flush(self, context_id: int) -> None:
        """No more text for this context: speak what is left, then yield :class:`TtsFlushed`."""
        ...

    def cancel(self, context_id: int) -> None:
        """Priority cancel of one context (see the module docs).  Never waits; idempotent."""
        ...

    async def aclose(self) -> None:
        """Cancel every context and release the connection.  Idempotent."""
        ...

    def __aiter__(self) -> Self: ...

    async def __anext__(self) -> TtsEvent: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class TtsProvider(Protocol):
    """Opens synthesis sessions.  Adapters subclass this Protocol explicitly to inherit :meth:`warm`."""

    @property
    def name(self) -> str: ...

    async def connect(self, config: TtsConfig) -> TtsSession:
        """Open a session; raises ProviderError (kind connect, auth, timeout...) when it cannot."""
        ...

    async def warm(self) -> None:
        """Prepare ahead of the first call (load and run the model once, pool a connection)."""
        return None


class TtsSessionBase(SessionBase[TtsEvent]):
    """Helper for TTS session handles: the priority cancel, implemented once.

    ``cancel`` marks the context cancelled, purges its queued events, queues one
    :class:`TtsCancelled` (ahead of everything when the event channel is full) and calls
    the subclass hook :meth:`_on_cancel` (stop synthesis, tell the server).  The reader
    skips any event of a cancelled context that the producer still emits afterwards, so
    no event of the context follows its :class:`TtsCancelled`.  Subclasses implement
    ``send_text`` and ``flush`` (ignoring cancelled contexts: :meth:`is_cancelled`).
    """

    def __init__(self, *, capacity: int = DEFAULT_EVENT_CAPACITY, name: str = "tts session") -> None:
        super().__init__(capacity=capacity, name=name)
        self._cancelled: set[int] = set()
        # Cancel notices that found the event channel full; each context at most once.
        self._notices: deque[TtsCancelled] = deque()

    def is_cancelled(self, context_id: int) -> bool:
        return context_id in self._cancelled

    def cancel(self, context_id: int) -> None:
        if context_id in self._cancelled or self.closed:
            return
        self._cancelled.add(context_id)
        self._events.purge(lambda event: _context_of(event) == context_id)
        notice = TtsCancelled(context_id=context_id)
        try:
            queued = self._events.try_send(notice)
        except ChannelClosed:
            queued = True  # the session ended: nobody reads a notice
        if not queued:
            self._notices.append(notice)
        self._on_cancel(context_id)

    def _on_cancel(self, context_id: int) -> None:
        """Subclass hook: stop work on the context at once (must not block)."""

    async def __anext__(self) -> TtsEvent:
        while True:
            if self._notices:
                return self._notices.popleft()
            event = await super().__anext__()
            if isinstance(event, TtsCancelled) or _context_of(event) not in self._cancelled:
                return event


class QueuedTtsSession(TtsSessionBase):
    """A TTS session that synthesizes in one task of its own, in order (a local or simulated voice).

    Text and flushes wait in a bounded queue (``capacity``; a full queue holds the sender:
    backpressure); a cancel drops the context's queued text.  Subclasses implement
    :meth:`_speak` and may narrow :meth:`_accept` (which text is spoken) and :meth:`_flushed`.
    The task and the queue end with the session.
    """

    def __init__(self, *, name: str, capacity: int) -> None:
        super().__init__(name=name)
        self._input: Channel[TtsInput] = Channel(capacity, name=f"{name} text")
        self._scope = TaskScope(name)
        self._scope.spawn(self._run(), name="synthesize")  # runs once the subclass is built

    def _accept(self, context_id: int, text: str) -> bool:
        """Whether ``text`` (of a live context) is synthesized: not when it is only whitespace."""
        return bool(text.strip())

    async def send_text(self, context_id: int, text: str) -> None:
        self._check_open()
        if not self.is_cancelled(context_id) and self._accept(context_id, text):
            await self._input.send(TextInput(context_id, text))

    async def flush(self, context_id: int) -> None:
        self._check_open()
        if not self.is_cancelled(context_id):
            await self._input.send(FlushInput(context_id))

    def _on_cancel(self, context_id: int) -> None:
        self._input.purge(lambda cmd: cmd.context_id == context_id)

    async def _shutdown(self) -> None:
        self._input.abort()
        await self._scope.aclose()

    async def _run(self) -> None:
        with contextlib.suppress(ChannelClosed):  # the session closed
            async for cmd in self._input:
                if self.is_cancelled(cmd.context_id):
                    continue
                if isinstance(cmd, FlushInput):
                    await self._flushed(cmd.context_id)
                elif not await self._speak(cmd.context_id, cmd.text):
                    return

    async def _flushed(self, context_id: int) -> None:
        """The context's text so far is all spoken."""
        await self._emit(TtsFlushed(context_id=context_id))

    async def _speak(self, context_id: int, text: str) -> bool:
        """Synthesize ``text``; False ends the session's synthesis (a scripted disconnect)."""
        raise NotImplementedError


def _context_of(event: TtsEvent) -> int | None:
    return event.context_id


def even_word_timings(text: str, offset: float, duration: float) -> tuple[WordTiming, ...]:
    """Each word's span when ``text`` takes ``duration`` seconds from ``offset`` at a constant character
    rate (spaces included): for a voice that reports no timings of its own (a mock, a replay)."""
    if not text:
        return ()
    per_char = duration / len(text)
    words: list[WordTiming] = []
    pos = 0
    for word in text.split():
        start = text.index(word, pos)
        pos = start + len(word)
        words.append(WordTiming(word, offset + start * per_char, offset + pos * per_char))
    return tuple(words)

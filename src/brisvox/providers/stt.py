"""Speech-to-text: the provider interface, its configuration and its events.

A :class:`SttProvider` opens one :class:`SttSession` per call (``connect``).  The session
takes the caller's PCM16 mono audio (``send_audio``) and an explicit end of utterance
(``finalize``, sent when the VAD says the caller stopped); it yields
:class:`Transcript` and :class:`SttError` events when iterated.

Flags of a transcript (the Deepgram vocabulary, which the other adapters map onto):

* ``is_final``: this text of the audio span will not change again; an interim
  (``is_final=False``) is cumulative for the current utterance and may be revised.
* ``speech_final``: the provider itself detected the end of the utterance.
* ``from_finalize``: this final answers our ``finalize`` (so the engine knows the
  transcript for the turn is complete and need not wait longer).

Channels: ``send_audio`` applies backpressure (it waits while the session's input buffer
is full).  A session that can also take audio without waiting says so with
:class:`SendsAudioNow` (``try_send_audio``): the listen stage then hands it a caller frame in
the task that delivered the frame, without a wake-up of its own; events are buffered up to a fixed capacity, then the provider's reader waits.
Leaving ``async with`` (or ``aclose``) cancels the session; it never blocks on the network
longer than the adapter's close timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from brisvox.providers.errors import ProviderError

__all__ = ["SendsAudioNow", "SttConfig", "SttError", "SttEvent", "SttProvider", "SttSession", "Transcript"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SttConfig:
    """What a session is asked to recognize.  Adapters reject what they cannot do (ConfigError)."""

    sample_rate: int = 16_000
    language: str = "en"
    interim_results: bool = True
    model: str | None = None  # the adapter's default when None


@dataclass(frozen=True, slots=True, kw_only=True)
class Transcript:
    """Recognized text.  ``start``/``end`` are seconds of session audio (from its first sample)."""

    text: str
    is_final: bool
    speech_final: bool = False
    from_finalize: bool = False
    start: float = 0.0
    end: float = 0.0
    confidence: float | None = None
    language: str | None = None

    def __repr__(self) -> str:
        flags = "".join(
            flag
            for flag, on in (("F", self.is_final), ("S", self.speech_final), ("Z", self.from_finalize))
            if on
        )
        return f"Transcript(<{len(self.text)} chars>, [{flags}], {self.start:.3f}-{self.end:.3f})"


@dataclass(frozen=True, slots=True, kw_only=True)
class SttError:
    """The provider failed.  After a ``fatal`` error the session yields nothing more."""

    error: ProviderError
    fatal: bool = True


SttEvent = Transcript | SttError


class SttSession(Protocol):
    """One streaming recognition; an async iterator of :data:`SttEvent` and an async context manager."""

    async def send_audio(self, pcm: bytes) -> None:
        """Send PCM16 little-endian mono audio at the configured rate (any whole number of samples)."""
        ...

    async def finalize(self) -> None:
        """The caller stopped: transcribe what was sent and answer with a ``from_finalize`` final."""
        ...

    async def aclose(self) -> None:
        """Cancel the session and release its connection.  Idempotent."""
        ...

    def __aiter__(self) -> Self: ...

    async def __anext__(self) -> SttEvent: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


@runtime_checkable
class SendsAudioNow(Protocol):
    """A session that takes audio without waiting when it has room (an optional extension)."""

    def try_send_audio(self, pcm: bytes) -> bool:
        """Send ``pcm`` at once: True when it was taken, False (nothing sent) when the session
        would have to wait (``send_audio`` then waits).  Raises as ``send_audio`` does."""
        ...


class SttProvider(Protocol):
    """Opens recognition sessions.  ``name`` identifies the adapter in errors and metrics.

    Adapters subclass this Protocol explicitly to inherit the no-op :meth:`warm`.
    """

    @property
    def name(self) -> str: ...

    async def connect(self, config: SttConfig) -> SttSession:
        """Open a session; raises ProviderError (kind connect, auth, timeout...) when it cannot."""
        ...

    async def warm(self) -> None:
        """Prepare ahead of the first call (load a model, open a pooled connection).  Default: nothing."""
        return None

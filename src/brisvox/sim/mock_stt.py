"""A scripted speech-to-text provider for simulations and tests.

:class:`MockStt` "recognizes" the words of a script (usually the utterances of a
:class:`~brisvox.sim.scenario.CallerScenario`) as the audio that carries them arrives: the
session counts the samples it was sent, so its notion of time is the audio's, exactly as
a streaming provider's is.

* Interims: every ``interim_interval`` (200 ms) of audio inside an utterance, a
  cumulative interim of the words heard so far (a word counts once its end was sent).
* Finals: ``finalize()`` answers, after ``final_latency``, with one final
  (``from_finalize=True``) holding the words heard and not yet finalized (empty text when
  there are none, as real providers do).  With ``endpointing`` set the mock also ends
  utterances itself: ``endpointing`` seconds of audio after an utterance's end it sends a
  ``speech_final`` final.
* A fixed transcript: with ``text`` set every ``finalize()`` answers, after
  ``final_latency``, with that text whatever the audio held (no interims): the mock of
  ``provider = "mock"`` in an agent file, for capacity tests with a real VAD.
* Faults: ``fail_connect`` makes ``connect`` raise; ``disconnect_after`` (seconds of audio)
  ends the session with a fatal ``closed`` error, as a dropped socket does.
"""

from __future__ import annotations

from dataclasses import dataclass

from brisvox.core.channel import Channel
from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import WordTiming
from brisvox.core.tasks import TaskScope
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.session import SessionBase
from brisvox.providers.stt import SttConfig, SttError, SttEvent, SttProvider, Transcript
from brisvox.sim.latency import INSTANT, LatencyProfile
from brisvox.sim.scenario import CallerScenario, SpokenUtterance

__all__ = ["MockStt", "MockSttConfig", "MockSttSession"]

_FINALIZE = object()
_INPUT_CAPACITY = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class MockSttConfig:
    utterances: tuple[SpokenUtterance, ...] = ()
    interim_interval: float = 0.2
    final_latency: float = 0.05
    final_latencies: tuple[float, ...] = ()  # the first finals' own latencies (then final_latency)
    endpointing: float | None = None
    latency: LatencyProfile = INSTANT  # its connect delay applies
    disconnect_after: float | None = None
    fail_connect: ProviderErrorKind | None = None
    text: str | None = None  # every finalize answers with this text (see the module docs)

    def __post_init__(self) -> None:
        if self.interim_interval <= 0:
            raise ConfigError(f"MockSttConfig.interim_interval must be positive, got {self.interim_interval}")
        if self.final_latency < 0 or any(latency < 0 for latency in self.final_latencies):
            raise ConfigError(f"MockSttConfig.final_latency must not be negative, got {self.final_latency} "
                              f"(final_latencies {self.final_latencies})")


class MockStt(SttProvider):
    """The provider: opens :class:`MockSttSession` objects and remembers them for assertions."""

    def __init__(self, clock: Clock, config: MockSttConfig = MockSttConfig(), *, name: str = "mock-stt",
                 record: bool = True) -> None:
        self._clock = clock
        self.config = config
        self._name = name
        self._record = record  # False in a server: a session kept per call would grow without bound
        self.sessions: list[MockSttSession] = []
        self.warm_calls = 0
        self._utterances = list(config.utterances)  # shared with every session: hear() adds to it

    def hear(self, utterance: SpokenUtterance) -> None:
        """Recognize one more utterance (a live script: the caller's next words, placed at the
        seconds of audio where they start, later than every utterance so far)."""
        if self._utterances and utterance.start < self._utterances[-1].end:
            raise ConfigError(f"{self._name}: an utterance starting at {utterance.start:.3f} s overlaps the "
                              f"previous one (ends at {self._utterances[-1].end:.3f} s)")
        self._utterances.append(utterance)

    @classmethod
    def for_scenario(cls, clock: Clock, scenario: CallerScenario, **options: object) -> MockStt:
        """A mock that recognizes the scenario's utterances (other MockSttConfig fields as keywords)."""
        return cls(clock, MockSttConfig(utterances=scenario.utterances, **options))  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        return self._name

    async def warm(self) -> None:
        self.warm_calls += 1

    async def connect(self, config: SttConfig) -> MockSttSession:
        await self._clock.sleep(self.config.latency.delays().connect())
        if self.config.fail_connect is not None:
            raise ProviderError(self._name, self.config.fail_connect, "scripted connect failure")
        session = MockSttSession(self._clock, self.config, config, self._name, self._utterances)
        if self._record:
            self.sessions.append(session)
        return session


class MockSttSession(SessionBase[SttEvent]):
    def __init__(self, clock: Clock, script: MockSttConfig, config: SttConfig, name: str,
                 utterances: list[SpokenUtterance] | None = None) -> None:
        super().__init__(name=f"{name} session")
        self._clock = clock
        self._script = script
        self._utts = utterances if utterances is not None else list(script.utterances)
        self._provider = name
        self._rate = config.sample_rate
        self._interims = config.interim_results
        self._input: Channel[bytes | object] = Channel(_INPUT_CAPACITY, name=f"{name} audio")
        self.audio_seconds = 0.0
        self.finalize_calls = 0
        self._finals_done = 0
        self._cur = 0  # index of the utterance being heard
        self._delivered = 0  # its words already in a final
        self._ticks = 0  # its interims so far
        self._scope = TaskScope(f"{name} session")
        self._scope.spawn(self._run(), name="recognize")

    async def send_audio(self, pcm: bytes) -> None:
        if not self.try_send_audio(pcm):
            await self._input.send(pcm)

    def try_send_audio(self, pcm: bytes) -> bool:
        """Send ``pcm`` without waiting (False: the input is full, nothing was sent).

        Audio that can cause nothing (no utterance left to hear, no scripted disconnect) is
        counted here, in the sender's task, while the recognizer waits with nothing queued:
        the same count in the same order as the recognizer's task would make, without waking
        it for every 20 ms frame (a streaming client writes its socket in the sender's task
        too).  Anything else is queued for the recognizer.
        """
        self._check_open()
        if len(pcm) % 2:
            raise ConfigError(f"{self._provider}: PCM16 audio must hold whole samples, got {len(pcm)} bytes")
        if (self._input.receiver_waiting and self._cur >= len(self._utts)
                and self._script.disconnect_after is None):
            self.audio_seconds += len(pcm) / (2 * self._rate)
            return True
        return self._input.try_send(pcm)

    async def finalize(self) -> None:
        self._check_open()
        self.finalize_calls += 1
        await self._input.send(_FINALIZE)

    async def _shutdown(self) -> None:
        self._input.abort()
        await self._scope.aclose()

    async def _run(self) -> None:
        try:
            async for item in self._input:
                if isinstance(item, bytes):
                    self.audio_seconds += len(item) / (2 * self._rate)
                    if not await self._on_audio():
                        return
                else:
                    latencies, done = self._script.final_latencies, self._finals_done
                    self._finals_done += 1
                    await self._clock.sleep(latencies[done] if done < len(latencies) else self._script.final_latency)
                    if self._script.text is not None:
                        await self._emit(Transcript(text=self._script.text, is_final=True, from_finalize=True,
                                                    start=0.0, end=self.audio_seconds, confidence=1.0))
                        continue
                    await self._final(from_finalize=True)
                    self._maybe_advance()
        except ChannelClosed:
            return

    async def _on_audio(self) -> bool:
        limit = self._script.disconnect_after
        if limit is not None and self.audio_seconds >= limit:
            err = ProviderError(self._provider, ProviderErrorKind.CLOSED, "scripted disconnect")
            await self._emit(SttError(error=err, fatal=True))
            self._input.abort()
            self._finish()
            return False
        utts = self._utts
        interval = self._script.interim_interval
        while self._cur < len(utts):
            utt = utts[self._cur]
            if self.audio_seconds < utt.start:
                break
            while self._interims:
                tick = utt.start + (self._ticks + 1) * interval
                if tick > self.audio_seconds or tick >= utt.end + interval:
                    break
                self._ticks += 1
                heard = self._heard(utt, tick)
                if heard:
                    await self._emit(_transcript(heard, is_final=False))
            end_at = self._script.endpointing
            if end_at is not None and self.audio_seconds >= utt.end + end_at:
                await self._final(speech_final=True)
            nxt = utts[self._cur + 1].start if self._cur + 1 < len(utts) else None
            if nxt is not None and self.audio_seconds >= nxt:
                # The next utterance began with this one never finalized: the provider closes it.
                await self._final()
            if not self._maybe_advance():
                break
        return True

    def _maybe_advance(self) -> bool:
        """Move to the next utterance once the current one ended and all its words were final."""
        utts = self._utts
        if self._cur >= len(utts):
            return False
        utt = utts[self._cur]
        if self._delivered < len(utt.words) or self.audio_seconds < utt.end:
            return False
        self._cur += 1
        self._delivered = 0
        self._ticks = 0
        return True

    def _heard(self, utt: SpokenUtterance, until: float) -> tuple[WordTiming, ...]:
        return tuple(w for w in utt.words[self._delivered :] if w.end <= until)

    async def _final(self, *, from_finalize: bool = False, speech_final: bool = False) -> None:
        utts = self._utts
        words: tuple[WordTiming, ...] = ()
        if self._cur < len(utts) and utts[self._cur].start <= self.audio_seconds:
            utt = utts[self._cur]
            words = self._heard(utt, self.audio_seconds)
            self._delivered += len(words)
        if words or from_finalize:
            await self._emit(
                _transcript(words, is_final=True, speech_final=speech_final, from_finalize=from_finalize)
            )


def _transcript(
    words: tuple[WordTiming, ...], *, is_final: bool, speech_final: bool = False, from_finalize: bool = False
) -> Transcript:
    return Transcript(
        text=" ".join(w.word for w in words),
        is_final=is_final,
        speech_final=speech_final,
        from_finalize=from_finalize,
        start=words[0].start if words else 0.0,
        end=words[-1].end if words else 0.0,
        confidence=1.0,
    )

"""The listen stage on its own: VAD events and transcripts out, audio to the STT at its rate,
and a speech-to-text session that fails for good ends the call."""

from __future__ import annotations

import asyncio
import struct
from typing import Self

import pytest

from brisvox.audio.resample import ResampleStream
from brisvox.core.clock import SimClock
from brisvox.core.frames import (
    BusyStage,
    InputAudioFrame,
    ModelBusyFrame,
    TranscriptFrame,
    VadStartedFrame,
    VadStoppedFrame,
)
from brisvox.core.pipeline import Links, Pipeline
from brisvox.core.tasks import TaskScope
from brisvox.engine.listen import HearingLost, ListenStage
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.vad import VadEvent, VadParams, VoiceActivityDetector
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.stt import SttError, SttEvent, Transcript
from tests.core.helpers import Collect
from tests.engine.harness import energy_vad

RATE = 16000


class FakeStt:
    """Records the audio it gets; yields the events a test puts in."""

    def __init__(self, fail_send: bool = False) -> None:
        self.audio = bytearray()
        self.finalized = 0
        self.events: asyncio.Queue[SttEvent | BaseException] = asyncio.Queue()
        self.fail_send = fail_send

    async def send_audio(self, pcm: bytes) -> None:
        if self.fail_send:
            raise ProviderError("fake-stt", ProviderErrorKind.CLOSED, "gone")
        self.audio += pcm

    async def finalize(self) -> None:
        self.finalized += 1

    async def aclose(self) -> None:
        pass

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SttEvent:
        got = await self.events.get()
        if isinstance(got, BaseException):
            raise got
        return got


def frames(seconds: float, level: int, rate: int = RATE) -> list[InputAudioFrame]:
    """20 ms frames of a square wave at ``level`` (0: silence)."""
    pcm = (struct.pack("<h", level) + struct.pack("<h", -level)) * round(0.01 * rate)
    return [InputAudioFrame(epoch=0, pcm=pcm, sample_rate=rate, at=k * 0.02) for k in range(round(seconds / 0.02))]


async def test_speech_gives_vad_events_and_the_transcripts_go_downstream_on_epoch_0() -> None:
    clock = SimClock()
    stt, sink = FakeStt(), Collect()
    async with TaskScope("listen test") as scope:
        stage = ListenStage(energy_vad(RATE), stt, scope)
        async with Pipeline("p").then(stage).start(clock, Links(downstream=sink)) as running:
            for frame in frames(0.5, 0) + frames(1.0, 8000) + frames(1.0, 0):
                await running.send(frame)
                await clock.sleep(0.02)
            await stt.events.put(Transcript(text="hello", is_final=True))
            await clock.sleep(0.1)
        scope.cancel()
    assert sink.of(VadStartedFrame) and sink.of(VadStoppedFrame)
    [transcript] = sink.of(TranscriptFrame)
    assert transcript.text == "hello" and transcript.epoch == 0  # type: ignore[attr-defined]
    assert len(stt.audio) == 2 * round(2.5 * RATE) and stt.finalized == 1


async def test_audio_reaches_the_stt_at_its_own_rate() -> None:
    clock = SimClock()
    stt = FakeStt()
    async with TaskScope("listen test") as scope:
        stage = ListenStage(energy_vad(8000), stt, scope, resample=ResampleStream(8000, RATE))
        async with Pipeline("p").then(stage).start(clock, Links(downstream=Collect())) as running:
            for frame in frames(1.0, 1000, rate=8000):
                await running.send(frame)
                await clock.sleep(0.02)  # in real time: the stage drops the oldest audio when behind
            await clock.sleep(0.1)
        scope.cancel()
    assert abs(len(stt.audio) - 2 * RATE) <= 2 * 320  # about 1 s at 16 kHz (the resampler holds a little)


async def test_a_failed_send_is_counted_and_the_stage_goes_on() -> None:
    clock = SimClock()
    stt = FakeStt(fail_send=True)
    async with TaskScope("listen test") as scope:
        stage = ListenStage(energy_vad(RATE), stt, scope)
        async with Pipeline("p").then(stage).start(clock, Links(downstream=Collect())) as running:
            for frame in frames(0.1, 0):
                await running.send(frame)
            await clock.sleep(0.1)
            assert running.running
        scope.cancel()
    assert stage.stt_errors == 5


@pytest.mark.parametrize("failure", ["fatal event", "raised"])
async def test_a_speech_to_text_session_that_fails_for_good_fails_the_stage_s_reader(failure: str) -> None:
    clock = SimClock()
    stt = FakeStt()
    error = ProviderError("fake-stt", ProviderErrorKind.SERVER, "down")
    seen: list[tuple[str, BaseException]] = []
    with pytest.raises(HearingLost, match="speech-to-text failed"):
        async with TaskScope("listen test", on_failure=lambda name, exc: seen.append((name, exc))) as scope:
            stage = ListenStage(energy_vad(RATE), stt, scope)
            async with Pipeline("p").then(stage).start(clock, Links(downstream=Collect())) as running:
                await running.send(frames(0.02, 0)[0])
                await stt.events.put(SttError(error=error, fatal=True) if failure == "fatal event" else error)
                await clock.sleep(0.1)
    assert [name for name, _ in seen] == ["stt-reader"]


class SaturatingVad(VoiceActivityDetector):
    """A detector whose pool refuses the frames the pattern marks (True: refused)."""

    def __init__(self, pattern: list[bool]) -> None:
        super().__init__(EnergyScorer(RATE), VadParams.energy())
        self.pattern = pattern

    async def process(self, pcm: bytes, at: float) -> list[VadEvent]:
        self.saturated = self.pattern.pop(0) if self.pattern else False
        return []


async def test_a_saturated_vad_pool_is_reported_once_per_episode_not_per_frame() -> None:
    clock = SimClock()
    sink = Collect()
    vad = SaturatingVad([False, True, True, True, False, False, True, True])
    async with TaskScope("listen test") as scope:
        stage = ListenStage(vad, FakeStt(), scope)
        async with Pipeline("p").then(stage).start(clock, Links(downstream=sink)) as running:
            for frame in frames(0.2, 0):
                await running.send(frame)
                await clock.sleep(0.02)
        scope.cancel()
    busy = sink.of(ModelBusyFrame)
    assert len(busy) == 2  # two runs of refused frames, five refused frames
    assert all(b.stage is BusyStage.VAD for b in busy)  # type: ignore[attr-defined]

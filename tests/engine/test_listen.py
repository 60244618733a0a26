"""The listen stage on its own: VAD events and transcripts out, audio to the STT at its rate,
and a speech-to-text session that fails for good ends the call."""

from __future__ import annotations

import asyncio
import struct
from typing import Self

import pytest

from brisvox.audio.resample import ResampleStream
from brisvox.core.clock import SimClock
from brisvox.core.errors import ProcessorFailed
from brisvox.core.frames import (
    BusyStage,
    InputAudioFrame,
    ModelBusyFrame,
    TranscriptFrame,
    VadStartedFrame,
    VadStoppedFrame,
)
from brisvox.core.pipeline import Links, Pipeline, RunningPipeline
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

    def prepare(self, pcm: bytes, at: float) -> tuple[list[VadEvent], list[object]]:
        self.saturated = self.pattern.pop(0) if self.pattern else False
        return [], []


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


class NowStt(FakeStt):
    """A session that takes audio without waiting while it has ``room`` (SendsAudioNow)."""

    def __init__(self) -> None:
        super().__init__()
        self.room = True
        self.taken_now = 0

    def try_send_audio(self, pcm: bytes) -> bool:
        if not self.room:
            return False
        self.audio += pcm
        self.taken_now += 1
        return True


def deliver(stage: ListenStage, running: RunningPipeline, frame: InputAudioFrame) -> None:
    """The call's caller-audio sink (engine.call._audio_into)."""
    if not stage.hear_now(frame):
        running.try_send(frame)


async def test_a_silent_frame_is_heard_in_the_delivering_task_while_the_stage_waits() -> None:
    clock = SimClock()
    stt = NowStt()
    async with TaskScope("listen test") as scope:
        stage = ListenStage(energy_vad(RATE), stt, scope)
        async with Pipeline("p").then(stage).start(clock, Links(downstream=Collect())):
            await clock.sleep(0.01)  # Start is through: the stage's task waits
            [frame] = frames(0.02, 0)
            assert stage.hear_now(frame)
            assert bytes(stt.audio) == frame.pcm and stt.taken_now == 1  # before any await
            stt.room = False  # a session that would have to wait: the rest goes to the task
            assert stage.hear_now(frame)
            assert len(stt.audio) == len(frame.pcm)
            await clock.sleep(0.01)
            assert len(stt.audio) == 2 * len(frame.pcm)
        scope.cancel()
    async with TaskScope("listen test") as scope:  # a session without try_send_audio: the task hears
        stage = ListenStage(energy_vad(RATE), FakeStt(), scope)
        async with Pipeline("p").then(stage).start(clock, Links(downstream=Collect())):
            await clock.sleep(0.01)
            assert not stage.hear_now(frame)
        scope.cancel()


async def test_frames_heard_in_the_delivering_task_give_the_task_s_events_and_audio_in_order() -> None:
    # Each frame a different level, delivered back to back and 20 ms apart: the VAD events (at
    # their times), the finalize and the STT's audio are those of the stage's task hearing all.
    stream = [f for k, level in enumerate([0] * 25 + [4000] * 50 + [0] * 50)
              for f in frames(0.02, level + k)]
    stream = [InputAudioFrame(epoch=0, pcm=f.pcm, sample_rate=RATE, at=k * 0.02) for k, f in enumerate(stream)]

    async def hear(now: bool, burst: int) -> tuple[list[tuple[str, float]], bytes, int, int]:
        clock, sink = SimClock(), Collect()
        stt = NowStt()
        async with TaskScope("listen test") as scope:
            stage = ListenStage(energy_vad(RATE), stt, scope)
            async with Pipeline("p").then(stage).start(clock, Links(downstream=sink)) as running:
                await clock.sleep(0.01)
                for k, frame in enumerate(stream):
                    deliver(stage, running, frame) if now else running.try_send(frame)
                    if k % burst == burst - 1:
                        await clock.sleep(0.02)
                await clock.sleep(0.1)
            scope.cancel()
        events = [(type(f).__name__, f.at) for f in sink.frames  # type: ignore[attr-defined]
                  if isinstance(f, VadStartedFrame | VadStoppedFrame)]
        return events, bytes(stt.audio), stt.finalized, stt.taken_now

    reference = await hear(now=False, burst=1)
    assert reference[0] and reference[2] == 1 and reference[3] == 0
    for burst in (1, 5):  # one at a time; five at once (the stage's task busy with the first)
        events, audio, finalized, taken_now = await hear(now=True, burst=burst)
        assert (events, audio, finalized) == reference[:3]
        assert taken_now > 0


async def test_a_frame_that_fails_in_the_delivering_task_fails_the_stage() -> None:
    class Broken(VoiceActivityDetector):
        def prepare(self, pcm: bytes, at: float) -> tuple[list[VadEvent], list[object]]:
            raise RuntimeError("a bug in the VAD")

    clock = SimClock()
    async with TaskScope("listen test") as scope:
        stage = ListenStage(Broken(EnergyScorer(RATE), VadParams.energy()), NowStt(), scope)
        running = Pipeline("p").then(stage).start(clock, Links(downstream=Collect()))
        await clock.sleep(0.01)
        assert stage.hear_now(frames(0.02, 0)[0])  # taken; the error is raised in the stage's task
        with pytest.raises(ProcessorFailed, match="a bug in the VAD"):
            await running.wait()
        scope.cancel()

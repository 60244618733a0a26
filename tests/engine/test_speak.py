"""The speak stage on its own, over a provider that streams its contexts independently."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from brisvox.agent.segmenter import SegmenterConfig
from brisvox.core.clock import SimClock
from brisvox.core.frames import (
    BotResponseDone,
    InterruptFrame,
    LlmResponseEnded,
    LlmResponseStarted,
    LlmTextFrame,
    OutputAudioFrame,
    UtteranceFlushed,
)
from brisvox.core.pipeline import Links, Pipeline, RunningPipeline
from brisvox.core.tasks import TaskScope
from brisvox.engine import FillerClip, FillerClipStore, PlayoutBook
from brisvox.engine.speak import SpeakStage
from brisvox.providers.tts import TtsAudio, TtsFlushed, TtsSessionBase
from tests.core.helpers import Collect

RATE = 16000
TONE = struct.pack("<h", 7) * 320  # 20 ms


class ParallelTts(TtsSessionBase):
    """Speaks a context the moment it is flushed, whatever else is open, except the held ones."""

    def __init__(self) -> None:
        super().__init__(name="parallel tts")
        self.texts: dict[int, str] = {}
        self.held: set[int] = set()

    async def send_text(self, context_id: int, text: str) -> None:
        self.texts[context_id] = self.texts.get(context_id, "") + text

    async def flush(self, context_id: int) -> None:
        if not self.texts:
            return
        if len(self.texts) == 1:  # the first context: the test releases it
            self.held.add(context_id)
            await self._emit(TtsAudio(context_id=context_id, pcm=TONE, sample_rate=RATE))
            return
        await self.speak(context_id)

    async def speak(self, context_id: int) -> None:
        await self._emit(TtsAudio(context_id=context_id, pcm=TONE, sample_rate=RATE))
        await self._emit(TtsFlushed(context_id=context_id))


async def rounds(running: RunningPipeline, *texts: tuple[str, str | None]) -> None:
    for i, (text, clip) in enumerate(texts):
        await running.send(LlmResponseStarted(epoch=0, round=i, clip=clip))
        await running.send(LlmTextFrame(epoch=0, text=text, round=i))
        await running.send(LlmResponseEnded(epoch=0, round=i))


CLIP_SAMPLE = struct.pack("<h", 1234)


@dataclass
class ClipWaiting:
    clock: SimClock
    tts: ParallelTts
    stage: SpeakStage
    sink: Collect
    running: RunningPipeline


@asynccontextmanager
async def a_clip_waiting_behind_the_first_words() -> AsyncIterator[ClipWaiting]:
    """Three rounds (words, a clip, a reply) sent; the first words held open by the provider."""
    clock = SimClock()
    tts = ParallelTts()
    clip = FillerClip.with_spread_words("One moment.", CLIP_SAMPLE * 8000, RATE)
    sink = Collect()
    async with TaskScope("speak test") as scope:
        stage = SpeakStage(tts, PlayoutBook(), SegmenterConfig(), scope, clips=FillerClipStore({"c": clip}),
                           clip_rate=RATE)
        async with Pipeline("p").then(stage).start(clock, Links(downstream=sink)) as running:
            await rounds(running, ("Let me look.", None), ("One moment.", "c"), ("It is sunny.", None))
            await clock.sleep(1.0)
            assert stage.clip_waits == 1
            yield ClipWaiting(clock, tts, stage, sink, running)
        scope.cancel()


async def test_a_reply_waits_for_a_clip_that_waits_for_the_words_before_it() -> None:
    async with a_clip_waiting_behind_the_first_words() as w:
        # The clip waits for the first words' end; the reply is held behind the clip, so
        # this provider, which would speak it at once, has not been given it yet.
        assert list(w.tts.texts.values()) == ["Let me look."]
        first = next(iter(w.tts.held))
        await w.tts.speak(first)  # the rest of the first words, then its end
        await w.clock.sleep(1.0)
        audio = [f.utterance for f in w.sink.of(OutputAudioFrame)]  # type: ignore[attr-defined]
        clip_utt = audio[2]
        assert audio == [first, first, clip_utt, audio[-1]] and first < clip_utt < audio[-1]
        assert list(w.tts.texts.values()) == ["Let me look.", "It is sunny."]  # never the phrase
        assert w.stage.clips_played == 1


async def test_a_barge_in_ends_the_wait_behind_a_clip_and_drops_the_clip_unplayed() -> None:
    async with a_clip_waiting_behind_the_first_words() as w:
        await w.running.send(InterruptFrame(new_epoch=1))
        await w.clock.sleep(1.0)  # not the 30 s wait limit: the barge-in ended the wait
        assert (w.stage.clips_dropped, w.stage.clips_played) == (1, 0)
        clip_audio = [f for f in w.sink.of(OutputAudioFrame) if f.pcm[:2] == CLIP_SAMPLE]  # type: ignore[attr-defined]
        assert not clip_audio
        assert w.sink.of(InterruptFrame)


async def test_only_audio_an_utterances_end_the_response_end_and_system_frames_go_on_to_transport_out() -> None:
    # The text sent and the word timings go to the book; turn and response markers end here:
    # TransportOut acts on nothing else, and each frame pushed would wake its task.  An
    # utterance's end follows its last audio (a transfer waits for it).
    clock = SimClock()
    tts, sink, book = ParallelTts(), Collect(), PlayoutBook()
    async with TaskScope("speak test") as scope:
        stage = SpeakStage(tts, book, SegmenterConfig(), scope)
        async with Pipeline("p").then(stage).start(clock, Links(downstream=sink)) as running:
            await rounds(running, ("Let me look.", None), ("It is sunny.", None))
            await running.send(BotResponseDone(epoch=0))
            await clock.sleep(1.0)
            await tts.speak(next(iter(tts.held)))
            await clock.sleep(1.0)
            await running.send(InterruptFrame(new_epoch=1))
            await clock.sleep(0.1)
        scope.cancel()
    kinds = {type(f).__name__ for f in sink.frames}
    assert kinds == {"StartFrame", "OutputAudioFrame", "UtteranceFlushed", "BotResponseDone", "InterruptFrame"}
    for i, f in enumerate(sink.frames):
        if isinstance(f, UtteranceFlushed):  # nothing of the utterance follows it
            assert not [g for g in sink.frames[i:] if isinstance(g, OutputAudioFrame) and g.utterance == f.utterance]

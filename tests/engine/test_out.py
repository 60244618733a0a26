"""TransportOut on its own (audio to commands, positions to the book and the turn driver),
and in calls: the client is told to clear only when audio was cut, and position reports
reach the book without a hop through the pipeline."""

from __future__ import annotations

import struct
from typing import cast

import pytest

from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.turn import FixedSilence
from brisvox.audio.pcm import silence
from brisvox.core.clock import SimClock
from brisvox.core.frames import (
    BotAudioEnded,
    BotAudioStarted,
    BotResponseDone,
    InterruptFrame,
    OutputAudioFrame,
)
from brisvox.core.pipeline import Links, Pipeline
from brisvox.core.timeline import TimelineRecorder, TurnEvent
from brisvox.engine import EngineConfig
from brisvox.engine.events import BotAudible, CallEvents, CallObserver
from brisvox.engine.out import PlayoutFact, TransportOut
from brisvox.engine.playout import PlayoutBook
from brisvox.sim import MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport.events import PlaybackPosition
from brisvox.transport.session import CommandSender
from tests.core.helpers import Collect
from tests.engine.harness import simulate

RATE = 16000


class Commands:
    """What TransportOut sends to the transport."""

    def __init__(self) -> None:
        self.clears: list[int] = []
        self.sent: list[OutputAudioFrame] = []

    def clear(self, epoch: int) -> bool:
        self.clears.append(epoch)
        return True

    async def audio(self, frame: OutputAudioFrame) -> None:
        self.sent.append(frame)


def audio(epoch: int, utterance: int, pcm: bytes) -> OutputAudioFrame:
    return OutputAudioFrame(epoch=epoch, pcm=pcm, sample_rate=RATE, utterance=utterance)


async def test_audio_goes_out_after_one_clear_per_newer_epoch_and_stale_audio_is_dropped_and_counted() -> None:
    clock = SimClock()
    commands, book, up = Commands(), PlayoutBook(), Collect()
    out = TransportOut(cast(CommandSender, commands), book)
    u0, u1 = book.open_utterance(0, 0), book.open_utterance(1, 0)
    async with Pipeline("p").then(out).start(clock, Links(upstream=up)) as running:
        await running.send(audio(0, u0, silence(0.02, RATE)))
        await clock.sleep(0.01)  # an interrupt overtakes queued data: let the audio go first
        await running.send(InterruptFrame(new_epoch=1))
        await running.send(audio(0, u0, silence(0.02, RATE)))  # stale: after the interrupt
        await running.send(audio(1, u1, silence(0.02, RATE)))
        await running.send(audio(1, u1, silence(0.02, RATE)))
        await clock.sleep(0.1)
    assert commands.clears == [1]  # epoch 0 needs none; epoch 1 once
    assert [f.epoch for f in commands.sent] == [0, 1, 1]
    assert out.stale_audio_dropped == 1


async def test_positions_tell_the_driver_when_the_bot_began_and_ended_and_the_stream_when_it_became_audible() -> None:
    clock = SimClock()
    commands, book, up, timeline = Commands(), PlayoutBook(), Collect(), TimelineRecorder()
    observer = CallObserver()
    out = TransportOut(cast(CommandSender, commands), book, timeline, CallEvents("c", observer, timeline))
    told: list[PlayoutFact] = []

    async def tell(fact: PlayoutFact) -> None:
        told.append(fact)

    out.report_to(tell)
    utt = book.open_utterance(0, 0)
    voice = silence(0.3, RATE) + struct.pack("<h", 4000) * RATE  # 0.3 s of silence, then 1 s of voice
    async with Pipeline("p").then(out).start(clock, Links(upstream=up)) as running:
        await running.send(audio(0, utt, voice))
        book.response_done(0)  # the speak stage's part: every utterance of the epoch was flushed
        await running.send(BotResponseDone(epoch=0))
        await clock.sleep(1.0)
        for played in (0.1, 0.4, 1.3):
            # The session's output task hands each report over; nothing goes through the inbox.
            await out.released(PlaybackPosition(epoch=0, utterance=utt, samples=round(played * RATE),
                                                sample_rate=RATE), clock.now())
            await clock.sleep(0.1)
    assert [(type(f).__name__, f.epoch) for f in told] == [("BotAudioStarted", 0), ("BotAudioEnded", 0)]
    assert not up.of(BotAudioStarted) and not up.of(BotAudioEnded)  # not pushed through the stages
    [audible] = [e for e in iter(observer.try_get, None) if isinstance(e, BotAudible)]
    # The report at 1.1 s (0.4 s released) covers the voice, which began 0.1 s of audio before
    # its end: it played 0.08 s before the report (the last 20 ms frame is still playing).
    assert audible.at == pytest.approx(1.1 - 0.08)
    record = timeline.get(0)
    assert record is not None and record.at(TurnEvent.BOT_AUDIBLE) == audible.at
    assert record.at(TurnEvent.BOT_AUDIO_STARTED) == pytest.approx(1.0)


async def test_a_response_done_after_its_audio_played_out_tells_the_driver_it_ended() -> None:
    clock = SimClock()
    commands, book = Commands(), PlayoutBook()
    out = TransportOut(cast(CommandSender, commands), book)
    told: list[PlayoutFact] = []

    async def tell(fact: PlayoutFact) -> None:
        told.append(fact)

    out.report_to(tell)
    utt = book.open_utterance(0, 0)
    async with Pipeline("p").then(out).start(clock) as running:
        await running.send(audio(0, utt, silence(0.1, RATE)))
        await clock.sleep(0.01)
        await out.released(PlaybackPosition(epoch=0, utterance=utt, samples=round(0.1 * RATE), sample_rate=RATE),
                           clock.now())
        assert [type(f).__name__ for f in told] == ["BotAudioStarted"]  # played out, but more may come
        book.response_done(0)
        await running.send(BotResponseDone(epoch=0))
        await clock.sleep(0.01)
    assert [type(f).__name__ for f in told] == ["BotAudioStarted", "BotAudioEnded"]


async def test_a_call_whose_replies_were_never_cut_sends_the_client_no_clear() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say("One.")], [Say("Two.")], [Say("Three.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("first thing").pause(3.0).say("second thing").pause(3.0)
                .say("third thing").pause(3.0).build())
    result = await simulate(clock, scenario, llm)
    assert result.report.turns == 3 and result.audio_at()
    assert result.clears() == []


async def test_a_barge_in_on_a_speaking_bot_sends_the_client_one_clear() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say(" ".join(["word"] * 80))], [Say("Sure.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("tell me a story").pause(2.0)
                .say("stop please stop now").pause(3.0).build())
    config = EngineConfig(turn=FixedSilence(silence=0.5), interruption=InterruptionPolicy.recommended())
    result = await simulate(clock, scenario, llm, config=config)
    assert [epoch for _, epoch in result.clears()] == [1]


async def test_the_driver_learns_the_bot_began_when_its_audio_went_out_even_while_transport_out_waits_for_room() -> None:
    # The TTS hands over 6 s of audio at once: TransportOut then waits for room in the pacer
    # (2.56 s) for seconds.  The first position report still reaches the book and the driver
    # as the audio goes out, not after TransportOut has handed over the rest.
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say(" ".join(["word"] * 40))]])
    scenario = ScenarioBuilder().pause(0.5).say("tell me a story").pause(12.0).build()
    result = await simulate(clock, scenario, llm, tts=MockTtsConfig(chunk_seconds=6.0))
    first_heard = result.audio_at()[0][0]
    record = result.report.timeline[0]
    started = record.at(TurnEvent.BOT_AUDIO_STARTED)
    assert started is not None and started - first_heard < 0.25

"""The turn driver on its own: turns, barge-ins with the fast-path clear, keys, and its events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from brisvox.agent.turn import FixedSilence, TurnMachine
from brisvox.core.clock import SimClock
from brisvox.core.frames import (
    BotAudioStarted,
    Direction,
    DtmfFrame,
    Frame,
    InterruptFrame,
    TranscriptFrame,
    TurnEndReason,
    UserTextFrame,
    UserTurnEnded,
    UserTurnStarted,
    VadStartedFrame,
    VadStoppedFrame,
)
from brisvox.core.pipeline import Links, Pipeline, RunningPipeline
from brisvox.core.tasks import TaskScope
from brisvox.engine.driver import TurnDriver, dtmf_text
from brisvox.engine.events import (
    CallEvents,
    CallObserver,
    EngineEvent,
    TurnEnded,
    TurnStarted,
    UserTranscript,
)
from tests.core.helpers import Collect


@dataclass
class Driven:
    clock: SimClock
    running: RunningPipeline
    sink: Collect
    observer: CallObserver
    clears: list[int] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # clears and interrupts, in the order they happened

    def events(self) -> list[EngineEvent]:
        return list(iter(self.observer.try_get, None))

    async def speak(self, start: float, words: str, stop: float) -> None:
        """The caller speaks from ``start`` to ``stop`` (clock seconds) and the STT hears ``words``."""
        await self.clock.sleep_until(start)
        await self.running.send(VadStartedFrame(at=start))
        await self.clock.sleep_until(stop)
        await self.running.send(TranscriptFrame(epoch=0, text=words, is_final=True, at=stop))
        await self.running.send(VadStoppedFrame(at=stop, speech_started_at=start))


class Recorder(Collect):
    def __init__(self, order: list[str]) -> None:
        super().__init__()
        self.order = order

    async def put(self, frame: Frame, direction: Direction):  # type: ignore[no-untyped-def]
        if isinstance(frame, InterruptFrame):
            self.order.append(f"interrupt {frame.new_epoch}")
        return await super().put(frame, direction)


@asynccontextmanager
async def driven() -> AsyncIterator[Driven]:
    clock = SimClock()
    observer = CallObserver()
    order: list[str] = []
    clears: list[int] = []
    sink = Recorder(order)

    def clear(epoch: int) -> None:
        clears.append(epoch)
        order.append(f"clear {epoch}")

    async with TaskScope("driver test") as scope:
        driver = TurnDriver(TurnMachine(FixedSilence(silence=0.5)), clear, scope, events=CallEvents("c", observer))
        async with Pipeline("p").then(driver).start(clock, Links(downstream=sink)) as running:
            yield Driven(clock, running, sink, observer, clears, order)
        scope.cancel()


async def test_a_turn_ends_after_the_silence_with_its_words_and_events_with_its_epoch() -> None:
    async with driven() as d:
        await d.speak(1.0, "a table for two", 2.0)
        await d.clock.sleep(1.0)
        assert [f.epoch for f in d.sink.of(UserTurnStarted)] == [0]  # type: ignore[attr-defined]
        [text] = d.sink.of(UserTextFrame)
        assert text.text == "a table for two"  # type: ignore[attr-defined]
        [ended] = d.sink.of(UserTurnEnded)
        assert ended.reason is TurnEndReason.SILENCE  # type: ignore[attr-defined]
        events = d.events()
        assert [(type(e).__name__, e.epoch) for e in events] == [
            ("TurnStarted", 0), ("UserTranscript", 0), ("TurnEnded", 0)]
        turn_end = events[2]
        assert isinstance(turn_end, TurnEnded) and turn_end.speech_ended == 2.0 and turn_end.at == 2.5
        assert d.clears == []


async def test_a_barge_in_clears_the_transport_before_the_interrupt_travels_and_starts_the_next_epoch() -> None:
    async with driven() as d:
        await d.speak(1.0, "tell me a story", 2.0)
        await d.clock.sleep(1.0)
        await d.running.send(BotAudioStarted(epoch=0, at=3.0), Direction.UPSTREAM)
        await d.speak(4.0, "stop", 4.5)
        await d.clock.sleep(1.0)
        assert d.order[:2] == ["clear 1", "interrupt 1"]
        events = d.events()
        starts = [e for e in events if isinstance(e, TurnStarted)]
        assert [(e.epoch, e.barge_in) for e in starts] == [(0, False), (1, True)]
        # The words spoken over the bot belong to the new turn.
        transcripts = [(e.text, e.epoch) for e in events if isinstance(e, UserTranscript)]
        assert transcripts == [("tell me a story", 0), ("stop", 1)]
        assert [f.epoch for f in d.sink.of(UserTurnEnded)] == [0, 1]  # type: ignore[attr-defined]


async def test_a_key_pressed_while_the_bot_is_idle_is_a_turn_of_its_own() -> None:
    async with driven() as d:
        await d.running.send(DtmfFrame(epoch=0, digit="5"))
        await d.clock.sleep(0.1)
        [text] = d.sink.of(UserTextFrame)
        assert text.text == dtmf_text("5")  # type: ignore[attr-defined]
        [ended] = [e for e in d.events() if isinstance(e, TurnEnded)]
        assert ended.reason is TurnEndReason.TEXT and ended.speech_ended is None

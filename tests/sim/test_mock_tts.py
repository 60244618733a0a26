from __future__ import annotations

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.tts import TtsAudio, TtsCancelled, TtsConfig, TtsError, TtsEvent, TtsFlushed, TtsWords
from brisvox.sim.latency import LatencyProfile
from brisvox.sim.mock_tts import MockTts, MockTtsConfig, MockTtsSession


async def _collect(clock: SimClock, session: MockTtsSession, out: list[tuple[float, TtsEvent]]) -> None:
    async for event in session:
        out.append((round(clock.now(), 4), event))


def _audio_seconds(events: list[tuple[float, TtsEvent]], ctx: int) -> float:
    return sum(e.duration for _, e in events if isinstance(e, TtsAudio) and e.context_id == ctx)


async def test_audio_length_follows_the_text_at_the_configured_rate_and_flush_comes_last() -> None:
    clock = SimClock()
    tts = MockTts(clock, MockTtsConfig(chars_per_second=14.0))
    events: list[tuple[float, TtsEvent]] = []
    async with await tts.connect(TtsConfig()) as session, TaskScope("t") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        await session.send_text(1, "Hello there. ")  # 13 chars
        await session.send_text(1, "How are you?")  # 12 chars
        await session.flush(1)
        await clock.sleep(1.0)
        await session.aclose()
    assert _audio_seconds(events, 1) == pytest.approx(25 / 14, abs=1 / 24_000)
    assert isinstance(events[-1][1], TtsFlushed) and events[-1][1].context_id == 1
    assert session.texts == {1: "Hello there. How are you?"}


async def test_word_timings_count_from_the_contexts_first_sample_across_segments() -> None:
    clock = SimClock()
    tts = MockTts(clock, MockTtsConfig(chars_per_second=10.0))
    events: list[tuple[float, TtsEvent]] = []
    async with await tts.connect(TtsConfig()) as session, TaskScope("t") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        await session.send_text(7, "ab cd ")
        await session.send_text(7, "ef")
        await session.flush(7)
        await clock.sleep(1.0)
        await session.aclose()
    words = [w for _, e in events if isinstance(e, TtsWords) for w in e.words]
    assert [(w.word, round(w.start, 3), round(w.end, 3)) for w in words] == [
        ("ab", 0.0, 0.2),
        ("cd", 0.3, 0.5),
        ("ef", 0.6, 0.8),
    ]


async def test_without_word_timings_no_words_event_is_sent() -> None:
    clock = SimClock()
    tts = MockTts(clock, MockTtsConfig(word_timings=False))
    events: list[tuple[float, TtsEvent]] = []
    async with await tts.connect(TtsConfig()) as session, TaskScope("t") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        await session.send_text(1, "no timestamps here")
        await session.flush(1)
        await clock.sleep(1.0)
        await session.aclose()
    assert not any(isinstance(e, TtsWords) for _, e in events)
    assert _audio_seconds(events, 1) > 1.0


async def test_first_audio_waits_the_profiles_first_event_and_synthesis_runs_at_the_realtime_factor() -> None:
    clock = SimClock()
    cfg = MockTtsConfig(chars_per_second=10.0, realtime_factor=0.5, latency=LatencyProfile(first_event=0.2))
    tts = MockTts(clock, cfg)
    events: list[tuple[float, TtsEvent]] = []
    async with await tts.connect(TtsConfig()) as session, TaskScope("t") as scope:
        start = clock.now()
        scope.spawn(_collect(clock, session, events), name="reader")
        await session.send_text(1, "x" * 20)  # 2 s of audio, 1 s of synthesis
        await session.flush(1)
        await clock.sleep(3.0)
        await session.aclose()
    audio_times = [t - start for t, e in events if isinstance(e, TtsAudio)]
    assert audio_times[0] == pytest.approx(0.2 + 0.02, abs=1e-3)
    assert audio_times[-1] == pytest.approx(1.2, abs=1e-3)


async def test_a_cancel_stops_one_context_at_once_and_leaves_the_other_speaking() -> None:
    clock = SimClock()
    tts = MockTts(clock, MockTtsConfig(chars_per_second=10.0, realtime_factor=1.0))
    events: list[tuple[float, TtsEvent]] = []
    async with await tts.connect(TtsConfig()) as session, TaskScope("t") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        await session.send_text(1, "x" * 20)
        await session.send_text(1, "y" * 20)
        await session.flush(1)
        await session.send_text(2, "z" * 10)
        await session.flush(2)
        await clock.sleep(0.5)
        session.cancel(1)
        cancelled_at = clock.now()
        await session.send_text(1, "ignored")
        await clock.sleep(3.0)
        await session.aclose()
    after = [e for t, e in events if t > cancelled_at]
    assert not any(getattr(e, "context_id", None) == 1 for e in after)
    assert TtsCancelled(context_id=1) in [e for _, e in events]
    assert not any(isinstance(e, TtsFlushed) and e.context_id == 1 for _, e in events)
    assert _audio_seconds(events, 1) == pytest.approx(0.5, abs=0.05)
    assert _audio_seconds(events, 2) == pytest.approx(1.0, abs=1e-3)
    assert session.cancelled == [1] and session.texts[1] == "x" * 20 + "y" * 20


async def test_a_scripted_disconnect_ends_an_utterance_midway_with_a_fatal_closed_error() -> None:
    clock = SimClock()
    tts = MockTts(clock, MockTtsConfig(chars_per_second=10.0, disconnect_after=0.4))
    events: list[tuple[float, TtsEvent]] = []
    async with await tts.connect(TtsConfig()) as session, TaskScope("t") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        await session.send_text(3, "a long sentence that will not finish")
        await clock.sleep(1.0)
        with pytest.raises(ChannelClosed):
            await session.flush(3)
    last = events[-1][1]
    assert isinstance(last, TtsError) and last.fatal and last.context_id == 3
    assert last.error.kind is ProviderErrorKind.CLOSED
    assert _audio_seconds(events, 3) == pytest.approx(0.4, abs=1e-3)


async def test_a_scripted_connect_failure_raises_its_kind() -> None:
    tts = MockTts(SimClock(), MockTtsConfig(fail_connect=ProviderErrorKind.RATE_LIMITED))
    with pytest.raises(ProviderError) as info:
        await tts.connect(TtsConfig())
    assert info.value.retryable

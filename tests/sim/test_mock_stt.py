from __future__ import annotations

from itertools import pairwise

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.stt import SttConfig, SttError, SttEvent, Transcript
from brisvox.sim.latency import LatencyProfile
from brisvox.sim.mock_stt import MockStt, MockSttConfig, MockSttSession
from brisvox.sim.scenario import CallerScenario, ScenarioBuilder

FRAME = 0.02


async def _collect(clock: SimClock, session: MockSttSession, out: list[tuple[float, SttEvent]]) -> None:
    async for event in session:
        out.append((round(clock.now(), 3), event))


async def _play(
    clock: SimClock, session: MockSttSession, scenario: CallerScenario, finalize_at: tuple[float, ...] = ()
) -> None:
    """Send the scenario in real time, calling finalize once the audio time passes each mark."""
    marks = list(finalize_at)
    sent = 0.0
    for frame in scenario.frames(FRAME):
        await session.send_audio(frame)
        sent += FRAME
        while marks and sent >= marks[0] - 1e-9:
            marks.pop(0)
            await session.finalize()
        await clock.sleep(FRAME)


async def _run(stt: MockStt, scenario: CallerScenario, finalize_at: tuple[float, ...] = ()) -> list[tuple[float, SttEvent]]:
    clock = SimClock()
    events: list[tuple[float, SttEvent]] = []
    async with await stt.connect(SttConfig()) as session, TaskScope("test") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        await _play(clock, session, scenario, finalize_at)
        await clock.sleep(0.5)
        await session.aclose()
    return events


def _texts(events: list[tuple[float, SttEvent]], *, final: bool) -> list[str]:
    return [e.text for _, e in events if isinstance(e, Transcript) and e.is_final is final]


async def test_interims_come_every_200_ms_of_speech_and_grow_word_by_word() -> None:
    scenario = ScenarioBuilder().pause(0.2).say("please book a table now", duration=2.0).pause(0.6).build()
    stt = MockStt.for_scenario(SimClock(), scenario)
    events = await _run(stt, scenario, finalize_at=(2.6,))
    interims = [(t, e) for t, e in events if isinstance(e, Transcript) and not e.is_final]
    assert [e.text for _, e in interims][-1] == "please book a table now"
    times = [t for t, _ in interims]
    assert all(b - a == pytest.approx(0.2, abs=0.021) for a, b in pairwise(times))
    texts = [e.text for _, e in interims]
    assert all(b.startswith(a) for a, b in pairwise(texts))


async def test_finalize_answers_with_one_from_finalize_final_after_the_final_latency() -> None:
    scenario = ScenarioBuilder().say("hello there", duration=1.0).pause(0.6).build()
    stt = MockStt.for_scenario(SimClock(), scenario, final_latency=0.1)
    events = await _run(stt, scenario, finalize_at=(1.3,))
    finals = [(t, e) for t, e in events if isinstance(e, Transcript) and e.is_final]
    assert len(finals) == 1
    at, final = finals[0]
    assert final.text == "hello there" and final.from_finalize and not final.speech_final
    assert at == pytest.approx(1.3 - FRAME + 0.1, abs=0.021)
    assert (final.start, final.end) == (0.0, pytest.approx(1.0))


async def test_each_vad_stop_gets_its_own_final_and_a_finalize_in_silence_gets_an_empty_one() -> None:
    scenario = ScenarioBuilder().say("first part", duration=1.0).pause(1.0).say("second part", duration=1.0).pause(1.0).build()
    stt = MockStt.for_scenario(SimClock(), scenario)
    events = await _run(stt, scenario, finalize_at=(1.3, 3.3, 3.8))
    assert _texts(events, final=True) == ["first part", "second part", ""]
    assert stt.sessions[0].finalize_calls == 3


async def test_with_endpointing_the_mock_ends_an_utterance_by_itself_with_speech_final() -> None:
    scenario = ScenarioBuilder().say("no finalize here", duration=1.2).pause(1.0).build()
    stt = MockStt.for_scenario(SimClock(), scenario, endpointing=0.3)
    events = await _run(stt, scenario)
    finals = [e for _, e in events if isinstance(e, Transcript) and e.is_final]
    assert [(f.text, f.speech_final, f.from_finalize) for f in finals] == [("no finalize here", True, False)]


async def test_an_utterance_never_finalized_is_closed_when_the_next_one_starts() -> None:
    scenario = ScenarioBuilder().say("one", duration=0.5).pause(0.5).say("two", duration=0.5).pause(0.5).build()
    stt = MockStt.for_scenario(SimClock(), scenario)
    events = await _run(stt, scenario, finalize_at=(1.9,))
    assert _texts(events, final=True) == ["one", "two"]


async def test_interim_results_can_be_switched_off() -> None:
    scenario = ScenarioBuilder().say("quiet please", duration=1.0).pause(0.5).build()
    stt = MockStt.for_scenario(SimClock(), scenario)
    clock = SimClock()
    events: list[tuple[float, SttEvent]] = []
    async with await stt.connect(SttConfig(interim_results=False)) as session, TaskScope("t") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        await _play(clock, session, scenario, finalize_at=(1.4,))
        await clock.sleep(0.2)
        await session.aclose()
    assert _texts(events, final=False) == [] and _texts(events, final=True) == ["quiet please"]


async def test_a_scripted_disconnect_ends_the_session_with_a_fatal_closed_error() -> None:
    scenario = ScenarioBuilder().say("this call will drop", duration=2.0).build()
    stt = MockStt.for_scenario(SimClock(), scenario, disconnect_after=1.0)
    clock = SimClock()
    events: list[tuple[float, SttEvent]] = []
    async with await stt.connect(SttConfig()) as session, TaskScope("t") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        with pytest.raises(ChannelClosed):
            await _play(clock, session, scenario)
    last = events[-1][1]
    assert isinstance(last, SttError) and last.fatal and last.error.kind is ProviderErrorKind.CLOSED
    assert events[-1][0] == pytest.approx(1.0 - FRAME, abs=0.001)


async def test_connect_takes_the_profiles_delay_and_a_scripted_failure_raises_its_kind() -> None:
    clock = SimClock()
    slow = MockStt(clock, MockSttConfig(latency=LatencyProfile(connect=0.25)))
    start = clock.now()
    async with await slow.connect(SttConfig()):
        assert clock.now() - start == pytest.approx(0.25)
    failing = MockStt(clock, MockSttConfig(fail_connect=ProviderErrorKind.AUTH))
    with pytest.raises(ProviderError) as info:
        await failing.connect(SttConfig())
    assert info.value.kind is ProviderErrorKind.AUTH
    await slow.warm()
    assert slow.warm_calls == 1


async def test_fixed_text_audio_is_counted_in_the_sender_s_task_and_the_final_keeps_its_latency() -> None:
    # The capacity tests' mock (``text``): audio that can cause nothing is counted when it is
    # sent, while the recognizer waits (no wake-up per frame); audio sent while a finalize is
    # pending waits behind it, so the final covers exactly the audio sent before the finalize.
    clock = SimClock()
    stt = MockStt(clock, MockSttConfig(final_latency=0.15, text="hello"))
    events: list[tuple[float, SttEvent]] = []
    frame = bytes(640)
    async with await stt.connect(SttConfig()) as session, TaskScope("test") as scope:
        scope.spawn(_collect(clock, session, events), name="reader")
        await clock.sleep(0.01)
        await session.send_audio(frame)
        assert session.audio_seconds == pytest.approx(0.02)  # counted before the recognizer ran
        assert session.try_send_audio(frame) and session.audio_seconds == pytest.approx(0.04)
        await session.finalize()
        await clock.sleep(0.05)
        await session.send_audio(frame)  # while the final's latency runs: queued
        assert session.audio_seconds == pytest.approx(0.04)
        await clock.sleep(0.2)
        assert session.audio_seconds == pytest.approx(0.06)
        await session.aclose()
    [(at, final)] = events
    assert at == pytest.approx(0.16) and isinstance(final, Transcript) and final.end == pytest.approx(0.04)

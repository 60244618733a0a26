"""The engine over a carrier's stream (the Twilio and Telnyx adapters and their test doubles):
what the caller heard is what the carrier played, as its mark echoes prove, not what brisvox
released."""

from __future__ import annotations

import pytest

from brisvox.agent.context import AssistantMessage
from brisvox.agent.played import CUT_MARKER
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.tasks import TaskScope, live_tasks, wait_for_task_baseline
from brisvox.engine import EngineConfig, Providers, run_call
from brisvox.sim import MockStt, MockTts, MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from tests.engine.harness import energy_vad
from tests.engine.test_call import LONG
from tests.transport.conformance._drivers import TelnyxDriver, TwilioDriver

CARRIERS = {"twilio": TwilioDriver, "telnyx": TelnyxDriver}  # Telnyx's caller audio comes shuffled

CHARS_PER_SECOND = MockTtsConfig().chars_per_second


async def _barge_in_over(carrier: str, buffer: float) -> tuple[str, TwilioDriver]:
    """A caller who asks, then talks over the long answer; the carrier plays the bot's audio
    ``buffer`` seconds after it arrives.  Returns what the context kept of the answer."""
    clock = SimClock()
    baseline = live_tasks()
    scenario = (ScenarioBuilder(sample_rate=8000).pause(0.5).say("what tables do you have").pause(3.0)
                .say("seven please").pause(2.5).build())
    llm = ScriptedLlm(clock, [[Say(LONG)], [Say("Seven it is.")]])
    providers = Providers(stt=MockStt.for_scenario(clock, scenario, interim_interval=0.2), llm=llm,
                          tts=MockTts(clock, MockTtsConfig()), vad=energy_vad)
    driver = CARRIERS[carrier](buffer=buffer)
    async with driver.open(clock) as (caller, session), TaskScope("carrier-call") as scope:
        call = scope.spawn(run_call(session, EngineConfig(turn=FixedSilence(silence=0.5)), providers, clock),
                           name="call")
        start = clock.now()
        for i, pcm in enumerate(scenario.frames(0.02)):
            await clock.sleep_until(start + i * 0.02)
            await caller.send_audio(pcm)
        await clock.sleep(2.0)
        await caller.hangup()
        report = await call
    await wait_for_task_baseline(clock, baseline)
    assert report.interrupts == 1 and len(caller.clears) >= 1, report
    answers = [m.text for m in report.context.messages if isinstance(m, AssistantMessage)]
    assert answers[-1] == "Seven it is."
    assert answers[0].endswith(CUT_MARKER), answers
    return answers[0].removesuffix(CUT_MARKER), driver


@pytest.mark.parametrize("carrier", sorted(CARRIERS))
async def test_a_barge_in_keeps_only_what_the_carrier_played_not_the_audio_it_still_held(carrier: str) -> None:
    played_at_once, prompt = await _barge_in_over(carrier, buffer=0.0)
    held, buffered = await _barge_in_over(carrier, buffer=1.0)
    # The carrier held a second of the answer when the caller cut in and flushed it unheard.
    flushed = buffered.flushed[0]
    assert 0.8 <= flushed <= 1.1, buffered.flushed
    assert prompt.flushed[0] < 0.1, prompt.flushed
    # brisvox released the same audio both times; the context keeps only what was played.
    assert held and LONG.startswith(held) and played_at_once.startswith(held)
    missing = len(played_at_once) - len(held)
    assert abs(missing - flushed * CHARS_PER_SECOND) <= 8, (played_at_once, held)

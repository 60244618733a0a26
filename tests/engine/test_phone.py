"""The telephony tools in calls (simulated calls on virtual time, a recording carrier).

The carrier here records what the tools asked of it; tests/server/test_carriers.py checks the
exact REST requests that the real carrier controls make of those asks.
"""

from __future__ import annotations

from urllib.parse import parse_qs

import numpy as np
import pytest

from brisvox.agent.context import ToolMessage
from brisvox.agent.flows import EndCall, FlowBuilder, Goto, Node, ToolUse
from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.tools import ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.secret import Secret
from brisvox.engine import EngineConfig
from brisvox.engine.phone import CallControl, Carrier, PhonePlan
from brisvox.server.carriers import TelnyxCalls, TwilioCalls
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, Pause, ScenarioBuilder, ScriptedLlm
from brisvox.sim import Say as Speak
from brisvox.transport.events import StopReason, WireAudioOut, WireMark
from tests.engine.harness import OBJ, Counter, SimResult, simulate
from tests.providers.cloud._fake_http import FakeHttpServer, RecordedRequest, Response
from tests.server.test_carriers import CALL, CCID, KEY, SID, TOKEN, basic, ok

TOOLS = ToolSet()


class Recording:
    """A carrier that records every request and when it came; ``hang`` never answers."""

    def __init__(self, clock: SimClock, carrier: Carrier = Carrier.TWILIO, hang: bool = False) -> None:
        self.clock, self.carrier, self.hang = clock, carrier, hang
        self.requests: list[tuple[str, float]] = []

    async def _answer(self, what: str) -> None:
        self.requests.append((what, self.clock.now()))
        if self.hang:
            await self.clock.sleep(3600)

    async def hang_up(self) -> None:
        await self._answer("hang_up")

    async def transfer(self, to: str) -> None:
        await self._answer(f"transfer {to}")

    async def send_dtmf(self, keys: str) -> bool:
        if self.carrier is not Carrier.TELNYX:
            return False  # as TwilioCalls: no DTMF command, the line plays tones
        await self._answer(f"dtmf {keys}")
        return True


def _barge_in_config() -> EngineConfig:
    return EngineConfig(turn=FixedSilence(silence=0.5), interruption=InterruptionPolicy.recommended())


async def test_a_committed_end_call_hangs_up_once_after_the_farewells_mark_echo() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    llm = ScriptedLlm(clock, [[Speak("Thanks for calling, goodbye!"), Call(name="end_call")], []])
    scenario = ScenarioBuilder().pause(0.5).say("that is all thanks").pause(6.0).build()
    result = await simulate(clock, scenario, llm, tools=TOOLS.registry(["end_call"]), phone=PhonePlan(carrier))
    assert result.report.stop_reason is StopReason.REQUESTED  # the engine ended the call
    assert [what for what, _ in carrier.requests] == ["hang_up"]
    echoed = [h.at for h in result.heard if isinstance(h.item, WireMark)]
    last_audio = max(h.at for h in result.heard if isinstance(h.item, WireAudioOut))
    assert len(echoed) == 1 and carrier.requests[0][1] >= echoed[0] >= last_audio
    assert result.report.phone is not None and result.report.phone.hangups == 1


async def test_a_barge_in_over_the_farewell_calls_the_end_off_and_no_hang_up_is_sent() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    farewell = " ".join(["goodbye"] * 60)
    llm = ScriptedLlm(clock, [[Speak("Okay."), Call(name="end_call")], [Speak(farewell)], [Speak("Sure.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("that is all thanks").pause(2.5)
                .say("wait one more thing please").pause(4.0).build())
    result = await simulate(clock, scenario, llm, config=_barge_in_config(), tools=TOOLS.registry(["end_call"]),
                            phone=PhonePlan(carrier))
    assert carrier.requests == []
    assert result.report.interrupts >= 1 and result.report.stop_reason is StopReason.PEER_HANGUP
    assert result.report.phone is not None and result.report.phone.ends_dropped == 1


async def test_a_transfer_in_a_reply_that_a_barge_in_discards_never_reaches_the_carrier() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    llm = ScriptedLlm(clock, [[Speak("One moment, I will transfer you to sales now."), Pause(4.0),
                               Call(name="transfer_call", arguments={"to": "+14155550100"})], [Speak("Sure.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("put me through to sales").pause(2.0)
                .say("no wait stop that please").pause(4.0).build())
    result = await simulate(clock, scenario, llm, config=_barge_in_config(),
                            tools=TOOLS.registry(["transfer_call"]), phone=PhonePlan(carrier))
    assert result.report.interrupts >= 1
    assert carrier.requests == []


async def test_a_committed_transfer_reaches_the_carrier_once() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    llm = ScriptedLlm(clock, [[Call(name="transfer_call", arguments={"to": "+14155550100"})], [Speak("Done.")]])
    scenario = ScenarioBuilder().pause(0.5).say("put me through to sales").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=TOOLS.registry(["transfer_call"]), phone=PhonePlan(carrier))
    assert [what for what, _ in carrier.requests] == ["transfer +14155550100"]
    assert result.report.phone is not None and result.report.phone.transfers == 1


async def test_a_hanging_carrier_becomes_an_error_the_model_reads_within_the_timeout() -> None:
    clock = SimClock()
    carrier = Recording(clock, hang=True)
    llm = ScriptedLlm(clock, [[Call(name="transfer_call", arguments={"to": "+14155550100"})],
                              [Speak("Sorry, I could not transfer you.")]])
    scenario = ScenarioBuilder().pause(0.5).say("put me through to sales").pause(10.0).build()
    result = await simulate(clock, scenario, llm, tools=TOOLS.registry(["transfer_call"]),
                            phone=PhonePlan(carrier, timeout=2.0))
    answers = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert len(answers) == 1 and answers[0].is_error and "no answer within 2 s" in answers[0].content
    assert result.report.phone is not None
    assert result.report.phone.carrier_timeouts == 1 and result.report.phone.carrier_failures == 1
    assert len(llm.requests) == 2  # the model was asked again and spoke the apology


async def test_send_dtmf_on_twilio_plays_dual_tones_in_band() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    llm = ScriptedLlm(clock, [[Call(name="send_dtmf", arguments={"digits": "5"})], [Speak("Pressed.")]])
    scenario = ScenarioBuilder().pause(0.5).say("press five").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=TOOLS.registry(["send_dtmf"]), phone=PhonePlan(carrier))
    pcm = b"".join(h.item.frame.pcm for h in result.heard if isinstance(h.item, WireAudioOut)
                   and h.item.frame.utterance == 0)
    rate = next(h.item.frame.sample_rate for h in result.heard if isinstance(h.item, WireAudioOut))
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples[: int(0.1 * rate)]))
    freqs = np.fft.rfftfreq(int(0.1 * rate), 1 / rate)
    peaks = sorted(freqs[np.argsort(spectrum)[-2:]])
    assert abs(peaks[0] - 770) < 15 and abs(peaks[1] - 1336) < 15  # key 5: 770 Hz + 1336 Hz
    assert result.report.phone is not None and result.report.phone.dtmf_in_band == 1


async def test_send_dtmf_on_telnyx_uses_the_carriers_command_and_may_repeat() -> None:
    clock = SimClock()
    carrier = Recording(clock, Carrier.TELNYX)
    llm = ScriptedLlm(clock, [[Call(name="send_dtmf", arguments={"digits": "1"})], [Speak("Again.")],
                              [Call(name="send_dtmf", arguments={"digits": "1"})], [Speak("Done.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("press one").pause(3.0).say("press one again")
                .pause(3.0).build())
    await simulate(clock, scenario, llm, tools=TOOLS.registry(["send_dtmf"]), phone=PhonePlan(carrier))
    assert [what for what, _ in carrier.requests] == ["dtmf 1", "dtmf 1"]


async def test_without_a_phone_line_the_tools_answer_an_error_and_nothing_ends() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Call(name="end_call")], [Speak("I cannot hang up.")]])
    scenario = ScenarioBuilder().pause(0.5).say("hang up").pause(3.0).build()
    result = await simulate(clock, scenario, llm, tools=TOOLS.registry(["end_call"]))
    answers = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert answers[0].is_error and "no phone line" in answers[0].content
    assert result.report.stop_reason is StopReason.PEER_HANGUP


async def test_over_the_generic_websocket_end_call_ends_the_call_after_the_farewell_without_a_carrier() -> None:
    from brisvox.server.carriers import NoCarrier

    clock = SimClock()
    llm = ScriptedLlm(clock, [[Speak("Goodbye!"), Call(name="end_call")], []])
    scenario = ScenarioBuilder().pause(0.5).say("bye now").pause(6.0).build()
    result = await simulate(clock, scenario, llm, tools=TOOLS.registry(["end_call"]), phone=PhonePlan(NoCarrier()))
    assert result.report.stop_reason is StopReason.REQUESTED
    assert result.report.phone is not None and result.report.phone.hangups == 0  # no REST: the stream's end is the hang-up


async def test_a_client_that_echoes_no_marks_still_ends_after_the_echo_timeout() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    llm = ScriptedLlm(clock, [[Speak("Goodbye!"), Call(name="end_call")], []])
    scenario = ScenarioBuilder().pause(0.5).say("bye now").pause(10.0).build()
    result = await simulate(clock, scenario, llm, tools=TOOLS.registry(["end_call"]), phone=PhonePlan(carrier),
                            echo_marks=False)
    assert result.report.stop_reason is StopReason.REQUESTED and [w for w, _ in carrier.requests] == ["hang_up"]
    last_audio = max(h.at for h in result.heard if isinstance(h.item, WireAudioOut))
    assert carrier.requests[0][1] >= last_audio + 4.9  # the 5 s wait for an echo that never came


def _spoken_until(result: SimResult) -> float:
    """When the caller received the last audio of the first thing the bot said."""
    audio = [h for h in result.heard if isinstance(h.item, WireAudioOut)]
    first = audio[0].item.frame.utterance  # type: ignore[union-attr]
    return max(h.at for h in audio if h.item.frame.utterance == first)  # type: ignore[union-attr]


async def test_a_transfer_waits_until_the_words_before_it_have_played() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    words = "One moment please, I am putting you through to our sales team right now."  # about 5 s of speech
    llm = ScriptedLlm(clock, [[Speak(words), Call(name="transfer_call", arguments={"to": "+14155550100"})],
                              [Speak("Done.")]])
    scenario = ScenarioBuilder().pause(0.5).say("put me through to sales").pause(9.0).build()
    result = await simulate(clock, scenario, llm, tools=TOOLS.registry(["transfer_call"]), phone=PhonePlan(carrier))
    [(what, at)] = carrier.requests
    assert what == "transfer +14155550100"
    echoed = [h.at for h in result.heard if isinstance(h.item, WireMark)]
    assert len(echoed) == 1 and at >= echoed[0] >= _spoken_until(result)  # the mark behind the words echoed first
    assert result.report.phone is not None and result.report.phone.transfers == 1


async def test_a_barge_in_over_the_words_before_a_transfer_calls_it_off() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    words = "One moment please, I am putting you through to our sales team right now, so please hold the line."
    llm = ScriptedLlm(clock, [[Speak(words), Call(name="transfer_call", arguments={"to": "+14155550100"})],
                              [Speak("Okay.")], [Speak("Sure.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("put me through to sales").pause(2.5)
                .say("no wait stop that please").pause(4.0).build())
    result = await simulate(clock, scenario, llm, config=_barge_in_config(),
                            tools=TOOLS.registry(["transfer_call"]), phone=PhonePlan(carrier))
    assert result.report.interrupts >= 1
    assert carrier.requests == []
    assert result.report.phone is not None and result.report.phone.transfers_called_off == 1


async def test_a_flows_end_call_and_the_end_call_tool_in_one_turn_hang_up_once() -> None:
    clock = SimClock()
    carrier = Recording(clock)
    check = ToolSpec(name="check_availability", description="Is a day free?", parameters=OBJ)
    reg = TOOLS.registry(["end_call"])
    reg.register(check, Counter(clock))
    flow = (
        FlowBuilder()
        .node(Node(name="collect", task_messages=("Ask for the day.",),
                   tools=(ToolUse(tool="check_availability", transition=Goto("farewell")),)))
        .node(Node(name="farewell", task_messages=("Say goodbye.",), tools=(ToolUse(tool="end_call"),),
                   post_actions=(EndCall(),)))
        .build(reg)
    )
    llm = ScriptedLlm(clock, [[Call(name="check_availability", arguments={"day": "friday"})],
                              [Speak("Friday is free. Goodbye!"), Call(name="end_call")], []])
    scenario = ScenarioBuilder().pause(0.5).say("is friday free").pause(8.0).build()
    result = await simulate(clock, scenario, llm, tools=reg, flow=flow, phone=PhonePlan(carrier))
    assert result.report.stop_reason is StopReason.REQUESTED
    assert [what for what, _ in carrier.requests] == ["hang_up"]  # one end, not one per asker
    assert len([h for h in result.heard if isinstance(h.item, WireMark)]) == 1
    assert result.report.phone is not None and result.report.phone.hangups == 1


def _control(carrier: Carrier, base: str) -> CallControl:
    if carrier is Carrier.TWILIO:
        return TwilioCalls(base, SID, Secret(TOKEN), CALL)
    return TelnyxCalls(base, Secret(KEY), CCID)


def _assert_one_hang_up(carrier: Carrier, req: RecordedRequest) -> None:
    """The carrier's documented hang-up: Twilio's call update to ``completed`` (basic auth), Telnyx's
    Call Control ``hangup`` action (bearer key, JSON)."""
    assert req.method == "POST"
    if carrier is Carrier.TWILIO:
        assert req.path == f"/2010-04-01/Accounts/{SID}/Calls/{CALL}.json"
        assert parse_qs(req.body.decode()) == {"Status": ["completed"]}
        assert req.headers["authorization"] == basic(SID, TOKEN)
    else:
        assert req.path == f"/v2/calls/{CCID.replace(':', '%3A')}/actions/hangup"
        assert req.json() == {} and req.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("carrier", [Carrier.TWILIO, Carrier.TELNYX])
async def test_over_the_carriers_rest_api_discarded_transfer_and_end_send_nothing_and_a_committed_end_one_hang_up(
        carrier: Carrier) -> None:
    clock = SimClock()
    sent_at: list[float] = []

    async def answer(request: RecordedRequest, response: Response) -> None:
        sent_at.append(clock.now())
        await ok(request, response)

    async with FakeHttpServer(answer) as api:
        words = "One moment please, I am putting you through to our sales team right now, so please hold the line."
        farewell = "Thank you so much for calling us today, it was a real pleasure, have a lovely evening, goodbye!"
        llm = ScriptedLlm(clock, [
            [Speak(words), Call(name="transfer_call", arguments={"to": "+14155550100"})],  # cut: never sent
            [Speak("Okay.")],
            [Speak(farewell), Call(name="end_call")],  # cut over the farewell: the end is called off
            [Speak("Sure.")],
            [Speak("Thanks, goodbye!"), Call(name="end_call")], []])  # committed and played: one hang-up
        scenario = (ScenarioBuilder().pause(0.5).say("put me through to sales").pause(2.5)
                    .say("no wait stop that please").pause(3.0).say("that is all").pause(2.5)
                    .say("wait one more thing please").pause(3.0).say("no that is all").pause(6.0).build())
        result = await simulate(clock, scenario, llm, config=_barge_in_config(),
                                tools=TOOLS.registry(["transfer_call", "end_call"]),
                                phone=PhonePlan(_control(carrier, api.base_url)))
    assert result.report.stop_reason is StopReason.REQUESTED
    assert result.report.interrupts == 2, result.report
    [req] = api.requests  # no transfer and no hang-up from the discarded generations: only the last one
    _assert_one_hang_up(carrier, req)
    phone = result.report.phone
    assert phone is not None and phone.transfers_called_off == 1 and phone.ends_dropped == 1, phone
    # ... sent after the caller's phone echoed the mark behind the farewell, itself behind its last audio
    farewell_epoch = max(h.item.frame.epoch for h in result.heard if isinstance(h.item, WireAudioOut))
    last_audio = max(h.at for h in result.heard
                     if isinstance(h.item, WireAudioOut) and h.item.frame.epoch == farewell_epoch)
    echoed = [h.at for h in result.heard if isinstance(h.item, WireMark) and h.at >= last_audio]
    assert len(echoed) == 1 and sent_at[0] >= echoed[0], (sent_at, echoed, last_audio)

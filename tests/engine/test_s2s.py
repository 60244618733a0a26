"""The S2S stage (run_s2s_call) on virtual time with a scripted S2S session."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from brisvox.agent.guards import WORK_CLAIM_WITHOUT_TOOL
from brisvox.agent.tools import CONFIRM_PENDING, ToolCallContext, ToolKind, ToolRegistry, ToolSpec
from brisvox.agent.tools.filler import FillerConfig
from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.core.frames import TurnEndReason
from brisvox.engine import CallFailed
from brisvox.engine.driver import dtmf_text
from brisvox.engine.events import (
    BotHeard,
    ToolCallSettled,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
    UserTranscript,
)
from brisvox.engine.s2s import run_s2s_call
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.s2s import (
    BargeIn,
    S2sAudio,
    S2sConfig,
    S2sError,
    S2sInteractionEnded,
    S2sInterrupted,
    S2sResponseDone,
    S2sSpeechStarted,
    S2sSpeechStopped,
    S2sToolCall,
    S2sToolResult,
    S2sTranscript,
    Speaker,
)
from brisvox.transport import LoopbackClient
from brisvox.transport.events import WireAudioOut, WireClear
from tests.engine.harness import energy_vad
from tests.engine.s2s_harness import RATE, FakeS2s, s2s_call, until
from tests.providers.cloud import _s2s_rig as rig

BOOK_SCHEMA = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}


def results(fake: FakeS2s) -> list[list[S2sToolResult]]:
    return list(fake.of("results"))


def content(result: S2sToolResult) -> Any:
    return json.loads(result.content)


async def calls_round(fake: FakeS2s, clock: SimClock, calls: list[rig.Call]) -> None:
    """One model response with ``calls``; wait until its results and request went out."""
    requests = len(fake.of("request"))
    await fake.emit(*(S2sToolCall(call_id=c, name=n, arguments=a) for c, n, a in calls), S2sResponseDone())
    await until(clock, lambda: len(fake.of("request")) > requests)


async def user_turn(fake: FakeS2s) -> None:
    await fake.emit(S2sSpeechStarted(), S2sSpeechStopped())


async def test_three_parallel_calls_are_answered_in_call_order_with_one_response_request() -> None:
    clock, fake = SimClock(), FakeS2s()
    tools = rig.Tools(clock)

    async def script() -> None:
        await user_turn(fake)
        await calls_round(fake, clock, rig.PARALLEL[0])
        await fake.emit(S2sInteractionEnded())

    result = await s2s_call(clock, fake, script, tools=tools.registry())
    (answer,) = results(fake)
    assert [r.call_id for r in answer] == ["c1", "c2", "c3"]
    assert [content(r)["what"] for r in answer] == ["a", "b", "c"]
    assert fake.kinds().count("request") == 1
    starts = [at for _, at in tools.started]
    assert max(starts) - min(starts) < 0.01  # they ran at the same time
    started = [e.call_id for e in result.events if isinstance(e, ToolCallStarted)]
    settled = [e.call_id for e in result.events if isinstance(e, ToolCallSettled)]
    assert started == settled == ["c1", "c2", "c3"]


async def test_a_three_round_chain_sends_one_result_and_one_request_per_round() -> None:
    clock, fake = SimClock(), FakeS2s()
    tools = rig.Tools(clock)

    async def script() -> None:
        await user_turn(fake)
        for calls in rig.CHAIN:
            await calls_round(fake, clock, calls)
        await fake.emit(S2sInteractionEnded())

    await s2s_call(clock, fake, script, tools=tools.registry())
    assert [[r.call_id for r in answer] for answer in results(fake)] == [["c1"], ["c2"], ["c3"]]
    assert fake.kinds() == ["results", "request"] * 3
    assert [w for w, _ in tools.started] == ["country", "capital", "weather"]


async def test_a_repeated_booking_is_answered_already_done_and_books_once() -> None:
    clock, fake = SimClock(), FakeS2s()
    tools = rig.Tools(clock)

    async def script() -> None:
        await user_turn(fake)
        for calls in rig.REPEATED_BOOKING:
            await calls_round(fake, clock, calls)

    await s2s_call(clock, fake, script, tools=tools.registry())
    first, second = (answer[0] for answer in results(fake))
    assert content(first) == {"booking": "BK-1001"}
    assert content(second)["error"] == "already_done"
    assert tools.bookings == ["BK-1001"]


def tone(seconds: float, rate: int = 24_000) -> bytes:
    """A loud square wave (audible to the playout book)."""
    period = rate // 200
    one = (b"\x00\x40" * (period // 2)) + (b"\x00\xc0" * (period // 2))
    return (one * int(seconds * rate / period + 1))[: int(seconds * rate) * 2]


async def test_a_model_barge_in_clears_the_transport_and_truncates_at_the_heard_position() -> None:
    clock, fake = SimClock(), FakeS2s()

    async def script() -> None:
        await fake.emit(S2sTranscript(Speaker.MODEL, "Hello there, how can I help you today?", item_id="i1"))
        for _ in range(20):  # 2 s of the model's speech, as the vendor streams it
            await fake.emit(S2sAudio(tone(0.1), item_id="i1"))
        start = clock.now()
        await clock.sleep(0.6)
        await fake.emit(S2sSpeechStarted(), S2sInterrupted())
        await until(clock, lambda: bool(fake.of("truncate")))
        fake.heard_at = clock.now() - start  # type: ignore[attr-defined]

    result = await s2s_call(clock, fake, script)
    ((item, heard_ms),) = fake.of("truncate")
    assert item == "i1"
    assert 450 <= heard_ms <= 650  # what the transport released by the cut, not the 2 s sent
    assert any(isinstance(h.item, WireClear) for h in result.heard)
    audio = sum(1 for h in result.heard if isinstance(h.item, WireAudioOut))
    assert audio < 50  # 20 ms frames: the rest of the 2 s never went out
    assert result.report.interrupts == 1
    (cut,) = [e for e in result.events if isinstance(e, BotHeard)]
    assert cut.text and "Hello there, how can I help you today?".startswith(cut.text)
    assert [e.barge_in for e in result.events if isinstance(e, TurnStarted)] == [True]


async def test_a_barge_in_over_a_carrier_truncates_at_what_it_played_not_what_it_still_held() -> None:
    clock, fake = SimClock(), FakeS2s()

    async def script() -> None:
        await fake.emit(S2sTranscript(Speaker.MODEL, "Hello there, how can I help you today?", item_id="i1"))
        for _ in range(20):
            await fake.emit(S2sAudio(tone(0.1), item_id="i1"))
        await clock.sleep(0.6)
        await fake.emit(S2sSpeechStarted(), S2sInterrupted())
        await until(clock, lambda: bool(fake.of("truncate")))

    await s2s_call(clock, fake, script, lead=0.3)  # the carrier held 0.3 s it never played
    ((item, heard_ms),) = fake.of("truncate")
    assert item == "i1" and 150 <= heard_ms <= 350  # released about 0.55 s, less the 0.3 s it held


async def test_our_barge_in_cancels_the_response_and_truncates() -> None:
    clock, fake = SimClock(), FakeS2s()
    vad = energy_vad(RATE)

    async def script() -> None:
        for _ in range(20):
            await fake.emit(S2sAudio(tone(0.1), item_id="i1"))
        await until(clock, lambda: bool(fake.of("truncate")), limit=3.0)

    result = await s2s_call(clock, fake, script, config=S2sConfig(barge_in=BargeIn.OURS), vad=vad,
                            speech=lambda t: tone(0.02, 16_000) if t >= 0.8 else bytes(640))
    assert fake.kinds()[:2] == ["cancel", "truncate"]
    ((item, heard_ms),) = fake.of("truncate")
    assert item == "i1" and 700 <= heard_ms <= 1300
    assert result.report.interrupts == 1


class SlowBooking:
    def __init__(self, clock: SimClock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds
        self.done: list[float] = []

    async def __call__(self, args: dict[str, Any], ctx: ToolCallContext) -> Any:
        await self.clock.sleep(self.seconds)
        self.done.append(self.clock.now())
        return {"booked": args["day"]}


def booking_registry(clock: SimClock, seconds: float = 0.0, *, confirm: bool = False) -> tuple[ToolRegistry, SlowBooking]:
    registry = ToolRegistry()
    booking = SlowBooking(clock, seconds)
    spec = ToolSpec(name="book_table", description="Book a table.", parameters=BOOK_SCHEMA,
                    kind=ToolKind.SIDE_EFFECT, confirm=confirm, timeout=max(10.0, 2 * seconds))
    registry.register(spec, booking)
    return registry, booking


async def test_a_side_effect_that_finishes_after_a_barge_in_is_reported_once() -> None:
    clock, fake = SimClock(), FakeS2s()
    registry, booking = booking_registry(clock, seconds=1.0)

    async def script() -> None:
        await user_turn(fake)
        await fake.emit(S2sToolCall(call_id="b1", name="book_table", arguments={"day": "friday"}), S2sResponseDone())
        await clock.sleep(0.3)
        await fake.emit(S2sSpeechStarted(), S2sInterrupted(), S2sSpeechStopped())
        await until(clock, lambda: bool(booking.done))
        await fake.emit(S2sInteractionEnded())
        await clock.sleep(0.2)
        await fake.emit(S2sInteractionEnded())  # a second end: nothing left to tell

    await s2s_call(clock, fake, script, tools=registry)
    assert results(fake) == []  # the cut execution's results never reached the model
    notes = fake.of("note")
    assert len(notes) == 1 and "book_table" in notes[0]
    assert len(booking.done) == 1


async def test_the_confirmation_gate_needs_a_second_user_turn() -> None:
    clock, fake = SimClock(), FakeS2s()
    registry, booking = booking_registry(clock, confirm=True)

    async def script() -> None:
        await user_turn(fake)
        await calls_round(fake, clock, [("b1", "book_table", {"day": "friday"})])
        await calls_round(fake, clock, [("k1", CONFIRM_PENDING, {"call_id": "t1.0"})])  # same turn: refused
        fake.booked_before = len(booking.done)  # type: ignore[attr-defined]
        await user_turn(fake)  # "yes please"
        await calls_round(fake, clock, [("k2", CONFIRM_PENDING, {"call_id": "t1.0"})])

    await s2s_call(clock, fake, script, tools=registry)
    gated, refused, confirmed = (answer[0] for answer in results(fake))
    assert content(gated)["status"] == "confirmation_required"
    assert refused.is_error and "not replied" in refused.content
    assert fake.booked_before == 0  # type: ignore[attr-defined]
    assert not confirmed.is_error and content(confirmed) == {"booked": "friday"}
    assert len(booking.done) == 1


async def test_a_work_claim_without_a_tool_call_gets_a_note_and_one_requested_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, fake = SimClock(), FakeS2s()
    registry, _ = booking_registry(clock)
    claim = "Let me check the availability for you."

    async def script() -> None:
        await user_turn(fake)
        for _ in range(2):  # the model claims again in the same user utterance
            await fake.emit(S2sTranscript(Speaker.MODEL, claim), S2sResponseDone(), S2sInteractionEnded())
            await clock.sleep(0.1)

    with caplog.at_level(logging.WARNING, logger="brisvox.engine.s2s"):
        await s2s_call(clock, fake, script, tools=registry)
    notes = fake.of("note")
    assert len(notes) == 2 and all(claim in n for n in notes)
    assert fake.kinds() == ["note", "request", "note"]  # one requested turn per user utterance
    assert sum(WORK_CLAIM_WITHOUT_TOOL in r.getMessage() for r in caplog.records) == 2


async def test_a_send_claim_while_the_call_ran_puts_a_correction_first_in_the_result() -> None:
    clock, fake = SimClock(), FakeS2s()
    registry, _ = booking_registry(clock, seconds=0.5)

    async def script() -> None:
        await user_turn(fake)
        await fake.emit(S2sToolCall(call_id="b1", name="book_table", arguments={"day": "friday"}),
                        S2sTranscript(Speaker.MODEL, "I've texted you the confirmation."), S2sResponseDone())
        await until(clock, lambda: bool(fake.of("request")))

    await s2s_call(clock, fake, script, tools=registry)
    ((result,),) = results(fake)
    assert result.content.startswith("CORRECTION")


async def test_a_fatal_vendor_error_ends_the_call_with_call_failed_and_tells_the_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, fake = SimClock(), FakeS2s()
    error = ProviderError("fake-s2s", ProviderErrorKind.SERVER, "the vendor broke")

    async def script() -> None:
        await fake.emit(S2sError(error, fatal=True))

    with pytest.raises(CallFailed) as failed, caplog.at_level(logging.ERROR):
        await s2s_call(clock, fake, script)
    assert failed.value.__cause__ is error and not failed.value.crashed
    assert failed.value.report.failure is not None and failed.value.report.failure.fatal
    assert any(r.exc_info for r in caplog.records)  # logged once with its traceback
    assert fake.closed


async def test_a_non_fatal_vendor_error_is_logged_and_the_call_goes_on() -> None:
    clock, fake = SimClock(), FakeS2s()
    tools = rig.Tools(clock)

    async def script() -> None:
        await fake.emit(S2sError(ProviderError("fake-s2s", ProviderErrorKind.PROTOCOL, "odd event")))
        await user_turn(fake)
        await calls_round(fake, clock, rig.CHAIN[0])

    result = await s2s_call(clock, fake, script, tools=tools.registry())
    assert result.report.failures == 1 and result.report.failure is None
    assert len(results(fake)) == 1


def test_our_barge_in_without_a_vad_is_refused() -> None:
    with pytest.raises(ConfigError, match="vad"):
        asyncio.run(run_s2s_call(None, S2sConfig(barge_in=BargeIn.OURS), FakeS2s(), SimClock()))  # type: ignore[arg-type]


def still_running(result: S2sToolResult) -> bool:
    return bool(content(result).get("status") == "still_running")


async def test_a_tool_past_the_think_budget_is_answered_still_running_and_its_result_comes_once_late() -> None:
    clock, fake = SimClock(), FakeS2s()
    registry, booking = booking_registry(clock, seconds=12.0)
    config = S2sConfig(filler=FillerConfig.OFF)

    async def script() -> None:
        await user_turn(fake)
        await fake.emit(S2sToolCall(call_id="b1", name="book_table", arguments={"day": "friday"}), S2sResponseDone())
        await clock.sleep(9.9)
        fake.before_budget = list(fake.sent)  # type: ignore[attr-defined]
        await until(clock, lambda: bool(fake.of("results")), limit=0.3)
        await fake.emit(S2sSpeechStarted(), S2sInterrupted(), S2sSpeechStopped())  # the caller talks over it
        await until(clock, lambda: bool(booking.done), limit=3.0)
        await clock.sleep(0.1)
        await fake.emit(S2sInteractionEnded())

    await s2s_call(clock, fake, script, config=config, tools=registry)
    assert fake.before_budget == []  # type: ignore[attr-defined]
    ((answer,),) = results(fake)  # the vendor's one result for the call: "still running"
    assert answer.call_id == "b1" and still_running(answer)
    (late,) = fake.of("note")  # the real answer once, as a late answer, though a barge-in came between
    assert late.startswith("LATE ANSWER") and "b1" in late and "friday" in late
    assert fake.kinds() == ["results", "request", "note", "request"]
    assert len(booking.done) == 1


async def test_without_a_think_budget_the_model_waits_for_the_result() -> None:
    clock, fake = SimClock(), FakeS2s()
    registry, booking = booking_registry(clock, seconds=12.0)
    config = S2sConfig(think_budget=None, filler=FillerConfig.OFF)

    async def script() -> None:
        await user_turn(fake)
        await fake.emit(S2sToolCall(call_id="b1", name="book_table", arguments={"day": "friday"}), S2sResponseDone())
        await until(clock, lambda: bool(fake.of("request")), limit=13.0)

    await s2s_call(clock, fake, script, config=config, tools=registry)
    assert booking.done
    ((answer,),) = results(fake)
    assert content(answer) == {"booked": "friday"}
    assert fake.kinds() == ["results", "request"]


async def test_a_tool_running_while_the_model_is_silent_gets_one_filler_after_the_delay() -> None:
    clock, fake = SimClock(), FakeS2s()
    registry, _ = booking_registry(clock, seconds=4.0)
    config = S2sConfig(filler=FillerConfig(delay=1.5, phrases=("Just a second.",)))

    async def script() -> None:
        await user_turn(fake)
        await fake.emit(S2sToolCall(call_id="b1", name="book_table", arguments={"day": "friday"}), S2sResponseDone())
        await clock.sleep(1.4)
        fake.before_delay = list(fake.sent)  # type: ignore[attr-defined]
        await until(clock, lambda: len(fake.of("request")) == 2, limit=3.0)

    await s2s_call(clock, fake, script, config=config, tools=registry)
    assert fake.before_delay == []  # type: ignore[attr-defined]
    assert fake.kinds() == ["note", "request", "results", "request"]  # one filler for the round
    (note,) = fake.of("note")
    assert "Just a second." in note and "book_table" in note


async def test_no_filler_while_the_model_speaks_during_a_tool_call() -> None:
    clock, fake = SimClock(), FakeS2s()
    registry, booking = booking_registry(clock, seconds=3.0)
    config = S2sConfig(filler=FillerConfig(delay=1.0))

    async def script() -> None:
        await user_turn(fake)
        await fake.emit(S2sToolCall(call_id="b1", name="book_table", arguments={"day": "friday"}), S2sResponseDone())
        for _ in range(25):  # the model says 2.5 s while the booking runs (silent 0.5 s < the delay after)
            await fake.emit(S2sAudio(tone(0.1), item_id="i1"))
        await until(clock, lambda: bool(fake.of("request")), limit=4.0)

    await s2s_call(clock, fake, script, config=config, tools=registry)
    assert booking.done
    assert fake.kinds() == ["results", "request"]


async def test_a_send_listed_in_a_truncated_result_needs_no_correction() -> None:
    """The sends come from the tool's value, not from the text the model reads (which a cut no longer parses)."""
    clock, fake = SimClock(), FakeS2s()
    registry = ToolRegistry()

    async def send(args: dict[str, Any], ctx: ToolCallContext) -> Any:
        await clock.sleep(0.5)
        return {"delivered": ["sms to the caller"], "log": "x" * 100_000}

    registry.register(ToolSpec(name="send_sms", description="Text the caller.", parameters=BOOK_SCHEMA,
                               kind=ToolKind.SIDE_EFFECT, timeout=10.0), send)

    async def script() -> None:
        await user_turn(fake)
        await fake.emit(S2sToolCall(call_id="s1", name="send_sms", arguments={"day": "friday"}),
                        S2sTranscript(Speaker.MODEL, "I've texted you the confirmation."), S2sResponseDone())
        await until(clock, lambda: bool(fake.of("request")))

    await s2s_call(clock, fake, script, tools=registry)
    ((result,),) = results(fake)
    assert not result.content.startswith("CORRECTION") and "TRUNCATED" in result.content.upper()


async def test_a_greeting_is_asked_of_the_model_before_the_caller_speaks() -> None:
    clock, fake = SimClock(), FakeS2s()

    async def script() -> None:
        await until(clock, lambda: bool(fake.of("request")))

    await s2s_call(clock, fake, script, config=S2sConfig(greeting="Hello, Trattoria here!"))
    assert fake.kinds()[:2] == ["note", "request"]
    assert "Hello, Trattoria here!" in fake.of("note")[0]


async def test_without_a_greeting_the_model_waits_for_the_caller() -> None:
    clock, fake = SimClock(), FakeS2s()

    async def script() -> None:
        await clock.sleep(1.0)

    await s2s_call(clock, fake, script)
    assert fake.of("request") == [] and fake.of("note") == []


# --- typed text and keys ---------------------------------------------------------------------


async def test_a_typed_message_reaches_the_model_as_a_user_message_and_asks_for_its_answer() -> None:
    clock, fake = SimClock(), FakeS2s()

    async def caller(client: LoopbackClient) -> None:
        await client.send_text("  A table for two, please.  ")

    async def script() -> None:
        await until(clock, lambda: bool(fake.of("request")))

    result = await s2s_call(clock, fake, script, caller=caller)
    assert fake.sent == [("user", "A table for two, please."), ("request", None)]
    assert [e.epoch for e in result.events if isinstance(e, TurnStarted)] == [1]
    assert [(e.epoch, e.reason) for e in result.events if isinstance(e, TurnEnded)] == [(1, TurnEndReason.TEXT)]
    assert [(e.text, e.final) for e in result.events if isinstance(e, UserTranscript)] == [
        ("A table for two, please.", True)]
    assert result.report.turns == 1


async def test_a_key_press_reaches_the_model_worded_as_the_cascade_words_it_and_asks_for_its_answer() -> None:
    clock, fake = SimClock(), FakeS2s()

    async def caller(client: LoopbackClient) -> None:
        await client.send_dtmf("5")

    async def script() -> None:
        await until(clock, lambda: bool(fake.of("request")))

    result = await s2s_call(clock, fake, script, caller=caller)
    assert fake.sent == [("user", dtmf_text("5")), ("request", None)]
    assert fake.of("user") == ["[the caller pressed the key 5]"]
    assert [e.reason for e in result.events if isinstance(e, TurnEnded)] == [TurnEndReason.TEXT]


async def test_a_typed_message_while_the_model_speaks_cuts_its_audio_before_the_model_gets_it() -> None:
    clock, fake = SimClock(), FakeS2s()

    async def caller(client: LoopbackClient) -> None:
        await clock.sleep(0.6)
        await client.send_text("Actually, make it three.")

    async def script() -> None:
        for _ in range(20):  # 2 s of the model's speech
            await fake.emit(S2sAudio(tone(0.1), item_id="i1"))
        await until(clock, lambda: bool(fake.of("request")), limit=3.0)

    result = await s2s_call(clock, fake, script, caller=caller)
    assert fake.kinds() == ["cancel", "truncate", "user", "request"]  # the vendor never hears the typing
    ((item, heard_ms),) = fake.of("truncate")
    assert item == "i1" and 400 <= heard_ms <= 800
    assert result.report.interrupts == 1
    assert [e.barge_in for e in result.events if isinstance(e, TurnStarted)] == [True]


async def test_a_key_pressed_while_the_greeting_is_being_made_cancels_it_before_asking_for_an_answer() -> None:
    clock, fake = SimClock(), FakeS2s()

    async def caller(client: LoopbackClient) -> None:
        await client.send_dtmf("1")

    async def script() -> None:
        await until(clock, lambda: len(fake.of("request")) == 2)

    await s2s_call(clock, fake, script, config=S2sConfig(greeting="Hello!"), caller=caller)
    # The greeting's response is still active (no audio, no response.done yet): OpenAI refuses a second one.
    assert fake.kinds() == ["note", "request", "cancel", "user", "request"]

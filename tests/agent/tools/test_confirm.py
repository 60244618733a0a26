"""The confirmation gate: confirm=True tools run only after a later user turn says yes."""

from __future__ import annotations

import json

import pytest

from brisvox.agent.context import Context, ToolCall
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.confirm import Confirmations, PendingConfirmation, Refusal
from brisvox.agent.tools.registry import CONFIRM_PENDING, RegistryError, ToolRegistry
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, body, call, deliver_round, engine, kind, scripted, spec


def _reg(probe: Probe) -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(spec("transfer_call", SE, confirm=True), scripted(probe, "transfer_call", 0.5, result="transferred"))
    reg.register(spec("look", RO), scripted(probe, "look"))
    return reg


def _confirm(cid: str, target: str) -> ToolCall:
    return ToolCall(id=cid, name=CONFIRM_PENDING, arguments={"call_id": target})


async def test_a_gated_call_is_held_and_runs_with_its_original_arguments_after_a_later_yes() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        ctx.push_user("transfer me to +90 555")
        eng.confirmations.note_user_turn()
        ex = await deliver_round(eng, ctx, [call("t1.0", "transfer_call", number="+90 555")], 1)
        res = ex.results[0]
        assert not res.is_error
        b = json.loads(res.content)
        assert b["status"] == "confirmation_required" and b["tool"] == "transfer_call" and b["call_id"] == "t1.0"
        assert "confirm_pending" in b["message"]
        assert probe.count("start") == 0 and len(eng.confirmations) == 1
        # the same user turn, another round: refused, still pending
        ex = await deliver_round(eng, ctx, [_confirm("t1.1", "t1.0")], 1)
        assert kind(ex.results[0]) == "confirmation_refused"
        assert "not replied" in body(ex.results[0])["detail"]
        assert len(eng.confirmations) == 1
        ctx.push_assistant("Shall I transfer you to +90 555?")
        ctx.push_user("yes please")
        eng.confirmations.note_user_turn()
        ex = await deliver_round(eng, ctx, [_confirm("t2.0", "t1.0")], 2)
        assert ex.results[0].content == "transferred" and not ex.results[0].is_error
        assert probe.count("start") == 1
        assert probe.contexts[0].call.arguments == {"number": "+90 555"}
        assert probe.contexts[0].call.id == "t2.0"
        ctx.validate()
        # once: a second confirmation finds nothing; a replay of the confirming call is recorded
        ex = await deliver_round(eng, ctx, [_confirm("t2.1", "t1.0")], 2)
        assert kind(ex.results[0]) == "confirmation_refused"
        ex = await eng.execute([_confirm("t2.0", "t1.0")], 2, CancelToken())
        ex.mark_delivered()
        assert ex.results[0].content == "transferred"
        assert probe.count("start") == 1


async def test_a_barge_in_clears_every_pending_request() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        (await eng.execute([call("t1.0", "transfer_call", number="1")], 1, CancelToken())).mark_delivered()
        assert eng.confirmations.clear() == 1
        eng.confirmations.note_user_turn()
        ex = await eng.execute([_confirm("t2.0", "t1.0")], 2, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "confirmation_refused" and probe.count("start") == 0


async def test_a_request_expires_after_its_ttl_on_the_injected_clock() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock, confirm_ttl=120.0) as eng:
        (await eng.execute([call("t1.0", "transfer_call", number="1")], 1, CancelToken())).mark_delivered()
        eng.confirmations.note_user_turn()
        await clock.sleep(120.5)
        ex = await eng.execute([_confirm("t2.0", "t1.0")], 2, CancelToken())
        ex.mark_delivered()
        assert "expired" in body(ex.results[0])["detail"] and probe.count("start") == 0


async def test_a_speculative_response_holds_a_gated_call_and_records_it_only_at_commit() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        s = await eng.speculate([call("t1.0", "transfer_call", number="1")], 1, CancelToken())
        assert len(eng.confirmations) == 0 and [c.id for c in s.held_calls()] == ["t1.0"]
        s.discard()
        assert len(eng.confirmations) == 0
        s = await eng.speculate([call("t1.1", "transfer_call", number="1")], 1, CancelToken())
        (await eng.commit(s, CancelToken())).mark_delivered()
        assert len(eng.confirmations) == 1


async def test_a_confirmed_call_is_not_refused_as_a_repeat_and_a_gated_repeat_asks_again() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        await deliver_round(eng, ctx, [call("t1.0", "transfer_call", number="1")], 1)
        ex = await deliver_round(eng, ctx, [call("t1.1", "transfer_call", number="1")], 1)
        assert json.loads(ex.results[0].content)["status"] == "confirmation_required"
        # the identical request replaced its predecessor
        assert [p.call.id for p in eng.confirmations.pending()] == ["t1.1"]


def test_at_most_eight_requests_wait_and_the_oldest_is_dropped() -> None:
    c = Confirmations()
    for i in range(9):
        c.request(ToolCall(id=f"t1.{i}", name="t", arguments={"i": i}), 1, 0.0, digest=i)
    assert len(c) == 8 and c.pending()[0].call.id == "t1.1"


def test_a_confirmation_from_an_older_epoch_is_stale() -> None:
    c = Confirmations()
    c.request(ToolCall(id="t3.0", name="t", arguments={}), 3, 0.0, digest=1)
    c.note_user_turn()
    assert c.take("t3.0", 2, 1.0) is Refusal.STALE
    assert isinstance(c.take("t3.0", 3, 1.0), PendingConfirmation)


def test_speech_that_was_going_on_when_the_request_was_made_is_not_the_reply() -> None:
    c = Confirmations()
    c.note_user_speech_started()  # speech 1 starts ...
    c.request(ToolCall(id="t1.0", name="t", arguments={}), 1, 0.0, digest=1)  # ... the model already asked
    c.note_user_turn()  # the end of speech 1 arrives late
    assert c.take("t1.0", 1, 1.0) is Refusal.NO_REPLY_YET
    c.note_user_speech_started()
    c.note_user_turn()
    assert isinstance(c.take("t1.0", 1, 2.0), PendingConfirmation)


def test_confirm_tools_can_be_turned_on_for_a_registered_side_effect_tool() -> None:
    reg = ToolRegistry()
    reg.register(spec("end_call", SE), scripted(Probe(SimClock()), "end_call"))
    reg.register(spec("look", RO), scripted(Probe(SimClock()), "look"))
    reg.require_confirmation("end_call")
    s = reg.spec("end_call")
    assert s is not None and s.confirm and CONFIRM_PENDING in reg
    with pytest.raises(RegistryError):
        reg.require_confirmation("look")
    with pytest.raises(RegistryError):
        reg.require_confirmation(CONFIRM_PENDING)


def test_the_confirmation_result_is_compact_json_that_still_names_the_call_to_confirm() -> None:
    from brisvox.agent.tools.confirm import confirmation_required_body

    text = confirmation_required_body("book_table", "t3.0")
    assert ": " not in text.split('"message"')[0] and '","' in text  # no blanks between fields
    b = json.loads(text)
    assert (b["status"], b["tool"], b["call_id"]) == ("confirmation_required", "book_table", "t3.0")
    assert "confirm_pending" in b["message"] and "call_id" in b["message"]
    # Every word is prompt the next round evaluates: the first wording was 400 characters.
    assert len(b["message"]) < 200

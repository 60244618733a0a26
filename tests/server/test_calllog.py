"""The call timeline built from a call's engine events (pure)."""

from __future__ import annotations

import pytest

from brisvox.agent.tools import ToolKind
from brisvox.agent.tools.results import Outcome
from brisvox.core.frames import TurnEndReason
from brisvox.engine import events as ev
from brisvox.server.calllog import MAX_TURNS, CallLog, CallTimeline

START = 100.0  # the engine clock at the call's start


def _two_turns() -> CallTimeline:
    t = CallTimeline("ws-1", "websocket", "2026-12-04T09:00:00+00:00", START)
    for event in (
        ev.TurnStarted(epoch=1, at=START + 1.0),
        ev.TurnEnded(epoch=1, at=START + 2.4, reason=TurnEndReason.SILENCE, speech_ended=START + 2.0),
        ev.LlmRound(epoch=1, at=START + 3.2, round=0, model="m", requested=START + 2.4, first_token=START + 2.9,
                    input_tokens=None, output_tokens=None, failed=False),
        ev.ToolCallStarted(epoch=1, at=START + 3.0, call_id="c1", name="book_table", arguments="{}",
                           kind=ToolKind.SIDE_EFFECT),
        ev.ToolCallSettled(epoch=1, at=START + 3.5, call_id="c1", name="book_table", outcome=Outcome.OK,
                           content="{}", is_error=False),
        ev.FillerStarted(epoch=1, at=START + 3.2, round=0, tool="book_table"),
        ev.BotAudible(epoch=1, at=START + 3.1),
        ev.TurnStarted(epoch=2, at=START + 4.0, barge_in=True),
        ev.BotHeard(epoch=1, at=START + 4.1, round=0, text="One mo", played=0.45),
    ):
        t.add(event)
    return t


def test_a_turn_row_holds_its_stages_relative_to_the_call_start() -> None:
    first, second = _two_turns().turns
    assert (first.speech_ended, first.ended, first.first_audio, first.cut) == pytest.approx((2.0, 2.4, 3.1, 4.1))
    stages = first.stages()
    assert stages == {"turn_detection": pytest.approx(0.4), "llm_first_token": pytest.approx(0.5),
                      "first_audio": pytest.approx(0.2), "turn_end_to_audio": pytest.approx(0.7),
                      "voice_to_voice": pytest.approx(1.1)}
    assert second.barge_in and second.stages()["voice_to_voice"] is None


def test_a_cut_turn_row_holds_what_the_caller_heard_and_the_seconds_it_covers() -> None:
    first, second = (row for row in _two_turns().to_json()["turn_rows"])
    assert first["heard"] == [{"round": 0, "text": "One mo", "played": 0.45}]
    assert second["heard"] == []


def test_tool_calls_are_bars_with_their_outcome_and_never_their_arguments_or_results() -> None:
    row = _two_turns().to_json()["turn_rows"][0]
    assert row["tools"] == [{"name": "book_table", "kind": "side_effect", "started": 3.0, "settled": 3.5,
                             "outcome": "ok", "error": False}]
    assert row["fillers"] == [3.2]
    assert "arguments" not in str(row) and "content" not in str(row)


def test_events_of_a_turn_never_seen_are_ignored_and_old_turns_scroll_out() -> None:
    t = CallTimeline("ws-1", "websocket", "", 0.0)
    t.add(ev.BotAudible(epoch=7, at=1.0))  # no TurnStarted for epoch 7
    assert t.turns == []
    for epoch in range(MAX_TURNS + 5):
        t.add(ev.TurnStarted(epoch=epoch, at=float(epoch)))
    assert len(t.turns) == MAX_TURNS and t.turns[0].epoch == 5


def test_the_log_lists_live_calls_first_then_the_newest_ended_and_keeps_a_bounded_number() -> None:
    log = CallLog(keep_ended=2)
    for n in range(4):
        log.open(f"c{n}", "websocket", "", 0.0)
    for n in range(3):
        log.close(f"c{n}", 5.0, "peer_hangup")
    assert [c["call_id"] for c in log.summaries()] == ["c3", "c2", "c1"]  # c0 scrolled out
    assert log.get("c0") is None
    ended = log.get("c2")
    assert ended is not None and not ended.live and ended.summary()["outcome"] == "peer_hangup"
    assert ended.summary()["duration"] == 5.0


def test_the_greeting_is_a_row_of_its_own_that_a_caller_talking_over_it_cuts() -> None:
    t = CallTimeline("wr-1", "webrtc", "", START)
    for event in (
        ev.BotText(epoch=0, at=START + 0.1, round=0, text="Hello, Trattoria."),
        ev.BotAudible(epoch=0, at=START + 0.3),
        ev.TurnStarted(epoch=1, at=START + 1.3, barge_in=True),
        ev.TurnEnded(epoch=1, at=START + 4.5, reason=TurnEndReason.SILENCE, speech_ended=START + 4.0),
        ev.BotHeard(epoch=0, at=START + 4.5, round=0, text="Hello", played=0.3),
        ev.BotAudible(epoch=1, at=START + 5.0),
    ):
        t.add(event)
    greeting, turn = t.to_json()["turn_rows"]
    assert (greeting["epoch"], greeting["greeting"], greeting["started"]) == (0, True, pytest.approx(0.1))
    assert (greeting["first_audio"], greeting["cut"]) == (pytest.approx(0.3), pytest.approx(4.5))
    assert (turn["epoch"], turn["greeting"], turn["barge_in"], turn["first_audio"]) == (1, False, True, pytest.approx(5.0))


def test_only_the_bots_first_line_opens_a_row_without_a_turn() -> None:
    t = CallTimeline("ws-1", "websocket", "", 0.0)
    t.add(ev.BotHeard(epoch=0, at=1.0, round=0, text="Hel", played=0.0))  # no text said yet: nothing to cut
    t.add(ev.TurnStarted(epoch=1, at=2.0))
    t.add(ev.BotText(epoch=0, at=2.1, round=0, text="late"))  # the caller's turn came first: not a greeting
    assert [(row.epoch, row.greeting) for row in t.turns] == [(1, False)]

from __future__ import annotations

from brisvox.core.timeline import MAX_LLM_ROUNDS, TimelineRecorder, TurnEvent


def test_the_first_mark_of_an_event_wins_and_repeats_are_counted() -> None:
    t = TimelineRecorder()
    assert t.mark(1, TurnEvent.USER_TURN_ENDED, 2.0)
    assert not t.mark(1, TurnEvent.USER_TURN_ENDED, 3.0)
    assert t.get(1).at(TurnEvent.USER_TURN_ENDED) == 2.0  # type: ignore[union-attr]
    assert t.stats.repeated == 1


def test_each_llm_round_is_timed_from_its_own_marks() -> None:
    t = TimelineRecorder()
    r0 = t.llm_request(0, 1.0)
    t.llm_first_token(0, r0, 1.25)
    t.llm_done(0, r0, 2.0)
    r1 = t.llm_request(0, 3.0)
    t.llm_first_token(0, r1, 3.5)
    record = t.get(0)
    assert record is not None
    assert [(m.round, m.time_to_first_token, m.duration) for m in record.llm_rounds()] == [(0, 0.25, 1.0), (1, 0.5, None)]
    assert record.at(TurnEvent.LLM_REQUEST) == 1.0
    assert record.between(TurnEvent.LLM_REQUEST, TurnEvent.LLM_FIRST_TOKEN) == 0.25


def test_rounds_past_the_cap_are_dropped_and_counted() -> None:
    t = TimelineRecorder()
    for i in range(MAX_LLM_ROUNDS + 3):
        t.llm_request(0, float(i))
    assert t.get(0).llm_round_count() == MAX_LLM_ROUNDS  # type: ignore[union-attr]
    assert t.stats.llm_rounds_dropped == 3


def test_only_the_newest_turns_are_kept() -> None:
    t = TimelineRecorder(max_turns=2)
    for epoch in range(4):
        t.mark(epoch, TurnEvent.USER_TURN_STARTED, float(epoch))
    assert [r.epoch for r in t.records()] == [2, 3]
    assert t.stats.turns_forgotten == 2


def test_a_late_mark_for_a_forgotten_turn_is_dropped_and_never_evicts_a_newer_turn() -> None:
    t = TimelineRecorder(max_turns=2)
    for epoch in (1, 2, 3):
        t.mark(epoch, TurnEvent.USER_TURN_STARTED, float(epoch))
    assert [r.epoch for r in t.records()] == [2, 3]
    assert t.mark(1, TurnEvent.CLEAR_APPLIED, 9.0) is False
    assert t.llm_request(1, 9.5) == 0  # a detached record: timed, but kept nowhere
    assert [r.epoch for r in t.records()] == [2, 3]
    assert t.get(1) is None and t.stats.late_marks == 2 and t.stats.turns_forgotten == 1

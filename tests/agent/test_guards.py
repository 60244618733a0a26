"""The claim guards, one test per design decision of the claim-guard spec, plus the pattern table."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import brisvox.agent.guards as guards
from brisvox.agent.guards import (
    WORK_CLAIM_WITHOUT_TOOL,
    ClaimKind,
    ClaimPattern,
    ClaimPatterns,
    DeliveryClaimGuard,
    ThinkBudget,
    ThinkVerdict,
    WorkClaimGuard,
    WorkClaimVerdict,
)
from brisvox.core.errors import ConfigError, InvalidInput


def test_the_guards_module_exports_exactly_its_public_api() -> None:
    assert sorted(guards.__all__) == sorted(
        [
            "DEFAULT_CLAIM_PATTERNS",
            "PHONE_THINK_BUDGET",
            "WORK_CLAIM_WITHOUT_TOOL",
            "ClaimKind",
            "ClaimPattern",
            "ClaimPatterns",
            "DeliveryClaimGuard",
            "DeliveryVerdict",
            "ThinkBudget",
            "ThinkOutcome",
            "ThinkVerdict",
            "WorkClaimDecision",
            "WorkClaimGuard",
            "WorkClaimVerdict",
        ]
    )


# --- delivery claims ---------------------------------------------------------------------------


def test_a_send_claimed_before_the_result_gets_a_correction_said_first() -> None:
    guard = DeliveryClaimGuard()
    guard.call_started("c1", at=1.0)
    guard.agent_said("Okay, I've texted you the link.", at=1.5)
    verdict = guard.result("c1", delivered=[], at=3.0)
    assert verdict.claim == "Okay, I've texted you the link."
    assert verdict.correction is not None and "nothing was sent" in verdict.correction
    body = verdict.apply('{"status": "failed"}')
    assert body.startswith("CORRECTION") and body.endswith('{"status": "failed"}')


def test_a_send_the_result_lists_as_delivered_needs_no_correction() -> None:
    guard = DeliveryClaimGuard()
    guard.call_started("c1", at=1.0)
    guard.agent_said("I sent it.", at=1.5)
    verdict = guard.result("c1", delivered=["sms:+1555"], at=3.0)
    assert verdict.correction is None and verdict.apply("x") == "x"


def test_a_send_claim_said_before_the_call_started_is_not_charged_to_it() -> None:
    guard = DeliveryClaimGuard()
    guard.agent_said("I sent it.", at=0.5)
    guard.call_started("c1", at=1.0)
    assert guard.result("c1", delivered=[], at=2.0).correction is None


def test_a_cancelled_call_is_forgotten_with_its_claims() -> None:
    guard = DeliveryClaimGuard()
    guard.call_started("c1", at=1.0)
    guard.agent_said("I sent it.", at=1.5)
    guard.call_cancelled("c1", at=2.0)
    assert guard.running_calls == 0
    with pytest.raises(InvalidInput):
        guard.result("c1", delivered=[], at=3.0)


def test_a_result_for_a_call_never_started_is_an_error_naming_the_call() -> None:
    with pytest.raises(InvalidInput, match="c9"):
        DeliveryClaimGuard().result("c9", delivered=[], at=1.0)


# --- work claims -------------------------------------------------------------------------------


def test_a_claim_with_no_tool_call_after_an_uninterrupted_reply_requests_one_turn() -> None:
    guard = WorkClaimGuard()
    guard.user_utterance(at=0.0)
    guard.agent_reply("Sure, let me check your calendar.", at=1.0, interrupted=False)
    decision = guard.interaction_ended(at=2.0)
    assert decision.verdict is WorkClaimVerdict.WITHOUT_TOOL
    assert decision.log_tag == WORK_CLAIM_WITHOUT_TOOL
    assert decision.claim == "Sure, let me check your calendar."
    assert decision.note is not None and '"Sure, let me check your calendar."' in decision.note
    assert decision.request_turn is True


def test_the_same_claim_after_an_interrupted_reply_gets_the_note_only() -> None:
    guard = WorkClaimGuard()
    guard.user_utterance(at=0.0)
    guard.agent_reply("Let me check your", at=1.0, interrupted=True)
    decision = guard.interaction_ended(at=2.0)
    assert decision.verdict is WorkClaimVerdict.WITHOUT_TOOL
    assert decision.note is not None
    assert decision.request_turn is False


def test_a_claim_followed_by_a_late_non_blocking_call_gets_no_note() -> None:
    guard = WorkClaimGuard()
    guard.user_utterance(at=0.0)
    guard.agent_reply("I'm checking that now.", at=1.0, interrupted=False)
    guard.tool_call_started("c1", at=1.8)  # the call arrives after the speech, before the end
    decision = guard.interaction_ended(at=2.0)
    assert decision.verdict is WorkClaimVerdict.TOOL_CALLED
    assert decision.note is None and not decision.request_turn


def test_a_claim_while_a_call_of_an_earlier_interaction_still_runs_gets_no_note() -> None:
    guard = WorkClaimGuard()
    guard.agent_reply("Let me look it up.", at=1.0, interrupted=False)
    guard.tool_call_started("c1", at=1.1)
    assert guard.interaction_ended(at=2.0).verdict is WorkClaimVerdict.TOOL_CALLED
    guard.user_utterance(at=3.0)
    guard.agent_reply("I'm still checking.", at=4.0, interrupted=False)
    decision = guard.interaction_ended(at=5.0)
    assert decision.verdict is WorkClaimVerdict.TOOL_RUNNING
    assert decision.note is None and not decision.request_turn
    guard.tool_call_finished("c1", at=6.0)
    guard.agent_reply("I'm still checking.", at=7.0, interrupted=False)
    assert guard.interaction_ended(at=8.0).verdict is WorkClaimVerdict.WITHOUT_TOOL


def test_an_offer_is_not_a_claim() -> None:
    guard = WorkClaimGuard()
    guard.user_utterance(at=0.0)
    guard.agent_reply("I can check that for you. Would you like me to look it up?", at=1.0, interrupted=False)
    decision = guard.interaction_ended(at=2.0)
    assert decision.verdict is WorkClaimVerdict.NO_CLAIM and decision.note is None


def test_a_second_claim_in_the_same_utterance_requests_no_second_turn() -> None:
    guard = WorkClaimGuard()
    guard.user_utterance(at=0.0)
    guard.agent_reply("Let me check.", at=1.0, interrupted=False)
    first = guard.interaction_ended(at=2.0)
    guard.agent_reply("I'm looking it up now.", at=3.0, interrupted=False)  # the requested turn claims again
    second = guard.interaction_ended(at=4.0)
    assert first.request_turn is True
    assert second.verdict is WorkClaimVerdict.WITHOUT_TOOL and second.note is not None
    assert second.request_turn is False
    guard.user_utterance(at=5.0)  # the caller speaks again: one more turn is allowed
    guard.agent_reply("Let me check.", at=6.0, interrupted=False)
    assert guard.interaction_ended(at=7.0).request_turn is True


def test_the_latest_claim_of_an_interaction_is_the_one_quoted() -> None:
    guard = WorkClaimGuard()
    guard.agent_reply("Let me check the weather.", at=1.0, interrupted=False)
    guard.agent_reply("Okay.", at=1.5, interrupted=False)
    guard.agent_reply("I'm booking the table.", at=2.0, interrupted=False)
    assert guard.interaction_ended(at=3.0).claim == "I'm booking the table."


def test_replies_we_wrote_are_skipped() -> None:
    guard = WorkClaimGuard()
    guard.agent_reply("Let me check.", at=1.0, interrupted=False, ours=True)
    assert guard.interaction_ended(at=2.0).verdict is WorkClaimVerdict.NO_CLAIM


def test_turkish_claims_are_found_and_turkish_offers_are_not() -> None:
    patterns = ClaimPatterns()
    assert patterns.find("Tamam, hemen bakıyorum.", ClaimKind.WORK) == "Tamam, hemen bakıyorum."
    assert patterns.find("Kontrol edeyim.", ClaimKind.WORK) is not None
    assert patterns.find("Size bağlantıyı gönderdim.", ClaimKind.DELIVERY) is not None
    assert patterns.find("İsterseniz kontrol edebilirim.", ClaimKind.WORK) is None


@pytest.mark.parametrize(
    "text",
    ["I can check that for you.", "Could I look that up?", "Shall I book it?", "Would you like me to check?", "Hello!"],
)
def test_offers_and_small_talk_match_no_work_pattern(text: str) -> None:
    assert ClaimPatterns().find(text, ClaimKind.WORK) is None


def test_a_user_can_extend_the_table() -> None:
    patterns = ClaimPatterns().extended([ClaimPattern(ClaimKind.WORK, "de", r"\bich\s+schaue\s+nach\b")])
    assert patterns.find("Moment, ich schaue nach.", ClaimKind.WORK) == "Moment, ich schaue nach."
    assert ClaimPatterns().find("Moment, ich schaue nach.", ClaimKind.WORK) is None


def test_a_pattern_that_does_not_compile_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"\(oops"):
        ClaimPatterns([ClaimPattern(ClaimKind.WORK, "en", "(oops")])


# --- think budget ------------------------------------------------------------------------------


def test_past_the_think_budget_the_result_says_the_work_still_runs_and_the_answer_comes_late() -> None:
    budget = ThinkBudget()
    assert budget.seconds == 10.0
    assert budget.decide("c1", "think", started_at=0.0, now=9.9, result=None) is None
    running = budget.decide("c1", "think", started_at=0.0, now=10.0, result=None)
    assert running is not None and running.verdict is ThinkVerdict.STILL_RUNNING
    assert json.loads(running.content)["status"] == "still_running"
    late = budget.late_answer("c1", "think", '{"events": 2}')
    assert late.verdict is ThinkVerdict.LATE_ANSWER and '{"events": 2}' in late.content


def test_a_result_within_the_budget_is_the_answer() -> None:
    outcome = ThinkBudget(3.0).decide("c1", "think", started_at=0.0, now=2.0, result="ok")
    assert outcome is not None and (outcome.verdict, outcome.content) == (ThinkVerdict.ANSWERED, "ok")


def test_a_budget_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ConfigError):
        ThinkBudget(0.0)


def test_a_quoted_claim_is_its_own_sentence_cut_to_the_quote_limit() -> None:
    text = "Hello there. Let me check " + "x" * 400 + ". Bye."
    quote = ClaimPatterns().find(text, ClaimKind.WORK)
    assert quote is not None and quote.startswith("Let me check") and len(quote) == guards.MAX_QUOTE


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200), kind=st.sampled_from(list(ClaimKind)))
def test_finding_claims_in_any_text_returns_a_piece_of_it_or_nothing(text: str, kind: ClaimKind) -> None:
    quote = ClaimPatterns().find(text, kind)
    assert quote is None or quote in text

"""The turn machine: the exhaustive transition table, the pause table, late ticks, clamping."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from brisvox.agent._deadline import MAX_DELAY
from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.turn import (
    DEFAULT_MIN_PAUSE,
    Adaptive,
    AnalysisState,
    ArmTimer,
    BotAudioEnded,
    BotAudioStarted,
    BotOpens,
    BotTurn,
    CancelTimer,
    EndReason,
    EndUserTurn,
    FixedSilence,
    Hangup,
    InputKind,
    Interrupt,
    RequestAnalysis,
    StartBotTurn,
    StartUserTurn,
    SttFinal,
    SttInterim,
    Tick,
    TurnAction,
    TurnInput,
    TurnMachine,
    TurnPolicy,
    TurnState,
    UserText,
    VadStart,
    VadStop,
    Verdict,
    ends_sentence,
)
from brisvox.core.errors import ConfigError, InvalidInput
from brisvox.core.frames import TurnEndReason

S = TurnState
FIXED = FixedSilence(0.5)
ADAPTIVE = Adaptive(min_pause=0.0)  # the spec's table: a complete verdict ends the turn at once
POLICIES: dict[str, TurnPolicy] = {"fixed": FIXED, "adaptive": ADAPTIVE}


def run(m: TurnMachine, *inputs: TurnInput) -> list[TurnAction]:
    out: list[TurnAction] = []
    for inp in inputs:
        out.extend(m.handle(inp))
    return out


def machine_in(policy: TurnPolicy, state: TurnState) -> tuple[TurnMachine, float]:
    """A machine driven into ``state`` (epoch 1 except for IDLE), and the time to use next."""
    m = TurnMachine(policy)
    adaptive = isinstance(policy, Adaptive)
    # A first exchange in epoch 0, answered and played out.
    run(m, VadStart(0.0), VadStop(1.0), SttFinal(1.05, "hello"))
    run(m, Verdict(1.1, 1, True) if adaptive else Tick(1.5))
    run(m, BotAudioStarted(2.0, 0), BotAudioEnded(3.0, 0))
    if state is S.IDLE:
        return m, 3.1
    run(m, VadStart(10.0))
    if state is S.USER_SPEAKING:
        return m, 10.1
    run(m, VadStop(10.5))
    if state is S.USER_PAUSED:
        return m, 10.6
    run(m, SttFinal(10.6, "ok"), Verdict(10.7, 2, True) if adaptive else Tick(11.0))
    if state is S.AWAITING_RESPONSE:
        return m, 11.1
    run(m, BotAudioStarted(11.2, 1))
    if state is S.BOT_SPEAKING:
        return m, 11.3
    run(m, Hangup(12.0))
    assert state is S.CLOSED
    return m, 12.1


def inputs_at(t: float, epoch: int) -> dict[InputKind, TurnInput]:
    return {
        InputKind.VAD_START: VadStart(t),
        InputKind.VAD_STOP: VadStop(t),
        InputKind.STT_INTERIM: SttInterim(t, "hello there"),
        InputKind.STT_FINAL: SttFinal(t, "Hello."),
        InputKind.VERDICT: Verdict(t, 2, True),
        InputKind.TICK: Tick(t),
        InputKind.BOT_AUDIO_STARTED: BotAudioStarted(t, epoch),
        InputKind.BOT_AUDIO_ENDED: BotAudioEnded(t, epoch),
        InputKind.USER_TEXT: UserText(t, "hi"),
        InputKind.HANGUP: Hangup(t),
        InputKind.BOT_OPENS: BotOpens(t),
        InputKind.BOT_TURN: BotTurn(t, interrupt=True),
    }


K = InputKind
Row = tuple[list[TurnAction], TurnState, int]
IGNORED: Callable[[TurnState], Row] = lambda s: ([], s, 1)  # noqa: E731


def expected(policy: str, state: TurnState, kind: InputKind, t: float) -> Row:
    adaptive = policy == "adaptive"
    if state is S.CLOSED:
        return IGNORED(S.CLOSED)
    if state is S.IDLE:
        return {
            K.VAD_START: ([StartUserTurn(1, t)], S.USER_SPEAKING, 0),
            K.USER_TEXT: ([StartUserTurn(1, t), EndUserTurn(1, EndReason.TEXT, t)], S.AWAITING_RESPONSE, 0),
            K.HANGUP: ([], S.CLOSED, 0),
            K.BOT_TURN: ([StartBotTurn(1)], S.AWAITING_RESPONSE, 0),
        }.get(kind, IGNORED(S.IDLE))
    if state is S.USER_SPEAKING:
        stop: Row = (
            ([RequestAnalysis(2, 1), ArmTimer(t + 3.0)], S.USER_PAUSED, 0)
            if adaptive
            else ([ArmTimer(t + 0.5)], S.USER_PAUSED, 0)
        )
        return {
            K.VAD_STOP: stop,
            K.STT_INTERIM: ([], S.USER_SPEAKING, 0),
            K.HANGUP: ([EndUserTurn(1, EndReason.HANGUP, t)], S.CLOSED, 0),
        }.get(kind, IGNORED(S.USER_SPEAKING))
    if state is S.USER_PAUSED:
        deadline = 13.5 if adaptive else 11.0
        rows: dict[InputKind, Row] = {
            K.VAD_START: ([CancelTimer()], S.USER_SPEAKING, 0),
            K.STT_INTERIM: ([], S.USER_PAUSED, 0),
            # A punctuated final shortens the adaptive wait to the stop (deadline - 3 s) + 0.3 s;
            # FixedSilence ignores it.
            K.STT_FINAL: ([ArmTimer(deadline - 3.0 + 0.3)] if adaptive else [], S.USER_PAUSED, 0),
            K.TICK: ([ArmTimer(deadline)], S.USER_PAUSED, 0),  # early: re-armed
            K.HANGUP: ([EndUserTurn(1, EndReason.HANGUP, t), CancelTimer()], S.CLOSED, 0),
        }
        if adaptive:
            rows[K.VERDICT] = ([EndUserTurn(1, EndReason.VERDICT, t), CancelTimer()], S.AWAITING_RESPONSE, 0)
        return rows.get(kind, IGNORED(S.USER_PAUSED))
    # AWAITING_RESPONSE and BOT_SPEAKING behave alike for these inputs.
    return {
        K.VAD_START: ([Interrupt(2), StartUserTurn(2, t)], S.USER_SPEAKING, 0),
        K.BOT_AUDIO_STARTED: ([], S.BOT_SPEAKING, 0),
        K.BOT_AUDIO_ENDED: ([], S.IDLE, 0),
        K.USER_TEXT: (
            [Interrupt(2), StartUserTurn(2, t), EndUserTurn(2, EndReason.TEXT, t)],
            S.AWAITING_RESPONSE,
            0,
        ),
        K.HANGUP: ([], S.CLOSED, 0),
        K.BOT_TURN: ([Interrupt(2), StartBotTurn(2)], S.AWAITING_RESPONSE, 0),
    }.get(kind, IGNORED(state))


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("state", list(TurnState))
@pytest.mark.parametrize("kind", list(InputKind))
def test_every_state_and_input_pair_has_the_specified_transition(
    policy: str, state: TurnState, kind: InputKind
) -> None:
    m, t = machine_in(POLICIES[policy], state)
    assert m.state is state
    before = m.stats.ignored(kind)
    total_before = m.stats.total_ignored
    actions = m.handle(inputs_at(t, m.epoch)[kind])
    want_actions, want_state, want_ignored = expected(policy, state, kind, t)
    assert actions == want_actions
    assert m.state is want_state
    assert m.stats.ignored(kind) - before == want_ignored
    assert m.stats.total_ignored - total_before == want_ignored


def test_the_transition_table_covers_six_states_and_twelve_inputs() -> None:
    assert len(TurnState) == 6
    assert len(InputKind) == 12


def test_a_bot_line_that_does_not_interrupt_waits_for_the_bot_to_be_silent_and_never_takes_a_candidate() -> None:
    m = TurnMachine(FIXED)
    run(m, BotOpens(0.0), BotAudioStarted(0.3, 0))
    assert not m.bot_turn_possible(interrupt=False) and run(m, BotTurn(1.0)) == []
    assert m.stats.ignored(K.BOT_TURN) == 1
    run(m, BotAudioEnded(2.0, 0))
    assert run(m, BotTurn(2.5)) == [StartBotTurn(1)] and m.state is S.AWAITING_RESPONSE
    judged = TurnMachine(FIXED, InterruptionPolicy.recommended())
    run(judged, BotOpens(0.0), BotAudioStarted(0.3, 0), VadStart(1.0))  # a barge-in candidate, being judged
    assert judged.barge_in_candidate is not None and run(judged, BotTurn(1.1, interrupt=True)) == []


def test_a_bot_that_opens_the_call_owns_epoch_zero_and_the_callers_first_turn_is_epoch_one() -> None:
    m = TurnMachine(FIXED)
    assert run(m, BotOpens(0.0)) == []
    assert m.state is S.AWAITING_RESPONSE and m.epoch == 0
    run(m, BotAudioStarted(0.3, 0), BotAudioEnded(4.0, 0))
    assert m.state is S.IDLE
    assert run(m, VadStart(6.0)) == [StartUserTurn(1, 6.0)]


def test_a_caller_who_talks_over_the_opening_line_barges_in_to_epoch_one() -> None:
    m = TurnMachine(FIXED)
    run(m, BotOpens(0.0), BotAudioStarted(0.3, 0))
    assert run(m, VadStart(1.0)) == [Interrupt(1), StartUserTurn(1, 1.0)]


def test_the_bot_can_open_only_a_call_where_nothing_happened_yet() -> None:
    m = TurnMachine(FIXED)
    run(m, VadStart(0.0))
    assert run(m, BotOpens(0.1)) == []
    assert m.state is S.USER_SPEAKING and m.stats.ignored(K.BOT_OPENS) == 1


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("state", [S.AWAITING_RESPONSE, S.BOT_SPEAKING])
@pytest.mark.parametrize("make", [BotAudioStarted, BotAudioEnded])
def test_bot_audio_of_another_epoch_is_ignored_and_counted(
    policy: str, state: TurnState, make: type[BotAudioStarted] | type[BotAudioEnded]
) -> None:
    m, t = machine_in(POLICIES[policy], state)
    assert m.epoch == 1
    for stale in (0, 2):
        kind = make.kind
        before = m.stats.ignored(kind)
        assert m.handle(make(t, stale)) == []
        assert m.state is state
        assert m.stats.ignored(kind) == before + 1
    # The epoch guard keeps the barge-in working: the next VAD start still interrupts.
    assert m.handle(VadStart(t + 1)) == [Interrupt(2), StartUserTurn(2, t + 1)]


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("state", [s for s in TurnState if s is not S.CLOSED])
def test_a_closed_machine_ignores_an_owed_final_after_a_hangup_from_any_state(
    policy: str, state: TurnState
) -> None:
    m, t = machine_in(POLICIES[policy], state)
    m.handle(Hangup(t))
    assert m.state is S.CLOSED
    before = m.stats.ignored(K.STT_FINAL)
    assert m.handle(SttFinal(t + 0.1, "late.")) == []
    assert m.stats.ignored(K.STT_FINAL) == before + 1
    assert m.timer is None


def test_the_first_user_turn_is_epoch_zero_and_each_later_one_advances_it() -> None:
    m = TurnMachine(FIXED)
    assert run(m, VadStart(0.0)) == [StartUserTurn(0, 0.0)]
    run(m, VadStop(1.0), Tick(1.5), BotAudioEnded(1.6, 0))
    assert run(m, VadStart(2.0)) == [StartUserTurn(1, 2.0)]
    # A resumed pause keeps its epoch.
    run(m, VadStop(3.0))
    assert run(m, VadStart(3.2)) == [CancelTimer()]
    assert m.epoch == 1


def test_a_typed_message_as_the_first_input_is_a_turn_in_epoch_zero() -> None:
    m = TurnMachine()
    assert m.handle(UserText(0.0, "hi")) == [StartUserTurn(0, 0.0), EndUserTurn(0, EndReason.TEXT, 0.0)]


# --- the pause table --------------------------------------------------------------------------

STOP = 10.0
REQ = Adaptive(require_final=True, min_pause=0.0, final_timeout=0.0)  # the spec's
MIN = Adaptive(min_pause=0.5)
REQ_MIN = Adaptive(require_final=True, min_pause=0.5, final_timeout=0.0)
HOLD = Adaptive(require_final=True, final_timeout=6.0)


def paused(policy: TurnPolicy) -> TurnMachine:
    m = TurnMachine(policy)
    run(m, VadStart(9.0), VadStop(STOP))
    return m


# (name, policy, inputs after the stop, expected sub-state, expected deadline/reason or end reason)
PAUSE_ROWS: list[tuple[str, TurnPolicy, list[TurnInput], AnalysisState | None, tuple[float, EndReason] | EndReason]] = [
    ("fixed: silence after the stop", FIXED, [], AnalysisState.NOT_REQUESTED, (10.5, EndReason.FIXED_SILENCE)),
    ("fixed: a punctuated final changes nothing", FIXED, [SttFinal(10.1, "Yes.")], AnalysisState.NOT_REQUESTED,
     (10.5, EndReason.FIXED_SILENCE)),
    ("pending: the fallback", ADAPTIVE, [], AnalysisState.PENDING, (13.0, EndReason.FALLBACK)),
    ("pending: an unpunctuated final", ADAPTIVE, [SttFinal(10.2, "yes")], AnalysisState.PENDING,
     (13.0, EndReason.FALLBACK)),
    ("pending: a punctuated final", ADAPTIVE, [SttFinal(10.2, "Yes. ")], AnalysisState.PENDING,
     (10.3, EndReason.STT_PUNCTUATION)),
    ("pending: a complete verdict ends at once", ADAPTIVE, [Verdict(10.3, 1, True)], None, EndReason.VERDICT),
    ("pending: a punctuated final then incomplete", ADAPTIVE, [SttFinal(10.2, "Yes?"), Verdict(10.4, 1, False)],
     AnalysisState.INCOMPLETE, (10.3, EndReason.STT_PUNCTUATION)),
    ("incomplete: the fallback", ADAPTIVE, [Verdict(10.2, 1, False)], AnalysisState.INCOMPLETE,
     (13.0, EndReason.FALLBACK)),
    ("incomplete: a punctuated final after the grace ends it at once", ADAPTIVE,
     [Verdict(10.2, 1, False), SttFinal(11.0, "Yes…")], None, EndReason.STT_PUNCTUATION),
    ("incomplete: an unpunctuated final", ADAPTIVE, [Verdict(10.2, 1, False), SttFinal(11.0, "yes")],
     AnalysisState.INCOMPLETE, (13.0, EndReason.FALLBACK)),
    ("incomplete: a late punctuated final still ends it before the fallback", ADAPTIVE,
     [Verdict(10.2, 1, False), SttFinal(12.8, "Yes!")], None, EndReason.STT_PUNCTUATION),
    ("complete, require_final: waits for the final", REQ, [Verdict(10.3, 1, True)], AnalysisState.COMPLETE,
     (11.1, EndReason.FINAL_GRACE)),
    ("complete, require_final: the final ends it", REQ, [Verdict(10.3, 1, True), SttFinal(10.5, "yes")], None,
     EndReason.VERDICT),
    ("complete, require_final: a final first, then the verdict ends it", REQ,
     [SttFinal(10.2, "yes"), Verdict(10.4, 1, True)], None, EndReason.VERDICT),
    ("complete, require_final: a late verdict is capped by the fallback", REQ, [Verdict(12.5, 1, True)],
     AnalysisState.COMPLETE, (13.0, EndReason.FINAL_GRACE)),
    ("complete, require_final: a punctuated final ends it", REQ, [Verdict(10.3, 1, True), SttFinal(10.9, "Yes.")],
     None, EndReason.VERDICT),
    ("min pause: a complete verdict inside it ends the turn at its end", MIN, [Verdict(10.2, 1, True)],
     AnalysisState.COMPLETE, (10.5, EndReason.VERDICT)),
    ("min pause: a complete verdict after it ends at once", MIN, [Verdict(10.6, 1, True)], None, EndReason.VERDICT),
    ("min pause: a punctuated final's grace ends no sooner", Adaptive(min_pause=0.5, punctuated_grace=0.1),
     [SttFinal(10.1, "Yes.")], AnalysisState.PENDING, (10.5, EndReason.STT_PUNCTUATION)),
    ("min pause, require_final: the final inside it ends the turn at its end", REQ_MIN,
     [Verdict(10.1, 1, True), SttFinal(10.2, "yes")], AnalysisState.COMPLETE, (10.5, EndReason.VERDICT)),
    ("min pause, require_final: the wait for the final is at least the min pause", Adaptive(
        require_final=True, final_grace=0.1, min_pause=0.5, final_timeout=0.0), [Verdict(10.1, 1, True)], AnalysisState.COMPLETE,
     (10.5, EndReason.FINAL_GRACE)),
    ("final owed, require_final: the fallback waits for it", HOLD, [Verdict(10.2, 1, False)],
     AnalysisState.INCOMPLETE, (16.0, EndReason.FALLBACK)),
    ("final owed, require_final: it ends the held pause when it comes", HOLD,
     [Verdict(10.2, 1, False), SttFinal(13.5, "for two at seven")], None, EndReason.FALLBACK),
    ("final owed, require_final: a complete verdict waits for it past the grace", HOLD, [Verdict(10.2, 1, True)],
     AnalysisState.COMPLETE, (16.0, EndReason.FINAL_GRACE)),
    ("final owed, require_final: it ends a complete pause past the grace", HOLD,
     [Verdict(10.2, 1, True), SttFinal(12.0, "yes")], None, EndReason.VERDICT),
    ("final in, require_final: the fallback is not held", HOLD, [SttFinal(10.2, "yes"), Verdict(10.3, 1, False)],
     AnalysisState.INCOMPLETE, (13.0, EndReason.FALLBACK)),
    ("min pause longer than the fallback: the fallback ends it", Adaptive(min_pause=5.0), [Verdict(10.2, 1, True)],
     AnalysisState.COMPLETE, (13.0, EndReason.FALLBACK)),
    ("a verdict for another analysis is stale", ADAPTIVE, [Verdict(10.3, 7, True)], AnalysisState.PENDING,
     (13.0, EndReason.FALLBACK)),
    ("a second verdict for the same analysis is ignored", ADAPTIVE, [Verdict(10.2, 1, False), Verdict(10.3, 1, True)],
     AnalysisState.INCOMPLETE, (13.0, EndReason.FALLBACK)),
    ("a second final in the pause never moves the deadline", ADAPTIVE,
     [SttFinal(10.2, "yes"), SttFinal(10.3, "Yes.")], AnalysisState.PENDING, (13.0, EndReason.FALLBACK)),
]


@pytest.mark.parametrize(("name", "policy", "inputs", "sub", "want"), PAUSE_ROWS, ids=[r[0] for r in PAUSE_ROWS])
def test_the_pause_ends_or_shortens_by_analysis_sub_state(
    name: str,
    policy: TurnPolicy,
    inputs: list[TurnInput],
    sub: AnalysisState | None,
    want: tuple[float, EndReason] | EndReason,
) -> None:
    m = paused(policy)
    actions = run(m, *inputs)
    if isinstance(want, EndReason):
        assert m.state is S.AWAITING_RESPONSE
        assert [a for a in actions if isinstance(a, EndUserTurn)] == [EndUserTurn(0, want, inputs[-1].at)]
        assert m.timer is None
        return
    deadline, reason = want
    pause = m.pause
    assert pause is not None and pause.analysis is sub
    assert pause.deadline == pytest.approx(deadline) and pause.reason is reason
    assert m.timer == pause.deadline
    # Ticking at the deadline ends the turn with that reason.
    assert m.handle(Tick(pause.deadline)) == [EndUserTurn(0, reason, pause.deadline)]


def test_a_caller_who_goes_on_within_the_min_pause_after_a_complete_verdict_keeps_one_turn() -> None:
    # "A table for two, tomorrow at seven" | 0.3 s | "please": Smart Turn calls the first half
    # complete and Whisper's final is already in (the early decode), yet the turn stays open.
    m = TurnMachine(REQ_MIN)
    run(m, VadStart(9.0), VadStop(STOP), SttFinal(10.1, "A table for two, tomorrow at seven."))
    assert run(m, Verdict(10.15, 1, True)) == [] and m.timer == pytest.approx(10.5)
    assert m.pause is not None and m.pause.reason is EndReason.VERDICT
    assert run(m, VadStart(10.3)) == [CancelTimer()]  # the caller goes on: the same turn, no end
    assert m.state is S.USER_SPEAKING and m.epoch == 0
    actions = run(m, VadStop(10.8), SttFinal(10.9, "Please."), Verdict(11.0, 2, True), Tick(11.3))
    assert [a for a in actions if isinstance(a, EndUserTurn)] == [EndUserTurn(0, EndReason.VERDICT, 11.3)]
    # Without the min pause the first verdict ends the turn and "please" is a second one.
    m0 = TurnMachine(REQ)
    run(m0, VadStart(9.0), VadStop(STOP), SttFinal(10.1, "A table for two, tomorrow at seven."))
    assert run(m0, Verdict(10.15, 1, True))[0] == EndUserTurn(0, EndReason.VERDICT, 10.15)


def test_the_default_min_pause_is_livekit_s_half_second_and_a_negative_one_is_refused() -> None:
    assert Adaptive().min_pause == DEFAULT_MIN_PAUSE == 0.5
    with pytest.raises(ConfigError, match="min_pause"):
        Adaptive(min_pause=-0.1)


def test_extra_inputs_in_a_pause_are_counted_as_ignored() -> None:
    m = paused(ADAPTIVE)
    run(m, SttFinal(10.2, "yes"), SttFinal(10.3, "Yes."), Verdict(10.4, 1, False), Verdict(10.5, 1, True))
    assert m.stats.ignored(K.STT_FINAL) == 1
    assert m.stats.ignored(K.VERDICT) == 1


def test_a_final_of_an_earlier_pause_is_consumed_and_never_attributed_to_the_current_one() -> None:
    m = paused(ADAPTIVE)
    assert run(m, VadStart(10.2)) == [CancelTimer()]
    assert run(m, VadStop(10.6)) == [RequestAnalysis(2, 0), ArmTimer(13.6)]
    assert m.owed_finals == 2
    # The first final answers the first stop: no effect on this pause, not counted.
    assert run(m, SttFinal(10.7, "Wait.")) == []
    assert m.pause is not None and m.pause.final_at is None
    assert m.stats.total_ignored == 0
    assert run(m, SttFinal(10.8, "Go on.")) == [ArmTimer(pytest.approx(10.9))]
    # The verdict of the resumed pause's analysis is stale.
    assert run(m, Verdict(10.9, 1, True)) == []
    assert m.stats.ignored(K.VERDICT) == 1
    assert run(m, Verdict(11.0, 2, True)) == [EndUserTurn(0, EndReason.VERDICT, 11.0), CancelTimer()]


# --- the grace after a final (virtual time) ---------------------------------------------------

DEMO = Adaptive(require_final=True)  # the demo agent's policy: Smart Turn calls a flat voice unfinished


def test_a_punctuated_final_after_the_minimum_pause_ends_the_turn_when_it_comes() -> None:
    # The grace counts from the stop, not from the final: the demo's Whisper final comes 0.5 to
    # 2 s after the stop on the shared machine, and a wait after it only added 0.3 s to the turn
    # (a caller who goes on is heard by the VAD whenever the final comes).
    m = paused(DEMO)
    run(m, Verdict(10.3, 1, False))
    assert run(m, SttFinal(10.7, "A table for two tomorrow at seven.")) == [
        EndUserTurn(0, EndReason.STT_PUNCTUATION, 10.7), CancelTimer()]


def test_a_punctuated_final_inside_the_minimum_pause_ends_the_turn_at_its_end() -> None:
    m = paused(DEMO)
    run(m, Verdict(10.1, 1, False))
    assert run(m, SttFinal(10.2, "A table for two.")) == [ArmTimer(pytest.approx(STOP + DEMO.min_pause))]
    assert DEMO.punctuated_grace < DEMO.min_pause < DEMO.final_grace
    assert run(m, Tick(10.45)) == [ArmTimer(pytest.approx(10.5))]  # early: still waiting for more words
    assert run(m, Tick(10.5)) == [EndUserTurn(0, EndReason.STT_PUNCTUATION, 10.5)]


def test_an_unpunctuated_final_gets_no_grace_and_waits_for_the_fallback() -> None:
    m = paused(DEMO)
    run(m, Verdict(10.3, 1, False), SttFinal(10.7, "a table for two tomorrow at"))
    assert m.timer == pytest.approx(STOP + DEMO.fallback_silence)
    assert run(m, Tick(11.0)) == [ArmTimer(pytest.approx(13.0))]  # past any grace: nothing ends
    assert run(m, Tick(13.0)) == [EndUserTurn(0, EndReason.FALLBACK, 13.0)]


def test_the_punctuated_grace_is_the_policy_s_and_a_caller_who_goes_on_keeps_the_turn() -> None:
    m = paused(Adaptive(punctuated_grace=1.0))
    assert run(m, SttFinal(10.6, "Two people.")) == [ArmTimer(pytest.approx(STOP + 1.0))]
    assert run(m, VadStart(10.9)) == [CancelTimer()]  # more words within the grace: the turn goes on
    assert m.state is S.USER_SPEAKING


def test_the_end_reason_maps_to_the_frame_reason() -> None:
    assert EndReason.FIXED_SILENCE.frame_reason is TurnEndReason.SILENCE
    assert EndReason.STT_PUNCTUATION.frame_reason is TurnEndReason.FINAL
    assert {r.frame_reason for r in EndReason} == set(TurnEndReason)


def test_sentence_final_punctuation_is_the_last_non_whitespace_character() -> None:
    assert ends_sentence("Tamam.") and ends_sentence("ne? ") and ends_sentence("yes!\n") and ends_sentence("hmm…")
    assert not ends_sentence("yes") and not ends_sentence("3.5 kg") and not ends_sentence("  ")
    assert not ends_sentence("(ok)")


# --- late ticks ---------------------------------------------------------------------------

LATE_CASES: list[tuple[TurnPolicy, list[TurnInput], EndReason]] = [
    (FIXED, [], EndReason.FIXED_SILENCE),
    (ADAPTIVE, [], EndReason.FALLBACK),
    (ADAPTIVE, [SttFinal(10.2, "Yes.")], EndReason.STT_PUNCTUATION),
    (REQ, [Verdict(10.3, 1, True)], EndReason.FINAL_GRACE),
    (REQ, [Verdict(12.9, 1, True)], EndReason.FINAL_GRACE),
]


@pytest.mark.parametrize("late", [0.001, 5.0])
@pytest.mark.parametrize(("policy", "inputs", "reason"), LATE_CASES)
def test_a_tick_after_the_deadline_ends_the_pause_like_one_at_it(
    late: float, policy: TurnPolicy, inputs: list[TurnInput], reason: EndReason
) -> None:
    m = paused(policy)
    run(m, *inputs)
    deadline = m.timer
    assert deadline is not None
    at = deadline + late
    assert m.handle(Tick(at)) == [EndUserTurn(0, reason, at)]
    assert m.state is S.AWAITING_RESPONSE and m.timer is None


def test_a_tick_outside_a_pause_or_candidate_is_a_stale_timer_and_ignored() -> None:
    m = paused(FIXED)
    run(m, VadStart(10.2))
    assert m.handle(Tick(10.5)) == []
    assert m.stats.ignored(K.TICK) == 1


# --- clamping -----------------------------------------------------------------------------

HUGE = [math.inf, 1e300, MAX_DELAY * 10]


@pytest.mark.parametrize("huge", HUGE)
def test_huge_durations_clamp_instead_of_raising(huge: float) -> None:
    # Fixed silence.
    m = paused(FixedSilence(huge))
    assert m.timer == STOP + MAX_DELAY
    assert m.handle(Tick(STOP + MAX_DELAY)) == [EndUserTurn(0, EndReason.FIXED_SILENCE, STOP + MAX_DELAY)]
    # Fallback, final grace and punctuation grace.
    m = paused(Adaptive(fallback_silence=huge, punctuated_grace=huge))
    assert m.timer == STOP + MAX_DELAY
    run(m, SttFinal(10.1, "Yes."))
    assert m.pause is not None and m.pause.reason is EndReason.FALLBACK  # not earlier than the fallback
    m = paused(Adaptive(fallback_silence=huge, punctuated_grace=1.0))
    run(m, SttFinal(10.1, "Yes."))
    assert m.timer == pytest.approx(11.0)
    m = paused(Adaptive(fallback_silence=huge, final_grace=huge, require_final=True))
    run(m, Verdict(10.2, 1, True))
    assert m.timer == STOP + MAX_DELAY and m.pause is not None and m.pause.reason is EndReason.FINAL_GRACE
    m = paused(Adaptive(fallback_silence=huge, final_grace=2.0, require_final=True, final_timeout=0.0))
    run(m, Verdict(10.2, 1, True))
    assert m.timer == pytest.approx(12.2)
    m = paused(Adaptive(final_timeout=huge, require_final=True))  # the wait for a final that never comes
    assert m.timer == STOP + MAX_DELAY and m.pause is not None and m.pause.reason is EndReason.FALLBACK
    # The recheck of a barge-in candidate.
    for policy in (
        InterruptionPolicy(min_speech=huge),
        InterruptionPolicy(transcript_wait=huge),
        InterruptionPolicy(min_speech=1.0, vad_hangover=huge),
        InterruptionPolicy(echo_guard=huge),
    ):
        m = TurnMachine(FIXED, policy)
        run(m, VadStart(0.0), VadStop(1.0), Tick(1.5), BotAudioStarted(2.0, 0))
        actions = m.handle(VadStart(3.0))
        assert len(actions) == 1 and isinstance(actions[0], ArmTimer)
        assert math.isfinite(actions[0].deadline) and actions[0].deadline <= 3.0 + MAX_DELAY


def test_deadlines_stay_finite_at_the_end_of_the_float_range() -> None:
    m = TurnMachine(FixedSilence(math.inf))
    big = 1.7e308
    run(m, VadStart(big), VadStop(big))
    deadline = m.timer
    assert deadline is not None and math.isfinite(deadline)
    assert run(m, Tick(deadline))[0] == EndUserTurn(0, EndReason.FIXED_SILENCE, deadline)


@pytest.mark.parametrize(
    "make",
    [
        lambda: FixedSilence(-1.0),
        lambda: FixedSilence(math.nan),
        lambda: Adaptive(fallback_silence=-0.1),
        lambda: Adaptive(final_grace=math.nan),
        lambda: Adaptive(punctuated_grace=-0.3),
        lambda: InterruptionPolicy(min_speech=-1.0),
        lambda: InterruptionPolicy(min_words=-1),
    ],
)
def test_negative_or_nan_durations_are_a_config_error(make: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        make()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_an_input_whose_time_is_not_finite_is_ignored_and_counted(bad: float) -> None:
    m = paused(ADAPTIVE)
    for inp in (VadStart(bad), VadStop(bad), SttFinal(bad, "Yes."), Tick(bad), Verdict(bad, 1, True), Hangup(bad)):
        assert m.handle(inp) == []
    assert m.stats.total_ignored == 6
    assert m.state is S.USER_PAUSED and m.timer == STOP + 3.0


def test_something_that_is_not_a_turn_input_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="str"):
        TurnMachine().handle("VadStart")  # type: ignore[arg-type]


def test_the_repr_of_text_inputs_hides_the_text() -> None:
    assert "secret" not in repr(SttFinal(1.0, "secret")) + repr(SttInterim(1.0, "secret")) + repr(UserText(1.0, "secret"))


def test_a_machine_is_freed_without_the_cycle_collector() -> None:
    import gc

    gc.collect()
    gc.disable()
    try:
        # Machines another test keeps alive are not this one (the slotted machine takes no weakref).
        others = [o for o in gc.get_objects() if isinstance(o, TurnMachine)]
        m = paused(ADAPTIVE)
        run(m, SttFinal(10.1, "ok."), VadStart(10.2))
        del m
        # No reference cycle: reference counting alone freed it.
        assert not [o for o in gc.get_objects() if isinstance(o, TurnMachine) and not any(o is k for k in others)]
    finally:
        gc.enable()


# --- a final that comes after its turn ended (the fallback beat a slow STT) ----------------


def _ended_before_its_final() -> TurnMachine:
    """Epoch 0 spoken, stopped at 1.0, ended by the 3 s fallback with its final still owed."""
    m = TurnMachine(Adaptive())
    actions = run(m, VadStart(0.0), VadStop(1.0), Tick(4.0))
    assert EndUserTurn(0, EndReason.FALLBACK, 4.0) in actions and m.owed_finals == 1 and m.owes_ended_turn
    return m


@pytest.mark.parametrize("answer", ["pending", "playing", "played"])
def test_a_late_final_with_words_completes_its_turn_in_the_next_epoch_with_the_turns_end_reason(answer: str) -> None:
    m = _ended_before_its_final()
    if answer != "pending":
        run(m, BotAudioStarted(4.5, 0))
    if answer == "played":
        run(m, BotAudioEnded(4.8, 0))
    actions = run(m, SttFinal(5.0, "a table for two"))
    replaces = [Interrupt(1)] if answer != "played" else []  # the answer to the shorter transcript goes
    assert actions == [*replaces, StartUserTurn(1, 5.0), EndUserTurn(1, EndReason.FALLBACK, 5.0)]
    assert m.state is S.AWAITING_RESPONSE and m.owed_finals == 0 and not m.owes_ended_turn
    assert m.stats.total_ignored == 0


def test_a_final_later_than_the_final_timeout_still_completes_its_turn() -> None:
    m = TurnMachine(HOLD)
    run(m, VadStart(0.0), VadStop(1.0), Verdict(1.1, 1, False))
    assert run(m, Tick(4.0)) == [ArmTimer(7.0)]  # the fallback is held: the final is owed
    assert EndUserTurn(0, EndReason.FALLBACK, 7.0) in run(m, Tick(7.0)) and m.owes_ended_turn
    assert run(m, SttFinal(7.5, "a table for two")) == [  # the answer to no words is dropped
        Interrupt(1), StartUserTurn(1, 7.5), EndUserTurn(1, EndReason.FALLBACK, 7.5)]


def test_a_late_final_without_words_changes_nothing() -> None:
    m = _ended_before_its_final()
    assert run(m, SttFinal(5.0, "  ")) == [] and m.epoch == 0 and m.state is S.AWAITING_RESPONSE
    assert not m.owes_ended_turn


def test_a_late_final_while_the_caller_talks_again_is_consumed_and_joins_the_next_turn() -> None:
    m = TurnMachine(Adaptive(), InterruptionPolicy.recommended())
    run(m, VadStart(0.0), VadStop(1.0), Tick(4.0), VadStart(4.5))  # a barge-in candidate, pending
    assert m.barge_in_candidate is not None and m.owes_ended_turn  # the driver keeps the words
    assert run(m, SttFinal(4.6, "a table for two")) == [] and m.epoch == 0
    m2 = _ended_before_its_final()
    run(m2, BotAudioStarted(4.5, 0), BotAudioEnded(4.8, 0), VadStart(4.9))  # a new turn has started
    assert not m2.owes_ended_turn and run(m2, SttFinal(5.0, "a table for two")) == [] and m2.epoch == 1


def test_only_the_ended_turns_own_finals_complete_it_not_an_older_stops() -> None:
    m = TurnMachine(Adaptive(), InterruptionPolicy.recommended())
    run(m, VadStart(0.0), VadStop(1.0), SttFinal(1.2, "Hi."), Tick(1.2 + 0.8))  # turn 0, answered
    run(m, VadStart(2.5), VadStop(2.6))  # a cough over the answer: vetoed, its final still owed
    assert m.stats.total_vetoed == 1
    run(m, BotAudioEnded(3.0, 0), VadStart(3.5), VadStop(4.0), Tick(7.0))  # turn 1 ends on the fallback
    assert m.owed_finals == 2 and not m.owes_ended_turn  # the cough's final comes first
    assert run(m, SttFinal(7.5, "hm")) == [] and m.owes_ended_turn
    assert run(m, SttFinal(7.6, "for two")) == [
        Interrupt(2), StartUserTurn(2, 7.6), EndUserTurn(2, EndReason.FALLBACK, 7.6)]

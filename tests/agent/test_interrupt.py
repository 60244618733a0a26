"""The interruption policy: backchannel matching, the guards, the candidate life cycle, the echo window."""

from __future__ import annotations

import math

import pytest

from brisvox.agent.interrupt import (
    BACKCHANNEL_MAX_TOKENS,
    Assessment,
    BackchannelSet,
    Confirm,
    Guard,
    InterruptionPolicy,
    Observation,
    TextKind,
)
from brisvox.agent.turn import (
    ArmTimer,
    BotAudioEnded,
    BotAudioStarted,
    CancelTimer,
    EndReason,
    EndUserTurn,
    FixedSilence,
    Hangup,
    InputKind,
    Interrupt,
    StartUserTurn,
    SttFinal,
    SttInterim,
    Tick,
    TurnAction,
    TurnInput,
    TurnMachine,
    TurnState,
    UserText,
    VadStart,
    VadStop,
)
from brisvox.core.errors import ConfigError

REC = InterruptionPolicy.recommended()
EN = InterruptionPolicy(backchannels=(BackchannelSet.english(),))
TR = InterruptionPolicy(backchannels=(BackchannelSet.turkish(),))

# --- backchannel matching -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "text", "backchannel"),
    [
        (EN, "yeah", True),
        (EN, "Mm-hmm.", True),
        (EN, "uh-huh", True),
        (EN, "uh huh", True),  # "uh-huh" is the tokens uh, huh
        (EN, "yeah, okay, got it", True),
        (EN, "I see", True),
        (EN, "İ see", True),  # "İ" folds to a plain "i"
        (EN, "ye", False),  # a partial word is not a backchannel
        (EN, "yes", False),  # answers are deliberately left out
        (EN, "no", False),
        (EN, "okay wait", False),
        (EN, "got", False),  # only part of a phrase
        (EN, "", False),
        (EN, "tamam", False),
        (TR, "tamam", True),
        (TR, "Hı-hı", True),
        (TR, "hı hı", True),
        (TR, "öyle mi", True),
        (TR, "ÖYLE Mİ", True),
        (TR, "evet evet, aynen", True),
        (TR, "hi-hi", False),  # dotless ı stays distinct from i
        (TR, "hayır", False),
        (TR, "tamam ama", False),
        (TR, "öyle", False),
        (REC, "okay tamam", True),  # phrases of any configured set
    ],
)
def test_backchannel_text_must_be_covered_by_configured_phrases(
    policy: InterruptionPolicy, text: str, backchannel: bool
) -> None:
    assert policy.is_backchannel(text) is backchannel


def test_backchannel_matching_stops_after_sixteen_tokens() -> None:
    assert REC.is_backchannel(" ".join(["yeah"] * BACKCHANNEL_MAX_TOKENS))
    assert not REC.is_backchannel(" ".join(["yeah"] * (BACKCHANNEL_MAX_TOKENS + 1)))
    assert not REC.is_backchannel(" ".join(["yeah"] * 10_000))


def test_an_interim_is_classified_by_its_words() -> None:
    assert REC.classify("") == (TextKind.NONE, 0)
    assert REC.classify(" ... ") == (TextKind.NONE, 0)
    assert REC.classify("mm-hmm") == (TextKind.BACKCHANNEL, 1)
    assert REC.classify("wait, stop!") == (TextKind.SPEECH, 2)


def test_a_backchannel_phrase_needs_a_word() -> None:
    with pytest.raises(ConfigError, match="'--'"):
        BackchannelSet.of("bad", ["--"])


def test_the_presets_have_the_specified_values() -> None:
    assert InterruptionPolicy.disabled().is_disabled
    assert not REC.is_disabled
    assert (REC.min_speech, REC.vad_hangover, REC.echo_guard, REC.echo_min_words) == (0.3, 0.1, 0.4, 1)
    assert (REC.transcript_wait, REC.backchannel_cap, REC.min_words, REC.confirm) == (0.35, 1.5, 0, Confirm.ALL)
    assert [s.name for s in REC.backchannels] == ["english", "turkish"]


# --- the pure policy ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "obs", "want"),
    [
        (InterruptionPolicy(), Observation(0.0, 0.0), Assessment()),
        # min_speech live: elapsed - hangover, recheck at min_speech + hangover.
        (InterruptionPolicy(min_speech=0.3, vad_hangover=0.1), Observation(1.0, 1.35),
         Assessment(Guard.MIN_SPEECH, 1.4)),
        (InterruptionPolicy(min_speech=0.3, vad_hangover=0.1), Observation(1.0, 1.4), Assessment()),
        # A tick before the start is judged as of the start.
        (InterruptionPolicy(min_speech=0.3), Observation(1.0, 0.2), Assessment(Guard.MIN_SPEECH, 1.3)),
        # min_words arms no timer.
        (InterruptionPolicy(min_words=2), Observation(0.0, 5.0, 1, TextKind.SPEECH), Assessment(Guard.MIN_WORDS)),
        (InterruptionPolicy(min_words=2), Observation(0.0, 5.0, 2, TextKind.SPEECH), Assessment()),
        # All vs Any.
        (InterruptionPolicy(min_speech=0.3, min_words=2), Observation(0.0, 0.5, 1, TextKind.SPEECH),
         Assessment(Guard.MIN_WORDS)),
        (InterruptionPolicy(min_speech=0.3, min_words=2, confirm=Confirm.ANY), Observation(0.0, 0.5, 1, TextKind.SPEECH),
         Assessment()),
        (InterruptionPolicy(min_speech=0.3, min_words=2, confirm=Confirm.ANY), Observation(0.0, 0.1, 2, TextKind.SPEECH),
         Assessment()),
        (InterruptionPolicy(min_speech=0.3, min_words=2, confirm=Confirm.ANY), Observation(0.0, 0.1, 1, TextKind.SPEECH),
         Assessment(Guard.MIN_SPEECH, 0.3)),
        # Echo window: lifted by words or by its end.
        (InterruptionPolicy(echo_guard=0.4), Observation(1.0, 1.1, bot_audio_since=0.9), Assessment(Guard.ECHO, 1.3)),
        (InterruptionPolicy(echo_guard=0.4), Observation(1.0, 1.1, 1, TextKind.SPEECH, 0.9), Assessment()),
        (InterruptionPolicy(echo_guard=0.4), Observation(1.0, 1.3, bot_audio_since=0.9), Assessment()),
        (InterruptionPolicy(echo_guard=0.4), Observation(1.0, 1.1), Assessment()),  # the bot is silent
        (InterruptionPolicy(echo_guard=0.4, echo_min_words=2), Observation(1.0, 1.1, 1, TextKind.SPEECH, 0.9),
         Assessment(Guard.ECHO, 1.3)),
        # Transcript wait.
        (InterruptionPolicy(transcript_wait=0.35), Observation(0.0, 0.2), Assessment(Guard.TRANSCRIPT, 0.35)),
        (InterruptionPolicy(transcript_wait=0.35), Observation(0.0, 0.2, 1, TextKind.SPEECH), Assessment()),
        (InterruptionPolicy(transcript_wait=0.35), Observation(0.0, 0.35), Assessment()),
        # Backchannel cap.
        (REC, Observation(0.0, 0.5, 1, TextKind.BACKCHANNEL), Assessment(Guard.BACKCHANNEL, 1.5)),
        (REC, Observation(0.0, 1.5, 1, TextKind.BACKCHANNEL), Assessment()),
        (InterruptionPolicy(backchannels=(BackchannelSet.english(),)), Observation(0.0, 99.0, 1, TextKind.BACKCHANNEL),
         Assessment(Guard.BACKCHANNEL, None)),  # no cap: only words lift it
        # The recheck is the earliest time-driven lift.
        (REC, Observation(0.0, 0.1, bot_audio_since=-0.2), Assessment(Guard.ECHO, 0.2)),
        (REC, Observation(0.0, 0.1), Assessment(Guard.TRANSCRIPT, 0.35)),
        (REC, Observation(0.0, 0.36), Assessment(Guard.MIN_SPEECH, 0.4)),
    ],
)
def test_assess_table(policy: InterruptionPolicy, obs: Observation, want: Assessment) -> None:
    got = policy.assess(obs)
    assert got.blocked_by is want.blocked_by
    if want.recheck_at is None:
        assert got.recheck_at is None
    else:
        assert got.recheck_at == pytest.approx(want.recheck_at)


@pytest.mark.parametrize(
    ("policy", "obs", "blocked"),
    [
        # A heard word waives min_speech at the stop (a short real "stop").
        (REC, Observation(0.0, 0.25, 1, TextKind.SPEECH), None),
        (REC, Observation(0.0, 0.25), Guard.MIN_SPEECH),  # no interim: judged on VAD alone
        (REC, Observation(0.0, 0.3), None),  # the backdated duration is exact: no hangover
        (REC, Observation(0.0, 0.1), Guard.MIN_SPEECH),  # the transcript wait no longer applies
        (REC, Observation(0.0, 0.4, 1, TextKind.BACKCHANNEL), Guard.BACKCHANNEL),
        (REC, Observation(0.0, 1.6, 2, TextKind.BACKCHANNEL), None),  # past the cap
        (InterruptionPolicy(min_speech=2.0, backchannels=(BackchannelSet.english(),), backchannel_cap=1.5),
         Observation(0.0, 1.6, 2, TextKind.BACKCHANNEL), None),  # a backchannel past its cap waives min_speech
        # The echo guard still applies at the stop when a word waives min_speech.
        (InterruptionPolicy(min_speech=0.3, echo_guard=0.4, echo_min_words=2),
         Observation(0.0, 0.25, 1, TextKind.SPEECH, 0.0), Guard.ECHO),
        (InterruptionPolicy(min_speech=0.3, echo_guard=0.4, echo_min_words=2),
         Observation(0.0, 0.25, 2, TextKind.SPEECH, 0.0), None),
        (InterruptionPolicy(min_words=2), Observation(0.0, 3.0, 1, TextKind.SPEECH), Guard.MIN_WORDS),
    ],
)
def test_assess_at_stop_table(policy: InterruptionPolicy, obs: Observation, blocked: Guard | None) -> None:
    got = policy.assess_at_stop(obs)
    assert got.blocked_by is blocked
    assert got.recheck_at is None


# --- the machine with a policy --------------------------------------------------------------


def play(m: TurnMachine, *inputs: TurnInput) -> list[TurnAction]:
    """Deliver inputs in order, firing the armed timer whenever it falls due before the next one."""
    out: list[TurnAction] = []
    for inp in inputs:
        while m.timer is not None and m.timer <= inp.at:
            out.extend(m.handle(Tick(m.timer)))
        out.extend(m.handle(inp))
    return out


def speaking_bot(policy: InterruptionPolicy, *, bot_start: float = 2.0) -> TurnMachine:
    """A machine whose epoch-0 reply started playing at ``bot_start``."""
    m = TurnMachine(FixedSilence(0.5), policy)
    play(m, VadStart(0.0), VadStop(1.0), SttFinal(1.1, "a table for two"), BotAudioStarted(bot_start, 0))
    assert m.state is TurnState.BOT_SPEAKING
    return m


def outcome(m: TurnMachine, actions: list[TurnAction]) -> str:
    if Interrupt(1) in actions:
        return "confirmed"
    if m.barge_in_candidate is not None:
        return "pending"
    vetoed = [g.value for g in Guard if m.stats.vetoed(g)]
    return "vetoed:" + ",".join(vetoed)


# (language, interim text, speech duration, outcome) with recommended(), long after the echo window.
INTERRUPTION_TABLE = [
    ("en", "mm-hmm", 0.5, "vetoed:backchannel"),
    ("en", "yeah okay", 0.8, "vetoed:backchannel"),
    ("en", "uh-huh right", 1.2, "vetoed:backchannel"),
    ("en", "yeah yeah yeah yeah yeah", 2.0, "confirmed"),  # past the 1.5 s cap
    ("en", "yes", 0.25, "confirmed"),  # an answer, waived at the stop
    ("en", "no", 0.2, "confirmed"),
    ("en", "wait", 0.6, "confirmed"),
    ("en", "", 0.22, "vetoed:min_speech"),  # a cough
    ("en", "", 0.8, "confirmed"),  # wordless but long
    ("tr", "hı-hı", 0.5, "vetoed:backchannel"),
    ("tr", "tamam", 0.4, "vetoed:backchannel"),
    ("tr", "öyle mi", 0.9, "vetoed:backchannel"),
    ("tr", "evet aynen", 1.0, "vetoed:backchannel"),
    ("tr", "hayır", 0.25, "confirmed"),
    ("tr", "bir dakika", 0.7, "confirmed"),
    ("tr", "tamam tamam tamam tamam", 1.8, "confirmed"),
]


@pytest.mark.parametrize(("lang", "text", "duration", "want"), INTERRUPTION_TABLE)
def test_the_interruption_table(lang: str, text: str, duration: float, want: str) -> None:
    m = speaking_bot(REC)
    t0 = 5.0
    inputs: list[TurnInput] = [VadStart(t0)]
    if text:
        inputs.append(SttInterim(t0 + min(0.15, duration / 2), text))
    inputs.append(VadStop(t0 + duration))
    actions = play(m, *inputs)
    assert outcome(m, actions) == want
    assert m.epoch == (1 if want == "confirmed" else 0)
    assert m.state is (TurnState.USER_PAUSED if want == "confirmed" else TurnState.BOT_SPEAKING)


def test_a_pending_candidate_changes_nothing_but_the_recheck_timer() -> None:
    m = speaking_bot(REC)
    assert m.handle(VadStart(5.0)) == [ArmTimer(5.35)]  # the transcript wait
    assert m.state is TurnState.BOT_SPEAKING and m.epoch == 0
    cand = m.barge_in_candidate
    assert cand is not None and cand.started == 5.0 and cand.recheck_at == 5.35 and not cand.detached
    assert m.handle(SttInterim(5.1, "mm-hmm")) == [ArmTimer(5.4)]  # min speech (with the hangover)
    assert m.handle(SttInterim(5.2, "mm-hmm")) == []  # unchanged deadline: nothing emitted
    assert m.handle(Tick(5.4)) == [ArmTimer(6.5)]  # the backchannel cap
    # A second VAD start is a duplicate.
    assert m.handle(VadStart(5.3)) == []
    assert m.stats.ignored(InputKind.VAD_START) == 1
    assert m.handle(VadStop(5.5)) == [CancelTimer()]
    assert m.stats.vetoed(Guard.BACKCHANNEL) == 1 and m.barge_in_candidate is None
    # The final of the vetoed utterance is consumed, not counted.
    assert m.handle(SttFinal(5.6, "Mm-hmm.")) == []
    assert m.stats.total_ignored == 1


def test_interims_are_cumulative_for_the_word_count_but_the_latest_decides_backchannel() -> None:
    m = speaking_bot(InterruptionPolicy(min_words=2, backchannels=(BackchannelSet.english(),)))
    m.handle(VadStart(5.0))
    m.handle(SttInterim(5.2, "yeah sure"))
    cand = m.barge_in_candidate
    assert cand is not None and cand.words == 2 and cand.text is TextKind.BACKCHANNEL
    # A restarted interim cannot lower the count; the latest text is speech now.
    assert m.handle(SttInterim(5.4, "wait")) == [Interrupt(1), StartUserTurn(1, 5.0)]


def test_an_interim_with_no_candidate_outside_the_user_turn_is_ignored() -> None:
    m = speaking_bot(REC)
    assert m.handle(SttInterim(3.0, "hello")) == []
    assert m.stats.ignored(InputKind.STT_INTERIM) == 1


def test_the_bot_audio_ending_detaches_the_candidate_and_a_confirmation_promotes_it() -> None:
    m = speaking_bot(REC)
    m.handle(VadStart(5.0))
    assert m.handle(BotAudioEnded(5.1, 0)) == []
    assert m.state is TurnState.IDLE
    cand = m.barge_in_candidate
    assert cand is not None and cand.detached
    # A duplicate start of the detached candidate is ignored; nothing starts a new turn.
    assert m.handle(VadStart(5.2)) == []
    assert m.handle(SttInterim(5.3, "wait a second")) == [ArmTimer(5.4)]
    # Promoted: a plain user turn, no Interrupt (the bot is already silent).
    assert m.handle(Tick(5.4)) == [StartUserTurn(1, 5.0)]
    assert m.state is TurnState.USER_SPEAKING and m.stats.promoted == 1 and m.stats.confirmed == 0


def test_a_detached_backchannel_is_vetoed_at_its_stop_and_gets_no_turn() -> None:
    m = speaking_bot(REC)
    play(m, VadStart(5.0), SttInterim(5.15, "mm-hmm"), BotAudioEnded(5.2, 0), VadStop(5.4))
    assert m.state is TurnState.IDLE and m.epoch == 0
    assert m.stats.vetoed(Guard.BACKCHANNEL) == 1


def test_a_typed_message_confirms_a_pending_candidate() -> None:
    m = speaking_bot(REC)
    m.handle(VadStart(5.0))
    assert m.handle(UserText(5.1, "cancel")) == [Interrupt(1), StartUserTurn(1, 5.0), CancelTimer()]
    assert m.state is TurnState.USER_SPEAKING and m.stats.confirmed == 1


def test_a_hangup_drops_a_pending_candidate() -> None:
    m = speaking_bot(REC)
    m.handle(VadStart(5.0))
    assert m.handle(Hangup(5.1)) == [CancelTimer()]
    assert m.stats.dropped == 1 and m.barge_in_candidate is None and m.timer is None


def test_a_candidate_before_the_bot_audio_is_guarded_once_the_audio_starts() -> None:
    m = TurnMachine(FixedSilence(0.5), InterruptionPolicy(echo_guard=0.4, min_speech=0.1))
    m.handle(VadStart(0.0))
    m.handle(VadStop(1.0))
    m.handle(Tick(1.5))
    assert m.state is TurnState.AWAITING_RESPONSE
    assert m.handle(VadStart(1.6)) == [ArmTimer(pytest.approx(1.7))]
    assert m.handle(BotAudioStarted(1.65, 0)) == []  # min speech still lifts first
    assert m.state is TurnState.BOT_SPEAKING
    assert m.timer is not None
    assert m.handle(Tick(m.timer)) == [ArmTimer(pytest.approx(2.05))]  # the echo window
    assert m.handle(Tick(2.05)) == [Interrupt(1), StartUserTurn(1, 1.6)]


def test_a_cough_is_vetoed_when_the_vad_hangover_is_set_and_confirmed_when_it_is_not() -> None:
    # A 220 ms cough; the VAD reports its stop 300 ms later, backdated.
    for hangover, want in ((0.3, "vetoed:min_speech"), (0.0, "confirmed")):
        m = speaking_bot(InterruptionPolicy(min_speech=0.3, vad_hangover=hangover))
        actions = play(m, VadStart(5.0))
        # The stop arrives at 5.52 carrying 5.22: ticks due before the arrival fire first.
        while m.timer is not None and m.timer <= 5.52:
            actions += m.handle(Tick(m.timer))
        actions += m.handle(VadStop(5.22))
        assert outcome(m, actions) == want


# --- the echo window ------------------------------------------------------------------------

ECHO = InterruptionPolicy(echo_guard=0.4)


def test_per_chunk_bot_audio_reports_do_not_keep_the_echo_window_open() -> None:
    m = speaking_bot(ECHO, bot_start=2.0)
    for k in range(1, 50):
        m.handle(BotAudioStarted(2.0 + 0.02 * k, 0))
    assert m.handle(VadStart(2.5)) == [Interrupt(1), StartUserTurn(1, 2.5)]


def test_a_repeated_or_late_bot_audio_report_never_moves_the_echo_window_backwards() -> None:
    m = speaking_bot(ECHO, bot_start=2.0)
    m.handle(BotAudioStarted(3.0, 0))  # a real gap: the window restarts at 3.0
    m.handle(BotAudioStarted(1.0, 0))  # older
    m.handle(BotAudioStarted(3.0, 0))  # repeated
    assert m.handle(VadStart(3.2)) == [ArmTimer(pytest.approx(3.4))]


def test_the_echo_window_restarts_only_after_a_gap_of_the_guard_since_the_last_report() -> None:
    m = speaking_bot(ECHO, bot_start=2.0)
    m.handle(BotAudioStarted(2.3, 0))  # 300 ms after the previous report: same window
    assert m.handle(VadStart(2.45)) == [Interrupt(1), StartUserTurn(1, 2.45)]
    m = speaking_bot(ECHO, bot_start=2.0)
    m.handle(BotAudioStarted(2.3, 0))
    m.handle(BotAudioStarted(2.7, 0))  # 400 ms after the previous report: restarts
    assert m.handle(VadStart(2.8)) == [ArmTimer(pytest.approx(3.1))]
    assert m.handle(SttInterim(2.9, "stop")) == [Interrupt(1), StartUserTurn(1, 2.8), CancelTimer()]


def test_the_echo_guard_still_applies_at_the_vad_stop_when_a_word_waives_min_speech() -> None:
    m = speaking_bot(InterruptionPolicy(min_speech=0.3, echo_guard=0.4, echo_min_words=2), bot_start=2.0)
    actions = play(m, VadStart(2.05), SttInterim(2.15, "okay"), VadStop(2.3))
    assert outcome(m, actions) == "vetoed:echo"


def test_a_new_turn_clears_the_echo_window() -> None:
    m = speaking_bot(ECHO, bot_start=2.0)
    play(m, BotAudioEnded(3.0, 0), VadStart(4.0), VadStop(4.5))
    m.handle(Tick(5.0))
    assert m.epoch == 1
    # The epoch-1 reply starts a fresh window.
    m.handle(BotAudioStarted(6.0, 1))
    assert m.handle(VadStart(6.1)) == [ArmTimer(pytest.approx(6.4))]


def test_disabled_confirms_every_candidate_at_once() -> None:
    m = speaking_bot(InterruptionPolicy.disabled())
    assert m.handle(VadStart(2.01)) == [Interrupt(1), StartUserTurn(1, 2.01)]
    assert m.stats.candidates == m.stats.confirmed == 1


def test_a_barge_in_confirmed_at_the_stop_opens_the_pause_of_that_turn() -> None:
    m = speaking_bot(REC)
    actions = play(m, VadStart(5.0), SttInterim(5.1, "stop"), VadStop(5.25))
    assert actions[-3:] == [Interrupt(1), StartUserTurn(1, 5.0), ArmTimer(5.75)]
    assert m.state is TurnState.USER_PAUSED
    assert play(m, SttFinal(5.3, "Stop."), Tick(5.75))[-1] == EndUserTurn(1, EndReason.FIXED_SILENCE, 5.75)


def test_policy_durations_accept_infinity_as_never() -> None:
    assert InterruptionPolicy(min_speech=math.inf).min_speech == math.inf

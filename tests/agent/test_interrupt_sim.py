"""Simulator-level interruption cases: scripted calls through the turn machine on virtual time."""

from __future__ import annotations

import dataclasses
import random

import pytest

from brisvox.agent.interrupt import Guard, InterruptionPolicy
from brisvox.agent.turn import EndReason, FixedSilence, StartUserTurn

from ._turn_sim import VAD_START_DELAY, VAD_STOP_HANGOVER, Bot, CallLog, Speech, run_call

# The simulator's VAD holds its stop for 300 ms: the policy must know (caller contract).
REC = dataclasses.replace(InterruptionPolicy.recommended(), vad_hangover=VAD_STOP_HANGOVER)
ECHO_ONLY = InterruptionPolicy(echo_guard=0.4)
OPENING = Speech(0.5, 1.5, "hello there how are you")


def call(*speech: Speech, policy: InterruptionPolicy = REC, bot: Bot | None = None) -> CallLog:
    return run_call([OPENING, *speech], policy, bot=bot)


def reply_start(log: CallLog, k: int = 0) -> float:
    return log.replies[k].start


def test_the_opening_turn_is_answered_and_played_out() -> None:
    log = call()
    assert log.turn_ends == [EndReason.VERDICT]
    assert len(log.replies) == 1 and log.replies[0].completed
    assert log.interrupts == []


@pytest.mark.parametrize("text", ["mm-hmm", "yeah", "uh-huh right", "okay"])
def test_an_english_backchannel_over_the_bot_does_not_interrupt(text: str) -> None:
    log = call(Speech(1.0, 0.5, text, after_reply=0))
    assert log.interrupts == []
    assert log.machine.stats.vetoed(Guard.BACKCHANNEL) == 1
    assert log.replies[0].completed and len(log.replies) == 1


@pytest.mark.parametrize("text", ["tamam", "hı hı", "evet aynen", "öyle mi"])
def test_a_turkish_backchannel_over_the_bot_does_not_interrupt(text: str) -> None:
    log = call(Speech(1.0, 0.5, text, after_reply=0))
    assert log.interrupts == []
    assert log.machine.stats.vetoed(Guard.BACKCHANNEL) == 1
    assert log.replies[0].completed


def test_a_backchannel_over_the_last_word_is_detached_and_still_vetoed() -> None:
    log = call(Speech(3.8, 0.5, "mm-hmm", after_reply=0))  # the reply ends at 4.0
    assert log.interrupts == []
    assert len(log.of(StartUserTurn)) == 1  # no second user turn
    assert log.machine.stats.vetoed(Guard.BACKCHANNEL) == 1 and log.machine.stats.promoted == 0


@pytest.mark.parametrize(
    ("policy", "burst"),
    # Alone, the echo window cannot veto a burst whose stop is reported (300 ms after its end)
    # after the window closed: the live check confirms it at the window end.  With min_speech
    # and the hangover (recommended) it can.
    [(REC, 0.25), (ECHO_ONLY, 0.05)],
    ids=["recommended", "echo-only"],
)
def test_an_echo_burst_at_the_start_of_the_reply_is_vetoed(policy: InterruptionPolicy, burst: float) -> None:
    log = call(Speech(0.02, burst, "", after_reply=0), policy=policy)
    assert log.interrupts == []
    assert log.machine.stats.vetoed(Guard.ECHO) == 1
    assert log.replies[0].completed


def test_words_inside_the_echo_window_lift_the_echo_guard() -> None:
    log = call(Speech(0.05, 0.8, "wait a moment", after_reply=0), policy=ECHO_ONLY)
    (t,) = log.interrupts
    assert t - reply_start(log) < 0.4  # confirmed by the interim, inside the window
    assert log.replies[1].epoch == 1


def test_a_cough_is_vetoed_with_the_vad_hangover_and_would_interrupt_without_it() -> None:
    cough = Speech(1.5, 0.22, "", after_reply=0)
    log = call(cough)
    assert log.interrupts == [] and log.machine.stats.vetoed(Guard.MIN_SPEECH) == 1
    # The clock path without the hangover confirms at start + 300 ms, before the stop arrives.
    mismatched = dataclasses.replace(REC, vad_hangover=0.0)
    assert len(call(cough, policy=mismatched).interrupts) == 1


def test_minimum_words_veto_a_one_word_interruption_and_confirm_two() -> None:
    policy = dataclasses.replace(REC, min_words=2)
    log = call(Speech(1.0, 0.5, "stop", after_reply=0), policy=policy)
    assert log.interrupts == [] and log.machine.stats.vetoed(Guard.MIN_WORDS) == 1
    log = call(Speech(1.0, 1.0, "stop right there", after_reply=0), policy=policy)
    assert len(log.interrupts) == 1


def test_a_short_real_interruption_is_confirmed_at_its_stop() -> None:
    log = call(Speech(1.0, 0.25, "no", after_reply=0))
    (t,) = log.interrupts
    start = reply_start(log) + 1.0
    assert t == pytest.approx(start + 0.25 + VAD_STOP_HANGOVER)  # the stop waives min_speech
    assert log.replies[0].completed is False
    assert log.replies[1].epoch == 1 and log.replies[1].completed


def test_a_long_real_interruption_is_confirmed_before_its_stop() -> None:
    log = call(Speech(1.0, 1.5, "wait I have a question", after_reply=0))
    (t,) = log.interrupts
    start = reply_start(log) + 1.0
    # min_speech (300 ms) + the hangover, counted from the VAD start.
    assert t == pytest.approx(start + VAD_START_DELAY + 0.3 + VAD_STOP_HANGOVER)
    assert t < start + 1.5
    assert [r.epoch for r in log.replies] == [0, 1]


def test_per_chunk_bot_audio_reports_cannot_block_a_wordless_interruption() -> None:
    log = call(Speech(1.0, 1.0, "", after_reply=0), policy=ECHO_ONLY, bot=Bot(per_chunk=0.02))
    (t,) = log.interrupts
    assert t == pytest.approx(reply_start(log) + 1.0 + VAD_START_DELAY)
    # The same burst right after the reply starts is held by the window, then confirmed at its end.
    log = call(Speech(0.1, 1.0, "", after_reply=0), policy=ECHO_ONLY, bot=Bot(per_chunk=0.02))
    (t,) = log.interrupts
    assert t == pytest.approx(reply_start(log) + 0.4)


def test_the_stale_audio_of_an_interrupted_reply_is_flushed() -> None:
    log = call(Speech(1.0, 1.5, "wait I have a question", after_reply=0), bot=Bot(per_chunk=0.02))
    assert log.stale_audio_delivered == 0
    assert not log.replies[0].completed


def test_fixed_silence_calls_keep_the_same_invariants() -> None:
    log = run_call(
        [OPENING, Speech(1.0, 0.8, "one more thing", after_reply=0), Speech(2.0, 0.4, "tamam", after_reply=1)],
        REC,
        policy=FixedSilence(0.6),
    )
    assert len(log.interrupts) == 1
    assert log.turn_ends[:2] == [EndReason.FIXED_SILENCE, EndReason.FIXED_SILENCE]


def test_seeded_random_calls_keep_the_invariants() -> None:
    rng = random.Random(4)
    texts = ["", "mm-hmm", "tamam", "no", "wait please", "one two three four", "yeah okay", "hı hı"]
    for _ in range(60):
        speech = [OPENING]
        for k in range(rng.randint(0, 4)):
            speech.append(Speech(rng.uniform(0.0, 3.5), rng.uniform(0.05, 1.6), rng.choice(texts), after_reply=k))
        policy = rng.choice([REC, ECHO_ONLY, InterruptionPolicy.disabled(), dataclasses.replace(REC, min_words=2)])
        bot = Bot(per_chunk=rng.choice([None, 0.02]), reply_duration=rng.uniform(0.5, 4.0))
        run_call(speech, policy, bot=bot, until=40.0)  # the invariants are checked inside

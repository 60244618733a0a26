"""Randomized invariants of the turn machine with the interruption policy (hypothesis)."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.turn import (
    Adaptive,
    BotAudioEnded,
    BotAudioStarted,
    EndUserTurn,
    FixedSilence,
    Hangup,
    Interrupt,
    StartUserTurn,
    SttFinal,
    SttInterim,
    Tick,
    TurnInput,
    TurnMachine,
    TurnState,
    UserText,
    VadStart,
    VadStop,
    Verdict,
)

POLICIES = [FixedSilence(0.6), Adaptive(), Adaptive(require_final=True, final_grace=0.5), Adaptive(fallback_silence=1.0)]
INTERRUPTIONS = [
    InterruptionPolicy.disabled(),
    InterruptionPolicy.recommended(),
    InterruptionPolicy(echo_guard=0.4),
    dataclasses.replace(InterruptionPolicy.recommended(), min_words=2),
]
TEXTS = ["", "mm-hmm", "tamam", "wait", "no stop", "Yes.", "okay?", "hı hı", "one two three"]
OPEN = {TurnState.USER_SPEAKING, TurnState.USER_PAUSED}

ALL_KINDS = list(range(12))
# Inputs that move each state on, drawn more often so random calls get deep (10 and 11: a
# tick at the armed deadline and a late one).  Every kind stays possible in every state.
PROGRESS = {
    TurnState.IDLE: [0, 0, 0, 8],
    TurnState.USER_SPEAKING: [1, 1, 1, 2, 3],
    TurnState.USER_PAUSED: [3, 4, 4, 10, 10, 11, 0],
    TurnState.AWAITING_RESPONSE: [6, 6, 0, 0, 7, 3],
    TurnState.BOT_SPEAKING: [0, 0, 2, 2, 10, 6, 7, 1],
    TurnState.CLOSED: [9],
}
DTS = [0.0, 0.01, 0.05, 0.1, 0.3, 0.7, 1.5, 4.0]


def make_input(m: TurnMachine, t: float, kind: int, off: int, text: str, flag: bool, next_id: int) -> TurnInput:
    if kind == 0:
        return VadStart(t)
    if kind == 1:
        return VadStop(t - (0.3 if flag else 0.0))  # backdated
    if kind == 2:
        return SttInterim(t, text)
    if kind == 3:
        return SttFinal(t, text)
    if kind == 4:
        return Verdict(t, next_id + off, flag)
    if kind == 5:
        return Tick(t)
    if kind == 6:
        return BotAudioStarted(t, m.epoch + off)
    if kind == 7:
        return BotAudioEnded(t, m.epoch + off)
    if kind == 8:
        return UserText(t, text)
    if kind == 9:
        return Hangup(t)
    deadline = m.timer if m.timer is not None else t
    return Tick(deadline + (0.001 if kind == 10 else 5.0))


@settings(max_examples=150, deadline=None)
@given(
    policy=st.sampled_from(POLICIES),
    interruption=st.sampled_from(INTERRUPTIONS),
    n=st.integers(0, 60),
    data=st.data(),
)
def test_random_inputs_keep_every_invariant(
    policy: FixedSilence | Adaptive, interruption: InterruptionPolicy, n: int, data: st.DataObject
) -> None:
    m = TurnMachine(policy, interruption)
    t = 0.0
    starts = ends = 0
    last_analysis = 0
    for _ in range(n):
        if m.state is TurnState.CLOSED:
            break
        # One draw per step, decoded into the step's fields (cheap to generate).
        r = data.draw(st.integers(0, 2**31 - 1))
        kinds = ALL_KINDS if r % 4 == 0 else PROGRESS[m.state]
        r //= 4
        kind = kinds[r % len(kinds)]
        r //= len(kinds)
        t += DTS[r % len(DTS)]
        r //= len(DTS)
        off = (0, 0, 0, -1, 1)[r % 5]
        r //= 5
        text = TEXTS[r % len(TEXTS)]
        flag = bool(r // len(TEXTS) % 2)
        inp = make_input(m, t, kind, off, text, flag, last_analysis)
        state, epoch, pause = m.state, m.epoch, m.pause
        ignored = m.stats.total_ignored
        actions = m.handle(inp)  # never raises

        # Epochs only grow, one step per barge-in or turn start.
        assert m.epoch >= epoch
        for i, a in enumerate(actions):
            if isinstance(a, Interrupt):
                nxt = actions[i + 1]
                assert isinstance(nxt, StartUserTurn) and nxt.epoch == a.epoch == epoch + 1
            if isinstance(a, StartUserTurn | EndUserTurn):
                assert a.epoch == m.epoch
            if isinstance(a, StartUserTurn):
                starts += 1
            if isinstance(a, EndUserTurn):
                ends += 1
            if hasattr(a, "id"):
                last_analysis = a.id  # type: ignore[attr-defined]
        # Exactly one user turn is open in the speaking states, none elsewhere.
        assert starts - ends == (1 if m.state in OPEN else 0)
        # Every candidate is accounted for.
        s = m.stats
        pending = 1 if m.barge_in_candidate is not None else 0
        assert s.candidates == s.confirmed + s.promoted + s.total_vetoed + s.dropped + pending
        # The one timer slot follows the pause or the candidate, never both.
        assert m.pause is None or m.barge_in_candidate is None
        want = m.pause.deadline if m.pause else (m.barge_in_candidate.recheck_at if m.barge_in_candidate else None)
        assert m.timer == want and (want is None or math.isfinite(want))
        # Ignored inputs change nothing.
        if m.stats.total_ignored > ignored:
            assert actions == [] and m.state is state and m.epoch == epoch
        # Oracle: bot audio of another epoch is ignored.
        if isinstance(inp, BotAudioStarted | BotAudioEnded) and inp.epoch != epoch:
            assert actions == [] and m.state is state and m.stats.total_ignored == ignored + 1
        # Oracle: a tick at or after the pause deadline ends the pause with its reason.
        if isinstance(inp, Tick) and pause is not None and inp.at >= pause.deadline:
            assert actions == [EndUserTurn(epoch, pause.reason, inp.at)]
        if m.state is TurnState.CLOSED:
            assert m.timer is None and m.barge_in_candidate is None

    ends += sum(isinstance(a, EndUserTurn) for a in m.handle(Hangup(t + 1)))
    assert m.state is TurnState.CLOSED
    assert starts == ends  # every user turn start is paired with an end
    assert m.timer is None and m.barge_in_candidate is None
    s = m.stats
    assert s.candidates == s.confirmed + s.promoted + s.total_vetoed + s.dropped

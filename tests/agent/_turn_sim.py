"""A small deterministic driver: scripted calls through a TurnMachine on virtual time.

Virtual time is a discrete-event queue: nothing sleeps, every event happens at its
scheduled float instant, and ties run in scheduling order, so a run is reproducible.

Models (the simulator's energy VAD timing and a scripted bot):

* Caller speech (:class:`Speech`): the VAD reports the start 40 ms into it and the stop
  300 ms after its end, backdated to the end.  STT sends a cumulative interim every 200 ms
  while the caller speaks (words become visible halfway through their share of the
  utterance) and one final 50 ms after each VAD stop.
* Smart Turn answers every ``RequestAnalysis`` 50 ms later (complete unless scripted).
* Every ended user turn is answered by the bot: audio starts ``response_delay`` later and
  lasts ``reply_duration``; ``BotAudioStarted`` is reported once, or every chunk with
  ``per_chunk``.  An ``Interrupt`` flushes the bot audio of older epochs (never delivered).
* Speech can be anchored to the start of a bot reply (echo, backchannels, barge-ins).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.turn import (
    Adaptive,
    ArmTimer,
    BotAudioEnded,
    BotAudioStarted,
    CancelTimer,
    EndReason,
    EndUserTurn,
    Hangup,
    Interrupt,
    RequestAnalysis,
    StartUserTurn,
    SttFinal,
    SttInterim,
    Tick,
    TurnAction,
    TurnInput,
    TurnMachine,
    TurnPolicy,
    VadStart,
    VadStop,
    Verdict,
)

VAD_START_DELAY = 0.04
VAD_STOP_HANGOVER = 0.3
INTERIM_EVERY = 0.2
FINAL_DELAY = 0.05
VERDICT_DELAY = 0.05


@dataclass(frozen=True)
class Speech:
    """Caller sound: ``text`` spoken evenly over ``duration`` ("" for a cough, echo, noise).

    ``start`` is absolute, or relative to the audio start of bot reply ``after_reply``
    (0 = the first reply)."""

    start: float
    duration: float
    text: str = ""
    after_reply: int | None = None


@dataclass(frozen=True)
class Bot:
    response_delay: float = 0.4
    reply_duration: float = 4.0
    per_chunk: float | None = None  # report BotAudioStarted every chunk of this length


@dataclass
class Reply:
    epoch: int
    start: float
    end: float
    completed: bool = False


@dataclass
class CallLog:
    machine: TurnMachine
    inputs: list[tuple[float, TurnInput]] = field(default_factory=list)
    actions: list[tuple[float, TurnAction]] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    epochs_seen: list[int] = field(default_factory=list)
    stale_audio_delivered: int = 0

    def of(self, kind: type) -> list[tuple[float, TurnAction]]:
        return [(t, a) for t, a in self.actions if isinstance(a, kind)]

    @property
    def interrupts(self) -> list[float]:
        return [t for t, _ in self.of(Interrupt)]

    @property
    def turn_ends(self) -> list[EndReason]:
        return [a.reason for _, a in self.of(EndUserTurn)]  # type: ignore[attr-defined]


class Driver:
    def __init__(self, policy: TurnPolicy, interruption: InterruptionPolicy, bot: Bot, complete: bool) -> None:
        self.machine = TurnMachine(policy, interruption)
        self.log = CallLog(self.machine)
        self.bot = bot
        self.complete = complete
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._timer_gen = 0
        self._flushed_below = 0  # bot audio of epochs below this is flushed
        self._anchored: dict[int, list[Speech]] = {}
        self._closed = False

    # --- the event queue ------------------------------------------------------------------

    def at(self, when: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(when, self.now), self._seq, fn))

    def run(self, until: float) -> None:
        while self._queue and not self._closed:
            when, _, fn = heapq.heappop(self._queue)
            if when > until:
                break
            self.now = when
            fn()
        self.now = max(self.now, until)
        self.deliver(Hangup(self.now))
        self._closed = True

    # --- machine I/O --------------------------------------------------------------------

    def deliver(self, inp: TurnInput) -> None:
        if self._closed:
            return
        m = self.machine
        self.log.inputs.append((self.now, inp))
        actions = m.handle(inp)
        self.log.epochs_seen.append(m.epoch)
        for action in actions:
            self.log.actions.append((self.now, action))
            self.act(action)

    def act(self, action: TurnAction) -> None:
        if isinstance(action, ArmTimer):
            self._timer_gen += 1
            gen = self._timer_gen
            self.at(action.deadline, lambda: self._tick(gen, action.deadline))
        elif isinstance(action, CancelTimer):
            self._timer_gen += 1
        elif isinstance(action, RequestAnalysis):
            rid = action.id
            self.at(self.now + VERDICT_DELAY, lambda: self.deliver(Verdict(self.now, rid, self.complete)))
        elif isinstance(action, Interrupt):
            self._flushed_below = action.epoch
        elif isinstance(action, EndUserTurn) and action.reason is not EndReason.HANGUP:
            self._reply(action.epoch)
        elif isinstance(action, StartUserTurn):
            pass

    def _tick(self, gen: int, deadline: float) -> None:
        if gen == self._timer_gen:
            self.deliver(Tick(max(self.now, deadline)))

    # --- the bot --------------------------------------------------------------------------

    def _reply(self, epoch: int) -> None:
        start = self.now + self.bot.response_delay
        reply = Reply(epoch, start, start + self.bot.reply_duration)
        index = len(self.log.replies)
        self.log.replies.append(reply)

        def bot_event(inp: BotAudioStarted | BotAudioEnded, first: bool = False) -> None:
            if inp.epoch < self._flushed_below:
                return  # flushed at the Interrupt: the caller never hears it
            if inp.epoch != self.machine.epoch:
                self.log.stale_audio_delivered += 1
            if first:
                for s in self._anchored.get(index, []):
                    self.speak(Speech(self.now + s.start, s.duration, s.text))
            if isinstance(inp, BotAudioEnded):
                reply.completed = True
            self.deliver(inp)

        self.at(start, lambda: bot_event(BotAudioStarted(start, epoch), first=True))
        if self.bot.per_chunk:
            k = 1
            while start + k * self.bot.per_chunk < reply.end:
                t = start + k * self.bot.per_chunk
                self.at(t, lambda t=t: bot_event(BotAudioStarted(t, epoch)))  # type: ignore[misc]
                k += 1
        self.at(reply.end, lambda: bot_event(BotAudioEnded(reply.end, epoch)))

    # --- the caller ---------------------------------------------------------------------

    def speak(self, s: Speech) -> None:
        if s.after_reply is not None:
            self._anchored.setdefault(s.after_reply, []).append(s)
            return
        end = s.start + s.duration
        if s.duration < VAD_START_DELAY:
            return  # too short for the VAD
        words = s.text.split()
        share = s.duration / len(words) if words else 0.0

        def interim_text(t: float) -> str:
            return " ".join(w for i, w in enumerate(words) if s.start + (i + 0.5) * share <= t)

        self.at(s.start + VAD_START_DELAY, lambda: self.deliver(VadStart(self.now)))
        k = 1
        while s.start + k * INTERIM_EVERY < end:
            t = s.start + k * INTERIM_EVERY
            text = interim_text(t)
            if text:
                self.at(t, lambda text=text: self.deliver(SttInterim(self.now, text)))  # type: ignore[misc]
            k += 1
        self.at(end + VAD_STOP_HANGOVER, lambda: self.deliver(VadStop(end)))
        self.at(end + VAD_STOP_HANGOVER + FINAL_DELAY, lambda: self.deliver(SttFinal(self.now, s.text)))


def run_call(
    speech: list[Speech],
    interruption: InterruptionPolicy,
    *,
    policy: TurnPolicy | None = None,
    bot: Bot | None = None,
    complete: bool = True,
    until: float = 30.0,
) -> CallLog:
    """Play ``speech`` through a machine; check the invariants; return the log."""
    driver = Driver(policy or Adaptive(), interruption, bot or Bot(), complete)
    for s in sorted(speech, key=lambda s: (s.after_reply is not None, s.start)):
        driver.speak(s)
    driver.run(until)
    check_invariants(driver.log)
    return driver.log


def check_invariants(log: CallLog) -> None:
    m = log.machine
    # Epochs only grow.
    assert log.epochs_seen == sorted(log.epochs_seen)
    epochs = [a.epoch for _, a in log.actions if hasattr(a, "epoch")]  # type: ignore[attr-defined]
    assert epochs == sorted(epochs)
    # Every Interrupt is followed by its StartUserTurn.
    acts = [a for _, a in log.actions]
    for i, a in enumerate(acts):
        if isinstance(a, Interrupt):
            nxt = acts[i + 1]
            assert isinstance(nxt, StartUserTurn) and nxt.epoch == a.epoch
    # User turn starts equal ends (the call hung up).
    assert len(log.of(StartUserTurn)) == len(log.of(EndUserTurn))
    # No stale bot audio reached the machine; nothing is left pending.
    assert log.stale_audio_delivered == 0
    assert m.timer is None and m.barge_in_candidate is None
    s = m.stats
    assert s.candidates == s.confirmed + s.promoted + s.total_vetoed + s.dropped

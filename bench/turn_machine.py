"""Cost per input of the turn machine (brisvox.agent.turn) with InterruptionPolicy.recommended().

The machine sits on the hot path of every call: it sees every VAD event, every STT interim
and, with per-chunk reporting, a BotAudioStarted for every 20 ms chunk of bot audio.  This
script records a realistic call (user turns with interims every 200 ms, Smart Turn verdicts,
bot replies reported per chunk, backchannels, coughs and real barge-ins judged by the
policy, recheck ticks) by driving a live machine, then replays the recorded inputs on fresh
machines and prints the median cost per input over several repeats.

    python bench/turn_machine.py
    python bench/turn_machine.py --turns 400 --repeats 9
"""

from __future__ import annotations

import argparse
import gc
import statistics
from collections import Counter

from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.turn import (
    Adaptive,
    BotAudioEnded,
    BotAudioStarted,
    Interrupt,
    RequestAnalysis,
    SttFinal,
    SttInterim,
    Tick,
    TurnInput,
    TurnMachine,
    VadStart,
    VadStop,
    Verdict,
)
from brisvox.core.clock import monotonic_ns

CHUNK = 0.02


class Recorder:
    """Drives a live machine and records every input, firing its timer when due."""

    def __init__(self, interruption: InterruptionPolicy) -> None:
        self.m = TurnMachine(Adaptive(), interruption)
        self.inputs: list[TurnInput] = []
        self.last_analysis = 0
        self.interrupted = False

    def send(self, inp: TurnInput) -> None:
        while self.m.timer is not None and self.m.timer <= inp.at:
            self._deliver(Tick(self.m.timer))
        self._deliver(inp)

    def _deliver(self, inp: TurnInput) -> None:
        self.inputs.append(inp)
        for action in self.m.handle(inp):
            if isinstance(action, RequestAnalysis):
                self.last_analysis = action.id
            elif isinstance(action, Interrupt):
                self.interrupted = True


def record_call(turns: int, interruption: InterruptionPolicy) -> list[TurnInput]:
    r = Recorder(interruption)
    t = 0.0
    for i in range(turns):
        # The caller speaks for 1.1 s: interims every 200 ms, then the stop, final and verdict.
        r.send(VadStart(t))
        words = ["I", "would", "like", "to", "book", "a", "table"]
        for k in range(1, 6):
            r.send(SttInterim(t + 0.2 * k, " ".join(words[: k + 1])))
        r.send(VadStop(t + 1.1))
        r.send(SttFinal(t + 1.45, "I would like to book a table."))
        r.send(Verdict(t + 1.5, r.last_analysis, True))
        # The bot replies for 3 s, reported per 20 ms chunk.
        epoch = r.m.epoch
        start = t + 1.9
        r.interrupted = False
        chunks = int(3.0 / CHUNK)
        event = i % 4  # 0: nothing, 1: a backchannel, 2: a cough, 3: a real barge-in
        for c in range(chunks):
            at = start + c * CHUNK
            r.send(BotAudioStarted(at, epoch))
            offset = c * CHUNK
            if event == 1 and abs(offset - 1.0) < 1e-9:
                r.send(VadStart(at))
            if event == 1 and abs(offset - 1.2) < 1e-9:
                r.send(SttInterim(at, "mm-hmm"))
            if event == 1 and abs(offset - 1.5) < 1e-9:
                r.send(VadStop(at - 0.1))
                r.send(SttFinal(at + 0.05, "Mm-hmm."))
            if event == 2 and abs(offset - 1.0) < 1e-9:
                r.send(VadStart(at))
            if event == 2 and abs(offset - 1.32) < 1e-9:
                r.send(VadStop(at - 0.1))
                r.send(SttFinal(at + 0.05, ""))
            if event == 3 and abs(offset - 1.0) < 1e-9:
                r.send(VadStart(at))
            if event == 3 and abs(offset - 1.2) < 1e-9:
                r.send(SttInterim(at, "wait a second"))
            if r.interrupted:
                break
        if r.interrupted:
            # The barge-in becomes the next user turn: finish it like any other.
            t = r.m.timer if r.m.timer is not None else r.inputs[-1].at
            r.send(VadStop(t + 0.5))
            r.send(SttFinal(t + 0.85, "Wait a second."))
            r.send(Verdict(t + 0.9, r.last_analysis, True))
            t += 2.0
        else:
            r.send(BotAudioEnded(start + 3.0, epoch))
            t = start + 4.0
    return r.inputs


def replay(inputs: list[TurnInput], interruption: InterruptionPolicy) -> float:
    """Nanoseconds per input for one replay on a fresh machine."""
    m = TurnMachine(Adaptive(), interruption)
    handle = m.handle
    gc.disable()
    try:
        t0 = monotonic_ns()
        for inp in inputs:
            handle(inp)
        elapsed = monotonic_ns() - t0
    finally:
        gc.enable()
    return elapsed / len(inputs)


def per_kind(inputs: list[TurnInput], interruption: InterruptionPolicy, repeats: int) -> dict[str, float]:
    """Median nanoseconds per input of each kind (timed one by one, timer overhead subtracted)."""
    samples: dict[str, list[float]] = {}
    overhead = statistics.median(-(monotonic_ns() - monotonic_ns()) for _ in range(10_000))
    for _ in range(repeats):
        m = TurnMachine(Adaptive(), interruption)
        for inp in inputs:
            t0 = monotonic_ns()
            m.handle(inp)
            dt = monotonic_ns() - t0
            samples.setdefault(inp.kind.value, []).append(max(0.0, dt - overhead))
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    for name, policy in (
        ("recommended()", InterruptionPolicy.recommended()),
        ("disabled()", InterruptionPolicy.disabled()),
    ):
        inputs = record_call(args.turns, policy)
        kinds = Counter(inp.kind.value for inp in inputs)
        runs = [replay(inputs, policy) for _ in range(args.repeats)]
        print(f"turn machine, Adaptive + {name}: {len(inputs)} inputs per call replay")
        print(f"  median {statistics.median(runs):.0f} ns per input (min {min(runs):.0f}, max {max(runs):.0f};"
              f" {args.repeats} replays)")
        if name == "recommended()":
            medians = per_kind(inputs, policy, max(1, args.repeats // 2))
            for kind, count in kinds.most_common():
                print(f"    {kind:<18} {count:>6} inputs  median {medians[kind]:>6.0f} ns")
            weighted = sum(medians[k] * c for k, c in kinds.items()) / len(inputs)
            # Per-input medians drop the samples a busy machine preempted; the replay does not.
            print(f"  per-kind medians weighted by the call's mix: {weighted:.0f} ns per input")
        budget = CHUNK * 1e9
        print(f"  = {100 * statistics.median(runs) / budget:.4f} % of one 20 ms window per input")


if __name__ == "__main__":
    main()

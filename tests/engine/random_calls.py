"""Randomized whole calls: one seed is one simulated call, checked against the tool contract.

A seed decides everything (so a failure replays exactly): speculation on or off, the
caller (how many turns, pauses inside a turn that start a speculation, gaps short enough
to barge in on the bot or its tools, when they hang up), the end-of-turn silence, the
scripted model (text, one to three parallel calls mixing a read-only lookup and two
side-effect tools, further rounds after the results) and every tool's duration against
its timeout.  The call runs through the production stages over the loopback transport,
with the mock STT and TTS of :mod:`brisvox.sim`, on virtual time.

:func:`check` lists what the call broke (empty: nothing):

* the call crashed (``run_call`` raised, or a turn failed and was logged);
* a side effect ran twice (one idempotency key started twice);
* a side effect started before its turn was final (a speculative response) or after
  the caller hung up;
* a finished side effect is not in the final context exactly once (its slot, a late
  note or an orphan replay: each result carries a unique reference);
* a task was left behind.

Used by ``tests/engine/test_random_calls.py`` (2,000 seeds) and ``bench/random_calls.py``.
"""

from __future__ import annotations

import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import Any

from brisvox.agent.context import Message, SystemMessage, ToolMessage, UserMessage
from brisvox.agent.tools import ToolCallContext, ToolError, ToolKind, ToolRegistry, ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope, live_tasks, wait_for_task_baseline
from brisvox.core.timeline import TurnEvent
from brisvox.engine import CallReport, EngineConfig, Providers, SpeculationMode, run_call
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.vad import VadParams, VoiceActivityDetector
from brisvox.providers.llm import LlmRequest
from brisvox.sim import (
    Call,
    Interleave,
    LatencyProfile,
    MockStt,
    MockTts,
    Say,
    ScenarioBuilder,
    ScriptedLlm,
    Step,
)
from brisvox.transport import LoopbackTransport, TransportSession

__all__ = ["CallOutcome", "check", "run_random_call"]

RATE = 8000  # the telephone rate: half the samples of 16 kHz to score and to render
FRAME = 0.08  # caller audio per packet: twice the usual 20 ms halves the cost of the caller's side
DAYS = ("monday", "tuesday", "friday")
OBJ = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}
WORDS = ("book a table on friday", "is there room on monday", "cancel that please", "send me a text",
         "what about tuesday evening", "yes that works")


@dataclass
class ToolRun:
    """One start of a tool, as the tool saw it."""

    tool: str
    kind: ToolKind
    call: str
    epoch: int
    key: tuple[str, int, str]
    ref: str  # unique: the result (or the error) carries it
    started: float
    ended: float | None = None
    finished: bool = False  # returned a result or raised ToolError (not cancelled)


@dataclass
class CallOutcome:
    seed: int
    speculation: bool
    report: CallReport | None
    crash: BaseException | None
    hung_up_at: float
    runs: list[ToolRun]
    errors: list[str]  # error log lines of the call
    leaked: str | None
    turn_ends: dict[int, float] = field(default_factory=dict)


class _Tools:
    """The call's tools: each start draws its duration (and, rarely, a failure) from the seed."""

    def __init__(self, clock: SimClock, rng: random.Random) -> None:
        self.clock, self.rng = clock, rng
        self.runs: list[ToolRun] = []
        self.specs = {
            "check_availability": ToolSpec(name="check_availability", description="Free tables on a day.",
                                           parameters=OBJ, timeout=rng.choice((0.8, 1.5, 3.0))),
            "book_table": ToolSpec(name="book_table", description="Book a table.", parameters=OBJ,
                                   kind=ToolKind.SIDE_EFFECT, timeout=rng.choice((0.8, 1.5, 3.0))),
            "send_sms": ToolSpec(name="send_sms", description="Text the caller.", parameters=OBJ,
                                 kind=ToolKind.SIDE_EFFECT, timeout=rng.choice((0.5, 2.0))),
        }

    def registry(self) -> ToolRegistry:
        reg = ToolRegistry()
        for spec in self.specs.values():
            reg.register(spec, self._tool(spec))
        return reg

    def _tool(self, spec: ToolSpec) -> Any:
        async def tool(arguments: dict[str, Any], ctx: ToolCallContext) -> Any:
            key = ctx.idempotency_key()
            run = ToolRun(spec.name, spec.kind, ctx.call.id, ctx.epoch, (key.session, key.epoch, key.call_id),
                          f"ref-{len(self.runs)}-x", self.clock.now())
            self.runs.append(run)
            # From instant to well past the timeout (a side effect then finishes late).
            seconds = self.rng.choice((0.0, 0.1, 0.4)) if self.rng.random() < 0.4 else self.rng.uniform(0, 2.5 * spec.timeout)
            fails = self.rng.random() < 0.1
            await self.clock.sleep(seconds)
            run.ended, run.finished = self.clock.now(), True
            if fails:
                raise ToolError(f"nothing free ({run.ref})")
            return {"ref": run.ref, **arguments}

        return tool


class _Model:
    """The scripted model: what it answers depends on the seed and on what the request ends with."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def __call__(self, request: LlmRequest) -> list[Step]:
        rng = self.rng
        last = request.messages[-1] if request.messages else None
        after_results = isinstance(last, ToolMessage)
        if rng.random() < (0.65 if after_results else 0.4):
            return [Say(rng.choice(("Done, see you friday.", "There is a table at eight.",
                                    "Sorry, I could not do that, shall I try another day?")))]
        calls = tuple(
            Call(name=rng.choice(("check_availability", "book_table", "book_table", "send_sms")),
                 arguments={"day": rng.choice(DAYS)}, fragments=rng.choice((1, 3)))
            for _ in range(rng.choice((1, 1, 2, 3)))
        )
        steps: list[Step] = []
        if rng.random() < 0.5:
            steps.append(Say("Let me check that for you. "))
        steps.append(Interleave(calls) if len(calls) > 1 and rng.random() < 0.5 else calls[0])
        steps.extend(calls[1:] if not isinstance(steps[-1], Interleave) else ())
        return steps


def _scenario(rng: random.Random, seed: int) -> tuple[ScenarioBuilder, float]:
    b = ScenarioBuilder(sample_rate=RATE, words_per_second=3.5, seed=seed)
    b.pause(rng.uniform(0.2, 0.6))
    for _ in range(rng.choice((1, 2, 2, 3))):
        words = rng.choice(WORDS).split()
        if len(words) > 2 and rng.random() < 0.4:  # a pause inside the turn: a speculative start
            cut = rng.randrange(1, len(words))
            b.say(" ".join(words[:cut])).pause(rng.uniform(0.2, 0.8)).say(" ".join(words[cut:]))
        else:
            b.say(" ".join(words))
        # Short gaps barge in on the bot or its tools; long ones let them finish.
        b.pause(rng.choice((rng.uniform(0.3, 1.5), rng.uniform(1.5, 4.0), rng.uniform(4.0, 6.0))))
    return b, rng.uniform(0.0, 2.5)


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}")


async def run_random_call(seed: int) -> CallOutcome:
    """Play the call of ``seed`` on the running (virtual-time) loop."""
    rng = random.Random(seed)
    clock = SimClock()
    speculation = rng.random() < 0.5
    builder, linger = _scenario(rng, seed)
    scenario = builder.build()
    tools = _Tools(clock, rng)
    config = EngineConfig(
        turn=FixedSilence(silence=rng.choice((0.5, 0.8, 1.0))),
        speculation=SpeculationMode.AT_PAUSE if speculation else SpeculationMode.OFF,
    )
    llm = ScriptedLlm(clock, _Model(rng), latency=LatencyProfile(
        first_event=rng.uniform(0.05, 0.6), per_event=0.02, jitter=0.5, seed=seed))
    providers = Providers(
        stt=MockStt.for_scenario(clock, scenario),
        llm=llm,
        tts=MockTts(clock),
        vad=lambda rate: VoiceActivityDetector(EnergyScorer(rate), VadParams.energy()),
    )
    errors = _Errors()
    root = logging.getLogger("brisvox")
    root.addHandler(errors)
    baseline = live_tasks()
    report: CallReport | None = None
    crash: BaseException | None = None
    hung_up_at = 0.0
    try:
        async with LoopbackTransport(clock) as transport, TaskScope("random-call") as scope:
            client = await transport.connect(metadata={"sample_rate": str(RATE)})
            link = await transport.accept()
            session = await TransportSession.open(clock, link)
            call = scope.spawn(run_call(session, config, providers, clock, tools=tools.registry()), name="call")

            async def drain() -> None:
                with contextlib.suppress(ChannelClosed):  # the call ended
                    while True:
                        await client.recv()

            listener = scope.spawn(drain(), name="listener")
            start = clock.now()
            for i, pcm in enumerate(scenario.frames(FRAME)):
                await clock.sleep_until(start + i * FRAME)
                await client.send_audio(pcm, RATE)
            await clock.sleep(linger)
            hung_up_at = clock.now()
            await client.hangup()
            try:
                report = await call
            except Exception as exc:
                crash = exc
            listener.cancel()
    except Exception as exc:  # the scope re-raises a failed call
        crash = crash or exc
    finally:
        root.removeHandler(errors)
    leaked: str | None = None
    try:
        await wait_for_task_baseline(clock, baseline)
    except Exception as exc:
        leaked = str(exc)
    ends: dict[int, float] = {}
    if report is not None:
        for record in report.timeline:
            at = record.at(TurnEvent.USER_TURN_ENDED)
            if at is not None:
                ends[record.epoch] = at
    return CallOutcome(seed, speculation, report, crash, hung_up_at, tools.runs, errors.lines, leaked, ends)


def _texts(messages: tuple[Message, ...]) -> list[str]:
    return [m.content if isinstance(m, ToolMessage) else m.text
            for m in messages if isinstance(m, ToolMessage | SystemMessage | UserMessage)]


def check(outcome: CallOutcome) -> list[str]:
    """What the call broke (see the module docs); empty when it kept the contract."""
    problems: list[str] = []
    if outcome.crash is not None:
        problems.append(f"crashed: {type(outcome.crash).__name__}: {outcome.crash}")
    problems.extend(f"error logged: {line}" for line in outcome.errors)
    if outcome.leaked is not None:
        problems.append(f"left tasks: {outcome.leaked}")
    effects = [r for r in outcome.runs if r.kind is ToolKind.SIDE_EFFECT]
    keys = [r.key for r in effects]
    problems.extend(f"side effect {k} ran twice" for k in sorted(set(keys)) if keys.count(k) > 1)
    for run in effects:
        if run.started > outcome.hung_up_at:
            problems.append(f"side effect {run.call} started after the hang-up ({run.started:.2f} > {outcome.hung_up_at:.2f})")
        ended = outcome.turn_ends.get(run.epoch)
        if outcome.report is not None and (ended is None or run.started < ended):
            problems.append(f"side effect {run.call} started before its turn {run.epoch} was final (speculative)")
    if outcome.report is not None:
        texts = _texts(outcome.report.context.messages)
        for run in effects:
            if not run.finished:
                continue
            seen = sum(t.count(run.ref) for t in texts)
            if seen != 1:
                problems.append(f"finished side effect {run.call} ({run.ref}) is in the final context {seen} times")
    return problems

"""The tool engine: validation, rounds, speculation, cancellation, timeouts, idempotency.

One engine per session.  Every entry point (:meth:`ToolEngine.execute`,
:meth:`ToolEngine.speculate`, :meth:`ToolEngine.commit`) runs the same three steps:

1. **Plan** (synchronous, issue order): the call cap, unknown tools, the argument size
   cap, schema validation.  Malformed calls are answered at once; under ``speculate``
   SideEffect calls are held.  Nothing runs.
2. **Admit**: a round of an older turn than the newest seen is stale (every call
   answered ``stale_turn``, no budget spent); a round with a malformed call spends one
   unit of its turn's retry budget, and a turn whose count exceeds
   ``max_invalid_rounds`` runs nothing more (``budget_exhausted``).
3. **Run**: calls start in issue order and are awaited together; each answers in its
   own slot, so results are in issue order whatever the completion order.

ReadOnly calls are dropped at their timeout or at the turn's cancellation.  SideEffect
calls run on their own task owned by the engine: a timeout or an interruption ends the
caller's wait, not the call, whose result is recorded in the idempotency store and
reaches the model exactly once (in its slot, or as a late note).  See docs/TOOLS.md.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from brisvox.agent.assemble import InvalidCall
from brisvox.agent.context import ToolCall, ToolMessage
from brisvox.agent.tools import _calls as texts
from brisvox.agent.tools._answers import Answers, Tally, delivered_of, render, said_of
from brisvox.agent.tools._calls import Raised, guarded
from brisvox.agent.tools._plan import malformed, plan_calls
from brisvox.agent.tools._race import Ended, race
from brisvox.agent.tools._records import LateNote, Record, Slot
from brisvox.agent.tools._side_effects import SideEffects
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.confirm import DEFAULT_CONFIRM_TTL, Confirmations
from brisvox.agent.tools.execution import Execution, Receipt, Speculation
from brisvox.agent.tools.lines import make_line
from brisvox.agent.tools.offer import Grounds
from brisvox.agent.tools.registry import (
    CONFIRM_PENDING,
    CallMeta,
    RegisteredTool,
    ToolCallContext,
    ToolRegistry,
)
from brisvox.agent.tools.results import ErrorKind, Outcome
from brisvox.agent.tools.spec import ToolSpec
from brisvox.agent.tools.stats import ToolStatsSnapshot
from brisvox.agent.tools.store import IdempotencyStore, IdempotencyUsage
from brisvox.core.clock import Clock
from brisvox.core.tasks import TaskScope

if TYPE_CHECKING:
    from brisvox.agent.ui import UiChannel

__all__ = ["ToolEngine", "ToolEngineConfig"]

_KIB = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolEngineConfig:
    """Bounds and windows of one session's tool engine (defaults from the tool contract)."""

    max_invalid_rounds: int = 2
    max_result_bytes: int = 64 * _KIB
    idempotency_capacity: int = 256
    idempotency_max_bytes: int = 4 * _KIB * _KIB
    max_argument_bytes: int = 16 * _KIB
    max_side_effect_runtime: float = 120.0
    orphan_window: float = 120.0
    confirm_ttl: float = DEFAULT_CONFIRM_TTL


class ToolEngine:
    """Runs the tool calls of one session.  Use as an async context manager (or ``aclose()``)."""

    def __init__(
        self, registry: ToolRegistry, session: str, clock: Clock, config: ToolEngineConfig | None = None, *,
        meta: CallMeta | None = None, ui: UiChannel | None = None, line: object | None = None,
    ) -> None:
        """``meta``: what every tool's context says of the call (default: its session id only);
        ``ui``: the call's screen, when its transport has one (``ToolCallContext.dispatch``);
        ``line``: the call's phone line (``ToolCallContext.line``, the telephony tools')."""
        cfg = config if config is not None else ToolEngineConfig()
        self.registry = registry
        self.session = session
        self.clock = clock
        self.config = cfg
        self.meta = meta if meta is not None else CallMeta(call_id=session)
        self.ui = ui
        self.line = line
        self.confirmations = Confirmations(ttl=cfg.confirm_ttl)
        self._answers = Answers(session, clock)
        self._tally = Tally()
        self._effects = SideEffects(
            session=session,
            clock=clock,
            registry=registry,
            context=self._context,
            confirmations=self.confirmations,
            answers=self._answers,
            tally=self._tally,
            store_capacity=cfg.idempotency_capacity,
            store_bytes=max(cfg.idempotency_max_bytes, cfg.max_result_bytes),
            max_result_bytes=cfg.max_result_bytes,
            max_runtime=cfg.max_side_effect_runtime,
            orphan_window=cfg.orphan_window,
        )
        self._newest: int | None = None
        self._invalid = 0
        self._runs = 0
        self.offered: frozenset[str] | None = None  # None: every registered tool (see offer)
        self.grounds = Grounds(self.meta.agent)  # what the state allows (docs/TOOLS.md, "Offered now")

    def offer(self, names: Sequence[str]) -> list[str]:
        """Offer only ``names`` from now on (an agent's ``tools.set``): later requests list only
        them and a call to any other is answered ``unknown_tool``.  Returns the names that are
        not registered (then nothing changes)."""
        unknown = [name for name in names if name not in self.registry]
        if not unknown:
            self.offered = frozenset(names)
        return unknown

    def offered_specs(self, specs: Sequence[ToolSpec] | None = None) -> list[ToolSpec]:
        """The specs of the tools the model is offered now (name order), as the session's state
        allows them (:mod:`brisvox.agent.tools.offer`: ``confirm_pending`` only while a call
        waits, a required answer, bound arguments as constants).  ``specs``: a flow node's
        tools in place of every registered one."""
        waiting = self.confirmations.pending()
        return self.grounds.offer(self.listed_specs(specs), {p.call.id: p.call.name for p in waiting},
                                  answerable={p.call.id for p in waiting if self.confirmations.replied(p)})

    def heard_offer(self, offered: Sequence[ToolSpec], today: datetime.date,
                    tentative: str | None = None) -> tuple[list[ToolSpec], bool]:
        """``offered`` under the heard rules, and whether the round must be a call:
        ``confirm_pending`` alone when the caller's latest turn is a yes to a waiting call
        (:meth:`~brisvox.agent.tools.offer.Grounds.confirm_offer`, ``confirmed_by``); else the
        lookup the caller's latest turn asks for alone, or the offer without the lookups
        already called in this turn
        (:meth:`~brisvox.agent.tools.offer.Grounds.heard_offer`, ``lookup_when_heard``)."""
        waiting = [spec for p in self.confirmations.pending() if (spec := self.registry.spec(p.call.name)) is not None]
        if (confirm := self.grounds.confirm_offer(offered, waiting, tentative)) is not None:
            return [confirm], True  # the caller's yes to a waiting call: confirming is the only choice
        return self.grounds.heard_offer(offered, today, tentative)

    def confirm_question(self, execution: Execution) -> str | None:
        """The question to speak for a call ``execution`` left waiting at the gate, when its tool
        declares ``confirm_question`` (its fields filled from the call's arguments); None when no
        such call waits.  The question is the agent's own, not a model round: the 0.5B model
        answered a held booking with "The user should go ahead and book the table.", and a long
        reply is cut by the caller's yes (a barge-in drops the waiting call)."""
        ids = {m.call_id for m in execution.results}
        for p in self.confirmations.pending():
            spec = self.registry.spec(p.call.name)
            if p.call.id in ids and spec is not None and spec.confirm_question is not None:
                return make_line(spec.name, "confirm_question", spec.confirm_question, p.call.arguments)
        return None

    def listed_specs(self, specs: Sequence[ToolSpec] | None = None) -> list[ToolSpec]:
        """The agent's tools whatever the state (``offer``'s list, or a flow node's ``specs``):
        what a prompt describes, so its bytes do not change with the offer."""
        base = self.registry.specs() if specs is None else specs
        return [spec for spec in base if self.offered is None or spec.name in self.offered]

    def note_user_turn(self, text: str) -> str | None:
        """A caller's turn entered the context: confirmations may follow it, its words may be
        ``from_caller`` arguments, and its no (a confirm tool's ``declined_by``) drops that
        tool's waiting calls.  Returns what the agent says to that no itself (the dropped call's
        ``declined_line``, filled from its arguments; the first, when several are dropped), or
        None: the turn is then answered without a model round, so nothing is looked up or
        booked on a no (the 0.5B model looked the table up again and asked "Shall I book it?")."""
        self.confirmations.note_user_turn()
        self.grounds.note_user_text(text)
        self.grounds.note_turn_slots(text)
        said: str | None = None
        for p in self.confirmations.pending():
            spec = self.registry.spec(p.call.name)
            if spec is not None and spec.declined_by and self.grounds.declines(text, spec.declined_by):
                self.confirmations.drop(p.call.id)  # the caller said no: nothing can confirm it now
                if said is None and spec.declined_line is not None:
                    said = make_line(spec.name, "declined_line", spec.declined_line, p.call.arguments)
        return said

    def _context(self, epoch: int, call: ToolCall, cancel: CancelToken) -> ToolCallContext:
        """The context one tool call runs with (ReadOnly and SideEffect alike)."""
        return ToolCallContext(self.session, epoch, call, cancel, self.meta, self.ui, self.line)

    # -- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> ToolEngine:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Ends the session: running SideEffect calls are aborted and recorded as lost."""
        await self._effects.aclose()

    def hang_up(self) -> None:
        """The caller is gone: from now on no SideEffect call starts (each answers ``interrupted``).

        Calls already running go on; :meth:`wait_side_effects` gives them time to finish.
        """
        self._effects.hung_up = True

    @property
    def hung_up(self) -> bool:
        return self._effects.hung_up

    async def wait_side_effects(self, timeout: float) -> int:
        """Waits up to ``timeout`` s (injected clock) for the running SideEffect calls to end.

        Returns how many still run.  Their results go to the late-note mailbox as usual.
        """
        return await self._effects.wait(timeout)

    # -- observation ---------------------------------------------------------------------------

    def invalid_rounds(self, epoch: int) -> int:
        """Malformed rounds spent by ``epoch`` (0 for a turn that is not the newest)."""
        return self._invalid if epoch == self._newest else 0

    def idempotency_usage(self) -> IdempotencyUsage:
        return self._effects.usage()

    def stats(self) -> ToolStatsSnapshot:
        return self._tally.snapshot

    def late_notes_dropped(self) -> int:
        return self._effects.late_notes_dropped()

    def take_late_notes(self) -> list[LateNote]:
        """Late results waiting for the model; call only when no tool call is open in the context."""
        return self._effects.take_late_notes()

    def running_side_effects(self) -> int:
        return self._effects.running()

    # White-box views for the engine's own tests (the records and the store live in the book).
    @property
    def _recent(self) -> deque[Record]:
        return self._effects.recent

    @property
    def _store(self) -> IdempotencyStore:
        return self._effects.store

    # -- entry points --------------------------------------------------------------------------

    async def execute(
        self, calls: Sequence[ToolCall | InvalidCall], epoch: int, cancel: CancelToken
    ) -> Execution:
        """Runs a committed response's calls; one result per call, in issue order."""
        slots = self._plan(calls, speculative=False)
        exhausted = self._admit(slots, epoch)
        run_id = self._next_run()
        ran = await self._run(slots, epoch, cancel, run_id)
        return self._finish(slots, epoch, exhausted, ran)

    async def speculate(
        self, calls: Sequence[ToolCall | InvalidCall], epoch: int, cancel: CancelToken
    ) -> Speculation:
        """Runs the ReadOnly calls of a speculative response; holds its SideEffect calls."""
        slots = self._plan(calls, speculative=True)
        exhausted = self._admit(slots, epoch)
        held = []
        for slot in slots:
            if slot.held:
                if slot.answer is None:
                    assert slot.call is not None
                    held.append(slot.call)
                    self._answers.trace("tool call held", slot, epoch, Outcome.HELD, 0.0)
                else:
                    slot.held = False
        run_id = self._next_run()
        await self._run([s for s in slots if not s.held], epoch, cancel, run_id)
        return Speculation(epoch=epoch, slots=slots, held=held, budget_exhausted=exhausted)

    async def commit(self, speculation: Speculation, cancel: CancelToken) -> Execution:
        """Runs the held calls of a speculation; the results are the whole response in issue order."""
        slots = speculation.take_slots()
        epoch = speculation.epoch
        held = [s for s in slots if s.held and s.answer is None]
        if held:
            if self._newest is not None and epoch < self._newest:
                for s in held:
                    self._answers.refuse(s, epoch, ErrorKind.STALE_TURN, Outcome.STALE_TURN, texts.STALE)
            elif self._invalid > self.config.max_invalid_rounds:
                for s in held:
                    self._answers.refuse(s, epoch, ErrorKind.BUDGET_EXHAUSTED, Outcome.BUDGET_EXHAUSTED, texts.EXHAUSTED)
            self._refuse_ungrounded([s for s in held if s.answer is None], use=True, epoch=epoch)
        run_id = self._next_run()
        ran = await self._run([s for s in held if s.answer is None], epoch, cancel, run_id)
        exhausted = speculation.budget_exhausted or any(s.outcome is Outcome.BUDGET_EXHAUSTED for s in held)
        return self._finish(slots, epoch, exhausted, ran)

    # -- planning ------------------------------------------------------------------------------

    def _next_run(self) -> int:
        self._runs += 1
        return self._runs

    def _plan(self, calls: Sequence[ToolCall | InvalidCall], *, speculative: bool) -> list[Slot]:
        slots = plan_calls(
            calls, self.registry, max_argument_bytes=self.config.max_argument_bytes, speculative=speculative,
            offered=self.offered,
        )
        for s in slots:
            if s.registered is not None and s.answer is None and not (speculative and s.registered.spec.name == CONFIRM_PENDING):
                self.grounds.note_lookup_called(s.registered.spec)
        # A held call is checked when it is committed (the state may change before).
        self._refuse_ungrounded([s for s in slots if not s.held], use=not speculative)
        return slots

    def _refuse_ungrounded(self, slots: list[Slot], *, use: bool, epoch: int | None = None) -> None:
        """Refuses the calls the state does not allow (a requirement, a ``from_caller``
        argument); ``use``: a call that passes uses the answer it stands on.  ``epoch``: a
        committed held call's turn (answered and traced at once; a planned call is answered
        as malformed and admitted with its round)."""
        for s in slots:
            if s.answer is not None or s.registered is None or s.call is None:
                continue
            spec = s.registered.spec
            if spec.requires is None and not spec.from_caller:
                continue
            why = self.grounds.refusal(spec, s.call.arguments)
            if why is None:
                if use:
                    self.grounds.note_used(spec)
                continue
            self.grounds.note_refused(spec)
            if epoch is not None:
                self._answers.refuse(s, epoch, ErrorKind.INVALID_ARGUMENTS, Outcome.INVALID_ARGUMENTS, why)
            else:
                malformed(s, ErrorKind.INVALID_ARGUMENTS, Outcome.INVALID_ARGUMENTS, why)

    def _admit(self, slots: list[Slot], epoch: int) -> bool:
        """Applies stale turns and the retry budget; returns whether the round is exhausted."""
        if not slots:
            return False
        refuse = self._answers.refuse
        if self._newest is not None and epoch < self._newest:
            for s in slots:
                s.held = False
                refuse(s, epoch, ErrorKind.STALE_TURN, Outcome.STALE_TURN, texts.STALE, overwrite=True)
            return False
        if self._newest is None or epoch > self._newest:
            self._newest = epoch
            self._invalid = 0
        if any(s.malformed for s in slots):
            self._invalid += 1
        for s in slots:
            s.retries = self._invalid
        if self._invalid > self.config.max_invalid_rounds:
            for s in slots:
                s.held = False
                refuse(s, epoch, ErrorKind.BUDGET_EXHAUSTED, Outcome.BUDGET_EXHAUSTED, texts.EXHAUSTED, overwrite=True)
            return True
        for s in slots:
            if s.answer is not None and s.outcome is not None:
                self._answers.trace("tool call settled", s, epoch, s.outcome, 0.0)
        return False

    # -- running -------------------------------------------------------------------------------

    async def _run(self, slots: list[Slot], epoch: int, cancel: CancelToken, run_id: int) -> list[Record]:
        """Runs every unanswered slot; returns the SideEffect records started by this run."""
        start = self.clock.now()
        ran: list[Record] = []
        effects = self._effects
        try:
            async with TaskScope(f"tools[{self.session}]/round{run_id}") as scope:
                for slot in slots:
                    if slot.answer is not None:
                        continue
                    registered = slot.registered
                    assert registered is not None and slot.call is not None
                    side_effect = registered.spec.is_side_effect
                    if cancel.is_cancelled or (side_effect and effects.hung_up):
                        self._tally.bump("not_started_cancelled")
                        detail = texts.NOT_STARTED if cancel.is_cancelled else texts.HUNG_UP
                        self._answers.settle_error(slot, epoch, start, ErrorKind.INTERRUPTED, Outcome.NOT_STARTED, detail)
                        continue
                    if not side_effect:
                        scope.spawn(self._read_only(slot, registered, epoch, cancel, start), name=slot.call_id)
                        continue
                    record = effects.start(slot, registered, epoch, cancel, start, run_id)
                    if record is not None:
                        ran.append(record)
                        scope.spawn(effects.wait_for_result(slot, record, epoch, cancel, start), name=slot.call_id)
        except asyncio.CancelledError:
            effects.round_dropped(slots)
            raise
        return ran

    async def _read_only(
        self, slot: Slot, registered: RegisteredTool, epoch: int, cancel: CancelToken, start: float
    ) -> None:
        assert slot.call is not None
        ctx = self._context(epoch, slot.call, cancel)
        timeout = registered.spec.timeout
        settle_error = self._answers.settle_error
        try:
            async with TaskScope(f"tool/{slot.call_id}") as scope:
                task = scope.spawn(guarded(registered.tool, slot.call.arguments, ctx), name="call")
                ended = await race(self.clock, task, start + timeout, cancel)
                if ended is not Ended.DONE:
                    scope.cancel()
        except asyncio.CancelledError:
            self._tally.bump("read_only_cancelled")
            raise
        if ended is Ended.CANCELLED:
            self._tally.bump("read_only_cancelled")
            settle_error(slot, epoch, start, ErrorKind.INTERRUPTED, Outcome.INTERRUPTED, texts.INTERRUPTED_RO)
            return
        if ended is Ended.TIMEOUT:
            settle_error(slot, epoch, start, ErrorKind.TIMEOUT, Outcome.TIMED_OUT, f"no answer within {timeout:g} s")
            return
        value = task.result()
        if isinstance(value, Raised):
            settle_error(slot, epoch, start, ErrorKind.TOOL_FAILED, Outcome.FAILED, value.detail)
            return
        try:
            text = render(value.value)
        except (TypeError, ValueError):
            settle_error(slot, epoch, start, ErrorKind.TOOL_FAILED, Outcome.FAILED, texts.NOT_JSON)
            return
        limit = self.config.max_result_bytes
        if len(text) > limit or len(text.encode()) > limit:
            detail = f"the tool's result exceeds {limit} bytes"
            settle_error(slot, epoch, start, ErrorKind.RESULT_TOO_LARGE, Outcome.RESULT_TOO_LARGE, detail)
            return
        self.grounds.note_answer(registered.spec.name, slot.call.arguments, value.value)
        self._answers.settle(slot, epoch, start, ToolMessage(call_id=slot.call_id, content=text), Outcome.OK,
                             delivered_of(value.value), said_of(registered.spec, slot.call.arguments, value.value))

    # -- executions ----------------------------------------------------------------------------

    def _finish(self, slots: list[Slot], epoch: int, exhausted: bool, ran: list[Record]) -> Execution:
        results, outcomes, delivered, lines = [], [], [], []
        for s in slots:
            assert s.answer is not None and s.outcome is not None, f"slot {s.call_id} was not answered"
            results.append(s.answer)
            outcomes.append(s.outcome)
            delivered.append(s.delivered)
            lines.append(s.line)
        receipt = Receipt(
            ran=tuple(ran),
            carried=tuple(s.record for s in slots if s.record is not None and s.carried),
            claims=tuple(s.claim for s in slots if s.claim is not None),
            taken=self._effects.take_mailbox(),
        )
        return Execution(
            self._effects, epoch=epoch, results=results, budget_exhausted=exhausted, outcomes=outcomes, receipt=receipt,
            delivered=delivered, lines=lines,
        )


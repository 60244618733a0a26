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
import json
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from brisvox.agent.assemble import InvalidCall
from brisvox.agent.context import ToolCall, ToolMessage
from brisvox.agent.tools import _calls as texts
from brisvox.agent.tools._calls import Raised, guarded, lost_body, timed_out_running
from brisvox.agent.tools._plan import plan_calls
from brisvox.agent.tools._race import Ended, race
from brisvox.agent.tools._records import (
    MAILBOX_CAPACITY,
    ORPHAN_CAPACITY,
    LateNote,
    Mailbox,
    Record,
    ReplayClaim,
    Settled,
    Slot,
    arguments_digest,
)
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.confirm import (
    DEFAULT_CONFIRM_TTL,
    Confirmations,
    PendingConfirmation,
    confirmation_required_body,
)
from brisvox.agent.tools.execution import Execution, Speculation
from brisvox.agent.tools.registry import (
    CONFIRM_PENDING,
    RegisteredTool,
    ToolCallContext,
    ToolRegistry,
)
from brisvox.agent.tools.results import ErrorKind, Outcome, error_message, truncate_result
from brisvox.agent.tools.stats import ToolStatsSnapshot, bump
from brisvox.agent.tools.store import EntryState, IdempotencyKey, IdempotencyStore, IdempotencyUsage
from brisvox.core.clock import Clock
from brisvox.core.tasks import TaskScope

__all__ = ["ToolEngine", "ToolEngineConfig"]

log = logging.getLogger(__name__)
trace = logging.getLogger("brisvox.tools")

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


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class ToolEngine:
    """Runs the tool calls of one session.  Use as an async context manager (or ``aclose()``)."""

    def __init__(
        self, registry: ToolRegistry, session: str, clock: Clock, config: ToolEngineConfig | None = None
    ) -> None:
        cfg = config if config is not None else ToolEngineConfig()
        self.registry = registry
        self.session = session
        self.clock = clock
        self.config = cfg
        self._store = IdempotencyStore(
            cfg.idempotency_capacity, max(cfg.idempotency_max_bytes, cfg.max_result_bytes)
        )
        self._scope = TaskScope(f"tools[{session}]")
        self._mailbox = Mailbox(MAILBOX_CAPACITY)
        self._recent: deque[Record] = deque(maxlen=ORPHAN_CAPACITY)
        self._stats = ToolStatsSnapshot()
        self.confirmations = Confirmations(ttl=cfg.confirm_ttl)
        self._newest: int | None = None
        self._invalid = 0
        self._runs = 0
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> ToolEngine:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Ends the session: running SideEffect calls are aborted and recorded as lost."""
        self._closed = True
        await self._scope.aclose()

    # -- observation ---------------------------------------------------------------------------

    def invalid_rounds(self, epoch: int) -> int:
        """Malformed rounds spent by ``epoch`` (0 for a turn that is not the newest)."""
        return self._invalid if epoch == self._newest else 0

    def idempotency_usage(self) -> IdempotencyUsage:
        return self._store.usage()

    def stats(self) -> ToolStatsSnapshot:
        return self._stats

    def late_notes_dropped(self) -> int:
        return self._mailbox.dropped

    def take_late_notes(self) -> list[LateNote]:
        """Late results waiting for the model; call only when no tool call is open in the context."""
        out = []
        for note, rec in self._mailbox.take_all():
            rec.note_reported = True
            out.append(note)
        return out

    def running_side_effects(self) -> int:
        return len(self._scope)

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
                    self._trace_event("tool call held", slot, epoch, Outcome.HELD, 0.0)
                else:
                    slot.held = False
        run_id = self._next_run()
        await self._run([s for s in slots if not s.held], epoch, cancel, run_id)
        return Speculation(epoch=epoch, slots=slots, held=held, budget_exhausted=exhausted)

    async def commit(self, speculation: Speculation, cancel: CancelToken) -> Execution:
        """Runs the held calls of a speculation; the results are the whole response in issue order."""
        slots = speculation._take()
        epoch = speculation.epoch
        held = [s for s in slots if s.held and s.answer is None]
        if held:
            if self._newest is not None and epoch < self._newest:
                for s in held:
                    self._answer_error(s, epoch, ErrorKind.STALE_TURN, Outcome.STALE_TURN, texts.STALE)
            elif self._invalid > self.config.max_invalid_rounds:
                for s in held:
                    self._answer_error(s, epoch, ErrorKind.BUDGET_EXHAUSTED, Outcome.BUDGET_EXHAUSTED, texts.EXHAUSTED)
        run_id = self._next_run()
        ran = await self._run([s for s in held if s.answer is None], epoch, cancel, run_id)
        exhausted = speculation.budget_exhausted or any(s.outcome is Outcome.BUDGET_EXHAUSTED for s in held)
        return self._finish(slots, epoch, exhausted, ran)

    # -- planning ------------------------------------------------------------------------------

    def _next_run(self) -> int:
        self._runs += 1
        return self._runs

    def _plan(self, calls: Sequence[ToolCall | InvalidCall], *, speculative: bool) -> list[Slot]:
        return plan_calls(
            calls, self.registry, max_argument_bytes=self.config.max_argument_bytes, speculative=speculative
        )

    def _admit(self, slots: list[Slot], epoch: int) -> bool:
        """Applies stale turns and the retry budget; returns whether the round is exhausted."""
        if not slots:
            return False
        if self._newest is not None and epoch < self._newest:
            for s in slots:
                s.held = False
                self._answer_error(s, epoch, ErrorKind.STALE_TURN, Outcome.STALE_TURN, texts.STALE, overwrite=True)
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
                self._answer_error(
                    s, epoch, ErrorKind.BUDGET_EXHAUSTED, Outcome.BUDGET_EXHAUSTED, texts.EXHAUSTED, overwrite=True
                )
            return True
        for s in slots:
            if s.answer is not None and s.outcome is not None:
                self._trace_event("tool call settled", s, epoch, s.outcome, 0.0)
        return False

    def _answer_error(
        self, slot: Slot, epoch: int, kind: ErrorKind, outcome: Outcome, detail: str, *, overwrite: bool = False
    ) -> None:
        if slot.answer is not None and not overwrite:
            return
        slot.answer = error_message(slot.call_id, kind, slot.tool, detail)
        slot.outcome = outcome
        self._trace_event("tool call settled", slot, epoch, outcome, 0.0)

    # -- running -------------------------------------------------------------------------------

    async def _run(self, slots: list[Slot], epoch: int, cancel: CancelToken, run_id: int) -> list[Record]:
        """Runs every unanswered slot; returns the SideEffect records started by this run."""
        start = self.clock.now()
        ran: list[Record] = []
        try:
            async with TaskScope(f"tools[{self.session}]/round{run_id}") as scope:
                for slot in slots:
                    if slot.answer is not None:
                        continue
                    registered = slot.registered
                    assert registered is not None and slot.call is not None
                    if cancel.is_cancelled:
                        self._stats = bump(self._stats, "not_started_cancelled")
                        self._settle_error(
                            slot, epoch, start, ErrorKind.INTERRUPTED, Outcome.NOT_STARTED, texts.NOT_STARTED
                        )
                        continue
                    if not registered.spec.is_side_effect:
                        scope.spawn(self._read_only(slot, registered, epoch, cancel, start), name=slot.call_id)
                        continue
                    record = self._start_side_effect(slot, registered, epoch, cancel, start, run_id)
                    if record is not None:
                        ran.append(record)
                        scope.spawn(self._await_side_effect(slot, record, epoch, cancel, start), name=slot.call_id)
        except asyncio.CancelledError:
            # The caller dropped this round: results already read come back as late notes.
            for slot in slots:
                rec = slot.record
                if rec is not None and slot.carried:
                    rec.orphan = True
                    self._push_note(rec)
            raise
        return ran

    async def _read_only(
        self, slot: Slot, registered: RegisteredTool, epoch: int, cancel: CancelToken, start: float
    ) -> None:
        assert slot.call is not None
        ctx = ToolCallContext(self.session, epoch, slot.call, cancel)
        timeout = registered.spec.timeout
        try:
            async with TaskScope(f"tool/{slot.call_id}") as scope:
                task = scope.spawn(guarded(registered.tool, slot.call.arguments, ctx), name="call")
                ended = await race(self.clock, task, start + timeout, cancel)
                if ended is not Ended.DONE:
                    scope.cancel()
        except asyncio.CancelledError:
            self._stats = bump(self._stats, "read_only_cancelled")
            raise
        if ended is Ended.CANCELLED:
            self._stats = bump(self._stats, "read_only_cancelled")
            self._settle_error(slot, epoch, start, ErrorKind.INTERRUPTED, Outcome.INTERRUPTED, texts.INTERRUPTED_RO)
            return
        if ended is Ended.TIMEOUT:
            self._settle_error(
                slot, epoch, start, ErrorKind.TIMEOUT, Outcome.TIMED_OUT, f"no answer within {timeout:g} s"
            )
            return
        value = task.result()
        if isinstance(value, Raised):
            self._settle_error(slot, epoch, start, ErrorKind.TOOL_FAILED, Outcome.FAILED, value.detail)
            return
        try:
            text = _render(value.value)
        except (TypeError, ValueError):
            self._settle_error(slot, epoch, start, ErrorKind.TOOL_FAILED, Outcome.FAILED, texts.NOT_JSON)
            return
        limit = self.config.max_result_bytes
        if len(text) > limit or len(text.encode()) > limit:
            self._settle_error(
                slot,
                epoch,
                start,
                ErrorKind.RESULT_TOO_LARGE,
                Outcome.RESULT_TOO_LARGE,
                f"the tool's result exceeds {limit} bytes",
            )
            return
        self._settle(slot, epoch, start, ToolMessage(call_id=slot.call_id, content=text), Outcome.OK)

    def _settle(self, slot: Slot, epoch: int, start: float, answer: ToolMessage, outcome: Outcome) -> None:
        slot.answer = answer
        slot.outcome = outcome
        self._trace_event("tool call settled", slot, epoch, outcome, self.clock.now() - start)

    def _settle_error(
        self, slot: Slot, epoch: int, start: float, kind: ErrorKind, outcome: Outcome, detail: str
    ) -> None:
        self._settle(slot, epoch, start, error_message(slot.call_id, kind, slot.tool, detail), outcome)

    # -- side effects --------------------------------------------------------------------------

    def _start_side_effect(
        self,
        slot: Slot,
        registered: RegisteredTool,
        epoch: int,
        cancel: CancelToken,
        start: float,
        run_id: int,
    ) -> Record | None:
        """Answers at once from the record, or starts the call's task and returns its record.

        Synchronous: the store, orphan and repeat checks cannot interleave with another call.
        """
        call = slot.call
        assert call is not None
        spec = registered.spec
        gated = False
        confirms: PendingConfirmation | None = None
        # A replay of a call id (a confirming call included) answers from the record.
        key = IdempotencyKey(self.session, epoch, call.id)
        entry = self._store.get(key)
        if entry is not None:
            if entry.state is EntryState.DONE:
                self._stats = bump(self._stats, "side_effect_replays")
                answer = ToolMessage(call_id=call.id, content=entry.content, is_error=entry.is_error)
                self._settle(slot, epoch, start, answer, Outcome.RECORDED)
            elif entry.state is EntryState.IN_FLIGHT:
                self._settle_error(slot, epoch, start, ErrorKind.DUPLICATE_CALL, Outcome.DUPLICATE, texts.DUPLICATE)
            else:
                self._settle_error(slot, epoch, start, ErrorKind.UNKNOWN_OUTCOME, Outcome.LOST, texts.UNKNOWN)
            return None

        if spec.name == CONFIRM_PENDING:
            taken = self.confirmations.take(call.arguments.get("call_id"), epoch, start)
            if not isinstance(taken, PendingConfirmation):
                self._settle_error(
                    slot, epoch, start, ErrorKind.CONFIRMATION_REFUSED, Outcome.CONFIRMATION_REFUSED, taken.value
                )
                return None
            held = self.registry.get(taken.call.name)
            if held is None:  # pragma: no cover - a registry only grows
                self._settle_error(slot, epoch, start, ErrorKind.UNKNOWN_TOOL, Outcome.UNKNOWN_TOOL, "gone")
                return None
            confirms = taken
            registered = held
            spec = held.spec
            slot.registered = held
            slot.tool = spec.name
            call = ToolCall(id=call.id, name=spec.name, arguments=taken.call.arguments)
            slot.call = call
            gated = True
        elif spec.confirm:
            digest = arguments_digest(spec.name, call.arguments)
            self.confirmations.request(call, epoch, start, digest)
            self._settle(
                slot,
                epoch,
                start,
                ToolMessage(call_id=call.id, content=confirmation_required_body(spec.name, call.id)),
                Outcome.CONFIRMATION_REQUIRED,
            )
            return None

        digest = arguments_digest(spec.name, call.arguments)
        if not gated and self._answer_orphan(slot, spec.name, digest, epoch, start, run_id):
            return None
        if not gated and not spec.repeatable and self._is_repeat(spec.name, digest, epoch, run_id):
            self._stats = bump(self._stats, "side_effect_repeats")
            self._settle_error(slot, epoch, start, ErrorKind.ALREADY_DONE, Outcome.REPEAT_REFUSED, texts.ALREADY_DONE)
            return None
        if not self._store.begin(key):
            self._settle_error(slot, epoch, start, ErrorKind.STORE_FULL, Outcome.STORE_FULL, texts.STORE_FULL)
            return None

        loop = asyncio.get_running_loop()
        record = Record(
            key=key,
            tool=spec.name,
            digest=digest,
            run_id=run_id,
            started_at=start,
            gated=gated,
            waiter=loop.create_future(),
        )
        slot.record = record
        if not gated:
            self._recent.append(record)
        if confirms is not None:
            log.info(
                "side-effect call %s epoch=%d key=%s confirms=%s",
                spec.name,
                epoch,
                key.hex(),
                confirms.call.id,
            )
        else:
            log.info("side-effect call %s epoch=%d key=%s", spec.name, epoch, key.hex())
        ctx = ToolCallContext(self.session, epoch, call, cancel)
        self._scope.spawn(self._side_effect_task(record, registered, call, ctx), name=f"side-effect/{call.id}")
        return record

    def _answer_orphan(self, slot: Slot, tool: str, digest: int, epoch: int, start: float, run_id: int) -> bool:
        window = self.config.orphan_window
        if window <= 0:
            return False
        for rec in reversed(self._recent):
            if (
                not rec.orphan
                or rec.consumed
                or rec.digest != digest
                or rec.tool != tool
                or rec.run_id == run_id
                or rec.claimed_by == run_id
                or start - rec.started_at > window
            ):
                continue
            settled = rec.settled
            if settled is None:
                self._stats = bump(self._stats, "orphan_in_flight")
                self._settle_error(
                    slot, epoch, start, ErrorKind.DUPLICATE_CALL, Outcome.ORPHAN_IN_FLIGHT, texts.ORPHAN_RUNNING
                )
            elif rec.note_reported:
                self._stats = bump(self._stats, "orphan_reported")
                self._settle_error(
                    slot, epoch, start, ErrorKind.ALREADY_REPORTED, Outcome.ORPHAN_REPORTED, texts.ALREADY_REPORTED
                )
            elif settled.lost:
                self._stats = bump(self._stats, "orphan_lost")
                rec.claimed_by = run_id
                slot.claim = ReplayClaim(rec, slot.call_id, epoch, run_id)
                self._settle_error(slot, epoch, start, ErrorKind.UNKNOWN_OUTCOME, Outcome.ORPHAN_LOST, texts.UNKNOWN)
            else:
                self._stats = bump(self._stats, "orphan_replays")
                rec.claimed_by = run_id
                slot.claim = ReplayClaim(rec, slot.call_id, epoch, run_id)
                answer = ToolMessage(call_id=slot.call_id, content=settled.content, is_error=settled.is_error)
                self._settle(slot, epoch, start, answer, Outcome.ORPHAN_REPLAYED)
            return True
        return False

    def _is_repeat(self, tool: str, digest: int, epoch: int, run_id: int) -> bool:
        for rec in self._recent:
            settled = rec.settled
            if (
                rec.epoch == epoch
                and rec.run_id != run_id
                and rec.digest == digest
                and rec.tool == tool
                and rec.delivered
                and settled is not None
                and not settled.lost
                and not settled.is_error
            ):
                return True
        return False

    async def _side_effect_task(
        self, record: Record, registered: RegisteredTool, call: ToolCall, ctx: ToolCallContext
    ) -> None:
        spec = registered.spec
        runtime = max(self.config.max_side_effect_runtime, spec.timeout)
        settled: Settled
        try:
            async with TaskScope(f"tool/{call.id}") as scope:
                task = scope.spawn(guarded(registered.tool, call.arguments, ctx), name="call")
                ended = await race(self.clock, task, record.started_at + runtime, None)
                if ended is not Ended.DONE:
                    scope.cancel()
            if ended is not Ended.DONE:
                log.warning("side-effect call %s passed the %g s backstop; outcome unknown", spec.name, runtime)
                settled = Settled(lost_body(call.id, spec.name, texts.BACKSTOP), True, Outcome.LOST, lost=True)
            else:
                value = task.result()
                if isinstance(value, Raised):
                    if value.crashed:
                        settled = Settled(lost_body(call.id, spec.name, texts.CRASHED), True, Outcome.LOST, lost=True)
                    else:
                        body = error_message(call.id, ErrorKind.TOOL_FAILED, spec.name, value.detail).content
                        settled = Settled(body, True, Outcome.FAILED)
                else:
                    try:
                        text, cut = truncate_result(_render(value.value), self.config.max_result_bytes)
                        settled = Settled(text, False, Outcome.OK_TRUNCATED if cut else Outcome.OK)
                    except (TypeError, ValueError):
                        body = error_message(call.id, ErrorKind.TOOL_FAILED, spec.name, texts.NOT_JSON).content
                        settled = Settled(body, True, Outcome.FAILED)
        except asyncio.CancelledError:
            # The engine is closing: the call is aborted and its outcome is unknown.
            self._record(record, Settled(lost_body(call.id, spec.name, texts.ABORTED), True, Outcome.LOST, lost=True))
            raise
        self._record(record, settled)

    def _record(self, record: Record, settled: Settled) -> None:
        if settled.lost:
            self._store.lose(record.key)
        else:
            self._store.finish(record.key, settled.content, settled.is_error)
        record.settled = settled
        waiter = record.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(settled)
        elif not self._closed:
            self._push_note(record)

    def _push_note(self, record: Record) -> None:
        if record.settled is None or record.consumed:
            return
        self._stats = bump(self._stats, "side_effect_late_results")
        if self._mailbox.push(record.note(), record):
            trace.debug(
                "late_result session=%s epoch=%d call=%s tool=%s",
                self.session,
                record.epoch,
                record.key.call_id,
                record.tool,
                extra={
                    "session": self.session,
                    "epoch": record.epoch,
                    "call": record.key.call_id,
                    "tool": record.tool[:64],
                    "outcome": Outcome.LATE_RESULT.value,
                },
            )

    def _close_channel(self, record: Record) -> Settled | None:
        """Ends the slot's wait; a result that arrived meanwhile is returned (and answered)."""
        waiter = record.waiter
        record.waiter = None
        if waiter is not None and waiter.done():
            return waiter.result()
        return None

    async def _await_side_effect(
        self, slot: Slot, record: Record, epoch: int, cancel: CancelToken, start: float
    ) -> None:
        registered = slot.registered
        assert registered is not None and record.waiter is not None
        timeout = registered.spec.timeout
        try:
            ended = await race(self.clock, record.waiter, start + timeout, cancel)
        except asyncio.CancelledError:
            # The execute future was dropped: its result (now or later) comes back as a note.
            record.orphan = True
            if self._close_channel(record) is not None:
                self._push_note(record)
            raise
        settled = self._close_channel(record)
        if settled is not None:
            slot.carried = True
            message = ToolMessage(call_id=slot.call_id, content=settled.content, is_error=settled.is_error)
            self._settle(slot, epoch, start, message, settled.outcome)
            return
        record.orphan = True
        if ended is Ended.CANCELLED:
            self._stats = bump(self._stats, "side_effect_interrupted")
            self._settle_error(
                slot, epoch, start, ErrorKind.INTERRUPTED, Outcome.INTERRUPTED_RUNNING, texts.INTERRUPTED_SE
            )
        else:
            self._settle_error(
                slot, epoch, start, ErrorKind.TIMEOUT, Outcome.TIMED_OUT_RUNNING, timed_out_running(timeout)
            )

    # -- executions ----------------------------------------------------------------------------

    def _finish(self, slots: list[Slot], epoch: int, exhausted: bool, ran: list[Record]) -> Execution:
        results, outcomes = [], []
        for s in slots:
            assert s.answer is not None and s.outcome is not None, f"slot {s.call_id} was not answered"
            results.append(s.answer)
            outcomes.append(s.outcome)
        return Execution(
            self,
            epoch=epoch,
            results=results,
            budget_exhausted=exhausted,
            ran=ran,
            carried=[s.record for s in slots if s.record is not None and s.carried],
            claims=[s.claim for s in slots if s.claim is not None],
            taken=self._mailbox.take_all(),
            outcomes=outcomes,
        )

    def _delivered(self, execution: Execution) -> None:
        for rec in execution._carried:
            rec.delivered = True
        for note_rec in execution._taken:
            note_rec[1].note_reported = True
        for claim in execution._claims:
            orphan = claim.orphan
            orphan.consumed = True
            orphan.claimed_by = None
            self._mailbox.remove_for(orphan)
            settled = orphan.settled
            if settled is None:  # pragma: no cover - only settled orphans are claimed
                continue
            # The answer is now this call's own record: a replay of its id answers the same.
            key = IdempotencyKey(self.session, claim.epoch, claim.call_id)
            if self._store.get(key) is None and self._store.begin(key):
                if settled.lost:
                    self._store.lose(key)
                else:
                    self._store.finish(key, settled.content, settled.is_error)
            # The model has now read the result under the new id: a later identical call of
            # this turn is a repeat of a delivered call.
            if not settled.lost:
                self._recent.append(
                    Record(
                        key=key,
                        tool=orphan.tool,
                        digest=orphan.digest,
                        run_id=claim.run_id,
                        started_at=self.clock.now(),
                        replay=True,
                        settled=settled,
                        delivered=True,
                    )
                )

    def _discarded(self, execution: Execution) -> None:
        self._mailbox.put_back(execution._taken)
        for claim in execution._claims:
            if claim.orphan.claimed_by == claim.run_id:
                claim.orphan.claimed_by = None
        for rec in execution._ran:
            rec.orphan = True
        for rec in execution._carried:
            self._push_note(rec)

    # -- tracing -------------------------------------------------------------------------------

    def _trace_event(self, message: str, slot: Slot, epoch: int, outcome: Outcome, duration: float) -> None:
        if not trace.isEnabledFor(logging.DEBUG):
            return
        duration_us = round(duration * 1_000_000)
        tool = slot.tool[:64]
        trace.debug(
            "%s session=%s epoch=%d call=%s tool=%s outcome=%s duration_us=%d retries=%d",
            message,
            self.session,
            epoch,
            slot.call_id,
            tool,
            outcome.value,
            duration_us,
            slot.retries,
            extra={
                "session": self.session,
                "epoch": epoch,
                "call": slot.call_id,
                "tool": tool,
                "outcome": outcome.value,
                "duration_us": duration_us,
                "retries": slot.retries,
            },
        )

"""The engine's SideEffect book: starting calls, their tasks, the idempotency store, late
notes and orphans.

A SideEffect call runs on a task of the book's own :class:`TaskScope`, so nothing the
caller does (a timeout, a barge-in, a dropped round) stops it.  Its :class:`Record`
follows the lifecycle of :mod:`brisvox.agent.tools._lifecycle`; every move below goes
through :meth:`Record.move`, so the order of events is checked in one table.  The book
is also the :class:`~brisvox.agent.tools.execution.DeliveryHooks` of every execution:
a delivered execution reports its slots and notes as read, a discarded one turns them
into notes and orphans.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from brisvox.agent.context import ToolCall, ToolMessage
from brisvox.agent.tools import _calls as texts
from brisvox.agent.tools._answers import Answers, Tally, delivered_of, render, said_of
from brisvox.agent.tools._calls import Raised, guarded, lost_body, timed_out_running
from brisvox.agent.tools._lifecycle import Event, Phase
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
from brisvox.agent.tools.confirm import Confirmations, PendingConfirmation, confirmation_required_body
from brisvox.agent.tools.execution import Receipt
from brisvox.agent.tools.registry import CONFIRM_PENDING, RegisteredTool, ToolCallContext, ToolRegistry
from brisvox.agent.tools.results import ErrorKind, Outcome, error_message, truncate_result
from brisvox.agent.tools.store import EntryState, IdempotencyKey, IdempotencyStore, IdempotencyUsage
from brisvox.core.clock import Clock
from brisvox.core.tasks import TaskScope

__all__ = ["SideEffects"]

# The engine's module name: operators filter on it (docs/TOOLS.md, "Observability").
log = logging.getLogger("brisvox.agent.tools.engine")
trace = logging.getLogger("brisvox.tools")


class SideEffects:
    """Every SideEffect call of one session (see the module docs)."""

    def __init__(
        self,
        *,
        session: str,
        clock: Clock,
        registry: ToolRegistry,
        context: Callable[[int, ToolCall, CancelToken], ToolCallContext],
        confirmations: Confirmations,
        answers: Answers,
        tally: Tally,
        store_capacity: int,
        store_bytes: int,
        max_result_bytes: int,
        max_runtime: float,
        orphan_window: float,
    ) -> None:
        self.session, self.clock, self.registry = session, clock, registry
        self._context = context
        self.confirmations = confirmations
        self._answers = answers
        self._tally = tally
        self.store = IdempotencyStore(store_capacity, store_bytes)
        self._max_result_bytes = max_result_bytes
        self._max_runtime = max_runtime
        self._orphan_window = orphan_window
        self._scope = TaskScope(f"tools[{session}]")
        self._running: set[asyncio.Task[None]] = set()
        self._mailbox = Mailbox(MAILBOX_CAPACITY)
        self.recent: deque[Record] = deque(maxlen=ORPHAN_CAPACITY)
        self._closed = False
        self.hung_up = False

    # -- the session -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Running calls are aborted and recorded lost; no note is pushed any more."""
        self._closed = True
        self.hung_up = True
        await self._scope.aclose()

    def running(self) -> int:
        return len(self._scope)

    async def wait(self, timeout: float) -> int:
        """Waits up to ``timeout`` s (injected clock) for the running calls; returns how many still run."""
        running = {t for t in self._running if not t.done()}
        if running and timeout > 0:
            async with TaskScope(f"tools[{self.session}]/drain") as scope:
                done = scope.spawn(asyncio.wait(running), name="side-effects")
                await race(self.clock, done, self.clock.now() + timeout, None)
                scope.cancel()  # cancels the wait only, never the calls
        return sum(1 for t in self._running if not t.done())

    def usage(self) -> IdempotencyUsage:
        return self.store.usage()

    def late_notes_dropped(self) -> int:
        return self._mailbox.dropped

    def take_late_notes(self) -> list[LateNote]:
        out = []
        for note, rec in self._mailbox.take_all():
            rec.move(Event.REPORT)
            out.append(note)
        return out

    def take_mailbox(self) -> tuple[tuple[LateNote, Record], ...]:
        """The waiting notes, for an execution to carry (reported when it is delivered)."""
        return tuple(self._mailbox.take_all())

    # -- starting a call -------------------------------------------------------------------

    def start(
        self, slot: Slot, registered: RegisteredTool, epoch: int, cancel: CancelToken, start: float, run_id: int
    ) -> Record | None:
        """Answers at once from the record, or starts the call's task and returns its record.

        Synchronous: the store, orphan and repeat checks cannot interleave with another call.
        """
        answers = self._answers
        call = slot.call
        assert call is not None
        spec = registered.spec
        gated = False
        confirms: PendingConfirmation | None = None
        # A replay of a call id (a confirming call included) answers from the record.
        key = IdempotencyKey(self.session, epoch, call.id)
        entry = self.store.get(key)
        if entry is not None:
            if entry.state is EntryState.DONE:
                self._tally.bump("side_effect_replays")
                answer = ToolMessage(call_id=call.id, content=entry.content, is_error=entry.is_error)
                answers.settle(slot, epoch, start, answer, Outcome.RECORDED, entry.delivered)
            elif entry.state is EntryState.IN_FLIGHT:
                answers.settle_error(slot, epoch, start, ErrorKind.DUPLICATE_CALL, Outcome.DUPLICATE, texts.DUPLICATE)
            else:
                answers.settle_error(slot, epoch, start, ErrorKind.UNKNOWN_OUTCOME, Outcome.LOST, texts.UNKNOWN)
            return None

        if spec.name == CONFIRM_PENDING:
            taken = self.confirmations.take(call.arguments.get("call_id"), epoch, start)
            if not isinstance(taken, PendingConfirmation):
                answers.settle_error(
                    slot, epoch, start, ErrorKind.CONFIRMATION_REFUSED, Outcome.CONFIRMATION_REFUSED, taken.value
                )
                return None
            held = self.registry.get(taken.call.name)
            if held is None:  # pragma: no cover - a registry only grows
                answers.settle_error(slot, epoch, start, ErrorKind.UNKNOWN_TOOL, Outcome.UNKNOWN_TOOL, "gone")
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
            answer = ToolMessage(call_id=call.id, content=confirmation_required_body(spec.name, call.id))
            answers.settle(slot, epoch, start, answer, Outcome.CONFIRMATION_REQUIRED)
            return None

        digest = arguments_digest(spec.name, call.arguments)
        if not gated and self._answer_orphan(slot, spec.name, digest, epoch, start, run_id):
            return None
        if not gated and not spec.repeatable and self._is_repeat(spec.name, digest, epoch, run_id):
            self._tally.bump("side_effect_repeats")
            answers.settle_error(slot, epoch, start, ErrorKind.ALREADY_DONE, Outcome.REPEAT_REFUSED, texts.ALREADY_DONE)
            return None
        if not self.store.begin(key):
            answers.settle_error(slot, epoch, start, ErrorKind.STORE_FULL, Outcome.STORE_FULL, texts.STORE_FULL)
            return None

        record = Record(
            key=key,
            tool=spec.name,
            digest=digest,
            run_id=run_id,
            started_at=start,
            waiter=asyncio.get_running_loop().create_future(),
        )
        slot.record = record
        if not gated:  # a gated call takes no part in orphan replay or repeat refusal
            self.recent.append(record)
        if confirms is not None:
            log.info("side-effect call %s epoch=%d key=%s confirms=%s", spec.name, epoch, key.hex(), confirms.call.id)
        else:
            log.info("side-effect call %s epoch=%d key=%s", spec.name, epoch, key.hex())
        ctx = self._context(epoch, call, cancel)
        task = self._scope.spawn(self._task(record, registered, call, ctx), name=f"side-effect/{call.id}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return record

    def _answer_orphan(self, slot: Slot, tool: str, digest: int, epoch: int, start: float, run_id: int) -> bool:
        window = self._orphan_window
        if window <= 0:
            return False
        answers = self._answers
        for rec in reversed(self.recent):
            if (
                rec.digest != digest  # first: the cheap test that rules most records out
                or not rec.is_orphan
                or rec.tool != tool
                or rec.run_id == run_id
                or rec.claimed_by == run_id
                or start - rec.started_at > window
            ):
                continue
            settled = rec.settled
            if rec.phase is Phase.DETACHED:
                self._tally.bump("orphan_in_flight")
                answers.settle_error(
                    slot, epoch, start, ErrorKind.DUPLICATE_CALL, Outcome.ORPHAN_IN_FLIGHT, texts.ORPHAN_RUNNING
                )
            elif rec.phase is Phase.REPORTED:
                self._tally.bump("orphan_reported")
                answers.settle_error(
                    slot, epoch, start, ErrorKind.ALREADY_REPORTED, Outcome.ORPHAN_REPORTED, texts.ALREADY_REPORTED
                )
            elif settled is not None and settled.lost:
                self._tally.bump("orphan_lost")
                rec.claimed_by = run_id
                slot.claim = ReplayClaim(rec, slot.call_id, epoch, run_id)
                answers.settle_error(slot, epoch, start, ErrorKind.UNKNOWN_OUTCOME, Outcome.ORPHAN_LOST, texts.UNKNOWN)
            else:
                assert settled is not None  # NOTED: the call has finished
                self._tally.bump("orphan_replays")
                rec.claimed_by = run_id
                slot.claim = ReplayClaim(rec, slot.call_id, epoch, run_id)
                answer = ToolMessage(call_id=slot.call_id, content=settled.content, is_error=settled.is_error)
                answers.settle(slot, epoch, start, answer, Outcome.ORPHAN_REPLAYED, settled.delivered)
            return True
        return False

    def _is_repeat(self, tool: str, digest: int, epoch: int, run_id: int) -> bool:
        for rec in self.recent:
            settled = rec.settled
            if (
                rec.epoch == epoch
                and rec.run_id != run_id
                and rec.digest == digest
                and rec.tool == tool
                and rec.phase is Phase.DELIVERED
                and settled is not None
                and not settled.lost
                and not settled.is_error
            ):
                return True
        return False

    # -- the call's task -------------------------------------------------------------------

    async def _task(self, record: Record, registered: RegisteredTool, call: ToolCall, ctx: ToolCallContext) -> None:
        spec = registered.spec
        runtime = max(self._max_runtime, spec.timeout)
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
                        text, cut = truncate_result(render(value.value), self._max_result_bytes)
                        settled = Settled(text, False, Outcome.OK_TRUNCATED if cut else Outcome.OK,
                                          delivered=delivered_of(value.value),
                                          line=said_of(spec, call.arguments, value.value))
                    except (TypeError, ValueError):
                        body = error_message(call.id, ErrorKind.TOOL_FAILED, spec.name, texts.NOT_JSON).content
                        settled = Settled(body, True, Outcome.FAILED)
        except asyncio.CancelledError:
            # The engine is closing: the call is aborted and its outcome is unknown.
            self._finish(record, Settled(lost_body(call.id, spec.name, texts.ABORTED), True, Outcome.LOST, lost=True))
            raise
        self._finish(record, settled)

    def _finish(self, record: Record, settled: Settled) -> None:
        if settled.lost:
            self.store.lose(record.key)
        else:
            self.store.finish(record.key, settled.content, settled.is_error, settled.delivered)
        record.settled = settled
        if record.move(Event.FINISH) is Phase.READY:
            assert record.waiter is not None
            record.waiter.set_result(settled)
        elif not self._closed:
            self._push_note(record)

    def _push_note(self, record: Record) -> None:
        self._tally.bump("side_effect_late_results")
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

    def _detach(self, record: Record) -> None:
        """The slot stops waiting: a result that already arrived becomes a note."""
        record.waiter = None
        if record.move(Event.DETACH) is Phase.NOTED:
            self._push_note(record)

    # -- the slot waiting for it -----------------------------------------------------------

    async def wait_for_result(self, slot: Slot, record: Record, epoch: int, cancel: CancelToken, start: float) -> None:
        """Answers ``slot`` with the call's result, or at its timeout or the turn's cancellation."""
        registered = slot.registered
        assert registered is not None and record.waiter is not None
        timeout = registered.spec.timeout
        answers = self._answers
        try:
            ended = await race(self.clock, record.waiter, start + timeout, cancel)
        except asyncio.CancelledError:
            # The round was dropped: the result (now or later) comes back as a note.
            self._detach(record)
            raise
        if record.phase is Phase.READY:  # the result is there (preferred over a tie with the deadline)
            record.waiter = None
            record.move(Event.READ)
            settled = record.settled
            assert settled is not None
            slot.carried = True
            message = ToolMessage(call_id=slot.call_id, content=settled.content, is_error=settled.is_error)
            answers.settle(slot, epoch, start, message, settled.outcome, settled.delivered, settled.line)
            return
        self._detach(record)
        if ended is Ended.CANCELLED:
            self._tally.bump("side_effect_interrupted")
            answers.settle_error(
                slot, epoch, start, ErrorKind.INTERRUPTED, Outcome.INTERRUPTED_RUNNING, texts.INTERRUPTED_SE
            )
        else:
            answers.settle_error(
                slot, epoch, start, ErrorKind.TIMEOUT, Outcome.TIMED_OUT_RUNNING, timed_out_running(timeout)
            )

    def round_dropped(self, slots: list[Slot]) -> None:
        """The caller dropped a round: results its slots already read come back as notes."""
        for slot in slots:
            rec = slot.record
            if rec is not None and slot.carried and rec.move(Event.DISCARD) is Phase.NOTED:
                self._push_note(rec)

    # -- DeliveryHooks -----------------------------------------------------------------------

    def on_delivered(self, receipt: Receipt) -> None:
        for rec in receipt.carried:
            rec.move(Event.DELIVER)
        for claim in receipt.claims:
            orphan = claim.orphan
            orphan.move(Event.REPLAY)
            orphan.claimed_by = None
            self._mailbox.remove_for(orphan)
            settled = orphan.settled
            if settled is None:  # pragma: no cover - only settled orphans are claimed
                continue
            # The answer is now this call's own record: a replay of its id answers the same.
            key = IdempotencyKey(self.session, claim.epoch, claim.call_id)
            if self.store.get(key) is None and self.store.begin(key):
                if settled.lost:
                    self.store.lose(key)
                else:
                    self.store.finish(key, settled.content, settled.is_error, settled.delivered)
            # The model has now read the result under the new id: a later identical call of
            # this turn is a repeat of a delivered call.
            if not settled.lost:
                self.recent.append(
                    Record(
                        key=key,
                        tool=orphan.tool,
                        digest=orphan.digest,
                        run_id=claim.run_id,
                        started_at=self.clock.now(),
                        phase=Phase.DELIVERED,
                        settled=settled,
                    )
                )
        for _note, rec in receipt.taken:
            if rec.phase is not Phase.REPLAYED:
                rec.move(Event.REPORT)

    def on_discarded(self, receipt: Receipt) -> None:
        self._mailbox.put_back(receipt.taken)
        for claim in receipt.claims:
            if claim.orphan.claimed_by == claim.run_id:
                claim.orphan.claimed_by = None
        carried = {id(rec) for rec in receipt.carried}
        for rec in receipt.ran:
            if id(rec) not in carried:
                rec.move(Event.DISCARD)  # already detached: it stays where it is
        for rec in receipt.carried:
            if rec.move(Event.DISCARD) is Phase.NOTED:
                self._push_note(rec)

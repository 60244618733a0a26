"""The session manager on virtual time, with fake sessions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import BrisvoxError, ConfigError
from brisvox.server.session import (
    AtCapacity,
    SessionCancel,
    SessionEnded,
    SessionManager,
    SessionOutcome,
    SessionSlot,
    ShutdownOutcome,
    ShutdownPolicy,
    ShuttingDown,
)


@dataclass
class Fake:
    """What a fake session does: run for ``seconds``, then end as told.

    ``obey``: return when the stop request is set; ``ignore_abort``: swallow one task
    cancellation and keep going until ``release`` is set.
    """

    seconds: float = 1.0
    raise_: BaseException | None = None
    obey: bool = True
    ignore_abort: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    saw_cancel: bool = False


async def fake_runner(item: Fake, cancel: SessionCancel) -> None:
    clock = SimClock()
    try:
        if item.obey:
            sleeper = asyncio.ensure_future(clock.sleep(item.seconds))
            stopper = asyncio.ensure_future(cancel.wait())
            try:
                await asyncio.wait([sleeper, stopper], return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                stopper.cancel()
                await asyncio.gather(sleeper, stopper, return_exceptions=True)
            item.saw_cancel = cancel.is_set()
        else:
            await clock.sleep(item.seconds)
    except asyncio.CancelledError:
        if not item.ignore_abort:
            raise
        await item.release.wait()
    if item.raise_ is not None:
        raise item.raise_


def manager(max_sessions: int = 2, ended: list[SessionEnded] | None = None) -> SessionManager[Fake]:
    return SessionManager(
        fake_runner, max_sessions=max_sessions, clock=SimClock(),
        on_end=ended.append if ended is not None else None,
    )


def admit(m: SessionManager[Fake]) -> SessionSlot[Fake]:
    slot = m.try_admit()
    assert isinstance(slot, SessionSlot), slot
    return slot


async def test_admission_at_capacity_is_refused_without_queueing_and_reservations_count() -> None:
    m = manager(max_sessions=2)
    a = admit(m)
    a.spawn(Fake(seconds=5))
    b = admit(m)  # reserved, not yet spawned
    assert (m.active, m.reserved, m.ready) == (1, 1, False)
    refused = m.try_admit()
    assert refused == AtCapacity(active=1, reserved=1, max_sessions=2)
    assert m.stats.refused_at_capacity == 1
    b.release()
    assert m.ready
    c = admit(m)
    c.spawn(Fake(seconds=1))
    report = await m.shutdown(ShutdownPolicy(drain_timeout=10))
    assert report.outcome is ShutdownOutcome.DRAINED
    assert m.stats.admitted == 3 and m.stats.released_unused == 1


async def test_a_drain_refuses_new_sessions_and_waits_for_the_live_ones_to_finish() -> None:
    clock = SimClock()
    ended: list[SessionEnded] = []
    m = manager(max_sessions=3, ended=ended)
    for seconds in (1.0, 2.5):
        admit(m).spawn(Fake(seconds=seconds))
    t0 = clock.now()
    shutdown = asyncio.ensure_future(m.shutdown(ShutdownPolicy(drain_timeout=10)))
    await asyncio.sleep(0)
    assert m.draining and not m.ready
    assert isinstance(m.try_admit(), ShuttingDown)
    report = await shutdown
    assert report.outcome is ShutdownOutcome.DRAINED and report.exit_code == 0
    assert report.drain_seconds == pytest.approx(2.5)
    assert clock.now() - t0 == pytest.approx(2.5)
    assert [e.outcome for e in ended] == [SessionOutcome.OK, SessionOutcome.OK]
    assert m.sessions() == [] and m.active == 0
    assert m.stats.refused_shutting_down == 1


async def test_a_slot_reserved_before_the_drain_is_honoured_and_waited_for() -> None:
    m = manager()
    slot = admit(m)
    shutdown = asyncio.ensure_future(m.shutdown(ShutdownPolicy(drain_timeout=10)))
    await SimClock().sleep(1.0)
    assert not shutdown.done()  # the reservation holds the drain
    info = slot.spawn(Fake(seconds=1.0))
    assert info.id in [s.id for s in m.sessions()]
    report = await shutdown
    assert report.outcome is ShutdownOutcome.DRAINED
    assert report.drain_seconds == pytest.approx(2.0)


async def test_sessions_that_outlive_the_drain_are_cancelled_cooperatively() -> None:
    ended: list[SessionEnded] = []
    m = manager(ended=ended)
    slow = Fake(seconds=100)
    admit(m).spawn(slow, name="call")
    admit(m).spawn(Fake(seconds=0.5), name="call")
    report = await m.shutdown(ShutdownPolicy(drain_timeout=2, cancel_timeout=1))
    assert report.outcome is ShutdownOutcome.CANCELLED and report.exit_code == 3
    assert report.cancelled == ("call-1",)
    assert report.drain_seconds == pytest.approx(2.0) and report.cancel_seconds == pytest.approx(0.0)
    assert slow.saw_cancel
    assert {e.info.id: e.outcome for e in ended} == {"call-2": SessionOutcome.OK, "call-1": SessionOutcome.CANCELLED}


async def test_sessions_that_ignore_the_stop_request_are_aborted() -> None:
    ended: list[SessionEnded] = []
    m = manager(ended=ended)
    admit(m).spawn(Fake(seconds=100, obey=False))
    report = await m.shutdown(ShutdownPolicy(drain_timeout=1, cancel_timeout=1, abort_timeout=1))
    assert report.outcome is ShutdownOutcome.ABORTED and report.exit_code == 4
    assert report.cancelled == report.aborted == ("session-1",)
    assert (report.drain_seconds, report.cancel_seconds) == (pytest.approx(1.0), pytest.approx(1.0))
    assert [e.outcome for e in ended] == [SessionOutcome.ABORTED]
    assert m.sessions() == []


async def test_a_session_that_survives_the_abort_is_reported_as_leaked() -> None:
    m = manager()
    stuck = Fake(seconds=100, obey=False, ignore_abort=True)
    admit(m).spawn(stuck)
    report = await m.shutdown(ShutdownPolicy(drain_timeout=1, cancel_timeout=1, abort_timeout=1))
    assert report.outcome is ShutdownOutcome.LEAKED and report.exit_code == 5
    assert report.leaked == ("session-1",)
    assert [s.id for s in m.sessions()] == ["session-1"]
    stuck.release.set()
    await m.wait_idle(1.0)
    assert m.sessions() == []


async def test_a_reservation_never_used_is_a_leftover_of_the_shutdown() -> None:
    m = manager()
    admit(m)
    report = await m.shutdown(ShutdownPolicy(drain_timeout=1, cancel_timeout=1, abort_timeout=1))
    assert report.outcome is ShutdownOutcome.LEAKED and report.reservations_left == 1


async def test_a_crashing_session_ends_alone_and_is_counted() -> None:
    ended: list[SessionEnded] = []
    m = manager(max_sessions=3, ended=ended)
    survivor = Fake(seconds=3)
    admit(m).spawn(survivor)
    admit(m).spawn(Fake(seconds=1, raise_=ZeroDivisionError("boom")))
    admit(m).spawn(Fake(seconds=2, raise_=BrisvoxError("provider went away")))
    await SimClock().sleep(2.5)
    assert [s.id for s in m.sessions()] == ["session-1"]
    assert m.stats.crashed == 1 and m.stats.ended[SessionOutcome.ERROR] == 1
    crashed = next(e for e in ended if e.outcome is SessionOutcome.CRASHED)
    assert crashed.error == "ZeroDivisionError: boom" and crashed.duration == pytest.approx(1.0)
    admit(m).release()  # the crash freed its place
    report = await m.shutdown(ShutdownPolicy(drain_timeout=5))
    assert report.outcome is ShutdownOutcome.DRAINED
    assert [e.outcome for e in ended][-1] is SessionOutcome.OK


class _LoggedBug(BrisvoxError):
    """A brisvox error reporting a bug it already logged (as the engine's CallFailed does)."""

    crashed = True


async def test_a_brisvox_error_that_reports_a_bug_is_counted_as_a_crash() -> None:
    ended: list[SessionEnded] = []
    m = manager(max_sessions=2, ended=ended)
    admit(m).spawn(Fake(seconds=1, raise_=_LoggedBug("the call failed in speak (RuntimeError)")))
    admit(m).spawn(Fake(seconds=1, raise_=BrisvoxError("provider went away")))
    await SimClock().sleep(1.5)
    assert sorted(e.outcome.value for e in ended) == ["crashed", "error"]
    assert m.stats.crashed == 1 and m.stats.ended[SessionOutcome.ERROR] == 1


async def test_no_exit_path_leaves_a_registry_entry() -> None:
    m = manager(max_sessions=5)
    fakes = [
        Fake(seconds=1),
        Fake(seconds=1, raise_=RuntimeError("x")),
        Fake(seconds=1, raise_=BrisvoxError("y")),
        Fake(seconds=100),
        Fake(seconds=100, obey=False),
    ]
    for fake in fakes:
        admit(m).spawn(fake)
    report = await m.shutdown(ShutdownPolicy(drain_timeout=2, cancel_timeout=1, abort_timeout=1))
    assert report.outcome is ShutdownOutcome.ABORTED
    assert m.sessions() == [] and m.active == 0 and m.reserved == 0
    assert sum(m.stats.ended.values()) == 5
    assert {o: n for o, n in m.stats.ended.items() if n} == {
        SessionOutcome.OK: 1, SessionOutcome.CRASHED: 1, SessionOutcome.ERROR: 1,
        SessionOutcome.CANCELLED: 1, SessionOutcome.ABORTED: 1,
    }


async def test_a_second_signal_skips_the_rest_of_the_drain() -> None:
    m = manager()
    admit(m).spawn(Fake(seconds=100))
    skip = asyncio.Event()
    shutdown = asyncio.ensure_future(m.shutdown(ShutdownPolicy(drain_timeout=30), skip_drain=skip))
    await SimClock().sleep(3)
    skip.set()
    report = await shutdown
    assert report.drain_skipped and report.drain_seconds == pytest.approx(3.0)
    assert report.outcome is ShutdownOutcome.CANCELLED


async def test_cancel_all_reaches_only_the_sessions_registered_at_that_moment() -> None:
    m = manager()
    first = Fake(seconds=100)
    admit(m).spawn(first)
    assert m.cancel_all() == ["session-1"]
    later = Fake(seconds=1)
    admit(m).spawn(later)
    await SimClock().sleep(2)
    assert first.saw_cancel and not later.saw_cancel
    await m.shutdown(ShutdownPolicy())


async def test_a_slot_spawns_once() -> None:
    m = manager()
    slot = admit(m)
    slot.spawn(Fake(seconds=0))
    with pytest.raises(RuntimeError):
        slot.spawn(Fake())
    slot.release()  # no-op after spawn
    assert m.reserved == 0
    await m.shutdown(ShutdownPolicy())


def test_bad_limits_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_sessions"):
        SessionManager(fake_runner, max_sessions=0, clock=SimClock())
    with pytest.raises(ConfigError, match="drain_timeout"):
        ShutdownPolicy(drain_timeout=-1)


async def test_on_cancel_runs_when_the_cancel_stage_begins_and_not_after_a_clean_drain() -> None:
    calls: list[int] = []
    m = manager()
    admit(m).spawn(Fake(seconds=100))
    report = await m.shutdown(ShutdownPolicy(drain_timeout=1), on_cancel=lambda: calls.append(m.active))
    assert report.outcome is ShutdownOutcome.CANCELLED and calls == [1]
    drained = manager()
    admit(drained).spawn(Fake(seconds=0.5))
    await drained.shutdown(ShutdownPolicy(drain_timeout=1), on_cancel=lambda: calls.append(-1))
    assert calls == [1]


async def test_a_held_slot_keeps_its_place_after_its_session_failed_until_its_connection_is_released() -> None:
    ended: list[SessionEnded] = []
    m = manager(max_sessions=1, ended=ended)
    slot = admit(m)
    slot.spawn(Fake(seconds=1, raise_=BrisvoxError("provider unreachable")), hold=True)
    await SimClock().sleep(2)
    assert [e.outcome for e in ended] == [SessionOutcome.ERROR]  # counted when the session ended
    assert (m.active, m.ready) == (1, False)  # its socket is still open: the place is taken
    assert isinstance(m.try_admit(), AtCapacity)
    slot.release()
    assert (m.active, m.ready) == (0, True)
    report = await m.shutdown(ShutdownPolicy(drain_timeout=1))
    assert report.outcome is ShutdownOutcome.DRAINED


async def test_a_held_session_still_running_after_its_connection_closed_keeps_its_place_until_it_ends() -> None:
    m = manager(max_sessions=1)
    slot = admit(m)
    slot.spawn(Fake(seconds=3), hold=True)
    slot.release()  # the socket closed first
    assert m.active == 1
    await SimClock().sleep(4)
    assert m.active == 0
    await m.shutdown(ShutdownPolicy())

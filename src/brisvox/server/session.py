"""The session manager: bounded admission, one task per session, and a staged shutdown.

The manager is generic over what a session runs on (a call link, a test double) and
over *how* it runs: a **session runner** is any async callable
``runner(item, cancel) -> object``.  ``cancel`` is the session's
:class:`SessionCancel`, a cooperative stop request set only by the shutdown; a runner
that sees it should say goodbye and return.

Admission never queues.  :meth:`SessionManager.try_admit` returns a
:class:`SessionSlot` (a reservation that counts against ``max_sessions``) or a typed
refusal, :class:`AtCapacity` or :class:`ShuttingDown`.  A slot reserved before the
drain began is honoured: :meth:`SessionSlot.spawn` cannot fail, and the shutdown waits
for outstanding reservations as it waits for sessions.

**A slot is a socket.**  A slot spawned with ``hold=True`` keeps its place (and its
registry entry, so it counts in ``active``) after its session ended, until the owner of
the connection calls :meth:`SessionSlot.release` (the socket closed); a session still
running after its socket closed keeps it too.  So a call whose session failed while its
socket stays open still counts against ``max_sessions``, and ``active`` counts every call
socket that carries a started call.

Each session runs in one task owned by the manager's :class:`~brisvox.core.tasks.TaskScope`.
Its result is classified (:class:`SessionOutcome`): a normal return is ``OK``, a
:class:`~brisvox.core.errors.BrisvoxError` is ``ERROR`` (an expected failure, such as a
provider that went away), any other exception is ``CRASHED`` (a bug; counted, logged with
its traceback, and it ends that session only; a ``BrisvoxError`` with ``crashed`` true,
the engine's ``CallFailed`` of a bug it already logged with its traceback, is ``CRASHED``
too, logged in one line), a return after the cooperative stop is
``CANCELLED`` and a hard task cancellation is ``ABORTED``.  The registry entry is removed
in a ``finally`` owned by the task, so every exit path removes it.

:meth:`SessionManager.shutdown` runs three stages, each timed on the injected clock:
drain (refuse new sessions, wait for the live ones to end), cancel (set every session's
stop request, wait), abort (cancel the tasks, wait).  What is still alive after that
has leaked.  The :class:`ShutdownReport` says which stage ended it and names the
leftovers of each stage.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from brisvox.core.clock import Clock, deadline_at
from brisvox.core.errors import BrisvoxError, ConfigError, DeadlineExceeded
from brisvox.core.tasks import TaskScope

__all__ = [
    "AtCapacity",
    "Refusal",
    "SessionCancel",
    "SessionEnded",
    "SessionInfo",
    "SessionManager",
    "SessionOutcome",
    "SessionRunner",
    "SessionSlot",
    "SessionStats",
    "ShutdownOutcome",
    "ShutdownPolicy",
    "ShutdownReport",
    "ShuttingDown",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

SessionCancel = asyncio.Event
"""A session's cooperative stop request (set by the shutdown's cancel stage; never cleared)."""

SessionRunner = Callable[[T, SessionCancel], Awaitable[object]]
"""``runner(item, cancel)``: runs one session until it ends."""


# --- admission -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AtCapacity:
    """Refused: ``active`` running plus ``reserved`` slots already use all ``max_sessions``."""

    active: int
    reserved: int
    max_sessions: int

    @property
    def reason(self) -> str:
        return "at_capacity"


@dataclass(frozen=True, slots=True)
class ShuttingDown:
    """Refused: the manager is draining or shut down."""

    @property
    def reason(self) -> str:
        return "shutting_down"


Refusal = AtCapacity | ShuttingDown


class SessionOutcome(enum.Enum):
    OK = "ok"
    ERROR = "error"
    CRASHED = "crashed"
    CANCELLED = "cancelled"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A registry entry: one live session."""

    id: str
    name: str
    started_at: float


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """How one session ended; ``error`` is the exception's text for ERROR and CRASHED."""

    info: SessionInfo
    outcome: SessionOutcome
    ended_at: float
    error: str | None = None

    @property
    def duration(self) -> float:
        return self.ended_at - self.info.started_at


@dataclass(slots=True)
class SessionStats:
    """Counters over the manager's life."""

    admitted: int = 0
    refused_at_capacity: int = 0
    refused_shutting_down: int = 0
    released_unused: int = 0
    ended: dict[SessionOutcome, int] = field(default_factory=lambda: dict.fromkeys(SessionOutcome, 0))

    @property
    def crashed(self) -> int:
        return self.ended[SessionOutcome.CRASHED]


class SessionSlot(Generic[T]):
    """A reserved place for one session: :meth:`spawn` it (cannot fail) or :meth:`release` it."""

    __slots__ = ("_held", "_manager", "_used")

    def __init__(self, manager: SessionManager[T]) -> None:
        self._manager = manager
        self._used = False
        self._held: str | None = None  # the id of a session spawned with hold, until release

    def spawn(self, item: T, *, name: str = "session", hold: bool = False) -> SessionInfo:
        """Start the session on ``item``.  Honoured even when a drain has begun since the reservation.
        ``hold``: the place stays taken after the session ended, until :meth:`release`."""
        if self._used:
            raise RuntimeError("a session slot can be used once")
        self._used = True
        info = self._manager._spawn(item, name, hold)
        if hold:
            self._held = info.id
        return info

    def release(self) -> None:
        """Give the place back: unused (before spawn), or the connection of a held session closed
        (the entry goes once its session has ended too).  Idempotent; a no-op after a spawn
        without ``hold``."""
        if not self._used:
            self._used = True
            self._manager._release_unused()
        elif self._held is not None:
            held, self._held = self._held, None
            self._manager._release_held(held)

    @property
    def used(self) -> bool:
        return self._used


# --- shutdown ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShutdownPolicy:
    """Bounds (seconds) of the three shutdown stages."""

    drain_timeout: float = 30.0
    cancel_timeout: float = 5.0
    abort_timeout: float = 2.0

    def __post_init__(self) -> None:
        for name in ("drain_timeout", "cancel_timeout", "abort_timeout"):
            value = getattr(self, name)
            if not value >= 0:
                raise ConfigError(f"ShutdownPolicy.{name} must be >= 0 s, got {value!r}")


class ShutdownOutcome(enum.Enum):
    """Which stage ended the shutdown; ``exit_code`` is the server process's exit status."""

    DRAINED = "drained"
    CANCELLED = "cancelled"
    ABORTED = "aborted"
    LEAKED = "leaked"

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]


_EXIT_CODES = {
    ShutdownOutcome.DRAINED: 0,
    ShutdownOutcome.CANCELLED: 3,
    ShutdownOutcome.ABORTED: 4,
    ShutdownOutcome.LEAKED: 5,
}


@dataclass(frozen=True, slots=True)
class ShutdownReport:
    """The result of :meth:`SessionManager.shutdown`.

    ``cancelled`` names the sessions still alive when the drain ended, ``aborted`` those
    still alive when the cancel stage ended, ``leaked`` those alive after the abort, and
    ``reservations_left`` the slots never spawned nor released.  Durations are seconds on
    the manager's clock; a stage that did not run took 0.
    """

    outcome: ShutdownOutcome
    drain_seconds: float
    cancel_seconds: float
    abort_seconds: float
    drain_skipped: bool
    cancelled: tuple[str, ...] = ()
    aborted: tuple[str, ...] = ()
    leaked: tuple[str, ...] = ()
    reservations_left: int = 0

    @property
    def exit_code(self) -> int:
        return self.outcome.exit_code


# --- the manager ---------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Live:
    info: SessionInfo
    cancel: SessionCancel
    task: asyncio.Task[None] | None = None
    held: bool = False  # its connection is still open (spawned with hold, not yet released)
    running: bool = True


class SessionManager(Generic[T]):
    """Admits, runs and shuts down sessions (see the module docs).

    ``on_end`` is called (synchronously, never raising into the manager) with every
    :class:`SessionEnded`, after the registry entry is gone; metrics hang off it.
    """

    def __init__(
        self,
        runner: SessionRunner[T],
        *,
        max_sessions: int,
        clock: Clock,
        name: str = "sessions",
        on_end: Callable[[SessionEnded], None] | None = None,
    ) -> None:
        if max_sessions < 1:
            raise ConfigError(f"SessionManager: max_sessions must be at least 1, got {max_sessions!r}")
        self._runner = runner
        self._max = max_sessions
        self._clock = clock
        self._name = name
        self._on_end = on_end
        self._scope = TaskScope(name)
        self._live: dict[str, _Live] = {}
        self._reserved = 0
        self._draining = False
        self._stopping = False  # the manager-wide stop request: later sessions start with theirs set
        self._changed: asyncio.Event | None = None
        self._ids = itertools.count(1)
        self.stats = SessionStats()

    # --- views --------------------------------------------------------------------------

    @property
    def max_sessions(self) -> int:
        return self._max

    @property
    def active(self) -> int:
        return len(self._live)

    @property
    def reserved(self) -> int:
        return self._reserved

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def ready(self) -> bool:
        """True when a ``try_admit`` now would succeed."""
        return not self._draining and self.active + self._reserved < self._max

    def sessions(self) -> list[SessionInfo]:
        """The registry: every live session, oldest first."""
        return [live.info for live in self._live.values()]

    # --- admission ----------------------------------------------------------------------

    def try_admit(self) -> SessionSlot[T] | Refusal:
        """Reserve a slot, or say why not.  Nothing queues."""
        if self._draining:
            self.stats.refused_shutting_down += 1
            return ShuttingDown()
        if self.active + self._reserved >= self._max:
            self.stats.refused_at_capacity += 1
            return AtCapacity(self.active, self._reserved, self._max)
        self._reserved += 1
        self.stats.admitted += 1
        return SessionSlot(self)

    def begin_drain(self) -> None:
        """Refuse every later ``try_admit`` with ShuttingDown (idempotent)."""
        if not self._draining:
            self._draining = True
            log.info("%s: draining (%d active, %d reserved)", self._name, self.active, self._reserved)
            self._notify()

    def cancel_all(self) -> list[str]:
        """Set the stop request of every session registered now (later ones are not affected)."""
        ids = list(self._live)
        for live in self._live.values():
            live.cancel.set()
        return ids

    def _spawn(self, item: T, name: str, hold: bool) -> SessionInfo:
        self._reserved -= 1
        info = SessionInfo(id=f"{name}-{next(self._ids)}", name=name, started_at=self._clock.now())
        cancel = SessionCancel()
        if self._stopping:
            cancel.set()
        live = _Live(info, cancel, held=hold)
        self._live[info.id] = live
        live.task = self._scope.spawn(self._run(item, live), name=info.id)
        self._notify()
        return info

    def _release_unused(self) -> None:
        self._reserved -= 1
        self.stats.released_unused += 1
        self._notify()

    def _release_held(self, session_id: str) -> None:
        live = self._live.get(session_id)
        if live is None:
            return
        live.held = False
        if not live.running:
            del self._live[session_id]
            self._notify()

    async def _run(self, item: T, live: _Live) -> None:
        outcome = SessionOutcome.OK
        error: str | None = None
        try:
            await self._runner(item, live.cancel)
            if live.cancel.is_set():
                outcome = SessionOutcome.CANCELLED
        except asyncio.CancelledError:
            outcome = SessionOutcome.ABORTED
            raise
        except BrisvoxError as exc:
            # A brisvox error that reports a bug it already logged (the engine's CallFailed) is a crash.
            outcome = SessionOutcome.CRASHED if getattr(exc, "crashed", False) is True else SessionOutcome.ERROR
            error = f"{type(exc).__name__}: {exc}"
            log.warning("%s: session %s ended with an error: %s", self._name, live.info.id, error)
        except Exception as exc:
            outcome = SessionOutcome.CRASHED
            error = f"{type(exc).__name__}: {exc}"
            log.error("%s: session %s crashed", self._name, live.info.id, exc_info=True)
        finally:
            live.running = False
            if not live.held:
                self._live.pop(live.info.id, None)
            self.stats.ended[outcome] += 1
            self._notify()
            ended = SessionEnded(live.info, outcome, self._clock.now(), error)
            if self._on_end is not None:
                try:
                    self._on_end(ended)
                except Exception:
                    log.exception("%s: on_end hook failed", self._name)

    # --- waiting ------------------------------------------------------------------------

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _idle(self) -> bool:
        return not self._live and self._reserved == 0

    async def _wait_idle(self, deadline: float, skip: asyncio.Event | None = None) -> bool:
        """Wait until nothing is live or reserved, ``deadline`` passes or ``skip`` is set."""
        while not self._idle():
            if self._clock.now() >= deadline or (skip is not None and skip.is_set()):
                return False
            self._changed = asyncio.Event()
            waits: list[asyncio.Task[object]] = [asyncio.ensure_future(self._changed.wait())]
            if skip is not None:
                waits.append(asyncio.ensure_future(skip.wait()))
            try:
                async with deadline_at(self._clock, deadline, "sessions to end"):
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            except DeadlineExceeded:
                return self._idle()  # idle at the deadline still counts as idle
            finally:
                for w in waits:
                    w.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
                self._changed = None
        return True

    async def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for every session and reservation to end; True if they did."""
        return await self._wait_idle(self._clock.now() + timeout)

    # --- shutdown -----------------------------------------------------------------------

    async def shutdown(
        self,
        policy: ShutdownPolicy,
        *,
        skip_drain: asyncio.Event | None = None,
        on_cancel: Callable[[], None] | None = None,
    ) -> ShutdownReport:
        """Drain, then cancel, then abort (see the module docs).  ``skip_drain`` set ends the
        drain stage early (a second stop signal); ``on_cancel`` is called as the cancel stage
        begins (a transport's goodbye to the calls left)."""
        clock = self._clock
        self.begin_drain()
        t0 = clock.now()
        drained = await self._wait_idle(t0 + policy.drain_timeout, skip_drain)
        t1 = clock.now()
        skipped = skip_drain is not None and skip_drain.is_set() and not drained
        if drained:
            return await self._finish(ShutdownOutcome.DRAINED, t1 - t0, 0.0, 0.0, skipped)
        cancelled = tuple(self._live)
        log.info("%s: drain ended with %d session(s) left; cancelling them", self._name, len(cancelled))
        self._stopping = True
        if on_cancel is not None:
            on_cancel()
        self.cancel_all()
        done = await self._wait_idle(t1 + policy.cancel_timeout)
        t2 = clock.now()
        if done:
            return await self._finish(ShutdownOutcome.CANCELLED, t1 - t0, t2 - t1, 0.0, skipped, cancelled)
        aborted = tuple(self._live)
        log.warning("%s: %d session(s) ignored the stop request; aborting them", self._name, len(aborted))
        for live in list(self._live.values()):
            if live.task is not None:
                live.task.cancel()
        done = await self._wait_idle(t2 + policy.abort_timeout)
        t3 = clock.now()
        if done:
            return await self._finish(
                ShutdownOutcome.ABORTED, t1 - t0, t2 - t1, t3 - t2, skipped, cancelled, aborted
            )
        leaked = tuple(self._live)
        log.error("%s: %d session(s) and %d reservation(s) leaked: %s",
                  self._name, len(leaked), self._reserved, ", ".join(leaked))
        return ShutdownReport(
            ShutdownOutcome.LEAKED, t1 - t0, t2 - t1, t3 - t2, skipped, cancelled, aborted, leaked, self._reserved
        )

    async def _finish(
        self,
        outcome: ShutdownOutcome,
        drain: float,
        cancel: float,
        abort: float,
        skipped: bool,
        cancelled: tuple[str, ...] = (),
        aborted: tuple[str, ...] = (),
    ) -> ShutdownReport:
        # Every session task has finished; closing the scope reaps them.
        self._stopping = True
        await self._scope.aclose()
        log.info("%s: shutdown %s (drain %.3f s, cancel %.3f s, abort %.3f s)",
                 self._name, outcome.value, drain, cancel, abort)
        return ShutdownReport(outcome, drain, cancel, abort, skipped, cancelled, aborted)

    def __repr__(self) -> str:
        return (f"SessionManager({self._name!r}, active={self.active}, reserved={self._reserved}, "
                f"max={self._max}, draining={self._draining})")

"""Where each call lives: the process's calls, and with Redis every node's.

A control request for a call (``POST /api/calls/{call_id}/hangup``) can arrive at any node of a
deployment behind a load balancer, but the call is a WebSocket held by one process.  The
:class:`CallDirectory` of each server process knows its own calls (the engine registers a
call when it starts and removes it when it ends) and acts on them; with
``BRISVOX_REDIS_URL`` it also shares them (:class:`RedisLink`):

* ``brisvox:call:<call id>`` names the process that holds the call (its *owner id*:
  ``BRISVOX_NODE_ID``, or the host name, plus the worker index), refreshed every
  :data:`HEARTBEAT` and expiring after :data:`TTL` when the process is gone;
* ``brisvox:load:<owner id>`` holds the process's active calls (same refresh and expiry);
  their sum is the deployment's, which ``BRISVOX_GLOBAL_MAX_CALLS`` caps at admission;
* a request for a call held elsewhere is published on ``brisvox:control:<owner id>``, which
  the owner subscribes to, and acted on there.

Redis is only for what must cross processes: a single node needs none.  When Redis cannot be
reached the process serves on: its own calls are controlled as before, a request for a call
elsewhere is answered 503, the global cap is not enforced (fail open, logged and counted
in ``brisvox_directory_errors_total``); every Redis call is bounded by :data:`REDIS_TIMEOUT`.
The global cap is as fresh as the last heartbeat: in one heartbeat the deployment can admit
up to one extra call per process (docs/SCALING.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import socket
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import BrisvoxError, DeadlineExceeded
from brisvox.core.ratelog import RateLimitedLog
from brisvox.core.tasks import TaskScope

__all__ = ["HEARTBEAT", "REDIS_TIMEOUT", "TTL", "CallDirectory", "Control", "ControlOutcome", "DirectoryError",
           "RedisLink", "owner_id"]

log = logging.getLogger(__name__)

HEARTBEAT = 1.0
"""Seconds between a process's refreshes of its calls and load in Redis."""
TTL = 5
"""Seconds after which a silent process's entries expire."""
REDIS_TIMEOUT = 2.0
"""Seconds any one Redis request may take."""
_MAX_CONTROL_BYTES = 1024


class DirectoryError(BrisvoxError):
    """Redis could not be reached or answered something unreadable."""


class Control(enum.Enum):
    """What a control request asks of a call."""

    HANGUP = "hangup"


class ControlOutcome(enum.Enum):
    """Where a control request went."""

    DONE = "done"  # the call is this process's: acted on
    FORWARDED = "forwarded"  # published to the process that holds it
    UNKNOWN = "unknown"  # no process holds a call by that id
    UNREACHABLE = "unreachable"  # not here, and the registry cannot be asked


def owner_id(node: str | None, worker: int | None) -> str:
    """This process's id in the registry: the node's (``BRISVOX_NODE_ID`` or the host name), plus the worker."""
    base = node or socket.gethostname()
    return base if worker is None else f"{base}/{worker}"


@dataclass(frozen=True, slots=True)
class _Entry:
    control: Callable[[Control], None]


class CallDirectory:
    """This process's calls by id, and (with a :class:`RedisLink`) every process's."""

    def __init__(self, owner: str, global_max_calls: int | None = None,
                 on_error: Callable[[], None] | None = None) -> None:
        self.owner = owner
        self.global_max_calls = global_max_calls
        self._calls: dict[str, _Entry] = {}
        self.link: RedisLink | None = None
        self.errors = 0
        self._on_error = on_error

    def failed(self) -> None:
        """A request to Redis failed (logged by the caller): counted, and told to ``on_error`` (a metric)."""
        self.errors += 1
        if self._on_error is not None:
            self._on_error()

    # --- this process's calls -------------------------------------------------------------

    def add(self, call_id: str, control: Callable[[Control], None]) -> None:
        """A call started here; ``control`` applies a control request to it (it must not block)."""
        self._calls[call_id] = _Entry(control)
        if self.link is not None:
            self.link.changed()

    def remove(self, call_id: str) -> None:
        self._calls.pop(call_id, None)
        if self.link is not None:
            self.link.forget(call_id)

    @property
    def calls(self) -> list[str]:
        return list(self._calls)

    def apply(self, call_id: str, control: Control) -> bool:
        """Act on a call of this process; False when it holds none by that id."""
        entry = self._calls.get(call_id)
        if entry is None:
            return False
        log.info("call %s: %s requested", call_id, control.value)
        entry.control(control)
        return True

    # --- any process's calls --------------------------------------------------------------

    async def control(self, call_id: str, control: Control) -> tuple[ControlOutcome, str | None]:
        """Act on ``call_id`` wherever it lives; returns the outcome and the owner's id."""
        if self.apply(call_id, control):
            return ControlOutcome.DONE, self.owner
        if self.link is None:
            return ControlOutcome.UNKNOWN, None
        try:
            owner = await self.link.forward(call_id, control)
        except DirectoryError as exc:
            self.failed()
            log.warning("call %s: the call registry is unreachable: %s", call_id, exc)
            return ControlOutcome.UNREACHABLE, None
        return (ControlOutcome.FORWARDED, owner) if owner is not None else (ControlOutcome.UNKNOWN, None)

    def over_global_cap(self) -> bool:
        """The deployment holds ``global_max_calls`` calls (as of the last heartbeat) besides this process's."""
        if self.global_max_calls is None or self.link is None:
            return False
        return self.link.others_load + len(self._calls) >= self.global_max_calls


class RedisLink:
    """The process's link to Redis (see the module docs): an async context manager that runs the
    heartbeat and the control subscription in tasks it owns."""

    def __init__(self, directory: CallDirectory, url: str, clock: Clock) -> None:
        import redis.asyncio as redis

        self._directory = directory
        self._clock = clock
        self._redis = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT,
                                           decode_responses=True)
        self._stack = AsyncExitStack()
        self._scope: TaskScope | None = None
        self._forgotten: list[str] = []
        self._wake = asyncio.Event()
        self.others_load = 0
        self._errors = RateLimitedLog(log, "the call registry (Redis)", clock.now, interval=30.0)

    async def __aenter__(self) -> RedisLink:
        self._directory.link = self
        self._scope = scope = await self._stack.enter_async_context(TaskScope("call-registry"))
        scope.spawn(self._beat(), name="registry-heartbeat")
        scope.spawn(self._listen(), name="registry-control")
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._directory.link = None
        try:
            if self._scope is not None:
                self._scope.cancel()  # the heartbeat and the subscription run until the server stops
            await self._stack.aclose()
        finally:
            try:
                await self._call("drop the load entry", self._redis.delete(self._load_key(self._directory.owner)))
            except DirectoryError as exc:
                log.info("%s; the entry expires after %d s", exc, TTL)
            await self._redis.aclose()

    def changed(self) -> None:
        self._wake.set()  # a new call is published at once, not at the next beat

    def forget(self, call_id: str) -> None:
        self._forgotten.append(call_id)
        self._wake.set()

    async def forward(self, call_id: str, control: Control) -> str | None:
        """Publish ``control`` to the process holding ``call_id``; its owner id, or None when none does."""
        owner = await self._call("look up a call", self._redis.get(self._call_key(call_id)))
        if owner is None:
            return None
        message = json.dumps({"call": call_id, "control": control.value})
        receivers = await self._call("publish a control request",
                                     self._redis.publish(self._control_channel(str(owner)), message))
        if not receivers:
            return None  # its owner is gone; the entry has not expired yet
        return str(owner)

    # --- tasks ------------------------------------------------------------------------------

    async def _beat(self) -> None:
        owner = self._directory.owner
        while True:
            try:
                await self._publish(owner)
            except DirectoryError as exc:
                self._directory.failed()
                self._errors.note("unreachable (serving on without it)", str(exc))
            self._wake.clear()
            with contextlib.suppress(DeadlineExceeded):  # the deadline is the beat; a call added wakes it sooner
                await bounded(self._clock, HEARTBEAT, self._wake.wait(), "registry heartbeat")

    async def _publish(self, owner: str) -> None:
        forgotten, self._forgotten = self._forgotten, []
        pipe = self._redis.pipeline(transaction=False)
        for call_id in self._directory.calls:
            pipe.set(self._call_key(call_id), owner, ex=TTL)
        for call_id in forgotten:
            pipe.delete(self._call_key(call_id))
        pipe.set(self._load_key(owner), len(self._directory.calls), ex=TTL)
        await self._call("refresh this process's calls", pipe.execute())
        keys = [k async for k in self._redis.scan_iter(match=self._load_key("*"), count=1000)]
        others = [k for k in keys if k != self._load_key(owner)]
        loads = await self._call("read the other processes' loads", self._redis.mget(others)) if others else []
        self.others_load = sum(int(v) for v in loads if v is not None and str(v).isdigit())

    async def _listen(self) -> None:
        channel = self._control_channel(self._directory.owner)
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await self._call("subscribe to control requests", pubsub.subscribe(channel))
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=HEARTBEAT)
                        if message is not None:
                            self._apply(message.get("data"))
            except Exception as exc:
                if not (isinstance(exc, DirectoryError | OSError) or _redis_error(exc)):
                    raise
                self._directory.failed()
                self._errors.note("control requests from other processes not received (retrying)", str(exc))
                await self._clock.sleep(HEARTBEAT)

    def _apply(self, data: Any) -> None:
        if not isinstance(data, str) or len(data) > _MAX_CONTROL_BYTES:
            log.warning("an unreadable control request from the registry was ignored (%s)", type(data).__name__)
            return
        try:
            request = json.loads(data)
            call_id, control = str(request["call"]), Control(request["control"])
        except (ValueError, KeyError, TypeError):
            log.warning("an unreadable control request from the registry was ignored")
            return
        if not self._directory.apply(call_id, control):
            log.info("call %s: a forwarded %s found the call ended", call_id, control.value)

    async def _call(self, what: str, request: Any) -> Any:
        try:
            return await bounded(self._clock, REDIS_TIMEOUT, request, f"Redis: {what}")
        except DeadlineExceeded as exc:
            raise DirectoryError(f"{what}: no answer within {REDIS_TIMEOUT:.0f} s") from exc
        except Exception as exc:
            if _redis_error(exc) or isinstance(exc, OSError):
                raise DirectoryError(f"{what}: {exc}") from exc
            raise

    @staticmethod
    def _call_key(call_id: str) -> str:
        return f"brisvox:call:{call_id}"

    @staticmethod
    def _load_key(owner: str) -> str:
        return f"brisvox:load:{owner}"

    @staticmethod
    def _control_channel(owner: str) -> str:
        return f"brisvox:control:{owner}"


def _redis_error(exc: BaseException) -> bool:
    from redis.exceptions import RedisError

    return isinstance(exc, RedisError)

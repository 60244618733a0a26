"""A call's phone line: what the built-in telephony tools act through.

:class:`PhoneLine` sits between the tools (``end_call``, ``transfer_call``, ``send_dtmf``,
:mod:`brisvox.server.phone_tools`) and the carrier's call control (:class:`CallControl`:
Twilio's or Telnyx's REST API, :mod:`brisvox.server.carriers`, or none on the generic
WebSocket).  Each tool's context carries the line (``ToolCallContext.line``).

Ending a call is never done by the tool itself: ``end_call`` only *requests* the end for its
turn (:meth:`PhoneLine.request_end`).  The runner takes the request when the turn's audio
has been released (``LlmRunner.response_played``, told by TransportOut) and ``run_call``
then registers a mark behind it and waits for the client's echo (the proof the farewell
played) before it calls :meth:`PhoneLine.hang_up` (the carrier's REST hang-up, once) and
ends the call.  A barge-in drops a pending request (:meth:`PhoneLine.drop_end`), so the
end of a discarded generation never reaches the carrier; so does a clear that cut the
farewell's mark.

``transfer_call`` waits the same way for the words before it: its turn's speech so far is
handed to the transport, a mark goes behind it, and only its echo lets the transfer reach
the carrier (:attr:`PhoneLine.before_transfer`, set by ``run_call``); a barge-in or a clear
that cut the mark calls the transfer off.

Every carrier request is bounded by ``timeout`` seconds on the injected clock.  A failure
or a timeout is logged once with its traceback, counted in :class:`PhoneStats` and raised
as :class:`CarrierError` to the tool (the model reads it and apologizes); a failed hang-up
is logged and counted and the call still ends (the stream closes).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from brisvox.audio.dtmf import dtmf_pcm, parse_digits
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import BrisvoxError, ChannelClosed, DeadlineExceeded
from brisvox.transport.events import Mark, MarkCleared, MarkPlayed
from brisvox.transport.session import CommandSender

__all__ = [
    "CARRIER_TIMEOUT",
    "END_ECHO_TIMEOUT",
    "CallControl",
    "Carrier",
    "CarrierError",
    "DtmfRoute",
    "MarkWaits",
    "PhoneLine",
    "PhonePlan",
    "PhoneStats",
    "TransferCalledOff",
    "end_after_echo",
    "mark_played",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

CARRIER_TIMEOUT: Final = 5.0
"""Seconds a carrier REST request may take (injected clock) before it counts as failed."""
END_ECHO_TIMEOUT: Final = 5.0
"""Seconds ``run_call`` waits for the echo of the mark behind the farewell before it ends the
call anyway (a client that echoes no marks); logged when it runs out."""


class Carrier(enum.Enum):
    """Who controls the call: the carrier whose REST API the tools use, or none (in band)."""

    TWILIO = "twilio"
    TELNYX = "telnyx"
    NONE = "none"


class DtmfRoute(enum.Enum):
    """How ``send_dtmf`` sent its keys."""

    CARRIER = "carrier"  # the carrier's DTMF command (Telnyx)
    IN_BAND = "in_band"  # tones in the bot's audio (Twilio, the generic WebSocket)


class CarrierError(BrisvoxError):
    """A carrier request failed or timed out; the message names the action and why (never a credential)."""


class TransferCalledOff(BrisvoxError):
    """A barge-in cut the words before a transfer: it never reached the carrier."""


class CallControl(Protocol):
    """One call's control at its carrier (``carrier`` NONE: no REST API; ending the stream ends the call)."""

    @property
    def carrier(self) -> Carrier: ...

    async def hang_up(self) -> None: ...

    async def transfer(self, to: str) -> None: ...

    async def send_dtmf(self, keys: str) -> bool:
        """Send ``keys`` through the carrier; False when it has no DTMF command (they go in band)."""
        ...


@dataclass(frozen=True, slots=True)
class PhonePlan:
    """What ``run_call`` builds a call's :class:`PhoneLine` from (the server's per-call choice)."""

    control: CallControl
    timeout: float = CARRIER_TIMEOUT
    transfer_to: tuple[str, ...] = ()
    on_failure: Callable[[str], None] | None = None


@dataclass(slots=True)
class PhoneStats:
    ends_requested: int = 0
    ends_dropped: int = 0  # a barge-in or a clear called the end off
    hangups: int = 0  # carrier hang-ups sent and answered
    transfers: int = 0
    transfers_called_off: int = 0  # a barge-in cut the words before them
    dtmf_carrier: int = 0
    dtmf_in_band: int = 0
    carrier_failures: int = 0  # requests that failed (a timeout included)
    carrier_timeouts: int = 0


class PhoneLine:
    """One call's line (see the module docs).  ``play`` plays PCM16 at ``out_rate`` into the
    call in ``epoch`` (in-band DTMF); ``transfer_to``: the only destinations ``transfer_call``
    may use (empty: any); ``on_failure`` is told every failed carrier request (a metric)."""

    def __init__(self, control: CallControl, clock: Clock, *, out_rate: int,
                 play: Callable[[int, bytes], Awaitable[None]],
                 timeout: float = CARRIER_TIMEOUT, transfer_to: tuple[str, ...] = (),
                 on_failure: Callable[[str], None] | None = None) -> None:
        self.control = control
        self.transfer_to = transfer_to
        self.clock = clock
        self.out_rate = out_rate
        self.timeout = timeout
        self.stats = PhoneStats()
        self._play = play
        self._on_failure = on_failure
        self._end_epoch: int | None = None
        # Set by run_call: waits until ``epoch``'s speech so far has played; False: a barge-in cut it.
        self.before_transfer: Callable[[int], Awaitable[bool]] | None = None

    @property
    def carrier(self) -> Carrier:
        return self.control.carrier

    # --- the end of the call (end_call -> runner -> run_call) ---------------------------------

    def request_end(self, epoch: int) -> None:
        """End the call once ``epoch``'s reply has played (``end_call``; the latest request wins)."""
        self._end_epoch = epoch
        self.stats.ends_requested += 1

    def drop_end(self, why: str) -> bool:
        """Call a pending end off (a barge-in; the farewell was cut); whether one was pending."""
        if self._end_epoch is None:
            return False
        log.info("end_call of turn %d called off: %s", self._end_epoch, why)
        self._end_epoch = None
        self.stats.ends_dropped += 1
        return True

    def take_end(self, epoch: int) -> bool:
        """True once, when ``epoch``'s audio has been released and that epoch asked for the end."""
        if self._end_epoch is None or self._end_epoch != epoch:
            return False
        self._end_epoch = None
        return True

    @property
    def end_pending(self) -> bool:
        return self._end_epoch is not None

    async def hang_up(self) -> None:
        """The carrier's hang-up (nothing on the generic WebSocket); a failure is logged and counted, not raised."""
        if self.carrier is Carrier.NONE:
            return
        try:
            await self._request("hang-up", self.control.hang_up())
        except CarrierError:
            return  # logged and counted; the stream still closes, which ends a <Connect><Stream> call
        self.stats.hangups += 1

    # --- tools --------------------------------------------------------------------------------

    async def transfer(self, to: str, epoch: int | None = None) -> None:
        """Transfer the call to ``to`` (raises :class:`CarrierError`, also without a carrier),
        once ``epoch``'s speech before it has played (:attr:`before_transfer`; raises
        :class:`TransferCalledOff` when a barge-in cut it)."""
        if self.carrier is Carrier.NONE:
            raise CarrierError("this call has no phone carrier, so it cannot be transferred")
        if self.transfer_to and to not in self.transfer_to:
            raise CarrierError(f"{to} is not a destination this agent may transfer to")
        if epoch is not None and self.before_transfer is not None and not await self.before_transfer(epoch):
            self.stats.transfers_called_off += 1
            raise TransferCalledOff("the caller spoke before the words before the transfer had played")
        await self._request("transfer", self.control.transfer(to))
        self.stats.transfers += 1

    async def send_dtmf(self, keys: str, epoch: int) -> DtmfRoute:
        """Send DTMF ``keys``: the carrier's command where it has one, else tones in ``epoch``'s audio."""
        parsed = parse_digits(keys)
        if self.carrier is not Carrier.NONE and await self._request("send_dtmf", self.control.send_dtmf(parsed)):
            self.stats.dtmf_carrier += 1
            return DtmfRoute.CARRIER
        await self._play(epoch, dtmf_pcm(parsed, self.out_rate))
        self.stats.dtmf_in_band += 1
        return DtmfRoute.IN_BAND

    async def _request(self, action: str, request: Awaitable[T]) -> T:
        what = f"{self.carrier.value} {action}"
        try:
            return await bounded(self.clock, self.timeout, request, what)
        except DeadlineExceeded as exc:
            self.stats.carrier_timeouts += 1
            failure = CarrierError(f"{what}: no answer within {self.timeout:g} s")
            cause: BaseException = exc
        except CarrierError as exc:
            failure, cause = CarrierError(f"{what}: {exc}"), exc
        except Exception as exc:  # the HTTP client's own errors (connection refused, TLS, ...)
            failure = CarrierError(f"{what} failed ({type(exc).__name__})")
            cause = exc
        self.stats.carrier_failures += 1
        log.error("carrier request failed: %s", failure, exc_info=cause)
        if self._on_failure is not None:
            self._on_failure(action)
        raise failure from cause


class MarkWaits:
    """Marks the engine itself waits for: ``run_call``'s event pump resolves them from the
    transport's ``MarkPlayed`` / ``MarkCleared`` (every mark ends in exactly one of the two)."""

    def __init__(self) -> None:
        self._waits: dict[str, asyncio.Future[bool]] = {}
        self._ids = itertools.count(1)

    def new(self) -> tuple[str, asyncio.Future[bool]]:
        """A fresh mark id and the future of its fate (True: played, False: cut by a clear)."""
        mark = f"end-{next(self._ids)}"
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waits[mark] = fut
        return mark, fut

    def forget(self, mark: str) -> None:
        """Stop waiting for ``mark`` (its wait timed out)."""
        self._waits.pop(mark, None)

    def resolve(self, event: MarkPlayed | MarkCleared) -> None:
        fut = self._waits.pop(event.id, None)
        if fut is not None and not fut.done():
            fut.set_result(isinstance(event, MarkPlayed))


async def mark_played(commands: CommandSender, marks: MarkWaits, clock: Clock, what: str,
                      timeout: float = END_ECHO_TIMEOUT) -> bool | None:
    """Send a mark behind the audio handed to the transport so far and wait for its fate: True
    once the client echoed it (``what`` has played; also after ``timeout``, logged, for a
    client that echoes no marks), False when a clear cut it, None when the transport is gone."""
    mark, fate = marks.new()
    try:
        await commands.send(Mark(mark))
    except ChannelClosed:
        return None
    try:
        return await bounded(clock, timeout, fate, f"the mark echo behind {what}")
    except DeadlineExceeded:
        marks.forget(mark)
        log.warning("no echo of the mark behind %s within %g s; going ahead", what, timeout)
        return True


async def end_after_echo(commands: CommandSender, marks: MarkWaits, clock: Clock, line: PhoneLine | None,
                         ended: asyncio.Event, timeout: float = END_ECHO_TIMEOUT) -> bool:
    """The one way the engine ends a call itself (``end_call``, a flow's ``EndCall``, an agent's
    farewell): a mark behind the audio released so far, its echo (the farewell played;
    ``timeout`` for a client that echoes none), the carrier's hang-up, then ``ended`` (the
    call's end Event, the one its pump waits on).  A clear that cuts the mark (the caller
    spoke over the farewell) calls the end off: False (True: the call was ended)."""
    played = await mark_played(commands, marks, clock, "the farewell", timeout)
    if played is None:
        ended.set()  # the transport is gone already: nothing is left to play
        return True
    if not played:
        if line is not None:
            line.stats.ends_dropped += 1
        log.info("the end of the call was called off: a clear cut the farewell before it played")
        return False
    if line is not None:
        await line.hang_up()
    ended.set()
    return True

"""An echo engine: plays every caller frame straight back (tests, benchmarks, demos).

``run_echo(clock, transport, scope)`` accepts calls until the transport shuts down and
serves each in its own task of ``scope``: caller audio is sent back as bot audio of the
current epoch, a DTMF ``*`` clears (a new epoch), ``#`` hangs up, and every echoed frame
whose seq is a multiple of ``mark_every`` (when set) is followed by a mark ``m<seq>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed
from brisvox.core.frames import OutputAudioFrame
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import CallerAudio, Clear, Dtmf, Mark, SendAudio, Stop, Stopped
from brisvox.transport.link import CallLink, Transport
from brisvox.transport.session import SessionConfig, TransportSession

__all__ = ["EchoOptions", "echo_call", "run_echo"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EchoOptions:
    mark_every: int = 0
    session: SessionConfig = field(default_factory=SessionConfig)


async def echo_call(clock: Clock, link: CallLink, options: EchoOptions | None = None) -> None:
    options = options or EchoOptions()
    session = await TransportSession.open(clock, link, options.session)
    epoch = 0
    try:
        while True:
            ev = await session.recv()
            if isinstance(ev, CallerAudio):
                f = ev.frame
                await session.send(SendAudio(OutputAudioFrame(epoch=epoch, pcm=f.pcm, sample_rate=f.sample_rate,
                                                              seq=f.seq)))
                if options.mark_every and f.seq % options.mark_every == 0:
                    await session.send(Mark(f"m{f.seq}"))
            elif isinstance(ev, Dtmf):
                if ev.digit == "*":
                    epoch += 1
                    await session.send(Clear(epoch))
                elif ev.digit == "#":
                    await session.send(Stop())
            elif isinstance(ev, Stopped):
                return
    except ChannelClosed:
        return
    finally:
        await session.close()


async def run_echo(clock: Clock, transport: Transport, scope: TaskScope,
                   options: EchoOptions | None = None) -> None:
    """Accept calls until the transport closes its accept queue."""
    n = 0
    while True:
        try:
            link = await transport.accept()
        except ChannelClosed:
            return
        n += 1
        scope.spawn(echo_call(clock, link, options), name=f"echo-{n}")

"""The transport conformance suite: the same behaviour through every transport.

Parametrized over :data:`~tests.transport.conformance._drivers.DRIVERS` (loopback,
WebSocket, Twilio, Telnyx, RTVI); caller audio is at the driver's ``rate``, bot audio at its
``out_rate`` (RTVI: 16 kHz in, 24 kHz out); every test runs on virtual time, and the test plugin fails a test
that leaves a task behind (the leak check).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brisvox.audio.g711 import ulaw_decode
from brisvox.core.clock import SimClock, bounded
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.core.frames import OutputAudioFrame
from brisvox.transport import (
    CallerAudio,
    Clear,
    Dtmf,
    Mark,
    MarkCleared,
    MarkPlayed,
    PlaybackPosition,
    SendAudio,
    Started,
    Stopped,
    StopReason,
    TransportEvent,
    TransportSession,
)
from tests._plugin import _run
from tests.transport.conformance._drivers import DRIVERS, Caller, Driver

# Sample values that survive mu-law unchanged, so a frame is recognized through every codec.
TAGS = sorted({struct.unpack("<h", ulaw_decode(bytes([code])))[0] for code in range(0x10, 0x70)})
FRAME = 0.02

pytestmark = pytest.mark.parametrize(
    "name", [pytest.param(name, marks=getattr(DRIVERS[name], "marks", ())) for name in sorted(DRIVERS)])


def lossy(driver: Driver) -> bool:
    """A lossy codec (WebRTC's Opus) changes sample values: frames are recognized by their tone."""
    return bool(getattr(driver, "lossy", False))


def tagged(rate: int, tag: int, lossy: bool = False) -> bytes:
    """20 ms of ``tag``: every sample equal to it, or (lossy) a tone of its own frequency (a
    multiple of 50 Hz: whole cycles in every 20 ms window, so each window's spectrum peaks on it)."""
    if not lossy:
        return struct.pack("<h", tag) * (rate // 50)
    t = np.arange(rate // 50) / rate
    return (np.sin(2 * np.pi * _tone(tag) * t) * 8000).astype("<i2").tobytes()


def _tone(tag: int) -> int:
    return 300 + 50 * (TAGS.index(tag) % 100)


def heard_tags(pcm: bytes, rate: int, lossy: bool) -> list[int]:
    """The run of tags in ``pcm``; lossy: each 20 ms window's tone, silent windows and one-window
    runs (a window across two tones) left out."""
    if not lossy:
        return tags_of(pcm)
    by_tone = {_tone(tag): tag for tag in TAGS}
    windows = np.frombuffer(pcm[:len(pcm) - len(pcm) % (rate // 25)], dtype="<i2").reshape(-1, rate // 50)
    runs: list[list[int]] = []
    for window in windows:
        if np.abs(window).max() < 1000:
            continue
        peak = int(np.argmax(np.abs(np.fft.rfft(window.astype(np.float64))))) * 50
        tag = by_tone.get(peak)
        if tag is None:
            continue
        if runs and runs[-1][0] == tag:
            runs[-1][1] += 1
        else:
            runs.append([tag, 1])
    out: list[int] = []
    for tag, count in runs:
        if count > 1 and (not out or out[-1] != tag):
            out.append(tag)
    return out


def chunk_tags(heard: list[tuple[float, bytes]], rate: int) -> list[int]:
    """The tag of each 20 ms chunk received over a lossy wire, by its tone (chunks whose peak is no
    tag's tone left out): a codec's frames follow the sender's, so each chunk holds mostly one tone."""
    by_tone = {_tone(tag): tag for tag in TAGS}
    out = []
    for _, pcm in heard:
        window = np.frombuffer(pcm[:rate // 50 * 2], dtype="<i2").astype(np.float64)
        if window.size == rate // 50 and np.abs(window).max() >= 1000:
            tag = by_tone.get(int(np.argmax(np.abs(np.fft.rfft(window)))) * 50)
            if tag is not None:
                out.append(tag)
    return out


def tags_of(pcm: bytes) -> list[int]:
    """The run of tags in ``pcm`` (one entry per 20 ms frame at any rate is not needed: runs)."""
    out: list[int] = []
    for (value,) in struct.iter_unpack("<h", pcm):
        if not out or out[-1] != value:
            out.append(value)
    return out


def bot(rate: int, tag: int, *, epoch: int = 0, utterance: int = 0, lossy: bool = False) -> SendAudio:
    return SendAudio(OutputAudioFrame(epoch=epoch, pcm=tagged(rate, tag, lossy), sample_rate=rate,
                                      utterance=utterance))


async def collect(clock: SimClock, session: TransportSession, done: Callable[[list[TransportEvent]], bool],
                  within: float = 10.0) -> list[TransportEvent]:
    got: list[TransportEvent] = []

    async def read() -> None:
        while not done(got):
            got.append(await session.recv())

    with contextlib.suppress(DeadlineExceeded, ChannelClosed):  # the test asserts on what arrived
        await bounded(clock, within, read(), "events")
    return got


async def started(clock: SimClock, session: TransportSession) -> None:
    first = await bounded(clock, 2.0, session.recv(), "started")
    assert isinstance(first, Started)


async def test_caller_audio_arrives_in_order(name: str) -> None:
    clock, driver = SimClock(), DRIVERS[name]()
    lossy_ = lossy(driver)
    per_tag = 3 if lossy_ else 1  # a lossy wire smears a tone over the window after it
    async with driver.open(clock) as (caller, session):
        await started(clock, session)
        sent = TAGS[:12]
        for tag in sent:
            for _ in range(per_tag):
                await caller.send_audio(tagged(driver.rate, tag, lossy_))
                await clock.sleep(FRAME)
        if lossy_:  # the wire carries silence around the speech: collect all of it
            events = await collect(clock, session, lambda got: False, within=1.0)
        else:
            events = await collect(clock, session,
                                   lambda got: sum(isinstance(e, CallerAudio) for e in got) >= len(sent))
        pcm = b"".join(e.frame.pcm for e in events if isinstance(e, CallerAudio))
        assert heard_tags(pcm, driver.rate, lossy_) == sent
        if not lossy_:
            assert len(pcm) == len(sent) * driver.rate // 50 * 2


async def test_bot_audio_is_paced_in_real_time_and_heard_in_order(name: str) -> None:
    clock, driver = SimClock(), DRIVERS[name]()
    lossy_ = lossy(driver)
    per_tag = 3 if lossy_ else 1
    async with driver.open(clock) as (caller, session):
        await started(clock, session)
        sent = [TAGS[(i // per_tag) % len(TAGS)] for i in range(50)]  # 1 s
        t0 = clock.now()
        for tag in sent:
            await session.send(bot(driver.out_rate, tag, lossy=lossy_))
        await clock.sleep(1.5)
        pcm = caller.heard_pcm()
        if lossy_:  # frames cut elsewhere than the engine's, a codec's look-ahead, a jitter buffer
            assert abs(len(pcm) - 50 * driver.out_rate // 50 * 2) <= 3 * driver.out_rate // 50 * 2
        else:
            assert len(pcm) == 50 * driver.out_rate // 50 * 2
        assert heard_tags(pcm, driver.out_rate, lossy_) == [t for i, t in enumerate(sent) if i == 0 or sent[i - 1] != t]
        first, last = caller.heard[0][0], caller.heard[-1][0]
        assert last - first >= 0.9, "the wire never sees faster than real-time audio"
        assert first - t0 < (0.25 if lossy_ else 0.1)


async def test_a_clear_cuts_the_bot_audio_within_one_frame_time(name: str) -> None:
    clock, driver = SimClock(), DRIVERS[name]()
    async with driver.open(clock) as (caller, session):
        await started(clock, session)
        for i in range(100):
            await session.send(bot(driver.out_rate, TAGS[i % len(TAGS)], lossy=lossy(driver)))
        await clock.sleep(0.3)
        cleared_at = clock.now()
        await session.send(Clear(1))
        events = await collect(clock, session, lambda got: False, within=0.5)
        if getattr(driver, "clear_messages", True):
            assert caller.clears, "the client was told to clear"
            assert caller.clears[0] - cleared_at <= FRAME
            assert not [at for at, _ in caller.heard if at > caller.clears[0]], "no old audio after the clear"
        else:
            # No message: the adapter drops what it holds.  The session released ``released``
            # frames (its last position report of the cut utterance); the last of them was still
            # in the adapter at the clear (its resampler's and frame buffer's lag), so the caller
            # hears none of it.  What had left the adapter (on the wire, in the jitter buffer) plays.
            released = max(e.samples for e in events if isinstance(e, PlaybackPosition) and e.epoch == 0) \
                // (driver.out_rate // 50)
            heard = [TAGS.index(tag) for tag in chunk_tags(caller.heard, driver.out_rate)]
            assert heard, "the audio before the clear was heard"
            assert max(heard) < released - 1, f"heard frame {max(heard)} of the {released} released: the adapter's " \
                                              "buffer was played after the clear"
            assert not [at for at, _ in caller.heard if at > cleared_at + 0.2], "no old audio after the clear"
        assert len(caller.heard_pcm()) < 30 * driver.out_rate // 50 * 2


async def test_every_mark_ends_exactly_once_as_played_or_cleared(name: str) -> None:
    clock, driver = SimClock(), DRIVERS[name]()
    async with driver.open(clock) as (_, session):
        await started(clock, session)
        ids = [f"m{i}" for i in range(6)]
        for i, mark in enumerate(ids):
            for _ in range(5):
                await session.send(bot(driver.out_rate, TAGS[i], utterance=i))
            await session.send(Mark(mark))
        await clock.sleep(0.45)
        await session.send(Clear(1))
        for _ in range(3):
            await session.send(bot(driver.out_rate, TAGS[20], epoch=1, utterance=9))
        await session.send(Mark("after"))
        ends = await collect(clock, session, lambda got: False, within=2.0)
        played = [e.id for e in ends if isinstance(e, MarkPlayed)]
        cut = [e.id for e in ends if isinstance(e, MarkCleared)]
        assert sorted(played + cut) == sorted([*ids, "after"]), "every mark ends exactly once"
        assert "m0" in played and "after" in played
        assert "m5" in cut


async def test_dtmf_arrives_in_order(name: str) -> None:
    clock, driver = SimClock(), DRIVERS[name]()
    if not getattr(driver, "dtmf", True):
        pytest.skip(f"{name}: the client has no DTMF")
    async with driver.open(clock) as (caller, session):
        await started(clock, session)
        for digit in "1#5*":
            await caller.send_dtmf(digit)
        events = await collect(clock, session, lambda got: sum(isinstance(e, Dtmf) for e in got) >= 4)
        assert [e.digit for e in events if isinstance(e, Dtmf)] == list("1#5*")


@pytest.mark.parametrize(("how", "reason"), [("hangup", StopReason.PEER_HANGUP),
                                              ("disconnect", StopReason.PEER_DISCONNECTED)])
async def test_hang_up_and_disconnect_map_to_their_stop_reasons(name: str, how: str, reason: StopReason) -> None:
    clock, driver = SimClock(), DRIVERS[name]()
    async with driver.open(clock) as (caller, session):
        await started(clock, session)
        await caller.send_audio(tagged(driver.rate, TAGS[0]))
        if how == "hangup":
            await caller.hangup()
        else:
            caller.disconnect()
        events = await collect(clock, session, lambda got: any(isinstance(e, Stopped) for e in got))
        assert [e.reason for e in events if isinstance(e, Stopped)] == [reason]
        assert session.stop_reason() is reason


async def test_an_engine_stop_hangs_up_the_client_and_leaves_no_task(name: str) -> None:
    clock, driver = SimClock(), DRIVERS[name]()
    async with driver.open(clock) as (caller, session):
        await started(clock, session)
        await session.close()
        await bounded(clock, 3.0, caller.ended.wait(), "client told")
    await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not left, [t.get_name() for t in left]


def test_fuzzed_inbound_messages_never_crash_the_adapter(name: str) -> None:
    driver_type = DRIVERS[name]
    if not getattr(driver_type, "fuzzed", True):
        pytest.skip(f"{name}: its inbound wire is not fuzzed here (see the driver's docs)")
    strategy = driver_type().fuzz_frames()

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(frames=st.lists(strategy, max_size=25))
    def run(frames: list[bytes | str]) -> None:
        _run(_fuzz_call(driver_type(), frames), realtime=False)

    run()


async def _fuzz_call(driver: Driver, frames: list[bytes | str]) -> None:
    clock = SimClock()
    async with driver.open(clock) as (caller, session):
        caller_: Caller = caller
        await started(clock, session)
        for frame in frames:
            try:
                await caller_.send_raw(frame)
            except (ChannelClosed, DeadlineExceeded):
                break  # the transport ended the call: allowed
            await clock.sleep(0.005)
        if not caller_.ended.is_set():
            await caller_.hangup()
        events = await collect(clock, session, lambda got: any(isinstance(e, Stopped) for e in got), within=30.0)
        assert session.stop_reason() is not None, f"the call did not end: {events[-3:]}"

"""The outbound track (peer.py's ``OutboundTrack``) on virtual time: it encodes Opus itself with
its own timestamps, and a clear resets the encoder while the timestamps run on."""

from __future__ import annotations

import fractions
import logging

import av
import numpy as np
import pytest
from aiortc.codecs.opus import OpusDecoder
from aiortc.jitterbuffer import JitterFrame
from aiortc.mediastreams import MediaStreamError

from brisvox.core.clock import SimClock
from brisvox.transport.webrtc import peer
from brisvox.transport.webrtc.media import FRAME_SAMPLES, OPUS_RATE, OutboundAudio
from brisvox.transport.webrtc.peer import OutboundTrack
from tests.transport.webrtc._client import rms, tone

DECODER_OVERLAP = 240
"""Samples (5 ms) at the start of a decoded frame that still carry the previous packet: the
browser's decoder overlaps each frame with the last one's tail (CELT's window), and that packet
left before the clear."""


def _track() -> tuple[OutboundTrack, OutboundAudio, list[BaseException]]:
    audio = OutboundAudio()
    failures: list[BaseException] = []
    return OutboundTrack(SimClock(), audio, lambda _sent, _now: None, failures.append), audio, failures


def _clear(track: OutboundTrack, audio: OutboundAudio) -> None:
    """What the call's writer does at a clear."""
    audio.clear()
    track.reset_encoder()


def _decode(decoder: OpusDecoder, packet: av.Packet) -> np.ndarray:  # type: ignore[type-arg]
    assert packet.pts is not None
    (frame,) = decoder.decode(JitterFrame(bytes(packet), packet.pts))
    stereo = np.frombuffer(bytes(frame.planes[0])[:frame.samples * 4], dtype="<i2")
    return stereo.reshape(-1, 2)[:, 0]


async def test_packets_carry_our_timestamps_at_48_khz_and_they_run_on_across_a_clear() -> None:
    track, audio, _ = _track()
    audio.push(tone(48000, 0.2), 48000)
    packets = [await track.recv() for _ in range(6)]
    _clear(track, audio)
    packets += [await track.recv() for _ in range(6)]
    assert track.encoder_resets == 1
    assert [p.pts for p in packets] == [i * FRAME_SAMPLES for i in range(12)], "960 a frame, never back to 0"
    assert all(p.time_base == fractions.Fraction(1, OPUS_RATE) for p in packets)


async def test_the_first_packet_after_a_clear_carries_no_audio_from_before_it() -> None:
    track, audio, _ = _track()
    audio.push(tone(48000, 0.2), 48000)  # 10 loud frames
    decoder = OpusDecoder()  # the browser's: it runs on across the clear
    before = [_decode(decoder, await track.recv()) for _ in range(10)]
    assert rms(before[-1].tobytes()) > 3000
    _clear(track, audio)
    after = [_decode(decoder, await track.recv()) for _ in range(3)]  # silence: nothing is queued
    # the old encoder's look-ahead (312 samples) would put the tone's last 6.5 ms into this frame
    assert rms(after[0][DECODER_OVERLAP:].tobytes()) < 50, "the new encoder starts from silence"
    assert all(rms(frame.tobytes()) < 50 for frame in after[1:])


async def test_an_encoder_failure_is_logged_reported_and_ends_the_track(monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def encode(self, pcm: bytes) -> bytes:
            raise ValueError("libopus is gone")

    monkeypatch.setattr(peer, "OpusEncoder", Broken)
    track, _, failures = _track()
    with caplog.at_level(logging.ERROR, logger=peer.__name__), pytest.raises(MediaStreamError):
        await track.recv()
    assert [type(f) for f in failures] == [ValueError]
    assert track.readyState == "ended"
    assert "the Opus encoder failed" in caplog.text and "libopus is gone" in caplog.text, "with its traceback"

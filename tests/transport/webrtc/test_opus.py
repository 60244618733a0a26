"""Our Opus encoder: one packet per 20 ms frame, and a clear error for a frame of the wrong size."""

from __future__ import annotations

import pytest
from aiortc.codecs.opus import OpusDecoder
from aiortc.jitterbuffer import JitterFrame

from brisvox.transport.webrtc.media import FRAME_SAMPLES
from brisvox.transport.webrtc.opus import EncoderFailed, OpusEncoder
from tests.transport.webrtc._client import rms, tone


def test_each_20_ms_frame_becomes_one_packet_that_decodes_to_the_audio() -> None:
    encoder, decoder = OpusEncoder(), OpusDecoder()
    pcm = tone(48000, 0.2)
    frame = FRAME_SAMPLES * 2
    decoded = b""
    for i in range(0, len(pcm), frame):
        packet = encoder.encode(pcm[i:i + frame])
        assert 0 < len(packet) < 400, "one Opus packet of a 64 kbit/s stream"
        for out in decoder.decode(JitterFrame(packet, i // 2)):
            decoded += bytes(out.planes[0])[:out.samples * 4]
    assert rms(decoded[len(decoded) // 2:]) > 3000, "the tone decodes back (stereo from a mono stream)"


def test_a_frame_of_the_wrong_size_is_refused_with_its_size() -> None:
    with pytest.raises(EncoderFailed, match="of 100 bytes"):
        OpusEncoder().encode(bytes(100))

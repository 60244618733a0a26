"""One call's Opus encoder: a 20 ms frame of 48 kHz mono PCM16 in, one Opus packet out.

The outbound track encodes with this itself (in the default executor) and hands aiortc's
sender the packets with its own timestamps, so a clear can throw the encoder away (its
look-ahead holds 6.5 ms of the cut audio) while the RTP timestamps run on; aiortc's own
encoder restarts its timestamps at 0 when it is replaced (docs/WEBRTC.md, Audio).

Mono at 64 kbit/s in libopus's VoIP mode: the bot's voice is mono, browsers decode a mono
stream on the negotiated ``opus/48000/2`` like any other, and mono costs half of aiortc's
stereo encoder (bench/webrtc.py measures both).
"""

from __future__ import annotations

import fractions

import av
import numpy as np

from brisvox.core.errors import BrisvoxError
from brisvox.transport.webrtc.media import FRAME_BYTES, FRAME_SAMPLES, OPUS_RATE

__all__ = ["BITRATE", "EncoderFailed", "OpusEncoder"]

BITRATE = 64_000
_TIME_BASE = fractions.Fraction(1, OPUS_RATE)


class EncoderFailed(BrisvoxError):
    """The Opus encoder gave no packet (or not one) for a frame."""


class OpusEncoder:
    """libopus through PyAV, one packet per 20 ms frame (see the module docs).  Not thread-safe:
    one frame at a time (the track awaits each encode before it takes the next frame)."""

    __slots__ = ("_codec", "_frames")

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "w")
        assert isinstance(codec, av.AudioCodecContext)
        codec.bit_rate = BITRATE
        codec.format = "s16"
        codec.layout = "mono"
        codec.sample_rate = OPUS_RATE
        codec.time_base = _TIME_BASE
        codec.options = {"application": "voip"}
        self._codec = codec
        self._frames = 0

    def encode(self, pcm: bytes) -> bytes:
        """The Opus packet for one 20 ms frame (``FRAME_BYTES`` of 48 kHz mono PCM16)."""
        if len(pcm) != FRAME_BYTES:
            raise EncoderFailed(f"an outbound frame of {len(pcm)} bytes (a 20 ms frame is {FRAME_BYTES})")
        frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm, dtype="<i2").reshape(1, -1), format="s16",
                                           layout="mono")
        frame.sample_rate = OPUS_RATE
        frame.time_base = _TIME_BASE
        frame.pts = self._frames * FRAME_SAMPLES
        self._frames += 1
        packets = self._codec.encode(frame)
        if len(packets) != 1:
            raise EncoderFailed(f"libopus gave {len(packets)} packets for frame {self._frames} (one expected)")
        return bytes(packets[0])

"""The audio path of one WebRTC call, without sockets, codecs or a clock (pure).

WebRTC carries Opus at 48 kHz; the engine hears ``input_rate`` and speaks ``output_rate``.
aiortc decodes Opus (its decoder thread) and the outbound track encodes it
(:mod:`brisvox.transport.webrtc.opus`, in the default executor); this module converts between its 48 kHz PCM16 and the engine's rates with the
audio layer's :class:`~brisvox.audio.resample.ResampleStream`:

* :class:`InboundAudio`: a decoded frame (48 kHz, mono or interleaved stereo, with its
  RTP-derived ``pts`` in 48 kHz samples) -> mono -> ``input_rate``.  A ``pts`` gap of
  whole frames up to ``max_concealed_frames`` is filled with silence before the frame
  (packet loss concealment: the engine's timeline keeps its length); a longer gap is a
  pause (DTX, a muted microphone) and is not filled.
* :class:`OutboundAudio`: engine audio at any supported rate -> 48 kHz -> 20 ms frames of
  960 samples in a bounded buffer (drop-oldest, counted) that the paced track takes one
  frame per 20 ms.  ``clear()`` drops the buffer, the partial frame and the resampler state.
  ``flush()`` pads the partial frame to a whole one (before a mark, so the mark's audio leaves).
* :class:`PlayoutMarks`: browsers report no playout, so a mark is acknowledged from an
  estimate: once the track has sent the last frame queued before the mark, plus
  ``mark_delay`` (the browser's jitter buffer and output latency).  A clear forgets pending
  marks (the transport core reports them cut).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from brisvox.audio.resample import ResampleStream
from brisvox.core.errors import InvalidInput

__all__ = ["FRAME_SAMPLES", "OPUS_RATE", "InboundAudio", "OutboundAudio", "PlayoutMarks"]

OPUS_RATE = 48_000
FRAME_SAMPLES = 960  # 20 ms at 48 kHz
FRAME_BYTES = FRAME_SAMPLES * 2
SILENT_FRAME = bytes(FRAME_BYTES)


def to_mono(pcm: bytes, channels: int) -> bytes:
    """Interleaved PCM16 of ``channels`` channels as mono (the mean of the channels)."""
    if channels == 1:
        return pcm
    if channels < 1:
        raise InvalidInput(f"an audio frame with {channels} channels")
    samples = np.frombuffer(pcm, dtype="<i2")
    usable = samples.size - samples.size % channels
    frames = samples[:usable].reshape(-1, channels).astype(np.int32)
    mono: bytes = (frames.sum(axis=1) // channels).astype("<i2").tobytes()
    return mono


@dataclass(slots=True)
class InboundAudio:
    """Caller audio from 48 kHz decoded frames to ``input_rate`` (see the module docs)."""

    input_rate: int
    max_concealed_frames: int = 5
    concealed_frames: int = 0
    """Frames of silence inserted for lost packets over the call."""
    gaps: int = 0
    """Gaps longer than ``max_concealed_frames`` (pauses: not filled)."""
    _resample: ResampleStream = field(init=False)
    _next_pts: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._resample = ResampleStream(OPUS_RATE, self.input_rate)

    def feed(self, pcm: bytes, *, channels: int, pts: int | None) -> bytes:
        """PCM16 at ``input_rate`` for one decoded frame (with the concealed silence before it)."""
        mono = to_mono(pcm, channels)
        samples = len(mono) // 2
        head = b""
        if pts is not None:
            if self._next_pts is not None and pts > self._next_pts:
                missing = pts - self._next_pts
                frames = round(missing / FRAME_SAMPLES)
                if 0 < frames <= self.max_concealed_frames:
                    self.concealed_frames += frames
                    head = bytes(missing * 2)
                elif frames > self.max_concealed_frames:
                    self.gaps += 1
            self._next_pts = pts + samples
        return self._resample.process(head + mono if head else mono)


@dataclass(slots=True)
class OutboundAudio:
    """Bot audio from the engine's rate to 20 ms frames at 48 kHz (see the module docs)."""

    capacity: int = 50
    """Frames held at most (1 s); past it the oldest is dropped."""
    dropped: int = 0
    queued_total: int = 0
    """Frames ever queued (the position a mark waits for)."""
    sent_total: int = 0
    """Frames ever taken by the track."""
    _frames: deque[bytes] = field(default_factory=deque, init=False)
    _partial: bytearray = field(default_factory=bytearray, init=False)
    _partial_stale: bool = field(default=False, init=False)
    _streams: dict[int, ResampleStream] = field(default_factory=dict, init=False)

    def push(self, pcm: bytes, rate: int) -> None:
        stream = self._streams.get(rate)
        if stream is None:
            stream = self._streams[rate] = ResampleStream(rate, OPUS_RATE)
        self._partial += stream.process(pcm)
        self._partial_stale = False
        while len(self._partial) >= FRAME_BYTES:
            self._queue(bytes(self._partial[:FRAME_BYTES]))
            del self._partial[:FRAME_BYTES]

    def flush(self) -> None:
        """Pad the partial frame with silence to a whole frame and queue it."""
        if self._partial:
            self._partial += bytes(FRAME_BYTES - len(self._partial))
            self._queue(bytes(self._partial))
            self._partial.clear()

    def _queue(self, frame: bytes) -> None:
        if len(self._frames) >= self.capacity:
            self._frames.popleft()
            self.dropped += 1
            self.sent_total += 1  # a dropped frame counts as gone, so marks behind it still come due
        self._frames.append(frame)
        self.queued_total += 1

    def take(self) -> bytes | None:
        """The next 20 ms frame, or None when nothing is buffered (the track then sends silence).
        A partial frame that got no audio for a whole take is the end of an utterance: it is
        padded and sent (one frame time late at most, never glued to the next utterance)."""
        if not self._frames:
            if self._partial and self._partial_stale:
                self.flush()
            else:
                self._partial_stale = True
                return None
        self.sent_total += 1
        return self._frames.popleft()

    @property
    def buffered(self) -> int:
        return len(self._frames)

    def clear(self) -> int:
        """Drop everything buffered and forget the resamplers' state; the frames dropped."""
        dropped = len(self._frames)
        self.sent_total += dropped
        self._frames.clear()
        self._partial.clear()
        for stream in self._streams.values():
            stream.reset()
        return dropped


@dataclass(slots=True)
class PlayoutMarks:
    """Marks acknowledged from a playout estimate (see the module docs)."""

    mark_delay: float = 0.1
    _waiting: deque[tuple[int, str]] = field(default_factory=deque, init=False)
    _due: deque[tuple[float, str]] = field(default_factory=deque, init=False)

    def mark(self, mark_id: str, position: int) -> None:
        """A mark after the first ``position`` frames queued."""
        self._waiting.append((position, mark_id))

    def sent(self, sent_total: int, now: float) -> None:
        """The track has sent ``sent_total`` frames by ``now``."""
        while self._waiting and self._waiting[0][0] <= sent_total:
            self._due.append((now + self.mark_delay, self._waiting.popleft()[1]))

    def due(self, now: float) -> list[str]:
        """The marks whose audio has played by ``now``, in order."""
        out = []
        while self._due and self._due[0][0] <= now:
            out.append(self._due.popleft()[1])
        return out

    def clear(self) -> None:
        self._waiting.clear()
        self._due.clear()

    def __len__(self) -> int:
        return len(self._waiting) + len(self._due)

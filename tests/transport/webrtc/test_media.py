"""The pure audio path of a WebRTC call: 48 kHz <-> the engine's rates, loss concealment, the
outbound frame buffer and the playout estimate for marks."""

from __future__ import annotations

import numpy as np

from brisvox.transport.webrtc.media import FRAME_SAMPLES, InboundAudio, OutboundAudio, PlayoutMarks, to_mono


def _frame(value: int, samples: int = FRAME_SAMPLES, channels: int = 2) -> bytes:
    return np.full(samples * channels, value, dtype="<i2").tobytes()


def test_stereo_is_mixed_to_mono() -> None:
    stereo = np.array([100, 300, -50, 50], dtype="<i2").tobytes()
    assert np.frombuffer(to_mono(stereo, 2), dtype="<i2").tolist() == [200, 0]


def test_caller_audio_comes_out_at_the_input_rate() -> None:
    inbound = InboundAudio(16000)
    out = b"".join(inbound.feed(_frame(1000), channels=2, pts=i * FRAME_SAMPLES) for i in range(10))
    assert abs(len(out) // 2 - 3200) <= 40, "10 frames of 20 ms are 200 ms at 16 kHz"


def test_a_lost_packet_is_concealed_with_silence_but_a_long_pause_is_not() -> None:
    inbound = InboundAudio(48000, max_concealed_frames=3)
    first = inbound.feed(_frame(1000), channels=2, pts=0)
    after_loss = inbound.feed(_frame(1000), channels=2, pts=3 * FRAME_SAMPLES)  # frames 1 and 2 lost
    assert len(after_loss) == len(first) + 2 * FRAME_SAMPLES * 2
    assert inbound.concealed_frames == 2
    after_pause = inbound.feed(_frame(1000), channels=2, pts=100 * FRAME_SAMPLES)
    assert len(after_pause) == FRAME_SAMPLES * 2 and inbound.gaps == 1


def test_bot_audio_is_cut_into_20_ms_frames_at_48_khz_and_a_clear_drops_them() -> None:
    out = OutboundAudio(capacity=10)
    out.push(np.full(2400, 500, dtype="<i2").tobytes(), 24000)  # 100 ms
    assert 4 <= out.buffered <= 5
    queued = out.queued_total
    out.flush()
    assert out.queued_total == queued + 1, "the partial frame is padded and queued"
    frame = out.take()
    assert frame is not None and len(frame) == FRAME_SAMPLES * 2
    assert out.clear() == out.queued_total - 1 and out.buffered == 0 and out.take() is None
    assert out.sent_total == out.queued_total, "cleared frames count as gone"


def test_a_full_outbound_buffer_drops_the_oldest_frame() -> None:
    out = OutboundAudio(capacity=2)
    for value in (1, 2, 3):
        out.push(np.full(FRAME_SAMPLES, value * 100, dtype="<i2").tobytes(), 48000)
    out.flush()
    assert out.dropped >= 1 and out.buffered == 2


def test_a_mark_is_due_after_its_frames_left_plus_the_playout_delay_and_a_clear_forgets_it() -> None:
    marks = PlayoutMarks(mark_delay=0.1)
    marks.mark("a", position=2)
    marks.mark("b", position=4)
    marks.sent(1, now=0.0)
    assert marks.due(10.0) == []
    marks.sent(2, now=1.0)
    assert marks.due(1.05) == [] and marks.due(1.1) == ["a"]
    marks.clear()
    marks.sent(4, now=2.0)
    assert marks.due(3.0) == [] and len(marks) == 0


def test_the_tail_of_an_utterance_is_sent_once_no_audio_followed_it_for_a_frame_time() -> None:
    out = OutboundAudio()
    out.push(np.full(480, 500, dtype="<i2").tobytes(), 24000)  # 20 ms: a little under a frame at 48 kHz
    assert out.take() is None, "the first dry take waits: more audio may complete the frame"
    tail = out.take()
    assert tail is not None and len(tail) == FRAME_SAMPLES * 2
    assert out.take() is None

from __future__ import annotations

import numpy as np
import pytest

from brisvox.audio import ResampleQuality, ResampleStream, resample
from brisvox.core.errors import InvalidInput

RATES = [(16000, 8000), (8000, 16000), (24000, 16000), (24000, 8000), (48000, 16000), (16000, 24000)]


def tone(rate: int, seconds: float, freq: float = 440.0, amp: float = 10000.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return np.rint(amp * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def in_frames(stream: ResampleStream, x: np.ndarray, frame: int) -> np.ndarray:
    out = b"".join(stream.process(x[i : i + frame].tobytes()) for i in range(0, len(x), frame))
    return np.frombuffer(out + stream.flush(), dtype=np.int16).astype(float)


ENGINES = [ResampleQuality.LOW_LATENCY, ResampleQuality.LOW, ResampleQuality.HIGH]


@pytest.mark.parametrize("quality", ENGINES)
@pytest.mark.parametrize(("src", "dst"), RATES)
def test_a_tone_resampled_in_20_ms_frames_is_continuous_across_frame_boundaries(
    src: int, dst: int, quality: ResampleQuality
) -> None:
    out = in_frames(ResampleStream(src, dst, quality), tone(src, 1.0), src // 50)
    assert len(out) == dst
    ideal = tone(dst, 1.0).astype(float)
    # Away from the stream's two ends the output is the same tone, sample for sample:
    # a reset filter or a lost sample at a boundary would show as an error of thousands.
    edge = dst // 20
    assert np.max(np.abs(out - ideal)[edge:-edge]) < 6.0


@pytest.mark.parametrize("quality", ENGINES)
@pytest.mark.parametrize(("src", "dst"), RATES)
def test_frame_by_frame_output_equals_resampling_the_whole_clip(src: int, dst: int, quality: ResampleQuality) -> None:
    x = tone(src, 0.5, freq=1234.0)
    framed = in_frames(ResampleStream(src, dst, quality), x, 7 * src // 1000)  # odd 7 ms frames
    whole = np.frombuffer(resample(x.tobytes(), src, dst, quality), dtype=np.int16).astype(float)
    assert len(framed) == len(whole)
    # libsoxr's int16 output rounding may differ by an LSB or two between block layouts.
    assert np.max(np.abs(framed - whole)) <= (0 if quality is ResampleQuality.LOW_LATENCY else 2)


@pytest.mark.parametrize("quality", ENGINES)
def test_downsampling_removes_a_tone_above_the_new_nyquist(quality: ResampleQuality) -> None:
    out = np.frombuffer(resample(tone(16000, 1.0, freq=5000.0).tobytes(), 16000, 8000, quality), dtype=np.int16)
    assert np.sqrt(np.mean(out[800:-800].astype(float) ** 2)) < 10  # the input's RMS is 7071


@pytest.mark.parametrize(("src", "dst"), RATES)
def test_the_low_latency_engine_never_holds_back_more_than_3_ms(src: int, dst: int) -> None:
    stream = ResampleStream(src, dst)  # the default engine
    x = tone(src, 1.0)
    frame = src // 50
    emitted = 0
    for k, i in enumerate(range(0, len(x), frame)):
        emitted += len(stream.process(x[i : i + frame].tobytes())) // 2
        owed = (k + 1) * (dst // 50)
        assert owed - emitted <= 0.003 * dst


def test_44_1_khz_resamples_through_the_many_phase_path() -> None:
    out = in_frames(ResampleStream(44100, 16000), tone(44100, 0.5), 441)
    ideal = tone(16000, 0.5).astype(float)
    assert len(out) == 8000
    assert np.max(np.abs(out - ideal)[400:-400]) < 4.0


def test_equal_rates_pass_audio_through_untouched() -> None:
    stream = ResampleStream(16000, 16000)
    pcm = tone(16000, 0.02).tobytes()
    assert stream.passthrough
    assert stream.process(pcm) == pcm
    assert stream.flush() == b""


@pytest.mark.parametrize("quality", ENGINES)
def test_reset_starts_a_new_stream_without_the_old_tail(quality: ResampleQuality) -> None:
    stream = ResampleStream(24000, 16000, quality)
    x = tone(24000, 0.2)
    first = in_frames(stream, x, 480)
    stream.process(tone(24000, 0.1, freq=3000.0).tobytes())
    stream.reset()
    again = in_frames(stream, x, 480)
    np.testing.assert_allclose(first, again, atol=2)


def test_every_quality_preset_resamples() -> None:
    for quality in ResampleQuality:
        assert len(resample(tone(16000, 0.1).tobytes(), 16000, 8000, quality)) == 1600


def test_bad_rates_and_half_samples_are_refused() -> None:
    with pytest.raises(InvalidInput, match="positive"):
        ResampleStream(0, 8000)
    with pytest.raises(InvalidInput, match="3 bytes"):
        ResampleStream(16000, 8000).process(b"abc")

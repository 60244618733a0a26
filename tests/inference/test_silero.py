"""Silero VAD on real speech (espeak-ng), silence and noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from brisvox.core.errors import ConfigError
from brisvox.core.frames import VadStartedFrame, VadStoppedFrame
from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.inference.silero import SileroModel, SileroReset, SileroScorer
from brisvox.inference.vad import VoiceActivityDetector, silero_vad
from tests._speech import espeak_wav


def feed(det: VoiceActivityDetector, pcm: bytes, frame: int = 640) -> list[object]:
    events: list[object] = []
    for i in range(0, len(pcm), frame):
        events += det.process_sync(pcm[i : i + frame], i / 2 / det.sample_rate)
    return events


def speech_spans(events: list[object]) -> list[tuple[float, float]]:
    spans = []
    for e in events:
        if isinstance(e, VadStoppedFrame):
            spans.append((e.speech_started_at, e.at))
    return spans


def test_silero_finds_the_speech_in_an_espeak_recording(model: SileroModel, tmp_path: Path) -> None:
    speech = espeak_wav("the quick brown fox jumps over the lazy dog", tmp_path)
    events = feed(VoiceActivityDetector(model.scorer()), speech.pcm)
    spans = speech_spans(events)
    assert isinstance(events[0], VadStartedFrame)
    assert len(spans) == sum(isinstance(e, VadStartedFrame) for e in events)  # every start was stopped
    spoken = speech.duration - 2.0  # 0.5 s of lead and 1.5 s of trailing silence
    assert 0.45 <= spans[0][0] <= 0.75
    assert 0.5 + spoken - 0.6 <= spans[-1][1] <= 0.5 + spoken + 0.1
    assert sum(b - a for a, b in spans) >= 0.7 * (spans[-1][1] - spans[0][0])


def test_silero_finds_nothing_in_silence_or_noise(model: SileroModel) -> None:
    rng = np.random.default_rng(3)
    noise = np.rint(rng.standard_normal(16000 * 4) * 1000).astype(np.int16).tobytes()  # about -30 dBFS
    hum = np.rint(2000 * np.sin(2 * np.pi * 50 * np.arange(16000 * 2) / 16000)).astype(np.int16).tobytes()
    for pcm in (bytes(16000 * 2 * 4), noise, hum):
        assert feed(VoiceActivityDetector(model.scorer()), pcm) == []


def test_silero_also_runs_at_8_khz(model: SileroModel, tmp_path: Path) -> None:
    speech = espeak_wav("hello there how are you today", tmp_path, rate=8000)
    events = feed(VoiceActivityDetector(model.scorer(8000)), speech.pcm, frame=320)
    assert any(isinstance(e, VadStartedFrame) for e in events)


def test_silero_refuses_other_rates(model: SileroModel) -> None:
    with pytest.raises(ConfigError, match="resample"):
        model.scorer(24000)


async def test_on_the_pool_the_windows_are_scored_off_the_loop_with_the_same_result(
    model: SileroModel, tmp_path: Path
) -> None:
    speech = espeak_wav("one two three", tmp_path)
    expected = feed(VoiceActivityDetector(model.scorer()), speech.pcm)
    async with InferencePool(PoolConfig(threads=1)) as pool:
        det = silero_vad(model, pool)
        events: list[object] = []
        for i in range(0, len(speech.pcm), 640):
            events += await det.process(speech.pcm[i : i + 640], i / 32000)
    assert events == expected
    assert det.scored_windows + det.silent_windows == len(speech.pcm) // 1024


class FakeSession:
    """Stands in for onnxruntime: probability from the window's loudness, state counts the calls."""

    def run(self, _outputs: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = feeds["input"]
        assert x.shape == (1, 64 + 512)
        loud = float(np.abs(x[0, 64:]).max()) > 0.1
        return [np.array([[0.9 if loud else 0.01]], dtype=np.float32), feeds["state"] + 1.0]


def fake_scorer(interval: float | None = 2.0) -> SileroScorer:
    return SileroModel(FakeSession()).scorer(16000, SileroReset(interval=interval))


def test_each_window_is_prefixed_by_the_last_64_samples_of_the_previous_one() -> None:
    seen: list[np.ndarray] = []

    class Recording(FakeSession):
        def run(self, outputs: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            seen.append(feeds["input"].copy())
            return super().run(outputs, feeds)

    scorer = SileroModel(Recording()).scorer()
    first = np.arange(512, dtype=np.int16)
    scorer.score(first)
    scorer.score(np.zeros(512, dtype=np.int16))
    np.testing.assert_array_equal(seen[0][0, :64], np.zeros(64))
    np.testing.assert_allclose(seen[1][0, :64], first[-64:] / 32768.0)
    assert scorer.state.shape == (2, 1, 128)


def test_the_state_is_reset_after_the_interval_once_a_run_of_windows_is_quiet() -> None:
    scorer = fake_scorer()
    loud = np.full(512, 10000, dtype=np.int16)
    quiet = np.zeros(512, dtype=np.int16)
    for _ in range(70):  # 2.24 s of speech: past the interval, but never quiet
        scorer.score(loud)
    assert scorer.resets == 0
    for _ in range(4):
        scorer.score(quiet)
    assert scorer.resets == 0  # four quiet windows are not yet a run of five
    scorer.score(quiet)
    assert scorer.resets == 1
    assert not scorer.state.any()


def test_a_reset_interval_of_none_never_resets() -> None:
    scorer = fake_scorer(interval=None)
    for _ in range(200):
        scorer.score(np.zeros(512, dtype=np.int16))
    assert scorer.resets == 0


def test_silero_finds_speech_in_telephone_audio_after_mulaw_decode_and_resampling(
    model: SileroModel, tmp_path: Path
) -> None:
    from brisvox.audio import ResampleStream, ulaw_decode, ulaw_encode

    speech = espeak_wav("thank you for calling how can i help", tmp_path, rate=8000)
    wire = ulaw_encode(speech.pcm)  # what a telephone leg carries
    up = ResampleStream(8000, 16000)
    det = VoiceActivityDetector(model.scorer(16000))
    events: list[object] = []
    for i in range(0, len(wire), 160):  # 20 ms mu-law frames
        events += det.process_sync(up.process(ulaw_decode(wire[i : i + 160])), i / 8000)
    starts = [e for e in events if isinstance(e, VadStartedFrame)]
    assert starts and 0.45 <= starts[0].at <= 0.8

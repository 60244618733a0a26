"""The start/stop tracker (pure) and the energy VAD."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.core.errors import ConfigError
from brisvox.core.frames import VadStartedFrame, VadStoppedFrame
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.vad import VadParams, VadTracker, VoiceActivityDetector, energy_vad
from tests._speech import espeak_wav

RATE = 16000
WIN = 160  # 10 ms


def run_tracker(tracker: VadTracker, pattern: str, t0: float = 0.0) -> list[object]:
    """Each character is one 10 ms window: 'x' speech (p=1), '.' silence (p=0), '~' p=0.4."""
    p = {"x": 1.0, ".": 0.0, "~": 0.4}
    events = []
    for i, ch in enumerate(pattern):
        e = tracker.observe(t0 + i * WIN / RATE, WIN, p[ch])
        if e is not None:
            events.append(e)
    return events


def test_speech_starts_after_min_speech_and_is_dated_at_its_first_window() -> None:
    tracker = VadTracker(VadParams(min_speech=0.04, min_silence=0.3), RATE)
    assert run_tracker(tracker, "..xxx", t0=10.0) == []
    assert run_tracker(tracker, "x", t0=10.05) == [VadStartedFrame(at=10.02)]


def test_a_burst_shorter_than_min_speech_starts_nothing() -> None:
    tracker = VadTracker(VadParams(min_speech=0.04, min_silence=0.3), RATE)
    assert run_tracker(tracker, "xxx.xxx.xx.") == []


def test_the_stop_comes_after_min_silence_and_is_backdated_to_the_start_of_the_silence() -> None:
    tracker = VadTracker(VadParams(min_speech=0.04, min_silence=0.1), RATE)
    events = run_tracker(tracker, "xxxxxx" + "." * 9)
    assert events == [VadStartedFrame(at=0.0)]  # nine silent windows: 90 ms, not yet
    events = run_tracker(tracker, ".", t0=0.15)
    assert events == [VadStoppedFrame(at=0.06, speech_started_at=0.0)]


def test_a_pause_shorter_than_min_silence_keeps_the_speech_open() -> None:
    tracker = VadTracker(VadParams(min_speech=0.02, min_silence=0.1), RATE)
    events = run_tracker(tracker, "xx" + "." * 9 + "xx" + "." * 10)
    assert events == [VadStartedFrame(at=0.0), VadStoppedFrame(at=0.13, speech_started_at=0.0)]


def test_hysteresis_keeps_speech_open_through_middling_probabilities() -> None:
    tracker = VadTracker(VadParams(threshold=0.5, hysteresis=0.15, min_speech=0.02, min_silence=0.05), RATE)
    # 0.4 is below the start threshold but above the stop threshold (0.35).
    assert run_tracker(tracker, "~~~~~~") == []
    assert run_tracker(tracker, "xx~~~~~~~~~") == [VadStartedFrame(at=0.0)]


def test_finish_closes_open_speech_at_its_silence_or_at_the_end() -> None:
    tracker = VadTracker(VadParams(min_speech=0.02, min_silence=1.0), RATE)
    run_tracker(tracker, "xxx...")
    assert tracker.finish(5.0) == VadStoppedFrame(at=0.03, speech_started_at=0.0)
    run_tracker(tracker, "xxx", t0=6.0)
    assert tracker.finish(7.0) == VadStoppedFrame(at=7.0, speech_started_at=6.0)
    assert tracker.finish(8.0) is None


def test_the_energy_defaults_are_40_ms_to_start_and_300_ms_to_stop() -> None:
    params = VadParams.energy()
    assert (params.min_speech, params.min_silence) == (0.04, 0.3)
    with pytest.raises(ConfigError, match="threshold"):
        VadParams(threshold=0.0)


def tone(seconds: float, amp: float) -> bytes:
    t = np.arange(int(RATE * seconds)) / RATE
    return np.rint(amp * np.sin(2 * np.pi * 300 * t)).astype(np.int16).tobytes()


def feed(det: VoiceActivityDetector, pcm: bytes, frame: int = 640) -> list[object]:
    events: list[object] = []
    for i in range(0, len(pcm), frame):
        events += det.process_sync(pcm[i : i + frame], i / 2 / det.sample_rate)
    return events


def test_the_energy_vad_times_a_loud_burst_from_frames_of_any_size() -> None:
    pcm = bytes(2 * RATE) + tone(1.0, 3000) + bytes(2 * RATE)  # 1 s silence, 1 s tone, 1 s silence
    for frame in (640, 998, 4000):
        det = VoiceActivityDetector(EnergyScorer(RATE), VadParams.energy())
        assert feed(det, pcm, frame) == [VadStartedFrame(at=1.0), VadStoppedFrame(at=2.0, speech_started_at=1.0)]


def test_the_energy_vad_ignores_silence_and_quiet_noise() -> None:
    rng = np.random.default_rng(7)
    quiet = np.rint(rng.standard_normal(3 * RATE) * 50).astype(np.int16).tobytes()  # about -56 dBFS
    det = VoiceActivityDetector(EnergyScorer(RATE), VadParams.energy())
    assert feed(det, bytes(6 * RATE)) == []
    assert feed(det, quiet) == []


def test_the_energy_vad_finds_espeak_speech(tmp_path: Path) -> None:
    speech = espeak_wav("please book a table for two at seven", tmp_path)
    det = VoiceActivityDetector(EnergyScorer(speech.sample_rate), VadParams.energy())
    events = feed(det, speech.pcm)
    starts = [e for e in events if isinstance(e, VadStartedFrame)]
    stops = [e for e in events if isinstance(e, VadStoppedFrame)]
    assert starts and stops
    assert 0.45 <= starts[0].at <= 0.7
    assert stops[-1].at <= speech.duration - 1.4


async def test_without_a_pool_the_detector_scores_inline_on_the_loop() -> None:
    det = VoiceActivityDetector(EnergyScorer(RATE), VadParams.energy())
    events = await det.process(tone(0.1, 3000), 3.0)
    assert events == [VadStartedFrame(at=3.0)]
    assert det.speaking
    det.reset()
    assert not det.speaking


def test_the_energy_factory_uses_the_simulator_timing() -> None:
    det = energy_vad(8000)
    assert det.sample_rate == 8000
    assert (det.params.min_speech, det.params.min_silence) == (0.04, 0.3)


async def test_windows_refused_by_a_full_pool_are_dropped_and_counted() -> None:
    import asyncio
    import threading

    from brisvox.inference.pool import InferencePool, Lane, PoolConfig

    async with InferencePool(PoolConfig(name="full", threads=1, jobs_per_thread=1)) as pool:
        started, release = threading.Event(), threading.Event()

        def block() -> None:
            started.set()
            release.wait(10)

        running = pool.submit(block)
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        queued = pool.submit(int, "1", lane=Lane.VAD)  # the VAD lane is now full
        det = VoiceActivityDetector(EnergyScorer(RATE), VadParams.energy(), pool)
        assert await det.process(tone(0.05, 3000), 0.0) == []
        assert det.dropped_windows == 5
        assert det.saturated
        release.set()
        await asyncio.gather(running, queued)
        assert await det.process(tone(0.05, 3000), 0.05) == [VadStartedFrame(at=0.05)]
        assert not det.saturated


@settings(max_examples=200, deadline=None)
@given(
    probs=st.lists(st.sampled_from([0.0, 0.2, 0.4, 0.6, 1.0]), max_size=300),
    min_speech=st.integers(0, 10),
    min_silence=st.integers(1, 30),
)
def test_events_alternate_and_each_stop_closes_the_start_before_it(
    probs: list[float], min_speech: int, min_silence: int
) -> None:
    params = VadParams(min_speech=min_speech * 0.01, min_silence=min_silence * 0.01)
    tracker = VadTracker(params, RATE)
    events = [e for i, p in enumerate(probs) if (e := tracker.observe(i * 0.01, WIN, p)) is not None]
    end = tracker.finish(len(probs) * 0.01)
    if end is not None:
        events.append(end)
    for i, e in enumerate(events):
        assert isinstance(e, VadStartedFrame if i % 2 == 0 else VadStoppedFrame)
        if isinstance(e, VadStoppedFrame):
            start = events[i - 1]
            assert isinstance(start, VadStartedFrame)
            assert e.speech_started_at == start.at
            # Speech lasted at least min_speech before it could start, and the stop is backdated
            # to the first silent window, which comes after the confirming speech.
            assert e.at >= start.at + params.min_speech - 1e-9
    assert not tracker.speaking


async def test_a_frame_at_another_rate_is_refused_naming_both_rates() -> None:
    from brisvox.core.errors import InvalidInput
    from brisvox.core.frames import InputAudioFrame

    det = energy_vad(16000)
    with pytest.raises(InvalidInput, match="16000 Hz but the frame is 8000 Hz"):
        await det.process_frame(InputAudioFrame(epoch=0, pcm=bytes(320), sample_rate=8000), 0.0)
    frame = InputAudioFrame(epoch=0, pcm=tone(0.1, 3000), sample_rate=16000)
    assert await det.process_frame(frame, 1.0) == [VadStartedFrame(at=1.0)]

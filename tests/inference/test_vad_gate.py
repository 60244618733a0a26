"""The quiet gate: quiet windows outside speech are silence without a model run, and the
detector hears the same turns as when it scores every window."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from brisvox.core.errors import ConfigError
from brisvox.core.frames import VadStartedFrame
from brisvox.inference import vad as vad_module
from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.inference.silero import SileroModel
from brisvox.inference.vad import VadEvent, VadParams, VoiceActivityDetector, silero_vad
from brisvox.inference.vad_batch import SileroBatcher
from tests._speech import espeak_wav

WIN = 512
FRAME = 640  # 20 ms at 16 kHz


class CountingScorer:
    """Probability 0.9 for a window with a sample above 1000, else 0.05; records what it saw."""

    sample_rate = 16000
    window_samples = WIN

    def __init__(self) -> None:
        self.scored: list[int] = []  # each scored window's first sample
        self.skipped: list[int] = []

    def score(self, window: np.ndarray) -> float:
        self.scored.append(int(window[0]))
        return 0.9 if int(np.abs(window).max()) > 1000 else 0.05

    def skip(self, window: np.ndarray) -> None:
        self.skipped.append(int(window[0]))

    def reset(self) -> None:
        return None


def _pcm(*windows: np.ndarray) -> bytes:
    return np.concatenate(windows).astype(np.int16).tobytes()


def _quiet(tag: int) -> np.ndarray:
    w = np.zeros(WIN, dtype=np.int16)
    w[0] = tag  # a tag under the floor, so a test can tell the windows apart
    return w


def _loud(tag: int) -> np.ndarray:
    w = np.full(WIN, 5000, dtype=np.int16)
    w[0] = tag
    return w


def test_quiet_windows_outside_speech_cost_no_model_run() -> None:
    scorer = CountingScorer()
    det = VoiceActivityDetector(scorer, VadParams(min_speech=0.064, min_silence=0.1))
    assert det.process_sync(bytes(WIN * 2 * 40), 0.0) == []
    assert scorer.scored == [] and det.gated_windows == 40 and det.scored_windows == 0
    assert len(scorer.skipped) == 40 - vad_module.REPLAY_WINDOWS  # the last few are held for the replay


async def test_a_silent_caller_sends_no_job_to_the_batcher(model: SileroModel) -> None:
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        batcher = SileroBatcher(model, pool)
        det = silero_vad(model, pool, batcher=batcher)
        for i in range(50):
            assert await det.process(bytes(FRAME), i * 0.02) == []
    assert batcher.stats.jobs == 0 and det.gated_windows == 50 * 320 // WIN


def test_when_the_gate_opens_the_held_quiet_windows_are_scored_first_and_only_the_loud_one_is_tracked() -> None:
    scorer = CountingScorer()
    det = VoiceActivityDetector(scorer, VadParams(min_speech=0.032, min_silence=0.1))
    held = vad_module.REPLAY_WINDOWS
    quiet = held + 5
    events = det.process_sync(_pcm(*(_quiet(i) for i in range(1, quiet + 1)), _loud(99)), 0.0)
    assert scorer.skipped == list(range(1, 6))
    assert scorer.scored == [*range(6, quiet + 1), 99]
    assert events == [VadStartedFrame(at=quiet * WIN / 16000)]  # the replayed windows' 0.05 never reached the tracker
    assert det.scored_windows == 1 and det.gated_windows == quiet


def test_inside_speech_every_window_is_scored_quiet_or_not() -> None:
    scorer = CountingScorer()
    det = VoiceActivityDetector(scorer, VadParams(min_speech=0.032, min_silence=0.1))
    for i, w in enumerate((_loud(1), _quiet(2), _quiet(3), _quiet(4), _quiet(5), _quiet(6))):
        det.process_sync(_pcm(w), i * WIN / 16000)
    # speaking from the first window until the fourth quiet one (min_silence 0.1 s: 4 windows) stops it
    assert scorer.scored == [1, 2, 3, 4, 5] and det.gated_windows == 1 and not det.speaking


def test_the_gate_off_scores_every_window() -> None:
    scorer = CountingScorer()
    det = VoiceActivityDetector(scorer, VadParams(quiet_floor=None))
    det.process_sync(bytes(WIN * 2 * 10), 0.0)
    assert len(scorer.scored) == 10 and det.gated_windows == 0


def test_a_quiet_floor_out_of_range_is_refused() -> None:
    with pytest.raises(ConfigError, match="quiet_floor"):
        VadParams(quiet_floor=-10.0)


def _stream(tmp_path: Path, scale: float, noise_dbfs: float | None, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    parts = []
    for text in ("hi I would like to check the status of my order", "yes that is right", "no",
                 "can you send it to my office instead"):
        s = np.frombuffer(espeak_wav(text, tmp_path, lead=rng.uniform(0.3, 1.5), trail=0.0).pcm,
                          dtype=np.int16).astype(np.float64)
        parts.append(s * scale)
    x = np.concatenate([*parts, np.zeros(16000)])
    if noise_dbfs is not None:
        x += rng.standard_normal(x.size) * 32768 * 10 ** (noise_dbfs / 20)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16).tobytes()


def _decisions(model: SileroModel, pcm: bytes, params: VadParams) -> list[VadEvent]:
    det = VoiceActivityDetector(model.scorer(), params)
    events: list[VadEvent] = []
    for i in range(0, len(pcm) - FRAME + 1, FRAME):
        events += det.process_sync(pcm[i : i + FRAME], i / 32000)
    return events


@pytest.mark.parametrize("noise_dbfs", [None, -90.0, -75.0, -50.0])
@pytest.mark.parametrize("scale", [0.5, 0.1])  # espeak's level, and 20 dB under it (a phone call's)
@pytest.mark.parametrize("params", [VadParams(), VadParams(threshold=0.7, hysteresis=0.0, min_speech=0.192,
                                                           min_silence=0.192)], ids=["default", "bench"])
def test_on_speech_with_silences_and_noise_the_gate_hears_the_same_turns(
    model: SileroModel, tmp_path: Path, noise_dbfs: float | None, params: VadParams, scale: float
) -> None:
    pcm = _stream(tmp_path, scale, noise_dbfs, seed=0)
    every = _decisions(model, pcm, VadParams(**{**_timing(params), "quiet_floor": None}))
    gated = _decisions(model, pcm, params)
    assert [type(e) for e in gated] == [type(e) for e in every]
    assert sum(isinstance(e, VadStartedFrame) for e in every) >= 4
    shifts = [abs(a.at - b.at) for a, b in zip(gated, every, strict=True)]
    # Within one window of the model's own decisions: Silero is recurrent, so the state the gate
    # leaves moves a decision by a window at most, as moving its periodic reset does
    # (bench/density/quiet_gate.py); without the replay of the held windows, the quiet cases fail.
    assert max(shifts) <= WIN / 16000 + 1e-9, shifts


def _timing(p: VadParams) -> dict[str, float]:
    return {"threshold": p.threshold, "hysteresis": p.hysteresis, "min_speech": p.min_speech,
            "min_silence": p.min_silence}


_ = asyncio  # the async tests run on pytest-asyncio's loop

"""Digital silence without a model run: Silero answers windows of zeros from its silence path,
and the detector's decisions are exactly those of scoring every window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from brisvox.core.frames import VadStartedFrame
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.inference.silero import SileroModel, SileroReset
from brisvox.inference.vad import VadEvent, VadParams, VoiceActivityDetector, silero_vad
from brisvox.inference.vad_batch import SileroBatcher
from tests._speech import espeak_wav

WIN = 512
BENCH = VadParams(threshold=0.7, hysteresis=0.0, min_speech=0.192, min_silence=0.192)  # bench/density's


def test_a_stream_of_zeros_takes_the_models_path_through_its_resets_without_running_it(model: SileroModel) -> None:
    scored, skipped = model.scorer(), model.scorer()
    zeros = np.zeros(WIN, dtype=np.int16)
    for _ in range(200):  # three reset cycles (2 s each)
        p = scored.score(zeros)
        q = skipped.skip(zeros)
        assert q is not None
        assert q == pytest.approx(p, abs=1e-6)
        np.testing.assert_allclose(skipped.state, scored.state, atol=1e-6)
    assert skipped.resets == scored.resets == 3


def test_zeros_after_sound_are_scored_until_the_next_reset(model: SileroModel) -> None:
    scorer = model.scorer(16000, SileroReset(interval=0.5))
    loud = (np.random.default_rng(1).standard_normal(WIN) * 4000).astype(np.int16)
    zeros = np.zeros(WIN, dtype=np.int16)
    assert scorer.skip(loud) is None
    scorer.score(loud)
    answered = []
    for _ in range(40):
        p = scorer.skip(zeros)
        answered.append(p is not None)
        if p is None:
            scorer.score(zeros)
    first = answered.index(True)  # off the path until the reset (0.5 s: 16 windows, then 5 quiet ones)
    assert first >= 15 and all(answered[first:])
    assert scorer.resets == 2  # the one that put it on the path, and the path's own


async def test_a_silent_caller_costs_no_model_run_and_no_pool_job(model: SileroModel) -> None:
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        batcher = SileroBatcher(model, pool)
        det = silero_vad(model, pool, batcher=batcher)
        for i in range(100):
            assert await det.process(bytes(640), i * 0.02) == []
    assert batcher.stats.jobs == 0 and det.scored_windows == 0 and det.silent_windows == 100 * 320 // WIN


def test_with_skip_silence_off_every_window_is_scored(model: SileroModel) -> None:
    det = VoiceActivityDetector(model.scorer(), VadParams(skip_silence=False))
    det.process_sync(bytes(2 * WIN * 20), 0.0)
    assert det.scored_windows == 20 and det.silent_windows == 0


def test_the_energy_detector_scores_silence_as_before() -> None:
    det = VoiceActivityDetector(EnergyScorer(16000), VadParams.energy())
    det.process_sync(bytes(2 * 160 * 10), 0.0)
    assert det.scored_windows == 10 and det.silent_windows == 0


def _stream(tmp_path: Path, rate: int, scale: float, noise_dbfs: float | None) -> bytes:
    rng = np.random.default_rng(0)
    parts = []
    for text in ("hi I would like to check the status of my order", "yes that is right", "no",
                 "can you send it to my office instead"):
        # silences of 0.5 to 4 s around the sentences: the long ones reach the model's reset
        s = espeak_wav(text, tmp_path, rate=rate, lead=float(rng.uniform(0.5, 4.0)), trail=0.0).pcm
        parts.append(np.frombuffer(s, dtype=np.int16).astype(np.float64) * scale)
    x = np.concatenate([*parts, np.zeros(3 * rate)])
    if noise_dbfs is not None:
        x += rng.standard_normal(x.size) * 32768 * 10 ** (noise_dbfs / 20)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16).tobytes()


def _decisions(model: SileroModel, pcm: bytes, rate: int, params: VadParams) -> tuple[list[VadEvent], int]:
    det = VoiceActivityDetector(model.scorer(rate), params)
    frame = rate // 50 * 2
    events: list[VadEvent] = []
    for i in range(0, len(pcm) - frame + 1, frame):
        events += det.process_sync(pcm[i : i + frame], i / 2 / rate)
    return events, det.silent_windows


@pytest.mark.parametrize("noise_dbfs", [None, -75.0])
@pytest.mark.parametrize("scale", [0.5, 0.1])  # espeak's level, and 14 dB under it
@pytest.mark.parametrize("rate", [16000, 8000])
@pytest.mark.parametrize("params", [VadParams(), BENCH], ids=["default", "bench"])
def test_on_speech_with_silences_and_noise_the_decisions_are_those_of_scoring_every_window(
    model: SileroModel, tmp_path: Path, noise_dbfs: float | None, scale: float, rate: int, params: VadParams
) -> None:
    import dataclasses

    pcm = _stream(tmp_path, rate, scale, noise_dbfs)
    every, none_skipped = _decisions(model, pcm, rate, dataclasses.replace(params, skip_silence=False))
    skipping, skipped = _decisions(model, pcm, rate, params)
    assert skipping == every
    assert sum(isinstance(e, VadStartedFrame) for e in every) >= 4 and none_skipped == 0
    assert (skipped > 0) == (noise_dbfs is None)  # digital silence is skipped; noise, however faint, is scored

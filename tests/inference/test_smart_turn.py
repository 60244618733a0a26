"""Smart Turn v3.2 on real speech; the turn audio buffer; analyses on an executor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from brisvox.audio import pcm16_to_array
from brisvox.core.errors import ConfigError
from brisvox.inference.errors import ModelNotFound, PoolClosed
from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.inference.smart_turn import EndOfTurnAnalyzer, SmartTurnModel, TurnAudio
from tests._speech import espeak_wav


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    try:
        return SmartTurnModel.load()
    except ModelNotFound as exc:
        pytest.skip(str(exc))


def test_the_model_answers_a_probability_for_speech_and_for_silence(model: SmartTurnModel, tmp_path: Path) -> None:
    speech = espeak_wav("i would like to book a table for two tonight", tmp_path, lead=0.2, trail=0.3)
    for audio in (pcm16_to_array(speech.pcm), np.zeros(16000, dtype=np.int16)):
        p = model.probability(audio)
        assert 0.0 <= p <= 1.0


async def test_an_analysis_runs_on_the_executor_and_returns_a_verdict(model: SmartTurnModel) -> None:
    async with InferencePool(PoolConfig(name="turn", threads=1)) as executor:
        analyzer = EndOfTurnAnalyzer(model, executor, threshold=0.5)
        await analyzer.warm()
        audio = (np.random.default_rng(1).standard_normal(16000 * 2) * 2000).astype(np.int16)
        verdict = await analyzer.analyze(audio)
        assert 0.0 <= verdict.probability <= 1.0
        assert verdict.complete == (verdict.probability > 0.5)
    with pytest.raises(PoolClosed):
        await analyzer.analyze(audio)


def test_the_threshold_must_be_a_probability(model: SmartTurnModel) -> None:
    with InferencePool(PoolConfig(threads=1)) as executor, pytest.raises(ConfigError, match="threshold"):
        EndOfTurnAnalyzer(model, executor, threshold=1.5)


def test_turn_audio_keeps_only_the_last_8_seconds() -> None:
    buf = TurnAudio()
    second = np.arange(16000, dtype=np.int16)
    for i in range(10):
        buf.append((second + i).astype(np.int16).tobytes())
    snap = buf.snapshot()
    assert snap.size == 128000
    assert snap[0] == 2 and snap[-1] == 15999 + 9
    assert buf.duration == 8.0
    buf.clear()
    assert buf.snapshot().size == 0

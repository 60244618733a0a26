"""Our numpy Whisper log-mel against Hugging Face's WhisperFeatureExtractor (test extra, no torch)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from brisvox.audio import pcm16_to_array
from brisvox.core.errors import InvalidInput
from brisvox.inference.mel import log_mel, mel_filters, normalize_waveform
from brisvox.inference.smart_turn import smart_turn_features
from tests._speech import espeak_wav


@pytest.fixture(scope="module")
def reference():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers = pytest.importorskip("transformers", reason="the test extra's transformers is not installed")
    return transformers.WhisperFeatureExtractor(
        feature_size=80, sampling_rate=16000, hop_length=160, chunk_length=8, n_fft=400
    )


def reference_features(reference, audio: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = reference(
        audio,
        sampling_rate=16000,
        return_tensors="np",
        padding="max_length",
        max_length=128000,
        truncation=True,
        do_normalize=True,
    )
    return np.asarray(out["input_features"])


def test_our_mel_filters_equal_the_reference_filters(reference) -> None:  # type: ignore[no-untyped-def]
    np.testing.assert_allclose(mel_filters(), reference.mel_filters.T, atol=1e-12)


def test_features_of_speech_match_the_reference(reference, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    speech = espeak_wav("could you tell me when the pharmacy opens", tmp_path, lead=0.2, trail=0.3)
    samples = pcm16_to_array(speech.pcm)
    padded = np.concatenate((np.zeros(128000 - samples.size, dtype=np.float32), samples / np.float32(32768.0)))
    ours = smart_turn_features(samples)
    theirs = reference_features(reference, padded.astype(np.float32))
    assert ours.shape == theirs.shape == (1, 80, 800)
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_features_of_noise_match_the_reference(reference) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(128000) * 0.05).astype(np.float32)
    np.testing.assert_allclose(log_mel(normalize_waveform(x))[None], reference_features(reference, x), atol=1e-4)


def test_longer_audio_keeps_its_last_8_seconds_and_shorter_audio_is_left_padded() -> None:
    rng = np.random.default_rng(5)
    long = (rng.standard_normal(16000 * 10) * 3000).astype(np.int16)
    np.testing.assert_array_equal(smart_turn_features(long), smart_turn_features(long[-128000:]))
    short = long[:16000]
    padded = np.concatenate((np.zeros(112000, dtype=np.int16), short))
    np.testing.assert_array_equal(smart_turn_features(short), smart_turn_features(padded))


def test_the_features_are_clamped_to_8_below_their_maximum_and_scaled() -> None:
    x = np.random.default_rng(2).standard_normal(16000)
    feats = log_mel(x)
    assert feats.shape == (80, 100)
    assert feats.max() - feats.min() <= 2.0 + 1e-6  # 8 log10 units, divided by 4


def test_too_little_audio_is_refused() -> None:
    with pytest.raises(InvalidInput, match="at least"):
        log_mel(np.zeros(10))

from __future__ import annotations

import numpy as np
import pytest

from brisvox.core.errors import InvalidInput
from brisvox.sim.scenario import ScenarioBuilder, SegmentKind


def _rms(pcm: bytes) -> float:
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768.0
    return float(np.sqrt(np.mean(x * x))) if len(x) else 0.0


def test_words_are_spread_over_the_speech_segment_in_proportion_to_their_length() -> None:
    sc = ScenarioBuilder().pause(0.5).say("hi there", duration=1.0).build()
    (utt,) = sc.utterances
    assert (utt.start, utt.end) == (0.5, 1.5)
    assert [w.word for w in utt.words] == ["hi", "there"]
    assert utt.words[0].end == pytest.approx(0.5 + 3 / 9)
    assert utt.words[1].end == pytest.approx(1.5)


def test_the_default_pace_is_two_and_a_half_words_per_second() -> None:
    sc = ScenarioBuilder().say("one two three four five").build()
    assert sc.duration == pytest.approx(2.0)


def test_the_rendering_is_loud_in_speech_and_silent_in_pauses() -> None:
    sc = ScenarioBuilder(sample_rate=8000).pause(0.4).say("book a table", duration=1.2).pause(0.4).build()
    pcm = sc.render()
    assert len(pcm) == 2 * 8000 * 2
    frames = sc.frames(0.02)
    assert len(frames) == 100
    loud = [i for i, f in enumerate(frames) if _rms(f) > 0.05]
    assert loud[0] == 20 and 76 <= loud[-1] < 80 and len(loud) > 45
    assert all(_rms(f) == 0.0 for f in frames[:20] + frames[80:])
    assert sc.is_speech_at(1.0) and not sc.is_speech_at(0.1)
    assert [s.kind for s in sc.segments] == [SegmentKind.SILENCE, SegmentKind.SPEECH, SegmentKind.SILENCE]


def test_a_noise_floor_is_quiet_but_not_zero_and_the_same_for_the_same_seed() -> None:
    a = ScenarioBuilder(noise_level=0.001, seed=3).pause(0.2).build().render()
    b = ScenarioBuilder(noise_level=0.001, seed=3).pause(0.2).build().render()
    assert a == b and 0 < _rms(a) < 0.01


def test_empty_speech_and_zero_pauses_are_refused() -> None:
    with pytest.raises(InvalidInput):
        ScenarioBuilder().say("   ")
    with pytest.raises(InvalidInput):
        ScenarioBuilder().pause(0)

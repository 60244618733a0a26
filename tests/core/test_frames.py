from __future__ import annotations

import dataclasses

import pytest

from brisvox.core import frames as F


def test_system_frames_are_never_stale() -> None:
    for frame in (F.StartFrame(), F.StopFrame(), F.CancelFrame(), F.InterruptFrame(new_epoch=1)):
        assert not frame.is_stale(1_000_000)


def test_control_and_data_frames_of_an_older_epoch_are_stale() -> None:
    assert F.UserTurnStarted(epoch=2, at=0.0).is_stale(3)
    assert F.LlmTextFrame(epoch=2, text="a").is_stale(3)
    assert not F.LlmTextFrame(epoch=3, text="a").is_stale(3)
    assert not F.LlmTextFrame(epoch=4, text="a").is_stale(3)


def test_word_timings_survive_any_interrupt() -> None:
    assert not F.WordTimingsFrame(epoch=0, utterance=1, words=()).is_stale(99)


def test_audio_holds_whole_samples_and_derives_its_duration() -> None:
    frame = F.InputAudioFrame(epoch=0, pcm=b"\x01\x00" * 320, sample_rate=16000, seq=7)
    assert frame.sample_count == 320
    assert frame.duration == 0.02
    out = F.OutputAudioFrame(epoch=1, pcm=b"\x00\x00" * 480, sample_rate=24000)
    assert out.duration == 0.02
    with pytest.raises(ValueError, match="whole samples, got 3 bytes"):
        F.InputAudioFrame(epoch=0, pcm=b"\x00\x00\x00", sample_rate=16000)
    with pytest.raises(ValueError, match="sample_rate must be positive"):
        F.OutputAudioFrame(epoch=0, pcm=b"", sample_rate=0)


def test_no_frame_repr_shows_text_or_samples() -> None:
    secret = "my card number is 4111"
    samples = b"\x7f\x7f" * 8
    shown = [
        F.LlmTextFrame(epoch=1, text=secret),
        F.TranscriptFrame(epoch=1, text=secret, is_final=True),
        F.UserTextFrame(epoch=1, text=secret),
        F.WordTimingsFrame(epoch=1, utterance=2, words=(F.WordTiming(secret, 0.0, 0.5),)),
        F.InputAudioFrame(epoch=1, pcm=samples, sample_rate=8000),
        F.OutputAudioFrame(epoch=1, pcm=samples, sample_rate=8000),
    ]
    for frame in shown:
        text = repr(frame)
        assert "4111" not in text, text
        assert "\\x7f" not in text, text
    assert repr(F.WordTiming(secret, 0.0, 0.5)).count("4111") == 0
    assert "<16 bytes>" in repr(shown[5])
    assert "epoch=1" in repr(shown[0])


def test_frames_are_frozen_and_slotted() -> None:
    frame = F.LlmTextFrame(epoch=0, text="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        frame.text = "y"  # type: ignore[misc]
    assert not hasattr(frame, "__dict__")


def test_every_frame_class_declares_its_class() -> None:
    for name in F.__all__:
        obj = getattr(F, name)
        if isinstance(obj, type) and issubclass(obj, F.Frame) and obj not in (F.Frame,):
            assert obj.frame_class in F.FrameClass


def test_malformed_audio_raises_a_brisvox_error_that_is_still_a_value_error() -> None:
    from brisvox.core.errors import InvalidAudio, InvalidInput

    with pytest.raises(InvalidAudio, match="whole samples") as caught:
        F.InputAudioFrame(epoch=0, pcm=b"\x00", sample_rate=16000)
    assert isinstance(caught.value, InvalidInput) and isinstance(caught.value, ValueError)


def test_a_turn_asks_for_a_text_only_reply_only_when_every_part_of_it_does() -> None:
    spoken, text = F.ReplyMode.SPOKEN, F.ReplyMode.TEXT
    assert text.joined(text) is text
    assert [a.joined(b) for a, b in ((text, spoken), (spoken, text), (spoken, spoken))] == [spoken] * 3

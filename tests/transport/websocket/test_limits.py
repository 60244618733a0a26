from __future__ import annotations

from brisvox.transport.websocket.limits import FLOOD_DECAY, AudioRateLimit, AudioVerdict


def test_audio_at_real_time_always_passes() -> None:
    limit = AudioRateLimit(ratio=1.25, burst=2.0, flood=5.0)
    assert all(limit.admit(0.02, i * 0.02) is AudioVerdict.PASS for i in range(10_000))
    assert limit.dropped == 0.0


def test_a_burst_passes_up_to_its_size_then_frames_are_dropped() -> None:
    limit = AudioRateLimit(ratio=1.25, burst=2.0, flood=5.0)
    verdicts = [limit.admit(1 / 64, 0.0) for _ in range(192)]  # binary fractions: exact sums
    assert verdicts.count(AudioVerdict.PASS) == 128
    assert set(verdicts[128:]) == {AudioVerdict.DROP}
    assert limit.dropped == 1.0


def test_tokens_accrue_at_the_ratio_and_never_past_the_burst() -> None:
    limit = AudioRateLimit(ratio=1.25, burst=2.0, flood=50.0)
    while limit.admit(0.02, 0.0) is AudioVerdict.PASS:
        pass
    assert limit.admit(1.0, 0.8) is AudioVerdict.PASS  # 0.8 s x 1.25 = 1 s of audio
    assert limit.admit(3.0, 100.0) is AudioVerdict.DROP  # capped at the 2 s burst


def test_dropped_audio_past_the_flood_limit_is_a_flood_and_the_count_decays() -> None:
    limit = AudioRateLimit(ratio=1.25, burst=0.0, flood=1.0)
    assert limit.admit(0.8, 0.0) is AudioVerdict.DROP
    assert limit.admit(0.3, 0.0) is AudioVerdict.FLOOD
    calm = AudioRateLimit(ratio=1.25, burst=0.0, flood=1.0)
    assert calm.admit(0.8, 0.0) is AudioVerdict.DROP
    # after 0.4/FLOOD_DECAY seconds the excess is down to 0.4 s; tokens refilled but burst is 0
    assert calm.admit(0.3, 0.4 / FLOOD_DECAY) is AudioVerdict.DROP

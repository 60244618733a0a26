from __future__ import annotations

from brisvox.core.frames import WordTiming
from brisvox.providers.tts import TtsAudio, TtsCancelled, TtsEvent, TtsFlushed, TtsSessionBase, TtsWords


def test_tts_audio_knows_its_duration_and_its_repr_shows_no_samples() -> None:
    chunk = TtsAudio(context_id=3, pcm=b"\x01\x00" * 2400, sample_rate=24_000)
    assert chunk.duration == 0.1
    assert repr(chunk) == "TtsAudio(context=3, <4800 bytes>, 24000 Hz)"


def test_tts_words_repr_counts_words_without_showing_them() -> None:
    words = TtsWords(context_id=1, words=(WordTiming("hello", 0.0, 0.3), WordTiming("there", 0.3, 0.6)))
    assert repr(words) == "TtsWords(context=1, <2 words>)"


class _Session(TtsSessionBase):
    def __init__(self, capacity: int = 8) -> None:
        super().__init__(capacity=capacity, name="test tts")
        self.stopped: list[int] = []

    async def send_text(self, context_id: int, text: str) -> None:
        raise NotImplementedError

    async def flush(self, context_id: int) -> None:
        raise NotImplementedError

    def _on_cancel(self, context_id: int) -> None:
        self.stopped.append(context_id)


def _audio(ctx: int) -> TtsAudio:
    return TtsAudio(context_id=ctx, pcm=b"\0\0", sample_rate=24_000)


async def _read(session: _Session, n: int) -> list[TtsEvent]:
    return [await anext(session) for _ in range(n)]


async def test_cancel_purges_the_contexts_queued_events_and_keeps_the_other_contexts() -> None:
    async with _Session() as s:
        for ev in (_audio(1), _audio(2), _audio(1), TtsFlushed(context_id=2)):
            await s._emit(ev)
        s.cancel(1)
        s.cancel(1)
        assert await _read(s, 3) == [_audio(2), TtsFlushed(context_id=2), TtsCancelled(context_id=1)]
        assert s.stopped == [1]


async def test_events_a_producer_emits_after_the_cancel_are_never_delivered() -> None:
    async with _Session() as s:
        s.cancel(5)
        await s._emit(_audio(5))
        await s._emit(_audio(6))
        assert await _read(s, 2) == [TtsCancelled(context_id=5), _audio(6)]


async def test_a_cancel_notice_overtakes_a_full_event_channel() -> None:
    async with _Session(capacity=2) as s:
        await s._emit(_audio(2))
        await s._emit(_audio(3))
        s.cancel(1)
        assert await _read(s, 3) == [TtsCancelled(context_id=1), _audio(2), _audio(3)]

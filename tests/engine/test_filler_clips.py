"""Pre-rendered filler clips in a call (virtual time): played instead of the provider, in order, cut at a barge-in."""

from __future__ import annotations

import asyncio
import struct

import pytest

from brisvox.agent.context import AssistantMessage
from brisvox.agent.played import CUT_MARKER
from brisvox.agent.tools import FillerPhrase, FillerPolicy, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError, DeadlineExceeded
from brisvox.core.frames import WordTiming
from brisvox.core.tasks import TaskScope
from brisvox.engine import ClipCache, FillerClip, FillerClipStore, render_clips
from brisvox.providers.errors import ProviderError
from brisvox.providers.tts import TtsConfig
from brisvox.sim import Call, LatencyProfile, MockTts, MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport.events import WireAudioOut
from tests.engine.harness import OBJ, RATE, Counter, SimResult, registry, simulate

WEATHER = ToolSpec(name="get_weather", description="The weather on a day.", parameters=OBJ, timeout=10.0)
PHRASE = "One moment please, let me check that"
CLIP_SAMPLE = 1234  # every sample of the clip: its frames are recognizable on the caller's side
ANSWER = "It will be sunny."


def clip(seconds: float, rate: int = RATE) -> FillerClip:
    return FillerClip.with_spread_words(PHRASE, struct.pack("<h", CLIP_SAMPLE) * int(seconds * rate), rate)


def policy() -> FillerPolicy:
    return FillerPolicy(phrases=[FillerPhrase(PHRASE, clip="check")])


def kinds(result: SimResult) -> list[str]:
    """What the caller heard, frame by frame: 'clip' or 'tts', repeats collapsed."""
    out: list[str] = []
    for h in result.heard:
        if isinstance(h.item, WireAudioOut):
            kind = "clip" if struct.unpack_from("<h", h.item.frame.pcm)[0] == CLIP_SAMPLE else "tts"
            if not out or out[-1] != kind:
                out.append(kind)
    return out


def utterances_in_order(result: SimResult) -> bool:
    """Whether each utterance's audio reached the caller whole, one utterance after the other."""
    utts = [h.item.frame.utterance for h in result.heard if isinstance(h.item, WireAudioOut)]
    return utts == sorted(utts)


def provider_texts(result: SimResult) -> list[str]:
    assert result.tts is not None
    return [t for s in result.tts.sessions for t in s.texts.values()]


def filler_texts(result: SimResult) -> list[str]:
    msgs = result.report.context.messages
    return [m.text for m in msgs if isinstance(m, AssistantMessage) and m.text and m.text != ANSWER]


async def call_with_clip(
    store: FillerClipStore, *, tool_seconds: float = 3.0, barge_in_after: float | None = None,
    first_words: str | None = None, tts: MockTtsConfig | None = None,
) -> tuple[SimResult, Counter]:
    clock = SimClock()
    tool = Counter(clock, seconds=tool_seconds, answer={"sky": "sunny"})
    first = [Say(first_words)] if first_words else []
    llm = ScriptedLlm(clock, [[*first, Call(name="get_weather", arguments={"day": "friday"})], [Say(ANSWER)],
                              [Say("Sure.")], [Say("Sure.")]])
    builder = ScenarioBuilder().pause(0.5).say("what is the weather on friday")
    if barge_in_after is None:
        builder = builder.pause(8.0)
    else:
        builder = builder.pause(barge_in_after).say("wait a second").pause(6.0)
    result = await simulate(clock, builder.build(), llm, tools=registry(w=(WEATHER, tool)), filler=policy(),
                            clips=store, tts=tts)
    return result, tool


async def test_a_cued_clip_speaks_the_filler_whole_and_the_provider_never_hears_the_phrase() -> None:
    result, tool = await call_with_clip(FillerClipStore({"check": clip(1.0)}))
    assert (result.report.clips_played, result.report.clip_fallbacks) == (1, 0)
    assert kinds(result) == ["clip", "tts"]  # the filler, then the answer
    assert utterances_in_order(result)
    assert PHRASE not in " ".join(provider_texts(result))
    first_clip = next(h.at for h in result.heard if isinstance(h.item, WireAudioOut))
    assert first_clip - tool.started[0] == pytest.approx(1.2, abs=0.05)  # at the filler delay
    assert filler_texts(result) == [PHRASE]  # played whole: in the context whole
    result.report.context.validate()


async def test_an_answer_ready_while_the_clip_plays_waits_for_it() -> None:
    # The tool answers 0.3 s into a 2 s clip: the answer's audio must not overtake the clip.
    result, _ = await call_with_clip(FillerClipStore({"check": clip(2.0)}), tool_seconds=1.5)
    assert result.report.clips_played == 1
    assert kinds(result) == ["clip", "tts"]
    clip_frames = [h for h in result.heard if isinstance(h.item, WireAudioOut) and h.item.frame.pcm[:2] ==
                   struct.pack("<h", CLIP_SAMPLE)]
    assert len(clip_frames) == 100  # every 20 ms of the 2 s clip reached the caller
    assert utterances_in_order(result)


async def test_a_clip_waits_for_the_words_spoken_before_it() -> None:
    # "Let me look" takes about 2.6 s of real-time synthesis; the filler is due 1.2 s after the
    # tool starts, so the clip is cued while the provider still speaks and must follow it.
    result, _ = await call_with_clip(
        FillerClipStore({"check": clip(1.0)}), tool_seconds=4.0, first_words="Let me look that up for you now.",
        tts=MockTtsConfig(realtime_factor=1.0),
    )
    assert result.report.clips_played == 1
    assert kinds(result) == ["tts", "clip", "tts"] and utterances_in_order(result)


@pytest.mark.parametrize("store", [FillerClipStore({}), FillerClipStore({"check": clip(1.0, rate=8000)})],
                         ids=["unknown key", "other rate"])
async def test_a_clip_that_cannot_play_falls_back_to_the_provider(store: FillerClipStore) -> None:
    result, _ = await call_with_clip(store)
    assert result.report.clips_played == 0
    assert "clip" not in kinds(result)
    if len(store):  # the key is known, so the policy cued it; the stage could not play it
        assert result.report.clip_fallbacks == 1
    assert PHRASE in provider_texts(result)
    assert filler_texts(result) == [PHRASE]


async def test_a_barge_in_mid_clip_leaves_only_the_heard_words_in_the_context() -> None:
    # The question ends at about 2.3 s; the turn ends 0.5 s later, the tool starts, the clip at
    # +1.2 s plays for 2 s.  The caller speaks again 4.6 s after the question: mid-clip.
    result, _ = await call_with_clip(FillerClipStore({"check": clip(2.0)}), tool_seconds=5.0, barge_in_after=2.6)
    assert result.report.clips_played == 1 and result.report.interrupts >= 1
    heard = [t.removesuffix(CUT_MARKER) for t in filler_texts(result)]
    assert len(heard) == 1 and heard[0] != PHRASE and PHRASE.startswith(heard[0].rstrip(",. ")), heard
    result.report.context.validate()


async def test_a_barge_in_before_the_clip_plays_drops_it_unheard() -> None:
    result, _ = await call_with_clip(
        FillerClipStore({"check": clip(1.0)}), tool_seconds=5.0, first_words="Let me look that up for you now.",
        tts=MockTtsConfig(realtime_factor=1.0), barge_in_after=1.9,
    )
    assert result.report.clips_dropped == 1 and result.report.clips_played == 0
    assert "clip" not in kinds(result)
    assert not any(text.startswith("One moment") for text in filler_texts(result))  # never heard, never said


def test_a_clip_rejects_odd_bytes_and_words_past_its_end() -> None:
    with pytest.raises(ConfigError, match="whole PCM16 samples"):
        FillerClip(b"\x00", RATE, ())
    with pytest.raises(ConfigError, match="outside the clip"):
        FillerClip(b"\x00\x00" * 160, RATE, (WordTiming("late", 0.0, 1.0),))


def test_the_store_hands_out_a_clip_only_at_its_own_rate() -> None:
    store = FillerClipStore({"check": clip(0.5)})
    assert store.has_clip("check") and not store.has_clip("other")
    assert store.get("check", RATE) is not None
    assert store.get("check", 8000) is None and store.get("other", RATE) is None


async def test_clips_rendered_once_through_the_provider_carry_its_audio_and_words_and_play_in_a_call() -> None:
    clock = SimClock()
    store = await render_clips(MockTts(clock), TtsConfig(sample_rate=RATE), {"check": PHRASE}, clock)
    rendered = store.get("check", RATE)
    assert rendered is not None and [w.word for w in rendered.words] == PHRASE.split()
    assert rendered.duration == pytest.approx(len(PHRASE) / MockTtsConfig().chars_per_second, abs=0.01)
    result, _ = await call_with_clip(store)
    assert result.report.clips_played == 1 and PHRASE not in " ".join(provider_texts(result))


async def test_rendering_names_the_clip_the_provider_failed_and_gives_up_at_its_deadline() -> None:
    clock = SimClock()
    broken = MockTts(clock, MockTtsConfig(disconnect_after=0.1))
    with pytest.raises(ProviderError, match="'check'"):
        await render_clips(broken, TtsConfig(sample_rate=RATE), {"check": PHRASE}, clock)
    slow = MockTts(clock, MockTtsConfig(latency=LatencyProfile(first_event=30.0)))
    start = clock.now()
    with pytest.raises(DeadlineExceeded, match="1 filler clip"):
        await render_clips(slow, TtsConfig(sample_rate=RATE), {"check": PHRASE}, clock, timeout=5.0)
    assert clock.now() - start == pytest.approx(5.0)


async def test_the_clip_cache_renders_once_per_rate_and_does_not_retry_a_failure() -> None:
    clock = SimClock()
    cache = ClipCache(MockTts(clock), TtsConfig(), {"check": PHRASE}, clock)
    async with TaskScope("calls") as scope:
        first = cache.start(RATE, scope)
        assert first is not None and cache.store(RATE) is None  # the first call speaks text
        assert cache.start(RATE, scope) is None  # already rendering
        await first
        store = cache.store(RATE)
        assert store is not None and store.get("check", RATE) is not None
        assert cache.start(RATE, scope) is None and cache.store(8000) is None
        broken = ClipCache(MockTts(clock, MockTtsConfig(disconnect_after=0.1)), TtsConfig(), {"check": PHRASE}, clock)
        failed = broken.start(RATE, scope)
        assert failed is not None
        await failed
        assert broken.store(RATE) is None and broken.start(RATE, scope) is None  # not retried


async def test_a_rendering_cancelled_with_its_call_starts_again_with_the_next() -> None:
    clock = SimClock()
    slow = MockTts(clock, MockTtsConfig(latency=LatencyProfile(first_event=2.0)))
    cache = ClipCache(slow, TtsConfig(), {"check": PHRASE}, clock)
    async with TaskScope("calls") as scope:
        task = cache.start(RATE, scope)
        assert task is not None
        await clock.sleep(0.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        again = cache.start(RATE, scope)
        assert again is not None
        await again
        assert cache.store(RATE) is not None

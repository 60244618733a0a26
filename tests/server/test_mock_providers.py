"""``provider = "mock"``: named in an agent file, checked like every provider, built with its latencies."""

from __future__ import annotations

from pathlib import Path

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.tasks import TaskScope
from brisvox.providers.llm import LlmRequest, TextDelta
from brisvox.providers.stt import SttConfig, Transcript
from brisvox.providers.tts import TtsAudio, TtsConfig
from brisvox.server.agent_file import AgentFileError, parse_agent_file
from brisvox.server.call_providers import build_call_providers
from brisvox.server.mock_providers import MOCK_REPLY, MOCK_TRANSCRIPT, mock_llm, mock_stt, mock_tts
from brisvox.sim import MockStt, MockTts, ScriptedLlm

BASE = """\
[agent]
name = "capacity"
prompt = "You answer the phone."
"""

MOCKS = BASE + """
[stt]
provider = "mock"
options = { final_latency = 0.2, text = "a table for two." }

[llm]
provider = "mock"
options = { first_token = 0.4, token_gap = 0.05, reply = "Sure thing. Two it is." }

[tts]
provider = "mock"
options = { first_audio = 0.1, chars_per_second = 20, chunk_seconds = 0.02 }
"""


def problems(text: str) -> list[str]:
    with pytest.raises(AgentFileError) as info:
        parse_agent_file(text, source="agent.toml")
    return [str(p) for p in info.value.problems]


def test_an_agent_file_names_the_mocks_with_their_latency_options() -> None:
    d = parse_agent_file(MOCKS, source="agent.toml")
    assert (d.stt.provider, d.llm.provider, d.tts.provider) == ("mock", "mock", "mock")
    assert dict(d.stt.options) == {"final_latency": 0.2, "text": "a table for two."}
    assert dict(d.llm.options) == {"first_token": 0.4, "token_gap": 0.05, "reply": "Sure thing. Two it is."}
    assert d.tts.options["chars_per_second"] == 20.0 and isinstance(d.tts.options["chars_per_second"], float)


def test_a_bad_mock_option_is_named_with_its_position_and_what_the_mock_takes() -> None:
    text = BASE + """
[stt]
provider = "mock"
options = { final_latncy = 0.2 }

[llm]
provider = "mock"
options = { first_token = "fast" }

[tts]
provider = "mock"
options = { first_audio = 11.0 }
"""
    assert problems(text) == [
        "agent.toml:7:13: stt.options.final_latncy: unknown option for stt provider 'mock' "
        "(known: final_latency, text)",
        "agent.toml:11:27: llm.options.first_token: expected a number for llm provider 'mock', got 'fast' (a string)",
        "agent.toml:15:27: tts.options.first_audio: expected a value from 0 to 10 for tts provider 'mock', "
        "got 11.0 (a number)",
    ]


def test_a_mock_takes_no_key() -> None:
    text = BASE + '\n[llm]\nprovider = "mock"\napi_key_env = "SOME_KEY"\n'
    assert problems(text) == ["agent.toml:7:1: llm.api_key_env: llm provider 'mock' takes no key"]


def test_serve_builds_the_mocks_the_file_names_without_keeping_a_record_per_call() -> None:
    import asyncio

    built = build_call_providers(parse_agent_file(MOCKS, source=Path("agent.toml")), SimClock(), {})
    try:
        p = built.providers
        assert isinstance(p.stt, MockStt) and isinstance(p.llm, ScriptedLlm) and isinstance(p.tts, MockTts)
        assert p.stt.config.final_latency == 0.2 and p.stt.config.text == "a table for two."
        assert p.tts.config.chars_per_second == 20.0 and p.tts.config.latency.first_event == 0.1
        assert not built.summaries  # the mock cannot summarize: requests keep the newest turns
        assert built.llm_label.startswith("mock")
    finally:
        asyncio.run(built.aclose())


async def test_the_mock_stt_answers_every_finalize_with_its_text_after_its_latency() -> None:
    clock = SimClock()
    stt = mock_stt({}, clock)
    got: list[tuple[float, Transcript]] = []
    async with await stt.connect(SttConfig()) as session, TaskScope("test") as scope:

        async def read() -> None:
            async for event in session:
                if isinstance(event, Transcript):
                    got.append((round(clock.now(), 3), event))

        scope.spawn(read(), name="reader")
        await session.send_audio(bytes(640))
        await session.finalize()
        await clock.sleep(1.0)
        await session.finalize()
        await clock.sleep(1.0)
        await session.aclose()
    assert [(t, e.text, e.is_final, e.from_finalize) for t, e in got] == [
        (0.15, MOCK_TRANSCRIPT, True, True), (1.15, MOCK_TRANSCRIPT, True, True)]
    assert stt.sessions == []  # no record kept: a server would grow with every call


async def test_the_mock_llm_streams_its_reply_word_by_word_after_the_first_token_latency() -> None:
    clock = SimClock()
    llm = mock_llm({"token_gap": 0.02}, clock)
    times: list[float] = []
    text = ""
    async with llm.stream(LlmRequest(messages=())) as stream:
        async for event in stream:
            if isinstance(event, TextDelta):
                times.append(round(clock.now(), 3))
                text += event.text
    assert text == MOCK_REPLY and len(times) == 19
    assert times[0] == 0.3 and times[1] == 0.32 and llm.requests == []


async def test_the_mock_tts_speaks_a_tone_as_long_as_the_text_after_its_first_audio_latency() -> None:
    clock = SimClock()
    tts = mock_tts({"chars_per_second": 10.0}, clock)
    first: float | None = None
    samples = 0
    async with await tts.connect(TtsConfig(sample_rate=16000)) as session:
        await session.send_text(1, "Sure. ")  # 6 characters: 0.6 s at 10 per second
        await session.flush(1)
        async for event in session:
            if isinstance(event, TtsAudio):
                first = clock.now() if first is None else first
                samples += len(event.pcm) // 2
            elif not isinstance(event, TtsAudio) and samples:
                break
    assert first == pytest.approx(0.1) and samples == 9600
    assert tts.sessions == []

"""``provider = "mock"`` in an agent file: the simulation mocks of :mod:`brisvox.sim` with
fixed latencies, for capacity tests (``brisvox loadtest``, ``bench/density``) of a real
server with a real VAD, transport and engine, and no model or vendor behind it.

* STT: every turn's ``finalize`` (sent at the VAD stop) is answered ``final_latency``
  seconds later with one final of ``text``, whatever the caller said.
* LLM: every request is answered with ``reply``, its first word ``first_token`` seconds
  after the request and each next word ``token_gap`` later.
* TTS: each text segment is a tone of ``len(text) / chars_per_second`` seconds, its first
  chunk ``first_audio`` seconds after the segment's text, in chunks of ``chunk_seconds``
  made at ``realtime_factor`` (0: all at once).

The defaults are the latencies the density benchmark compares frameworks at
(docs/PERFORMANCE.md).  The option names and ranges are the catalog's
(:mod:`brisvox.server.providers`); the mocks keep no per-call record (``record=False``), so
a long-running server does not grow.
"""

from __future__ import annotations

from collections.abc import Mapping

from brisvox.core.clock import Clock
from brisvox.sim import LatencyProfile, MockStt, MockSttConfig, MockTts, MockTtsConfig, Say, ScriptedLlm

__all__ = ["MOCK_REPLY", "MOCK_TRANSCRIPT", "mock_llm", "mock_stt", "mock_tts"]

MOCK_TRANSCRIPT = "Hi I would like to check the status of my order."
MOCK_REPLY = ("Sure. I can help with that right away let me look up your order status in our system now.")
"""The Pipecat reference bot's 20 tokens as 19 words (its last token is the final "."): the first
sentence ends with the first word."""


def _number(options: Mapping[str, object], name: str, default: float) -> float:
    value = options.get(name, default)
    assert isinstance(value, int | float)  # the agent file checked the type and range
    return float(value)


def mock_stt(options: Mapping[str, object], clock: Clock) -> MockStt:
    text = options.get("text", MOCK_TRANSCRIPT)
    config = MockSttConfig(final_latency=_number(options, "final_latency", 0.15), text=str(text))
    return MockStt(clock, config, name="mock-stt", record=False)


def mock_llm(options: Mapping[str, object], clock: Clock) -> ScriptedLlm:
    reply = str(options.get("reply", MOCK_REPLY))
    latency = LatencyProfile(first_event=_number(options, "first_token", 0.3),
                             per_event=_number(options, "token_gap", 0.01))
    return ScriptedLlm(clock, lambda _request: [Say(reply)], latency=latency, name="mock-llm", record=False)


def mock_tts(options: Mapping[str, object], clock: Clock) -> MockTts:
    config = MockTtsConfig(
        latency=LatencyProfile(first_event=_number(options, "first_audio", 0.1)),
        chars_per_second=_number(options, "chars_per_second", 14.0),
        chunk_seconds=_number(options, "chunk_seconds", 0.04),
        realtime_factor=_number(options, "realtime_factor", 0.0),
    )
    return MockTts(clock, config, name="mock-tts", record=False)

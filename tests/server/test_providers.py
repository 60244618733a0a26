"""The provider catalog: its option tables match the adapters they are handed to."""

from __future__ import annotations

import dataclasses
import typing

from brisvox.engine import LlmConfig
from brisvox.providers.cloud import (
    AnthropicOptions,
    CartesiaOptions,
    DeepgramOptions,
    ElevenLabsOptions,
    GeminiOptions,
    OpenAiCompatOptions,
    OpenAiSpeechOptions,
)
from brisvox.server.providers import CATALOG, LLM_REQUEST_OPTIONS, Stage, lookup

ADAPTERS: dict[tuple[Stage, str], type] = {
    (Stage.STT, "deepgram"): DeepgramOptions, (Stage.TTS, "cartesia"): CartesiaOptions,
    (Stage.TTS, "elevenlabs"): ElevenLabsOptions, (Stage.TTS, "openai"): OpenAiSpeechOptions,
    (Stage.LLM, "anthropic"): AnthropicOptions, (Stage.LLM, "gemini"): GeminiOptions,
    **{(Stage.LLM, name): OpenAiCompatOptions for name in ("openai", "openrouter", "ollama", "vllm")},
}


def test_every_catalog_option_is_a_field_of_its_adapters_options_with_that_type() -> None:
    for (stage, name), cls in ADAPTERS.items():
        entry = lookup(stage, name)
        assert entry is not None and entry.options is not None
        hints = typing.get_type_hints(cls)
        fields = {f.name for f in dataclasses.fields(cls)}
        for option, kind in entry.options.items():
            if stage is Stage.LLM and option in LLM_REQUEST_OPTIONS:
                continue
            assert option in fields, (name, option)
            assert hints[option] is kind or kind in typing.get_args(hints[option]), (name, option)


def test_an_llms_request_options_are_fields_of_the_engines_llm_config_with_that_type() -> None:
    hints = typing.get_type_hints(LlmConfig)
    for entry in CATALOG:
        if entry.stage is Stage.LLM and entry.options is not None:
            for option in LLM_REQUEST_OPTIONS:
                if option in entry.options:
                    assert entry.options[option] in typing.get_args(hints[option]), (entry.name, option)


def test_every_provider_lists_its_options_and_every_model_llm_takes_temperature_and_max_tokens() -> None:
    for entry in CATALOG:
        assert entry.options is not None, entry.name
        if entry.stage is Stage.LLM and entry.name not in ("scripted", "auto", "mock"):
            assert {"temperature", "max_tokens"} <= set(entry.options), entry.name
            assert entry.bounds["temperature"] == (0.0, 2.0) and entry.bounds["max_tokens"][0] == 1


def test_every_numeric_option_has_a_finite_range() -> None:
    for entry in CATALOG:
        assert entry.options is not None
        for option, kind in entry.options.items():
            if kind in (int, float):
                low, high = entry.bounds[option]
                assert low is not None and high is not None and low <= high, (entry.name, option)

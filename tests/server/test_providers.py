"""The provider catalog: its option tables match the adapters they are handed to."""

from __future__ import annotations

import dataclasses
import typing

from brisvox.providers.cloud import (
    CartesiaOptions,
    DeepgramOptions,
    ElevenLabsOptions,
    OpenAiSpeechOptions,
)
from brisvox.server.providers import CATALOG, Stage, lookup

ADAPTERS = {(Stage.STT, "deepgram"): DeepgramOptions, (Stage.TTS, "cartesia"): CartesiaOptions,
            (Stage.TTS, "elevenlabs"): ElevenLabsOptions, (Stage.TTS, "openai"): OpenAiSpeechOptions}


def test_every_catalog_option_is_a_field_of_its_adapters_options_with_that_type() -> None:
    for (stage, name), cls in ADAPTERS.items():
        entry = lookup(stage, name)
        assert entry is not None and entry.options is not None
        hints = typing.get_type_hints(cls)
        fields = {f.name for f in dataclasses.fields(cls)}
        for option, kind in entry.options.items():
            assert option in fields, (name, option)
            assert hints[option] is kind or kind in typing.get_args(hints[option]), (name, option)


def test_every_stt_and_tts_provider_lists_its_options() -> None:
    for entry in CATALOG:
        if entry.stage is not Stage.LLM:
            assert entry.options is not None, entry.name

"""The configuration of one call: what the engine needs besides the providers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.segmenter import SegmenterConfig
from brisvox.agent.tools import FillerConfig, ToolEngineConfig
from brisvox.agent.turn import Adaptive, TurnPolicy
from brisvox.agent.window import WindowPolicy
from brisvox.core.errors import ConfigError
from brisvox.engine.hooks import Hook
from brisvox.providers.stt import SttConfig
from brisvox.providers.tts import TtsConfig

__all__ = ["DEFAULT_FALLBACK_LINE", "DEFAULT_HEARD_FALLBACK", "EngineConfig", "LlmConfig", "SpeculationMode", "SummaryConfig", "Timeouts"]

DEFAULT_FALLBACK_LINE = "Sorry, I'm having trouble answering right now. Could you say that again?"
# When the model fails on a turn with words: the caller hears what was understood (a misheard
# "at table 42" is noticed and said again), then the same request to repeat.
DEFAULT_HEARD_FALLBACK = "Sorry, I couldn't answer that in time. I heard: {heard}. Could you say it again?"
HEARD_WORDS = 20  # the last words of the turn a heard fallback restates


class SpeculationMode(enum.Enum):
    """When the model may start before the turn is final."""

    OFF = "off"  # the request waits for the end of the turn (the default)
    # At each pause with words the model starts on them; its text is held back, its
    # read-only tools run, its side-effect tools are held.  A turn that ends with the same
    # words commits it (spoken, held calls run once); other words drop it (nothing held runs).
    AT_PAUSE = "at_pause"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Every network wait of a call, in seconds of the injected clock."""

    connect: float = 5.0
    first_token: float = 8.0
    idle: float = 15.0
    stop: float = 5.0  # a graceful stop of the pipeline

    def __post_init__(self) -> None:
        for name in ("connect", "first_token", "idle", "stop"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"Timeouts.{name} must be > 0 seconds, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryConfig:
    """The chained summary of what the context window drops (docs/FLOWS.md, "Long calls in the engine").

    ``enabled``: make summaries; ``run_call`` uses its ``summarizer`` argument, else an
    ``LlmSummarizer`` over the call's LLM.  ``timeout``: seconds (injected clock) one
    background refresh may take, all its rounds together.
    """

    enabled: bool = True
    timeout: float = 20.0

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ConfigError(f"SummaryConfig.timeout must be > 0 seconds, got {self.timeout!r}")


@dataclass(frozen=True, slots=True)
class LlmConfig:
    system_prompt: str = "You are a helpful voice assistant. Answer briefly."
    max_tool_rounds: int = 6
    fallback_line: str = DEFAULT_FALLBACK_LINE
    # The fallback when the model fails on a turn with words, ``{heard}`` the caller's last
    # words (at most HEARD_WORDS); None: the fallback_line.
    heard_fallback: str | None = DEFAULT_HEARD_FALLBACK
    max_tokens: int | None = None
    temperature: float | None = None
    filler: FillerConfig = FillerConfig.DEFAULT  # what the runner builds its filler policy from
    # Spoken when the call starts, before the caller says anything (epoch 0); None: the bot waits.
    greeting: str | None = None

    def __post_init__(self) -> None:
        if self.max_tool_rounds < 1:
            raise ConfigError(f"LlmConfig.max_tool_rounds must be >= 1, got {self.max_tool_rounds}")
        if self.greeting is not None and not self.greeting.strip():
            raise ConfigError("LlmConfig.greeting must be None or some text, got an empty string")
        if self.heard_fallback is not None and self.heard_fallback.count("{heard}") != 1:
            raise ConfigError(f"LlmConfig.heard_fallback must hold {{heard}} once, got {self.heard_fallback!r}")

    def fallback_for(self, heard: str) -> str:
        """The line spoken when the model fails on a turn whose caller said ``heard``."""
        words = heard.split()[-HEARD_WORDS:]
        if self.heard_fallback is None or not words:
            return self.fallback_line
        return self.heard_fallback.replace("{heard}", " ".join(words).rstrip(".?!,;:"))


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One call's behaviour.  Providers are passed to ``run_call`` separately (the VAD's
    parameters belong to the ``Providers.vad`` factory, which builds one detector per call)."""

    turn: TurnPolicy = field(default_factory=Adaptive)
    interruption: InterruptionPolicy = field(default_factory=InterruptionPolicy.disabled)
    stt: SttConfig = field(default_factory=SttConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    timeouts: Timeouts = field(default_factory=Timeouts)
    tools: ToolEngineConfig = field(default_factory=ToolEngineConfig)
    # Each request carries the newest turns (None: the whole context) and a summary of the rest.
    window: WindowPolicy | None = field(default_factory=WindowPolicy)
    summary: SummaryConfig = field(default_factory=SummaryConfig)
    speculation: SpeculationMode = SpeculationMode.OFF
    # The rate the speech-to-text provider is fed; None: the call's input rate.  When it
    # differs from the call's rate the listen stage resamples (the VAD keeps the call's rate).
    stt_rate: int | None = None
    # The rate the call is listened to at (VAD, end of turn, and the STT unless stt_rate says
    # otherwise); None: the call's input rate.  Caller audio at another rate is converted
    # once, as it arrives (one ResampleStream per call).
    listen_rate: int | None = None
    # Custom processing at named points (brisvox.engine.hooks), in the order given per point.
    hooks: tuple[Hook, ...] = ()
    # The agent's name: what each tool's context says (ToolCallContext.meta.agent).
    agent: str = "agent"

    def __post_init__(self) -> None:
        for name in ("stt_rate", "listen_rate"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"EngineConfig.{name} must be a positive sample rate, got {value}")

"""The speech-to-speech provider interface: one model hears, decides and speaks.

A speech-to-speech (S2S) session takes the caller's audio and gives back the model's
audio, transcripts of both sides, tool calls, and turn events (the caller started or
stopped speaking, the model was interrupted, a response or an interaction ended).  We
answer tool calls with results (in call order), ask for a response, add notes (the claim
guards' facts), add the caller's typed words and keys as user messages, and tell the model what the caller actually heard (truncation).

Adapters: :mod:`brisvox.providers.cloud.openai_realtime` and
:mod:`brisvox.providers.cloud.gemini_live`.  Events are frozen slotted dataclasses; a
vendor failure is an :class:`S2sError` carrying a :class:`ProviderError`.  See docs/S2S.md.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from brisvox.agent.guards import ThinkBudget
from brisvox.agent.tools.filler import FillerConfig
from brisvox.agent.tools.spec import ToolSpec
from brisvox.core.errors import ConfigError
from brisvox.providers.errors import ProviderError

__all__ = [
    "BargeIn", "S2sAudio", "S2sConfig", "S2sError", "S2sEvent", "S2sInteractionEnded", "S2sInterrupted", "S2sPolicy", "S2sProvider", "S2sReady", "S2sResponseDone", "S2sSession", "S2sSpeechStarted", "S2sSpeechStopped", "S2sToolCall", "S2sToolCallsCancelled", "S2sToolResult", "S2sTranscript", "Scheduling", "Speaker",
]


class BargeIn(enum.Enum):
    """Who decides that the caller interrupts the model."""

    MODEL = "model"  # the vendor's voice activity detection cuts the model's response
    OURS = "ours"  # our turn-taking decides; the vendor's interruption is off and we cancel


@dataclass(frozen=True, slots=True)
class S2sPolicy:
    """How a speech-to-speech agent's calls run (an agent file's ``[s2s]`` ``barge_in`` and
    ``think_budget``; :class:`brisvox.Agent`'s ``s2s_policy``): who decides a barge-in, and how
    long a tool may run before the caller hears that the work still runs (None: the model waits)."""

    barge_in: BargeIn = BargeIn.MODEL
    think_budget: ThinkBudget | None = field(default_factory=ThinkBudget)


class Scheduling(enum.Enum):
    """When the model takes in a result of a non-blocking call (Gemini Live's FunctionResponseScheduling)."""

    INTERRUPT = "INTERRUPT"  # at once, cutting what it says
    WHEN_IDLE = "WHEN_IDLE"  # when it is done speaking (the vendor's default)
    SILENT = "SILENT"  # absorb without speaking


class Speaker(enum.Enum):
    CALLER = "caller"
    MODEL = "model"


@dataclass(frozen=True, slots=True, kw_only=True)
class S2sConfig:
    """What one S2S session is asked to do."""

    instructions: str = ""
    greeting: str | None = None  # said first: the stage asks the model for it as the call starts
    tools: Sequence[ToolSpec] = ()
    voice: str | None = None
    input_rate: int = 24_000
    output_rate: int = 24_000
    barge_in: BargeIn = BargeIn.MODEL
    non_blocking_tools: bool = True  # Gemini Live: declare tools NON_BLOCKING (the model keeps listening)
    transcribe: bool = True  # ask for transcripts of both sides
    # A phone call's think budget (10 s): a tool still running past it is answered "still running"
    # and its result comes later as a LATE ANSWER.  None: the model waits for every result.
    think_budget: ThinkBudget | None = field(default_factory=ThinkBudget)
    # Fillers while a tool runs and the model is silent past the delay (the model is asked to say one).
    filler: FillerConfig = FillerConfig.DEFAULT

    def __post_init__(self) -> None:
        for name in ("input_rate", "output_rate"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"S2sConfig.{name} must be positive, got {getattr(self, name)}")


# --- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class S2sReady:
    """The vendor accepted the session's configuration."""


@dataclass(frozen=True, slots=True)
class S2sAudio:
    """A chunk of the model's speech (PCM16 mono at ``S2sConfig.output_rate``)."""

    pcm: bytes = field(repr=False)
    item_id: str | None = None  # the vendor's id of the spoken item (OpenAI: needed to truncate it)


@dataclass(frozen=True, slots=True)
class S2sTranscript:
    """Text of what one side said; ``final`` closes the item's text."""

    speaker: Speaker
    text: str = field(repr=False)
    final: bool = False
    item_id: str | None = None


@dataclass(frozen=True, slots=True)
class S2sToolCall:
    """The model asks for a tool call; ``call_id`` is the vendor's id, echoed with the result."""

    call_id: str
    name: str
    arguments: dict[str, Any] = field(repr=False)
    arguments_error: str | None = None  # the vendor's arguments were not a JSON object: answer with an error


@dataclass(frozen=True, slots=True)
class S2sToolCallsCancelled:
    """The vendor withdrew calls (Gemini Live after an interruption); their results are not wanted."""

    call_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class S2sSpeechStarted:
    """The vendor heard the caller start speaking (``at_ms``: into the input audio, when given)."""

    at_ms: int | None = None
    item_id: str | None = None


@dataclass(frozen=True, slots=True)
class S2sSpeechStopped:
    at_ms: int | None = None
    item_id: str | None = None


@dataclass(frozen=True, slots=True)
class S2sInterrupted:
    """The model's output was cut (by the caller's speech or our cancel): stop playing it."""


@dataclass(frozen=True, slots=True)
class S2sResponseDone:
    """One model response ended; ``interrupted`` when it was cut before its end."""

    interrupted: bool = False
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class S2sInteractionEnded:
    """The model is done with this exchange (Gemini Live ``turnComplete``; OpenAI: the response ended)."""

    interrupted: bool = False


@dataclass(frozen=True, slots=True)
class S2sError:
    """A vendor failure.  ``fatal``: the session is over."""

    error: ProviderError
    fatal: bool = False


S2sEvent: TypeAlias = (
    S2sReady
    | S2sAudio
    | S2sTranscript
    | S2sToolCall
    | S2sToolCallsCancelled
    | S2sSpeechStarted
    | S2sSpeechStopped
    | S2sInterrupted
    | S2sResponseDone
    | S2sInteractionEnded
    | S2sError
)


@dataclass(frozen=True, slots=True)
class S2sToolResult:
    """Our answer to one tool call (``content`` as the tool engine rendered it)."""

    call_id: str
    name: str
    content: str = field(repr=False)
    is_error: bool = False
    scheduling: Scheduling | None = None  # non-blocking calls only (Gemini Live)


# --- the interface -----------------------------------------------------------------------------


@runtime_checkable
class S2sSession(Protocol):
    """One live speech-to-speech conversation: an async iterator of :data:`S2sEvent`."""

    def __aiter__(self) -> AsyncIterator[S2sEvent]: ...

    async def __anext__(self) -> S2sEvent: ...

    async def send_audio(self, pcm: bytes) -> None:
        """The caller's audio (PCM16 mono at ``S2sConfig.input_rate``)."""
        ...

    async def send_tool_results(self, results: Sequence[S2sToolResult]) -> None:
        """Results of one response's calls, in call order."""
        ...

    async def request_response(self) -> None:
        """Ask the model to speak now (after results, or after a guard's note)."""
        ...

    async def cancel_response(self) -> None:
        """Stop the model's current response (our barge-in)."""
        ...

    async def add_note(self, text: str) -> None:
        """Add a fact to the conversation without asking for a response."""
        ...

    async def add_user_text(self, text: str) -> None:
        """Add the caller's own words (a typed message, a key pressed) as a user message, without
        asking for a response (the stage asks with :meth:`request_response`)."""
        ...

    async def truncate(self, item_id: str | None, heard_ms: int) -> None:
        """The caller heard only the first ``heard_ms`` of the model's item: make the model believe that."""
        ...

    async def aclose(self) -> None: ...


class S2sProvider(Protocol):
    """Opens S2S sessions."""

    @property
    def name(self) -> str: ...

    async def connect(self, config: S2sConfig) -> S2sSession: ...

"""Frames: the shared vocabulary of every pipeline.

Three classes of frame travel between processors:

* **System** frames (start, stop, cancel, interrupt, timers, VAD events) carry no epoch,
  are never stale and overtake data on each inbox's system lane.
* **Control** frames (turn and response boundaries) carry the turn epoch they were
  produced in.
* **Data** frames (audio, text, transcripts) carry it too.

``is_stale(current)`` is the purge predicate of an interruption: a control or data frame
from an older epoch is dropped, except the frames that describe the past (word timings):
they say what the caller actually heard.  (Playback positions never travel as frames: the
transport hands them to the engine's TransportOut directly.)

The repr of a frame shows sizes only: never audio samples, never caller or model text.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import ClassVar

from brisvox.core.errors import InvalidAudio

__all__ = [
    "BotAudioEnded",
    "BotAudioStarted",
    "BotLineFrame",
    "BotResponseDone",
    "BusyStage",
    "CancelFrame",
    "ContextNoteFrame",
    "ControlFrame",
    "DataFrame",
    "Direction",
    "DtmfFrame",
    "Frame",
    "FrameClass",
    "InputAudioFrame",
    "InterruptFrame",
    "LlmResponseEnded",
    "LlmResponseStarted",
    "LlmTextFrame",
    "ModelBusyFrame",
    "OutputAudioFrame",
    "OverflowClass",
    "ReplyMode",
    "StartFrame",
    "StopFrame",
    "SystemFrame",
    "TimerFrame",
    "TranscriptFrame",
    "TurnEndReason",
    "TurnVerdictFrame",
    "UserTextFrame",
    "UserTurnEnded",
    "UserTurnStarted",
    "UserTurnTentative",
    "UtteranceFlushed",
    "VadStartedFrame",
    "VadStoppedFrame",
    "WordTiming",
    "WordTimingsFrame",
]


class Direction(enum.Enum):
    """Downstream runs from the transport's input to its output; upstream runs back."""

    DOWNSTREAM = "downstream"
    UPSTREAM = "upstream"

    @property
    def reverse(self) -> Direction:
        return Direction.UPSTREAM if self is Direction.DOWNSTREAM else Direction.DOWNSTREAM


class FrameClass(enum.Enum):
    SYSTEM = "system"
    CONTROL = "control"
    DATA = "data"


class OverflowClass(enum.Enum):
    """Which overflow policy of an inbox applies to a data frame (see ``brisvox.core.inbox``)."""

    AUDIO = "audio"
    METRICS = "metrics"
    OTHER = "other"  # always backpressure


def _redacted(value: object) -> str:
    if isinstance(value, str):
        return f"<{len(value)} chars>"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if isinstance(value, tuple | list):
        return f"<{len(value)} items>"
    return repr(value)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Frame:
    """Base of every frame.  Subclasses set the class variables, never override ``is_stale``."""

    frame_class: ClassVar[FrameClass]
    overflow: ClassVar[OverflowClass] = OverflowClass.OTHER
    # Tool results and word timings survive an interruption (see module docs).
    survives_interrupt: ClassVar[bool] = False

    def is_stale(self, current: int) -> bool:
        return False

    def __repr__(self) -> str:
        parts = ", ".join(f"{f.name}={_redacted(getattr(self, f.name))}" for f in dataclasses.fields(self))
        return f"{type(self).__name__}({parts})"


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class SystemFrame(Frame):
    frame_class: ClassVar[FrameClass] = FrameClass.SYSTEM


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class _EpochFrame(Frame):
    epoch: int

    def is_stale(self, current: int) -> bool:
        return self.epoch < current and not self.survives_interrupt


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ControlFrame(_EpochFrame):
    frame_class: ClassVar[FrameClass] = FrameClass.CONTROL


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class DataFrame(_EpochFrame):
    frame_class: ClassVar[FrameClass] = FrameClass.DATA


# --- system frames -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class StartFrame(SystemFrame):
    """Sent downstream once when a pipeline starts."""


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class StopFrame(SystemFrame):
    """Graceful stop: a processor first handles everything queued before it, then forwards it."""


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class CancelFrame(SystemFrame):
    """Immediate stop: forwarded at once, queued frames are dropped."""


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class InterruptFrame(SystemFrame):
    """A barge-in: every task adopts ``new_epoch`` and drops frames of older epochs."""

    new_epoch: int


class BusyStage(enum.Enum):
    """Which embedded model refused work."""

    STT = "speech_to_text"
    TTS = "text_to_speech"
    VAD = "voice_activity"


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ModelBusyFrame(SystemFrame):
    """An embedded model refused a job because its inference pool is full (the machine is at
    capacity).  The listen stage sends it downstream when the speech-to-text refused the
    caller's words, or when the voice activity detector's pool starts refusing frames (once
    per saturation episode, not per frame): the turn driver emits a ``ModelBusy`` event, the runner answers the turn
    whose words were lost with the fallback line.  (A busy text-to-speech is an event of the
    speak stage alone: no stage acts on it.)"""

    stage: BusyStage
    provider: str


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class TimerFrame(SystemFrame):
    """A stage's own timer fired (the stage puts it into its own inbox: a self-wake).

    ``token`` tells the stage which arming it belongs to, so a timer that was replaced
    after it fired is recognised and ignored.
    """

    at: float
    token: int


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class TurnVerdictFrame(SystemFrame):
    """An end-of-turn model's answer to analysis ``analysis`` (a self-wake of the turn driver)."""

    at: float
    analysis: int
    complete: bool


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class VadStartedFrame(SystemFrame):
    """Speech began at ``at`` (clock seconds)."""

    at: float


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class VadStoppedFrame(SystemFrame):
    """Speech ended; ``at`` is backdated to the start of the silence that ended it."""

    at: float
    speech_started_at: float


# --- control frames ------------------------------------------------------------------------


class ReplyMode(enum.Enum):
    """How a turn's reply reaches the caller.  A turn asks for TEXT only when every part of it
    did (an RTVI ``send-text`` with ``audio_response: false``); spoken words, keys or a typed
    message that wants an answer out loud make it SPOKEN (:meth:`joined`)."""

    SPOKEN = "spoken"  # through the TTS; the context keeps what the caller heard of it
    TEXT = "text"  # shown, never synthesized; the context keeps all of it (it was all delivered)

    def joined(self, other: ReplyMode) -> ReplyMode:
        """The reply of a turn made of a part asking for ``self`` and one asking for ``other``."""
        return self if self is other else ReplyMode.SPOKEN


class TurnEndReason(enum.Enum):
    SILENCE = "silence"
    MODEL = "model"  # the end-of-turn model said complete
    FINAL = "final"  # a punctuated STT final
    FALLBACK = "fallback"
    TEXT = "text"  # a typed message
    HANGUP = "hangup"


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class UserTurnStarted(ControlFrame):
    at: float


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class UserTurnEnded(ControlFrame):
    at: float
    reason: TurnEndReason


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class UserTurnTentative(ControlFrame):
    """The caller paused with these words: the turn may end here (a speculative start may begin)."""

    at: float
    text: str


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class LlmResponseStarted(ControlFrame):
    round: int
    clip: str | None = None  # the key of a pre-rendered clip that may speak this round (a filler)
    reply: ReplyMode = ReplyMode.SPOKEN  # TEXT: the round is shown, never synthesized (the turn's reply)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class LlmResponseEnded(ControlFrame):
    round: int


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BotAudioStarted(ControlFrame):
    """The bot's audio reached the caller at ``at``."""

    at: float


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BotAudioEnded(ControlFrame):
    at: float


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class UtteranceFlushed(ControlFrame):
    """All of the utterance's audio is ahead of this frame (its TTS context ended: flushed,
    cancelled or failed)."""

    utterance: int


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BotResponseDone(ControlFrame):
    """No more bot audio will come for this epoch's response (it may still be playing)."""


# --- data frames ---------------------------------------------------------------------------


def _check_pcm(pcm: bytes, sample_rate: int, what: str) -> None:
    if len(pcm) % 2:
        raise InvalidAudio(f"{what}: PCM16 audio must hold whole samples, got {len(pcm)} bytes")
    if sample_rate <= 0:
        raise InvalidAudio(f"{what}: sample_rate must be positive, got {sample_rate}")


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class InputAudioFrame(DataFrame):
    """Caller audio: PCM16 little-endian mono.  Duration and sample count are derived."""

    overflow: ClassVar[OverflowClass] = OverflowClass.AUDIO
    pcm: bytes
    sample_rate: int
    seq: int = 0
    at: float = 0.0  # clock time of the first sample, when the source knows it

    def __post_init__(self) -> None:
        _check_pcm(self.pcm, self.sample_rate, "InputAudioFrame")

    @property
    def sample_count(self) -> int:
        return len(self.pcm) // 2

    @property
    def duration(self) -> float:
        return len(self.pcm) / (2 * self.sample_rate)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class OutputAudioFrame(DataFrame):
    """Bot audio: PCM16 little-endian mono, tagged with the utterance (TTS context) it belongs to."""

    overflow: ClassVar[OverflowClass] = OverflowClass.AUDIO
    pcm: bytes
    sample_rate: int
    utterance: int = 0
    seq: int = 0

    def __post_init__(self) -> None:
        _check_pcm(self.pcm, self.sample_rate, "OutputAudioFrame")

    @property
    def sample_count(self) -> int:
        return len(self.pcm) // 2

    @property
    def duration(self) -> float:
        return len(self.pcm) / (2 * self.sample_rate)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class TranscriptFrame(DataFrame):
    text: str
    is_final: bool
    speech_final: bool = False
    from_finalize: bool = False
    at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class UserTextFrame(DataFrame):
    """A message the caller typed instead of speaking (from the transport, epoch 0), or a turn's
    words (from the turn driver); ``reply``: how the answer should reach the caller."""

    text: str
    reply: ReplyMode = ReplyMode.SPOKEN


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ContextNoteFrame(DataFrame):
    """A fact for the model's context that opens no turn and is never spoken (an app event from
    the caller's screen).  A barge-in never drops it: it happened."""

    survives_interrupt: ClassVar[bool] = True
    text: str


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BotLineFrame(DataFrame):
    """A line the bot says of its own accord (an agent's ``say``).  Put into the turn driver's
    inbox with any epoch; the driver sends it on in the epoch of the bot turn it starts, and the
    LLM runner speaks it.  ``farewell``: the call ends once it has played.  A barge-in never drops
    it on the way: the runner tells the agent that a newer turn overtook it."""

    survives_interrupt: ClassVar[bool] = True
    text: str
    interrupt: bool = False
    farewell: bool = False


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class LlmTextFrame(DataFrame):
    text: str
    round: int = 0


@dataclass(frozen=True, slots=True)
class WordTiming:
    """One word of an utterance, in seconds from the utterance's first sample."""

    word: str
    start: float
    end: float

    def __repr__(self) -> str:
        return f"WordTiming(<{len(self.word)} chars>, {self.start:.3f}-{self.end:.3f})"


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class WordTimingsFrame(DataFrame):
    survives_interrupt: ClassVar[bool] = True
    utterance: int
    words: tuple[WordTiming, ...]


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class DtmfFrame(DataFrame):
    digit: str

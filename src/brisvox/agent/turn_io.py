"""The turn machine's inputs and actions (:mod:`brisvox.agent.turn` is the machine).

Every input carries its time (float seconds of the caller's clock) and its :class:`InputKind`;
the machine answers each with a list of actions, in order.  Text-bearing inputs name no
text in their ``repr``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from brisvox.core.frames import TurnEndReason

__all__ = [
    "ArmTimer",
    "BotAudioEnded",
    "BotAudioStarted",
    "BotOpens",
    "BotTurn",
    "CancelTimer",
    "EndReason",
    "EndUserTurn",
    "Hangup",
    "InputKind",
    "Interrupt",
    "RequestAnalysis",
    "StartBotTurn",
    "StartUserTurn",
    "SttFinal",
    "SttInterim",
    "Tick",
    "TurnAction",
    "TurnInput",
    "UserText",
    "VadStart",
    "VadStop",
    "Verdict",
]

class InputKind(enum.Enum):
    VAD_START = "vad_start"
    VAD_STOP = "vad_stop"
    STT_INTERIM = "stt_interim"
    STT_FINAL = "stt_final"
    VERDICT = "verdict"
    TICK = "tick"
    BOT_AUDIO_STARTED = "bot_audio_started"
    BOT_AUDIO_ENDED = "bot_audio_ended"
    USER_TEXT = "user_text"
    HANGUP = "hangup"
    BOT_OPENS = "bot_opens"
    BOT_TURN = "bot_turn"


class EndReason(enum.Enum):
    FIXED_SILENCE = "fixed_silence"
    VERDICT = "verdict"
    FINAL_GRACE = "final_grace"
    STT_PUNCTUATION = "stt_punctuation"
    FALLBACK = "fallback"
    TEXT = "text"
    HANGUP = "hangup"

    @property
    def frame_reason(self) -> TurnEndReason:
        """The reason a :class:`~brisvox.core.frames.UserTurnEnded` frame carries."""
        return _FRAME_REASONS[self]


_FRAME_REASONS = {
    EndReason.FIXED_SILENCE: TurnEndReason.SILENCE,
    EndReason.VERDICT: TurnEndReason.MODEL,
    EndReason.FINAL_GRACE: TurnEndReason.MODEL,
    EndReason.STT_PUNCTUATION: TurnEndReason.FINAL,
    EndReason.FALLBACK: TurnEndReason.FALLBACK,
    EndReason.TEXT: TurnEndReason.TEXT,
    EndReason.HANGUP: TurnEndReason.HANGUP,
}



# --- inputs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VadStart:
    at: float
    kind: ClassVar[InputKind] = InputKind.VAD_START


@dataclass(frozen=True, slots=True)
class VadStop:
    """``at`` is the backdated stop: the start of the silence."""

    at: float
    kind: ClassVar[InputKind] = InputKind.VAD_STOP


@dataclass(frozen=True, slots=True)
class SttInterim:
    at: float
    text: str
    kind: ClassVar[InputKind] = InputKind.STT_INTERIM

    def __repr__(self) -> str:
        return f"SttInterim(at={self.at!r}, text=<{len(self.text)} chars>)"


@dataclass(frozen=True, slots=True)
class SttFinal:
    at: float
    text: str
    kind: ClassVar[InputKind] = InputKind.STT_FINAL

    def __repr__(self) -> str:
        return f"SttFinal(at={self.at!r}, text=<{len(self.text)} chars>)"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A Smart Turn result; ``analysis`` echoes the id of its :class:`RequestAnalysis`."""

    at: float
    analysis: int
    complete: bool
    kind: ClassVar[InputKind] = InputKind.VERDICT


@dataclass(frozen=True, slots=True)
class Tick:
    """The armed timer fired (at or after its deadline)."""

    at: float
    kind: ClassVar[InputKind] = InputKind.TICK


@dataclass(frozen=True, slots=True)
class BotAudioStarted:
    """The bot's audio of ``epoch`` reached the caller at ``at``."""

    at: float
    epoch: int
    kind: ClassVar[InputKind] = InputKind.BOT_AUDIO_STARTED


@dataclass(frozen=True, slots=True)
class BotAudioEnded:
    at: float
    epoch: int
    kind: ClassVar[InputKind] = InputKind.BOT_AUDIO_ENDED


@dataclass(frozen=True, slots=True)
class UserText:
    """A typed message from the caller."""

    at: float
    text: str
    kind: ClassVar[InputKind] = InputKind.USER_TEXT

    def __repr__(self) -> str:
        return f"UserText(at={self.at!r}, text=<{len(self.text)} chars>)"


@dataclass(frozen=True, slots=True)
class Hangup:
    at: float
    kind: ClassVar[InputKind] = InputKind.HANGUP


@dataclass(frozen=True, slots=True)
class BotOpens:
    """The bot speaks first (a greeting): epoch 0 is the bot's, the caller's first turn is epoch 1.

    Legal only before anything else happened (``IDLE``, no turn yet); the machine then
    awaits the bot's audio as after a turn, so the caller can barge in on the greeting.
    """

    at: float
    kind: ClassVar[InputKind] = InputKind.BOT_OPENS


@dataclass(frozen=True, slots=True)
class BotTurn:
    """The bot speaks a line of its own (an agent's ``say``) in a new epoch: from ``IDLE``, or,
    with ``interrupt``, cutting the response (``AWAITING_RESPONSE``/``BOT_SPEAKING``); never
    over a barge-in candidate.  Ignored otherwise (the caller holds it and offers it again)."""

    at: float
    interrupt: bool = False
    kind: ClassVar[InputKind] = InputKind.BOT_TURN


TurnInput = (
    VadStart | VadStop | SttInterim | SttFinal | Verdict | Tick | BotAudioStarted | BotAudioEnded | UserText | Hangup
    | BotOpens | BotTurn
)


# --- actions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartUserTurn:
    epoch: int
    at: float


@dataclass(frozen=True, slots=True)
class EndUserTurn:
    epoch: int
    reason: EndReason
    at: float


@dataclass(frozen=True, slots=True)
class StartBotTurn:
    """The bot's line takes ``epoch`` (the machine then awaits its audio, as after a turn)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Interrupt:
    """A confirmed barge-in: every stage adopts ``epoch`` and drops older work."""

    epoch: int


@dataclass(frozen=True, slots=True)
class RequestAnalysis:
    """Run Smart Turn on the audio up to the stop; answer with ``Verdict(analysis=id)``."""

    id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Deliver ``Tick`` at (or after) ``deadline``; replaces any armed timer."""

    deadline: float


@dataclass(frozen=True, slots=True)
class CancelTimer:
    pass


TurnAction = StartUserTurn | EndUserTurn | StartBotTurn | Interrupt | RequestAnalysis | ArmTimer | CancelTimer

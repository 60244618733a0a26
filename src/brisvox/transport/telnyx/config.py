"""Configuration, counters and the call registry of the Telnyx media streaming transport."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret
from brisvox.transport.telephony import DEFAULT_MAX_MARKS
from brisvox.transport.telnyx.protocol import Codec
from brisvox.transport.telnyx.reorder import DEFAULT_REORDER_TIMEOUT, DEFAULT_WINDOW, MAX_WINDOW

__all__ = ["CallRegistry", "HangupHook", "TelnyxConfig", "TelnyxStats"]

HangupHook = Callable[[str], Awaitable[None]]
"""Ends the call at Telnyx (the host's REST ``hangup`` with its API key), given the call_control_id."""

_MIN_CHUNK = 160  # 20 ms at 8 kHz: Telnyx takes 20 ms to 30 s per media message
_MAX_CHUNK = 30 * 8000


@dataclass(frozen=True, slots=True, kw_only=True)
class TelnyxConfig:
    """What Telnyx adds to the WebSocket server's limits (``ServerConfig``).

    ``auth_token``: Telnyx's ``stream_auth_token``; when set a stream must prove it (upgrade
    header or ``connected``).  ``codec``: the outbound law, equal to the call's
    ``stream_bidirectional_codec``.  ``chunk_bytes``: G.711 bytes per outbound media
    message (160 to 240000).  ``hangup``: the host's hook that ends the call at Telnyx,
    bounded by ``hangup_timeout``."""

    path: str = "/telnyx"
    auth_token: Secret | None = None
    codec: Codec = Codec.PCMU
    chunk_bytes: int = _MIN_CHUNK
    progress_interval: float = 0.5
    max_marks: int = DEFAULT_MAX_MARKS
    reorder_window: int = DEFAULT_WINDOW
    reorder_timeout: float = DEFAULT_REORDER_TIMEOUT
    hangup: HangupHook | None = None
    hangup_timeout: float = 5.0

    def validate(self) -> None:
        if not self.path.startswith("/"):
            raise ConfigError(f"TelnyxConfig.path={self.path!r}: must start with '/'")
        if not _MIN_CHUNK <= self.chunk_bytes <= _MAX_CHUNK:
            raise ConfigError(f"TelnyxConfig.chunk_bytes={self.chunk_bytes}: expected {_MIN_CHUNK} to {_MAX_CHUNK} "
                              "(Telnyx takes 20 ms to 30 s per message)")
        if not 0.02 <= self.progress_interval <= 60:
            raise ConfigError(f"TelnyxConfig.progress_interval={self.progress_interval}: expected 0.02 to 60 s")
        if not 1 <= self.max_marks <= 65536:
            raise ConfigError(f"TelnyxConfig.max_marks={self.max_marks}: expected 1 to 65536")
        if not 1 <= self.reorder_window <= MAX_WINDOW:
            raise ConfigError(f"TelnyxConfig.reorder_window={self.reorder_window}: expected 1 to {MAX_WINDOW}")
        if not 0.001 <= self.reorder_timeout <= 5:
            raise ConfigError(f"TelnyxConfig.reorder_timeout={self.reorder_timeout}: expected 0.001 to 5 s")
        if not 0.1 <= self.hangup_timeout <= 60:
            raise ConfigError(f"TelnyxConfig.hangup_timeout={self.hangup_timeout}: expected 0.1 to 60 s")


@dataclass(slots=True)
class TelnyxStats:
    """Counters of every Telnyx call of one endpoint (plain numbers: one event loop writes them)."""

    calls_started: int = 0
    refused_auth: int = 0
    refused_start: int = 0
    refused_busy: int = 0
    duplicate_calls_refused: int = 0
    media_in: int = 0
    media_out: int = 0
    media_reordered: int = 0
    media_late: int = 0
    media_duplicate: int = 0
    media_lost: int = 0
    media_before_start: int = 0
    chunk_resyncs: int = 0
    dtmf_reordered: int = 0
    telnyx_errors: int = 0
    hangups_requested: int = 0
    hangups_failed: int = 0
    hangups_skipped: int = 0
    marks_sent: int = 0
    marks_echoed: int = 0
    marks_cut: int = 0
    marks_unmatched: int = 0
    marks_evicted: int = 0
    clears: int = 0
    faults: int = 0
    write_timeouts: int = 0
    idle_timeouts: int = 0  # nothing from the carrier for ping_timeout
    duration_limits: int = 0
    output_rate_mismatches: int = 0
    audio_dropped: int = 0  # media messages over the caller-audio rate limit (transport.telephony.rate)
    audio_floods: int = 0
    max_echo_latency: float = 0.0
    max_unplayed: float = 0.0
    closes: dict[int, int] = field(default_factory=dict)  # close code -> how many goodbyes sent with it


class CallRegistry:
    """One stream per call: the live call_control_ids and the last ``remember`` ended ones."""

    __slots__ = ("_ended", "_live", "remember")

    def __init__(self, remember: int = 1024) -> None:
        self.remember = remember
        self._live: set[str] = set()
        self._ended: OrderedDict[str, None] = OrderedDict()

    def claim(self, call_control_id: str) -> bool:
        """Mark the call live; False when it is live or ended already (a second stream)."""
        if call_control_id in self._live or call_control_id in self._ended:
            return False
        self._live.add(call_control_id)
        return True

    def forget(self, call_control_id: str) -> None:
        """Undo a claim for a call the engine never took (Telnyx's retry after 1013 is accepted)."""
        self._live.discard(call_control_id)

    def release(self, call_control_id: str) -> None:
        self._live.discard(call_control_id)
        self._ended[call_control_id] = None
        while len(self._ended) > self.remember:
            self._ended.popitem(last=False)

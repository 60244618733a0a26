"""Configuration and counters of the Twilio Media Streams transport."""

from __future__ import annotations

from dataclasses import dataclass, field

from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret
from brisvox.transport.telephony import DEFAULT_MAX_MARKS

__all__ = ["TwilioConfig", "TwilioStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TwilioConfig:
    """What Twilio adds to the WebSocket server's limits and timeouts (``ServerConfig``).

    ``auth_token`` (the account's auth token) turns on the ``X-Twilio-Signature`` check of
    the upgrade, over ``public_url`` (the ``wss://`` URL Twilio connects to, exactly as in
    the TwiML ``<Stream url=...>``).  ``chunk_bytes``: mu-law bytes per outbound ``media``
    message (160 = 20 ms).  ``progress_interval``: seconds of audio between the progress
    marks that measure how much sent audio Twilio has not played yet."""

    path: str = "/twilio"
    public_url: str | None = None
    auth_token: Secret | None = None
    chunk_bytes: int = 160
    progress_interval: float = 0.5
    max_marks: int = DEFAULT_MAX_MARKS

    def validate(self) -> None:
        if not self.path.startswith("/"):
            raise ConfigError(f"TwilioConfig.path={self.path!r}: must start with '/'")
        if self.auth_token is not None and not (self.public_url or "").startswith("wss://"):
            raise ConfigError("TwilioConfig.public_url must be the stream's wss:// URL when auth_token is set "
                              f"(got {self.public_url!r})")
        if not 1 <= self.chunk_bytes <= 64 * 1024:
            raise ConfigError(f"TwilioConfig.chunk_bytes={self.chunk_bytes}: expected 1 to 65536")
        if not 0.02 <= self.progress_interval <= 60:
            raise ConfigError(f"TwilioConfig.progress_interval={self.progress_interval}: expected 0.02 to 60 s")
        if not 1 <= self.max_marks <= 65536:
            raise ConfigError(f"TwilioConfig.max_marks={self.max_marks}: expected 1 to 65536")


@dataclass(slots=True)
class TwilioStats:
    """Counters of every Twilio call of one endpoint (plain numbers: one event loop writes them)."""

    calls_started: int = 0
    refused_signature: int = 0
    refused_start: int = 0
    refused_busy: int = 0
    media_in: int = 0
    media_out: int = 0
    lost_chunks: int = 0
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

"""Configuration of the WebSocket server."""

from __future__ import annotations

from dataclasses import dataclass, field

from brisvox.core.errors import ConfigError
from brisvox.transport.session import SessionConfig

__all__ = ["ServerConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """Limits and timeouts of one WebSocket server (seconds, bytes).  ``validate()`` is called by ``bind``."""

    host: str = "127.0.0.1"
    port: int = 0
    path: str = "/ws"
    max_calls: int = 100
    accept_queue: int = 16
    retry_after: int = 5  # seconds, in the 503's Retry-After
    max_rejects: int = 32  # concurrent 503 answers; past that connections are dropped
    handshake_timeout: float = 5.0
    start_timeout: float = 5.0
    ping_interval: float = 5.0
    ping_timeout: float = 15.0
    write_timeout: float = 5.0
    send_timeout: float = 2.0  # each hand-off of a lossless event to the engine, and the accept hand-off
    close_grace: float = 1.0
    shutdown_timeout: float = 5.0
    max_audio_bytes: int = 64 * 1024
    max_control_bytes: int = 8 * 1024
    max_faults: int = 16
    idle_timeout: float = 60.0  # no caller audio for this long ends the call (idle_timeout, 1008)
    max_call_duration: float = 3600.0  # a started call ends after this long (max_duration, 1008)
    audio_rate: float | None = 1.25  # caller audio admitted per second of time (None: no limit)
    audio_burst: float = 2.0  # seconds of audio admitted at once on top of the rate
    audio_flood: float = 5.0  # seconds of dropped audio (decaying) that end the call (audio_flood, 1008)
    session: SessionConfig = field(default_factory=SessionConfig)

    def validate(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"ServerConfig.{name}={getattr(self, name)!r}: {why}")

        for name in ("handshake_timeout", "start_timeout", "ping_interval", "ping_timeout", "write_timeout",
                     "send_timeout", "close_grace", "shutdown_timeout", "idle_timeout", "max_call_duration",
                     "audio_burst", "audio_flood"):
            if not getattr(self, name) > 0:
                raise bad(name, "must be positive")
        if self.ping_interval < 0.01:
            raise bad("ping_interval", "must be at least 10 ms")
        if self.ping_timeout <= self.ping_interval:
            raise bad("ping_timeout", f"must be longer than ping_interval ({self.ping_interval})")
        for name in ("max_calls", "accept_queue", "max_rejects"):
            if getattr(self, name) < 1:
                raise bad(name, "must be at least 1")
        if self.audio_rate is not None and not self.audio_rate >= 1.0:
            raise bad("audio_rate", "must be at least 1.0 (real time) or None")
        if self.max_audio_bytes < 2:
            raise bad("max_audio_bytes", "must be at least 2 (one sample)")
        if self.max_control_bytes < 512:
            raise bad("max_control_bytes", "must be at least 512")
        if self.max_faults < 0:
            raise bad("max_faults", "must be >= 0")
        if not self.path.startswith("/"):
            raise bad("path", "must start with '/'")
        self.session.validate()

"""Configuration and counters of the WebRTC transport."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from brisvox.core.errors import ConfigError
from brisvox.transport.events import SUPPORTED_RATES

__all__ = ["WebRtcConfig", "WebRtcStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WebRtcConfig:
    """Limits and timeouts of WebRTC calls (seconds).  ``validate()`` names a bad field."""

    hosts: tuple[str, ...] = ("127.0.0.1",)
    """The addresses offered as host candidates; nothing else is ever offered."""
    input_rate: int = 16_000
    output_rate: int = 24_000
    connect_timeout: float = 15.0
    """From the answer to ICE and DTLS up; past it the offer is abandoned unseen by the engine."""
    gather_timeout: float = 5.0
    """Building the answer (candidate gathering) at most this long."""
    idle_timeout: float = 15.0
    """No caller audio frame for this long: the browser vanished."""
    max_call_duration: float = 3600.0
    send_timeout: float = 2.0
    """Each lossless hand-off to the engine; past it the call ends as overloaded."""
    close_timeout: float = 2.0
    max_audio_packets_per_sec: int = 200
    """Inbound RTP packets per second per call (Opus sends 50); the excess is dropped before decoding."""
    packet_burst: float = 1.0
    """Seconds at the packet rate admitted at once on top of it."""
    max_concealed_frames: int = 5
    jitter_prefetch: int = 1
    """Packets aiortc's jitter buffer holds before decoding (its default, 4, adds 60 ms)."""
    outbound_frames: int = 50
    """20 ms frames buffered towards the browser at most (drop-oldest)."""
    mark_delay: float = 0.1
    """The estimated browser playout latency after a frame left (marks are acknowledged that much later)."""
    max_faults: int = 16

    def validate(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"WebRtcConfig.{name}={getattr(self, name)!r}: {why}")

        if not self.hosts:
            raise bad("hosts", "name at least one address to offer")
        for host in self.hosts:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                raise bad("hosts", f"{host!r} is not an IP address") from None
        for name in ("input_rate", "output_rate"):
            if getattr(self, name) not in SUPPORTED_RATES:
                raise bad(name, f"must be one of {sorted(SUPPORTED_RATES)}")
        for name in ("connect_timeout", "gather_timeout", "idle_timeout", "max_call_duration", "send_timeout",
                     "close_timeout", "packet_burst"):
            if not getattr(self, name) > 0:
                raise bad(name, "must be positive")
        if self.mark_delay < 0:
            raise bad("mark_delay", "must be >= 0")
        for name in ("max_audio_packets_per_sec", "outbound_frames", "jitter_prefetch"):
            if getattr(self, name) < 1:
                raise bad(name, "must be at least 1")
        if self.max_concealed_frames < 0 or self.max_faults < 0:
            raise bad("max_concealed_frames" if self.max_concealed_frames < 0 else "max_faults", "must be >= 0")


@dataclass(slots=True)
class WebRtcStats:
    """Counters over every call of one endpoint."""

    offers: int = 0
    calls_started: int = 0
    abandoned: int = 0  # never connected within connect_timeout
    refused_busy: int = 0  # connected, but the engine did not take the call
    packets_in: int = 0
    packets_dropped: int = 0  # over max_audio_packets_per_sec
    frames_in: int = 0
    frames_out: int = 0
    concealed_frames: int = 0
    outbound_dropped: int = 0
    idle_timeouts: int = 0
    duration_limits: int = 0
    overloads: int = 0
    encoder_failures: int = 0
    closes: dict[str, int] = field(default_factory=dict)  # why calls ended -> how many

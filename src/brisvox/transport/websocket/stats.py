"""Counters of a WebSocket server (plain ints: one event loop writes them)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ServerStats"]


@dataclass(slots=True)
class ServerStats:
    calls_started: int = 0
    refused_limit: int = 0  # 503 past max_calls
    refused_dropped: int = 0  # past max_rejects: dropped without an answer
    refused_busy: int = 0  # accept queue full (1013)
    refused_start: int = 0  # missing, invalid or oversized start
    frames_in: int = 0
    frames_out: int = 0
    faults: int = 0
    ping_timeouts: int = 0
    write_timeouts: int = 0
    output_rate_mismatches: int = 0
    idle_timeouts: int = 0
    duration_limits: int = 0
    audio_floods: int = 0
    audio_dropped_frames: int = 0  # caller audio over the rate limit
    json_too_deep: int = 0  # start or control messages refused for nesting past MAX_JSON_DEPTH
    closes: dict[int, int] = field(default_factory=dict)  # close code -> how many goodbyes sent with it

"""The caller-audio rate limit of the carrier streams (pure): the WebSocket transport's
:class:`~brisvox.transport.websocket.limits.AudioRateLimit`, fed with G.711 byte counts.

A carrier sends one 8 kHz G.711 byte per sample, so a media message of ``n`` bytes is
``n / 8000`` seconds of audio.  The settings are the server's (``ServerConfig.audio_rate``,
``audio_burst``, ``audio_flood``: ``BRISVOX_AUDIO_RATE`` / ``BRISVOX_AUDIO_FLOOD``), the same
for every transport.  A dropped message is counted in ``audio_dropped``; a flood (too much
dropped, decaying) ends the call with 1008 (``audio_floods``).
"""

from __future__ import annotations

from typing import Final, Protocol

from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.limits import AudioRateLimit, AudioVerdict

__all__ = ["G711_BYTES_PER_SECOND", "AudioCounters", "admit_audio", "audio_limit"]

G711_BYTES_PER_SECOND: Final = 8000


class AudioCounters(Protocol):
    audio_dropped: int
    audio_floods: int


def audio_limit(config: ServerConfig) -> AudioRateLimit | None:
    """One call's limit (None: ``audio_rate`` is off)."""
    if config.audio_rate is None:
        return None
    return AudioRateLimit(config.audio_rate, config.audio_burst, config.audio_flood)


def admit_audio(limit: AudioRateLimit | None, size: int, now: float, stats: AudioCounters) -> AudioVerdict:
    """The verdict on a media message of ``size`` G.711 bytes arriving at ``now``; drops and floods counted."""
    if limit is None:
        return AudioVerdict.PASS
    verdict = limit.admit(size / G711_BYTES_PER_SECOND, now)
    if verdict is not AudioVerdict.PASS:
        stats.audio_dropped += 1
        if verdict is AudioVerdict.FLOOD:
            stats.audio_floods += 1
    return verdict

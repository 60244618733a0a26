"""Latency profiles for the mock providers.

A profile says how long a mock takes: to connect, to its first event of a response, and
between later events, each with an optional jitter drawn from a seeded generator, so a
simulation with jitter still replays identically.  The named profiles are rough shapes of
real providers, not measurements of any one vendor.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from brisvox.core.errors import ConfigError

__all__ = ["CLOUD", "INSTANT", "LOCAL", "SLOW", "Delays", "LatencyProfile"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyProfile:
    """Seconds a mock waits.  ``jitter`` adds up to that fraction of each delay (seeded)."""

    connect: float = 0.0
    first_event: float = 0.0
    per_event: float = 0.0
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("connect", "first_event", "per_event", "jitter"):
            value = getattr(self, name)
            if value < 0:
                raise ConfigError(f"LatencyProfile.{name} must not be negative, got {value}")

    def delays(self) -> Delays:
        """A fresh, seeded source of this profile's delays (one per session or stream)."""
        return Delays(self)


INSTANT = LatencyProfile()
LOCAL = LatencyProfile(connect=0.0, first_event=0.08, per_event=0.02)
CLOUD = LatencyProfile(connect=0.15, first_event=0.3, per_event=0.03, jitter=0.2)
SLOW = LatencyProfile(connect=0.5, first_event=1.5, per_event=0.1, jitter=0.3)


@dataclass(slots=True)
class Delays:
    """Draws the delays of one profile; jitter comes from a generator seeded by the profile."""

    profile: LatencyProfile
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.profile.seed)

    def _jittered(self, base: float) -> float:
        if base <= 0 or self.profile.jitter <= 0:
            return base
        return base * (1.0 + self._rng.uniform(0.0, self.profile.jitter))

    def connect(self) -> float:
        return self._jittered(self.profile.connect)

    def first_event(self) -> float:
        return self._jittered(self.profile.first_event)

    def per_event(self) -> float:
        return self._jittered(self.profile.per_event)

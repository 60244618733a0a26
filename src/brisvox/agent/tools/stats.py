"""Counters of the tool engine (interruptions, late results, replays, orphans)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["ToolStats", "ToolStatsSnapshot"]


@dataclass(frozen=True, slots=True)
class ToolStatsSnapshot:
    """A copy of the engine's counters at one instant."""

    read_only_cancelled: int = 0
    not_started_cancelled: int = 0
    side_effect_interrupted: int = 0
    side_effect_late_results: int = 0
    side_effect_replays: int = 0
    side_effect_repeats: int = 0
    orphan_replays: int = 0
    orphan_in_flight: int = 0
    orphan_lost: int = 0
    orphan_reported: int = 0


@dataclass(slots=True)
class ToolStats:
    """The live, mutable counters (owned by one engine)."""

    read_only_cancelled: int = 0
    not_started_cancelled: int = 0
    side_effect_interrupted: int = 0
    side_effect_late_results: int = 0
    side_effect_replays: int = 0
    side_effect_repeats: int = 0
    orphan_replays: int = 0
    orphan_in_flight: int = 0
    orphan_lost: int = 0
    orphan_reported: int = 0

    def snapshot(self) -> ToolStatsSnapshot:
        return ToolStatsSnapshot(**dataclasses.asdict(self))

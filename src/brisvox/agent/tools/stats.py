"""Counters of the tool engine (interruptions, late results, replays, orphans)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["ToolStatsSnapshot", "bump"]


@dataclass(frozen=True, slots=True)
class ToolStatsSnapshot:
    """The engine's counters at one instant (the engine replaces its copy on each change)."""

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


def bump(stats: ToolStatsSnapshot, counter: str) -> ToolStatsSnapshot:
    """``stats`` with ``counter`` one higher (counters change rarely: on interruptions and replays)."""
    return dataclasses.replace(stats, **{counter: getattr(stats, counter) + 1})

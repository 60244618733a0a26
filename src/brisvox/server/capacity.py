"""What the server can serve at once: the default call limit and the readiness of the models.

Every call holds at most one job at a time in each embedded model's
:class:`~brisvox.inference.pool.InferencePool` (its VAD frame, its transcription, its
synthesis, its end-of-turn analysis: each is awaited before the next is queued), and a
pool refuses a job with ``PoolFull`` once a lane holds ``lane_capacity`` of them.  So the
default call limit is

    max_calls = min(CALLS_PER_CORE x cores, lane_capacity of every embedded model's pool)

(docs/OPERATIONS.md): with the default limit no call is ever refused by a pool.  An
operator who sets ``BRISVOX_MAX_CALLS`` higher gets what the pools can do: readiness turns
503 while a pool is saturated (:func:`saturated_pools`), and a turn refused by a full
pool is answered (docs/OPERATIONS.md, "Capacity").
"""

from __future__ import annotations

from collections.abc import Iterable

from brisvox.inference.pool import InferencePool

__all__ = ["CALLS_PER_CORE", "default_max_calls", "saturated_pools"]

CALLS_PER_CORE = 25
"""Real-time calls one core carries besides the models (transport, pacing, pipeline, the LLM
client): measured by ``bench/load_calls.py`` (docs/OPERATIONS.md)."""


def default_max_calls(pools: Iterable[InferencePool], cores: int) -> int:
    """The call limit when ``BRISVOX_MAX_CALLS`` is unset (see the module docs); at least 1."""
    limit = CALLS_PER_CORE * max(1, cores)
    for pool in pools:
        limit = min(limit, pool.lane_capacity)
    return max(1, limit)


def saturated_pools(pools: Iterable[InferencePool]) -> list[str]:
    """The names of the pools that refuse new jobs now (a lane is full)."""
    return [pool.name for pool in pools if pool.saturated]

"""The default call limit follows from the cores and the embedded models' pools."""

from __future__ import annotations

from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.server.capacity import CALLS_PER_CORE, default_max_calls, saturated_pools


async def test_the_default_call_limit_is_the_smallest_pool_lane_or_the_cores_share() -> None:
    async with (InferencePool(PoolConfig(name="brisvox-vad", threads=1, jobs_per_thread=32)) as vad,
                InferencePool(PoolConfig(name="brisvox-whisper", threads=1, jobs_per_thread=8)) as stt):
        assert default_max_calls([vad, stt], cores=2) == 8  # one job per call each: the STT's lane bounds it
        assert default_max_calls([vad], cores=1) == min(32, CALLS_PER_CORE)
        assert saturated_pools([vad, stt]) == []
    assert default_max_calls([], cores=2) == 2 * CALLS_PER_CORE  # no embedded model: the cores
    assert default_max_calls([], cores=0) == CALLS_PER_CORE

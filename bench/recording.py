"""CPU per call-second with call recording (``[record]``) on vs off, concurrent calls, same run.

Each call is the recorded call of ``tests/recording/_calls.py`` through the server's session
runner (``engine_runner``) over a loopback transport: 9.8 s of caller audio, two turns, a tool
call and a barge-in, mock providers, on virtual time (the CPU is the engine's, the taps' and
the writer's own, gzip in its worker thread included; no waiting).  A round runs ``--calls``
calls at once on one virtual-time loop, recording off or on (files in a temporary
directory).  Rounds alternate off/on; the script prints the median CPU seconds per
call-second of each, their ratio and the bytes written per call-second.

    python bench/recording.py [--calls 50] [--rounds 5]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests.recording._calls

from tests.recording._calls import lookup_tools, recorded_call, recording_agent, recordings

from _onoff import cpu_seconds, on_off

CALL_SECONDS = 9.8


def round_(calls: int, record: bool) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        agent = recording_agent(Path(tmp), keep=100_000, record=record)
        tools = lookup_tools()

        async def main() -> None:
            await asyncio.gather(*(recorded_call(agent, tools) for _ in range(calls)))

        cpu, _ = cpu_seconds(main)
        written = sum(p.stat().st_size for p in recordings(Path(tmp)))
    return cpu / (calls * CALL_SECONDS), f", {written / (calls * CALL_SECONDS) / 1000:.1f} kB written per call-second"


if __name__ == "__main__":
    sys.exit(on_off(__doc__ or "", "recording", f"{CALL_SECONDS} s each: two turns, a tool call, a barge-in", round_))

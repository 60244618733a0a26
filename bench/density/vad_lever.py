"""The VAD levers alone: CPU per call-second of N calls' Silero detectors, one frame per call
every 20 ms in real time (calls staggered over the 20 ms), in this process, per configuration:

* ``none``: the feeder alone (no detector), to subtract: the rest is the VAD path's own cost;
* ``pool``: one inference-pool job per call and frame (brisvox before the batcher);
* ``batch``: :class:`~brisvox.inference.vad_batch.SileroBatcher`, the windows of every call
  that asks while a job runs scored together in the next job; ``batch:5``: the same with a
  5 ms linger (an idle batcher waits 5 ms for more calls before it starts a job);
* ``period:10``: the batcher starting a job at most every 10 ms (the windows that arrive in
  between wait for the next start, all in one run; a batcher idle that long starts at once);

each on asyncio and on uvloop, with digital silence answered without a model run
(``VadParams.skip_silence``, the default) and without (``--gates off,on``; the audio is the
loadtest's utterance, then as much digital silence, or with ``--noise DBFS`` white noise at that
level under all of it: a caller whose line is never digitally silent).  Prints the CPU per call-second (process CPU over the calls'
audio seconds), the jobs and ONNX runs per second, and how late the detectors answered
(p50/p95 of the time from a frame's due moment to its probabilities).

    taskset -c 0 python bench/density/vad_lever.py --calls 50 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import wave
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import numpy as np

from brisvox.core.clock import SystemClock
from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.inference.silero import SileroModel
from brisvox.inference.vad import VadParams, silero_vad
from brisvox.inference.vad_batch import SileroBatcher
from brisvox.loadtest import speech_wav

FRAME = 640


async def run(mode: str, calls: int, seconds: float, speech: bytes, gate: bool) -> dict[str, float]:
    model = SileroModel.load()
    async with InferencePool(PoolConfig(name="bench-vad", threads=1, jobs_per_thread=4096)) as pool:
        wait = float(mode.partition(":")[2] or 0) / 1000
        batcher = None
        if mode.startswith("batch"):
            batcher = SileroBatcher(model, pool, clock=SystemClock(), linger=wait)
        elif mode.startswith("period"):
            batcher = SileroBatcher(model, pool, clock=SystemClock(), period=wait)
        params = VadParams(skip_silence=gate)
        detectors = [silero_vad(model, pool, params=params, batcher=batcher) for _ in range(calls)]
        feed = mode != "none"
        frames = len(speech) // FRAME
        late: list[float] = []
        t0 = time.monotonic() + 0.1
        cpu0 = time.process_time()

        async def call(i: int) -> None:
            det = detectors[i]
            start = t0 + 0.02 * i / calls
            for k in range(round(seconds / 0.02)):
                due = start + k * 0.02
                now = time.monotonic()
                if due > now:
                    await asyncio.sleep(due - now)
                off = (k + i * 7) % frames * FRAME
                if feed:
                    await det.process(speech[off : off + FRAME], k * 0.02)
                late.append(time.monotonic() - due)

        await asyncio.gather(*(call(i) for i in range(calls)))
        cpu = time.process_time() - cpu0
        wall = time.monotonic() - t0
        stats = pool.stats()
        late.sort()
        return {
            "cpu_ms_per_call_s": 1000 * cpu / (calls * seconds),
            "jobs_per_s": stats.completed / wall,
            "runs_per_s": (batcher.stats.runs if batcher else stats.completed) / wall,
            "per_run": batcher.stats.windows / max(1, batcher.stats.runs) if batcher else 1.0,
            "late_p50_ms": 1000 * statistics.median(late),
            "late_p95_ms": 1000 * late[int(0.95 * (len(late) - 1))],
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--loops", default="asyncio,uvloop")
    ap.add_argument("--modes", default="pool,batch,batch:5,batch:10",
                    help="none, pool, batch[:linger ms] (the batcher waiting that long for more calls), "
                         "period:ms (the batcher starting a job at most that often)")
    ap.add_argument("--gates", default="off,on", help="skipping digital silence off and/or on")
    ap.add_argument("--noise", type=float, default=None,
                    help="white noise at this dBFS under the speech and the silence (default: none, digital silence)")
    args = ap.parse_args()
    with wave.open(str(speech_wav(Path("/tmp")))) as w:
        speech = w.readframes(w.getnframes())
    speech += bytes(len(speech))  # speech, then as much silence
    if args.noise is not None:
        pcm = np.frombuffer(speech, dtype=np.int16).astype(np.float64)
        pcm += np.random.default_rng(0).standard_normal(pcm.size) * 32768 * 10 ** (args.noise / 20)
        speech = np.clip(np.round(pcm), -32768, 32767).astype(np.int16).tobytes()
    print(f"{args.calls} calls x {args.seconds} s, noise {args.noise} dBFS, cpu {os.sched_getaffinity(0)}, load {os.getloadavg()[0]:.2f}")
    print("| loop | VAD | silence skip | CPU ms per call-second | pool jobs/s | ONNX runs/s | windows per run | answer late p50 / p95 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for loop in args.loops.split(","):
        for mode in args.modes.split(","):
            for gate in args.gates.split(","):
                if loop == "uvloop":
                    import uvloop

                    r = uvloop.run(run(mode, args.calls, args.seconds, speech, gate == "on"))
                else:
                    r = asyncio.run(run(mode, args.calls, args.seconds, speech, gate == "on"))
                print(f"| {loop} | {mode} | {gate} | {r['cpu_ms_per_call_s']:.2f} | {r['jobs_per_s']:.0f} | "
                      f"{r['runs_per_s']:.0f} | {r['per_run']:.1f} | {r['late_p50_ms']:.1f} / {r['late_p95_ms']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

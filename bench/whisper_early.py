"""Whisper's early decode: how long after the VAD's stop the final comes, with and without it.

Plays the recorded callers' sentences (espeak-ng, as ``bench/demo_callers.py``) into one
``local-whisper`` session each, in real time (20 ms frames), and calls ``finalize()`` where the
engine would: 0.1 s (Silero's hangover) after the last sound.  Two providers, the same model
and the demo agent's prompt: ``trailing_quiet`` 0.08 s (the early decode, the default) against None
(decode at ``finalize()``, as before), alternating per sentence so the machine's load swings
hit both alike.  Prints, per variant, the time from ``finalize()`` to the final (p50, p95),
how many finals came from an early decode, and the texts that differ between the variants;
then the machine's load.

Usage: ``python bench/whisper_early.py [--reps 3]`` (needs the local extra and ``brisvox models fetch``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

from brisvox.core.clock import SystemClock
from brisvox.core.tasks import TaskScope
from brisvox.providers.local.whisper import WhisperConfig, WhisperStt, WhisperSttSession
from brisvox.providers.stt import SttConfig, Transcript
from brisvox.server.demo import DEMO_AGENT_FILE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_callers import SCENARIOS, percentile, silence, speak

PROMPT = str(tomllib.loads(DEMO_AGENT_FILE.read_text())["stt"]["options"]["prompt"])  # the demo's vocabulary
FRAME = 640
HANGOVER = 0.1  # Silero's min_silence: the VAD's stop comes this long after the last sound


def last_sound(pcm: bytes) -> float:
    """Seconds to the end of the last 10 ms window above -50 dBFS."""
    x = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    n = len(x) // 160
    ms = (x[: n * 160].reshape(n, 160) ** 2).mean(axis=1)
    loud = np.nonzero(ms >= (32768 * 10 ** (-50 / 20)) ** 2)[0]
    return float(loud[-1] + 1) * 0.01 if len(loud) else 0.0


async def one(stt: WhisperStt, pcm: bytes) -> tuple[float, str, bool]:
    """Play ``pcm`` in real time, finalize after the hangover; (finalize -> final s, text, early)."""
    clock = SystemClock()
    finalize_at = last_sound(pcm) + HANGOVER
    session = await stt.connect(SttConfig())
    assert isinstance(session, WhisperSttSession)
    got: asyncio.Future[tuple[float, str]] = asyncio.get_running_loop().create_future()

    async def read() -> None:
        async for event in session:
            if isinstance(event, Transcript) and event.is_final and not got.done():
                got.set_result((time.perf_counter(), event.text))

    async with session, TaskScope("bench") as scope:
        scope.spawn(read(), name="reader")
        start = clock.now()
        for i in range(0, len(pcm), FRAME):
            at = i / 32000
            await clock.sleep_until(start + at)
            if at >= finalize_at:
                break
            await session.send_audio(pcm[i : i + FRAME])
        asked = time.perf_counter()
        await session.finalize()
        done, text = await got
        early = session.early_finals == 1
        await session.aclose()
    return done - asked, text, early


async def main_async(reps: int) -> int:
    sentences = [s for sc in SCENARIOS for s in sc.sentences]
    with tempfile.TemporaryDirectory() as tmp:
        audio = [silence(0.3) + speak(s, Path(tmp)) + silence(0.5) for s in sentences]
    variants = {"early decode (trailing_quiet 0.08 s)": WhisperStt(WhisperConfig(prompt=PROMPT)),
                "at finalize (trailing_quiet None)": WhisperStt(WhisperConfig(prompt=PROMPT, trailing_quiet=None))}
    for stt in variants.values():
        await stt.warm()
    waits: dict[str, list[float]] = {name: [] for name in variants}
    early: dict[str, int] = dict.fromkeys(variants, 0)
    texts: dict[tuple[str, int], str] = {}
    loads = [os.getloadavg()[0]]
    try:
        for rep in range(reps):
            for n, pcm in enumerate(audio):
                order = list(variants.items()) if (rep + n) % 2 == 0 else list(reversed(variants.items()))
                for name, stt in order:
                    wait, text, was_early = await one(stt, pcm)
                    waits[name].append(wait)
                    early[name] += was_early
                    texts[(name, n)] = text
            loads.append(os.getloadavg()[0])
    finally:
        for stt in variants.values():
            await stt.aclose()
    print(f"{len(sentences)} sentences x {reps} runs, real time, finalize() {HANGOVER} s after the last sound")
    for name, values in waits.items():
        print(f"  {name}: finalize -> final p50 {statistics.median(values):.3f} s, p95 "
              f"{percentile(values, 0.95):.3f} s; {early[name]} of {len(values)} finals from an early decode")
    names = list(variants)
    for n, sentence in enumerate(sentences):
        a, b = texts[(names[0], n)], texts[(names[1], n)]
        if a != b:
            print(f"  differs: {sentence!r}: {a!r} / {b!r}")
    print(f"load average (1 min) from {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores, shared")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    return asyncio.run(main_async(parser.parse_args(argv).reps))


if __name__ == "__main__":
    sys.exit(main())

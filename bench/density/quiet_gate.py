"""Skipping digital silence, proved: Silero's start/stop decisions with and without
``VadParams.skip_silence`` over espeak-ng speech with silences, mixed with noise at several
levels, at 16 and 8 kHz, and the share of windows answered without a model run.  Beside it, the
model's own spread: the decisions of the detector that scores everything with its periodic state
reset moved from 2.0 to 1.9 s (an arbitrary setting), and both against the sentences.

Each case is a stream: sentences at a speech level, 0.3-2 s silences between them, white noise
at a noise level under all of it (none: digital silence).  A detector's decisions are the list
of its events; "same" means equal to the list of the detector that scores every window.

    python bench/density/quiet_gate.py
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from brisvox.core.frames import VadStartedFrame, VadStoppedFrame
from brisvox.inference.silero import SileroModel, SileroReset
from brisvox.inference.vad import VadEvent, VadParams, VoiceActivityDetector

SENTENCES = (
    "hi I would like to check the status of my order",
    "yes that is right",
    "um, let me see, it was the twelfth of march I think",
    "no",
    "can you send it to my office instead, the address is four hundred main street",
    "okay thank you very much, goodbye",
)
NOISE_DBFS = (None, -90.0, -75.0, -66.0, -62.0, -60.0, -58.0, -55.0, -50.0, -40.0)
SPEECH_DBFS = (-18.0, -30.0, -42.0)
PARAMS = {"default": VadParams(), "bench": VadParams(threshold=0.7, hysteresis=0.0, min_speech=0.192,
                                                     min_silence=0.192)}


def espeak(text: str, rate: int, folder: Path) -> np.ndarray:
    out = folder / f"s{abs(hash((text, rate)))}.wav"
    raw = subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "--stdout", text], capture_output=True,
                         check=True, timeout=30).stdout
    subprocess.run(["sox", "-t", "wav", "-", "-r", str(rate), "-c", "1", "-b", "16", "-t", "raw", str(out)],
                   input=raw, check=True, timeout=30)
    return np.frombuffer(out.read_bytes(), dtype=np.int16).astype(np.float64)


def stream(sentences: list[np.ndarray], rate: int, speech_dbfs: float, noise_dbfs: float | None,
           seed: int) -> tuple[bytes, list[tuple[float, float]]]:
    """The stream's PCM and each sentence's voiced span (seconds)."""
    rng = np.random.default_rng(seed)
    parts = [np.zeros(int(rate * 0.7))]
    spans: list[tuple[float, float]] = []
    at = parts[0].size
    for s in sentences:
        voiced = np.flatnonzero(np.abs(s) > 300)
        rms = float(np.sqrt(np.mean(s[voiced] ** 2)))  # the level of the voiced part
        spans.append(((at + voiced[0]) / rate, (at + voiced[-1]) / rate))
        gap = np.zeros(int(rate * rng.uniform(0.3, 2.0)))
        parts += [s * (32768 * 10 ** (speech_dbfs / 20) / rms), gap]
        at += s.size + gap.size
    x = np.concatenate(parts)
    if noise_dbfs is not None:
        x += rng.standard_normal(x.size) * 32768 * 10 ** (noise_dbfs / 20)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16).tobytes(), spans


def truth(events: list[VadEvent], spans: list[tuple[float, float]]) -> tuple[int, int, list[float], list[float]]:
    """Against the sentences: how many were heard (a start inside), the starts outside every
    sentence, each heard sentence's start delay and stop delay (its first start, the first stop
    after its voiced end)."""
    starts = [e.at for e in events if isinstance(e, VadStartedFrame)]
    stops = [e.at for e in events if isinstance(e, VadStoppedFrame)]
    heard, start_delay, stop_delay = 0, [], []
    for lo, hi in spans:
        inside = [t for t in starts if lo - 0.1 <= t <= hi]
        if inside:
            heard += 1
            start_delay.append(inside[0] - lo)
            after = [t for t in stops if t >= hi - 0.5]
            if after:
                stop_delay.append(after[0] - hi)
    false = sum(not any(lo - 0.1 <= t <= hi for lo, hi in spans) for t in starts)
    return heard, false, start_delay, stop_delay


def decisions(model: SileroModel, pcm: bytes, rate: int, params: VadParams,
              interval: float = 2.0) -> tuple[list[VadEvent], int, int]:
    det = VoiceActivityDetector(model.scorer(rate, SileroReset(interval=interval)), params)
    frame = rate // 50 * 2
    events: list[VadEvent] = []
    for i in range(0, len(pcm) - frame + 1, frame):
        events += det.process_sync(pcm[i : i + frame], i / 2 / rate)
    end = det.finish(len(pcm) / 2 / rate)
    return events + ([end] if end else []), det.scored_windows, det.silent_windows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="16000,8000")
    ap.add_argument("--verbose", action="store_true", help="print the differing decisions")
    args = ap.parse_args()
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        print("needs espeak-ng and sox", file=sys.stderr)
        return 2
    model = SileroModel.load()
    configs: list[tuple[bool, float]] = [(False, 1.9), (True, 2.0)]  # (skip_silence, reset interval)
    names = {c: "silence skipped" if c[0] else "every window, reset interval 1.9 s" for c in configs}
    print("| rate | params | speech dBFS | noise dBFS | events | " + " | ".join(
        f"{names[c]}: decisions / skipped %" for c in configs) + " |")
    print("| --- " * (5 + len(configs)) + "|")
    # cases the same, cases, windows gated, windows, cases within a window, cases with events missing or added
    totals = {c: [0, 0, 0, 0, 0, 0] for c in configs}
    accuracy: dict[object, list] = {c: [0, 0, 0, [], []] for c in [None, *configs]}  # heard, sentences, false starts, delays
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (int(r) for r in args.rates.split(",")):
            sentences = [espeak(t, rate, Path(tmp)) for t in SENTENCES]
            for pname, params in PARAMS.items():
                for speech_dbfs in SPEECH_DBFS:
                    for k, noise in enumerate(NOISE_DBFS):
                        pcm, spans = stream(sentences, rate, speech_dbfs, noise, seed=k)
                        base, _, _ = decisions(model, pcm, rate, dataclasses.replace(params, skip_silence=False))
                        _tally(accuracy[None], base, spans)
                        cells = []
                        for c in configs:
                            skip, interval = c
                            got, scored, gated = decisions(model, pcm, rate,
                                                           dataclasses.replace(params, skip_silence=skip), interval)
                            _tally(accuracy[c], got, spans)
                            same = got == base
                            shift = _shift(base, got)
                            tot = totals[c]
                            tot[0] += same
                            tot[1] += 1
                            tot[2] += gated
                            tot[3] += scored + gated
                            tot[4] += shift is not None and shift <= 0.033
                            tot[5] += shift is None
                            cells.append(f"{'same' if same else 'count' if shift is None else f'{1000 * shift:.0f} ms'}"
                                         f" / {100 * gated / (scored + gated):.0f}")
                            if not same and args.verbose:
                                print(f"  {names[c]} differs: {_diff(base, got)}", file=sys.stderr)
                        print(f"| {rate} | {pname} | {speech_dbfs:g} | {'none' if noise is None else f'{noise:g}'} | "
                              f"{len(base)} | " + " | ".join(cells) + " |", flush=True)
    for c, (same, cases, gated, windows, close, count) in totals.items():
        print(f"{names[c]}: of {cases} cases {same} the same, {close} within one window (32 ms), {count} with "
              f"events missing or added; {100 * gated / windows:.1f} % of windows skipped")
    print("\nAgainst the sentences (heard: a start inside the voiced span; delays from its first and last voiced sample):")
    print("| detector | sentences heard | false starts | start delay mean / p95 ms | stop delay mean / p95 ms |")
    print("| --- | --- | --- | --- | --- |")
    for c, (heard, total, false, d_start, d_stop) in accuracy.items():
        name = "every window (the reference)" if c is None else names[c]
        print(f"| {name} | {heard} of {total} | {false} | {_ms(d_start)} | {_ms(d_stop)} |")
    print(f"({time.monotonic() - t0:.0f} s)")
    return 0


def _ms(xs: list[float]) -> str:
    a = np.array(xs) * 1000
    return f"{a.mean():.0f} / {np.percentile(a, 95):.0f}" if a.size else "-"


def _shift(a: list[VadEvent], b: list[VadEvent]) -> float | None:
    """The largest time shift between the events of ``a`` and ``b`` in order (None: not the same events)."""
    if len(a) != len(b) or any(type(x) is not type(y) for x, y in zip(a, b, strict=True)):
        return None
    return max((abs(x.at - y.at) for x, y in zip(a, b, strict=True)), default=0.0)


def _tally(acc: list, events: list[VadEvent], spans: list[tuple[float, float]]) -> None:
    heard, false, d_start, d_stop = truth(events, spans)
    acc[0] += heard
    acc[1] += len(spans)
    acc[2] += false
    acc[3] += d_start
    acc[4] += d_stop


def _diff(a: list[VadEvent], b: list[VadEvent]) -> str:
    return f"{[(type(e).__name__[3:7], round(e.at, 3)) for e in a]} != {[(type(e).__name__[3:7], round(e.at, 3)) for e in b]}"


if __name__ == "__main__":
    sys.exit(main())

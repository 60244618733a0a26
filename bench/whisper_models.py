"""Whisper tiny.en against base on the demo's sentences spoken by espeak-ng: word error rate and time.

Each sentence (what callers of the restaurant demo say: party sizes, days, times, names,
a yes, a cancellation) is spoken by two espeak-ng voices (``en-us``, ``en-gb``), padded with
silence like a caller's turn, and transcribed whole by each model directory given, with and
without the agent's vocabulary as the initial prompt (:data:`DEMO_PROMPT`).  Prints per model: the word error rate over all sentences (numbers
and times normalized: "2" and "two", "7:00" and "seven" count the same), the median and the
95th percentile of the transcription time, and each sentence it got wrong.

Each is run through the local STT's own model wrapper, once per encoder window given
(``--windows``, seconds; ``WhisperConfig.window_seconds``: the audio is padded to the window, not
to Whisper's 30 s, and the encoder's cost scales with it); the CPU time of each transcription
(process time, so the shared machine's load does not count) is printed with the wall time.

Usage: ``python bench/whisper_models.py [DIR ...] [--windows 30 10]`` (default: the fetched tiny.en).  Times are wall-clock on this machine, shared with other work: the
load average is printed with them; compare models within one run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from time import perf_counter, process_time

import numpy as np

from brisvox.inference import model_path
from brisvox.inference.models import WHISPER_TINY_EN
from brisvox.server.demo import DEMO_AGENT_FILE

# The agent's vocabulary: the demo agent file's [stt.options] prompt.
DEMO_PROMPT: str = tomllib.loads(DEMO_AGENT_FILE.read_text())["stt"]["options"]["prompt"]

SENTENCES = (
    "Hello, I would like to book a table.",
    "A table for two tomorrow at seven, please.",
    "Do you have a table for four on Saturday at eight?",
    "We are six people, Friday at half past seven.",
    "Is there anything free tonight at seven thirty?",
    "Three people on Sunday at six thirty.",
    "My name is Ada Lovelace.",
    "The name is Peter Smith.",
    "Yes, please book it.",
    "No, cancel that, please.",
    "What time do you open?",
    "Could we come at nine instead?",
    "A table for five next Monday at seven pm.",
    "Actually make it three people.",
    "I waited forty minutes last time and the soup was cold, so I want a quiet table this time.",
)
VOICES = ("en-us", "en-gb")

_NUMBERS = {str(i): w for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"])}
_NUMBERS.update({"30": "thirty", "40": "forty"})


def words(text: str) -> list[str]:
    """Lower case, no punctuation, digits and clock times spelled as words."""
    text = text.lower().replace("p.m.", "pm").replace("a.m.", "am")
    text = re.sub(r"(\d{1,2}):00", r"\1", text)
    text = re.sub(r"(\d{1,2}):30", r"\1 thirty", text)
    text = re.sub(r"[^a-z0-9' ]+", " ", text)
    return [_NUMBERS.get(w, w) for w in text.split()]


def edits(ref: list[str], hyp: list[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def speak(text: str, voice: str, out: Path) -> np.ndarray:
    wav = out / "s.wav"
    espeak = subprocess.run(["espeak-ng", "-v", voice, "-s", "160", "--stdout", text], check=True, capture_output=True)
    subprocess.run(["sox", "-t", "wav", "-", "-r", "16000", "-c", "1", "-b", "16", str(wav), "pad", "0.3", "0.5"],
                   input=espeak.stdout, check=True)
    raw = wav.read_bytes()[44:]
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


def run(dirs: list[Path], windows: list[float]) -> int:
    from brisvox.providers.local.whisper import WhisperConfig, _Model

    with tempfile.TemporaryDirectory() as tmp:
        clips = [(s, v, speak(s, v, Path(tmp))) for s in SENTENCES for v in VOICES]
    for directory, window, prompt in ((d, w, p) for d in dirs for w in windows for p in (None, DEMO_PROMPT)):
        model = _Model(WhisperConfig(model_dir=directory, threads=1, prompt=prompt, window_seconds=window), directory)
        errors = total = 0
        times: list[float] = []
        cpu: list[float] = []
        wrong: list[str] = []
        for sentence, voice, audio in clips:
            start, start_cpu = perf_counter(), process_time()
            heard = model.transcribe((audio * 32767).astype("<i2").tobytes()).text
            times.append(perf_counter() - start)
            cpu.append(process_time() - start_cpu)
            ref, hyp = words(sentence), words(heard)
            n = edits(ref, hyp)
            errors += n
            total += len(ref)
            if n:
                wrong.append(f"    {voice}: {sentence!r} -> {heard!r}")
        times.sort()
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
        how = "with the agent's vocabulary as prompt" if prompt else "no prompt"
        print(f"{directory.name} ({how}, {window:g} s window): WER {errors / total:.1%} ({errors}/{total} words), "
              f"time p50 {statistics.median(times):.2f} s, p95 {p95:.2f} s, CPU p50 {statistics.median(cpu):.2f} s")
        print("\n".join(wrong))
    print(f"load average: {os.getloadavg()[0]:.2f} (2 cores, shared with other work)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="*", type=Path)
    parser.add_argument("--windows", nargs="+", type=float, default=[30.0, 10.0], help="encoder windows, seconds")
    args = parser.parse_args(argv)
    return run(args.dirs or [model_path(WHISPER_TINY_EN[0]).parent], args.windows)


if __name__ == "__main__":
    sys.exit(main())

"""Recorded callers (espeak-ng) talk to the demo agent served by ``brisvox serve``, over WebSocket.

``brisvox serve`` runs with no agent file (the demo restaurant, the agent ``make demo`` runs)
in a child process; each call is the reference client (:mod:`brisvox.transport.websocket.client`)
playing one scenario in real time: the caller waits for the greeting, says each sentence,
and waits ``--gap`` seconds for the answer (a barge-in scenario speaks again while the
reply plays).  Scenarios: a greeting, an availability question, a booking (request, name,
yes), a cancellation (request, name, no), a long complaint, a barge-in.

Per scenario it prints what the agent said in the first run, the tool calls with their
outcomes, the bookings made, the fallbacks (an ``engine_failure`` of stage ``llm``), the
fillers, and the time from the end of the caller's speech to the first audible reply
(the server's ``latency`` event, ``speech_end_to_audio_ms``: from the VAD's end of speech
to the first audible sample released to the caller) as p50 and p95 over every turn; then
the same over all scenarios and the machine's load average.

Usage: ``python bench/demo_callers.py [--llm scripted|local|auto] [--runs 5] [--gap 8]``
(needs the local extra, ``brisvox models fetch``, espeak-ng and sox; ``--llm local`` the
local-llm extra and its GGUF).  Target (issue 28): p50 <= 1.5 s, p95 <= 2.5 s with one call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from brisvox.audio import WavAudio, read_wav
from brisvox.transport.websocket.client import ClientOptions, ClientResult, run

ROOT = Path(__file__).resolve().parents[1]
RATE = 16_000
GREETING_WAIT = 5.0  # the greeting plays first; speaking over it would cut it


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    sentences: tuple[str, ...]
    barge_in: bool = False  # the last sentence is spoken 1.5 s after the one before ends


SCENARIOS = (
    Scenario("greeting", ("Hello, good evening.",)),
    Scenario("availability", ("Do you have a table for two tomorrow at seven?",)),
    Scenario("booking", ("A table for two tomorrow at seven, please.", "The name is John Brown.",
                          "Yes, please book it.")),
    Scenario("cancellation", ("A table for four on Saturday at seven.", "My name is Maria.",
                               "No, cancel that.")),
    Scenario("complaint", ("Last time I waited forty minutes for my soup and it was cold when it came, and nobody "
                           "said sorry, so I want to know if it will be better this time.",)),
    Scenario("barge-in", ("What times do you have tomorrow for two people?", "Sorry, make it four people."),
             barge_in=True),
)


def speak(text: str, directory: Path) -> bytes:
    """PCM16 mono 16 kHz of ``text`` spoken by espeak-ng (en-us)."""
    out = directory / "s.wav"
    voice = subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "--stdout", text], capture_output=True,
                           check=True, timeout=30)
    subprocess.run(["sox", "-t", "wav", "-", "-r", str(RATE), "-c", "1", "-b", "16", str(out)],
                   input=voice.stdout, capture_output=True, check=True, timeout=30)
    return read_wav(out).pcm


def silence(seconds: float) -> bytes:
    return bytes(2 * round(seconds * RATE))


def caller_audio(scenario: Scenario, gap: float, directory: Path) -> WavAudio:
    pcm = bytearray(silence(GREETING_WAIT))
    for i, sentence in enumerate(scenario.sentences):
        if i and scenario.barge_in and i == len(scenario.sentences) - 1:
            pcm += silence(1.5)
        elif i:
            pcm += silence(gap)
        pcm += speak(sentence, directory)
    pcm += silence(1.0)
    return WavAudio(pcm=bytes(pcm), sample_rate=RATE)


class Server:
    """``brisvox serve`` (the demo agent) on a free port of 127.0.0.1."""

    def __init__(self, llm: str) -> None:
        env = {**os.environ, "BRISVOX_PORT": "0", "BRISVOX_HOST": "127.0.0.1", "PYTHONPATH": str(ROOT / "src")}
        for name in ("BRISVOX_LLM_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "BRISVOX_AGENT_FILE",
                     "BRISVOX_LLM_SCRIPTED"):
            if llm != "auto":
                env.pop(name, None)
        if llm == "scripted":
            env["BRISVOX_LLM_SCRIPTED"] = "1"
        self.proc = subprocess.Popen([sys.executable, "-m", "brisvox", "serve", "--workers", "1"], env=env, cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self.warm = threading.Event()
        self.readers = [threading.Thread(target=self._read, args=(s,), daemon=True)
                        for s in (self.proc.stdout, self.proc.stderr)]
        for reader in self.readers:
            reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.lines.append(line)
            if "call providers warm" in line:
                self.warm.set()

    def url(self) -> str:
        if not self.warm.wait(600):
            raise SystemExit("the server did not warm up in 10 minutes:\n" + "".join(self.lines[-30:]))
        m = re.search(r"listening on http://(127\.0\.0\.1:\d+)", "".join(self.lines))
        if m is None:
            raise SystemExit("no listening line:\n" + "".join(self.lines[-30:]))
        return f"ws://{m.group(1)}/ws"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(slots=True)
class Tally:
    latencies: list[float]
    fallbacks: int = 0
    fillers: int = 0
    bookings: int = 0
    failed_calls: int = 0
    # The latency event's parts, seconds: where the time goes (the turn end, the model, the speech).
    stages: dict[str, list[float]] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)  # how the answered turns ended


STAGES = (("speech end -> turn end", "speech_end_to_turn_end_ms"),
          ("turn end -> first token", "turn_end_to_first_token_ms"),
          ("turn end -> first audio", "turn_end_to_audio_ms"))


def tally(result: ClientResult, into: Tally) -> None:
    if not result.ok:
        into.failed_calls += 1
    for e in result.events:
        kind = e.get("kind")
        if kind == "latency" and "speech_end_to_audio_ms" in e:
            into.latencies.append(e["speech_end_to_audio_ms"] / 1000.0)
            for stage, key in STAGES:
                if e.get(key) is not None:
                    into.stages.setdefault(stage, []).append(e[key] / 1000.0)
            reason = str(e.get("turn_end_reason"))
            into.reasons[reason] = into.reasons.get(reason, 0) + 1
        elif kind == "engine_failure" and e.get("stage") == "llm":
            into.fallbacks += 1
        elif kind == "filler":
            into.fillers += 1
        elif kind == "tool_result" and e.get("outcome") == "ok" and "reservation_id" in str(e.get("content", "")):
            into.bookings += 1  # the restaurant's answer to a booking made (book_table, or its confirmation)


def transcript(result: ClientResult) -> list[str]:
    """The call as lines: the caller's turns, the agent's replies, its tool calls and their outcomes."""
    lines: list[str] = []
    said: dict[int, str] = {}
    for e in result.events:
        kind = e.get("kind")
        if kind == "user_turn":
            lines.append(f"    caller: {e['text']}")
        elif kind == "bot_text":
            said[e["epoch"]] = said.get(e["epoch"], "") + e["text"]
        elif kind == "bot_done" and e["epoch"] in said:
            lines.append(f"    agent:  {said.pop(e['epoch']).strip()}")
        elif kind == "tool_call":
            lines.append(f"    tool:   {e['name']}({e['arguments']})")
        elif kind == "tool_result":
            lines.append(f"    result: {e['name']} {e['outcome']}: {str(e['content'])[:120]}")
        elif kind == "engine_failure":
            lines.append(f"    failure: {e['stage']}")
        elif kind == "latency" and e.get("speech_end_to_audio_ms") is not None:
            turn_end = e.get("speech_end_to_turn_end_ms")
            lines.append(f"    latency: {e['speech_end_to_audio_ms'] / 1000:.2f} s to audio, turn end "
                         f"{'-' if turn_end is None else f'{turn_end / 1000:.2f} s'} ({e.get('turn_end_reason')})")
    lines.extend(f"    agent:  {text.strip()}" for text in said.values())
    return lines


async def call(url: str, audio: WavAudio, linger: float) -> ClientResult:
    return await run(ClientOptions(url=url, audio=audio, linger=linger, max_duration=600.0))


def report(name: str, t: Tally, runs: int) -> None:
    if t.latencies:
        lat = f"p50 {statistics.median(t.latencies):.2f} s, p95 {percentile(t.latencies, 0.95):.2f} s"
    else:
        lat = "no answered turn"
    print(f"  {name}: {runs} calls, {len(t.latencies)} answered turns, end of speech -> first audible reply {lat}; "
          f"fallbacks {t.fallbacks}, fillers {t.fillers}, bookings {t.bookings}, failed calls {t.failed_calls}")
    parts = "; ".join(f"{stage} p50 {statistics.median(v):.2f} s" for stage, v in t.stages.items() if v)
    if parts:
        print(f"    stages: {parts}; turns ended by {t.reasons}")


async def main_async(args: argparse.Namespace) -> int:
    server = Server(args.llm)
    try:
        url = server.url()
        print("".join(line for line in server.lines if line.startswith("brisvox") or "agent" in line[:40])[:400])
        total = Tally(latencies=[])
        tool_counts: dict[str, int] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for scenario in SCENARIOS:
                if args.only and scenario.name not in args.only:
                    continue
                audio = caller_audio(scenario, args.gap, Path(tmp))
                t = Tally(latencies=[])
                for n in range(args.runs):
                    result = await call(url, audio, args.gap)
                    tally(result, t)
                    for e in result.events:
                        if e.get("kind") == "tool_call":
                            tool_counts[e["name"]] = tool_counts.get(e["name"], 0) + 1
                    if n == 0:
                        print(f"{scenario.name} (first run):")
                        print("\n".join(transcript(result)))
                    if not result.ok:
                        print(f"    call failed: {result.failure}")
                report(scenario.name, t, args.runs)
                total.latencies += t.latencies
                total.fallbacks += t.fallbacks
                total.fillers += t.fillers
                total.bookings += t.bookings
                total.failed_calls += t.failed_calls
                for stage, values in t.stages.items():
                    total.stages.setdefault(stage, []).extend(values)
                for reason, count in t.reasons.items():
                    total.reasons[reason] = total.reasons.get(reason, 0) + count
        report("all scenarios", total, args.runs * len(args.only or SCENARIOS))
        print(f"  tool calls made: {tool_counts or 'none'}")
        early = [tuple(map(int, m.groups())) for line in server.lines
                 if (m := re.search(r"local-whisper session: (\d+) finals, (\d+) of them from an early decode "
                                    r"\((\d+) early decodes\)", line))]
        if early:
            print(f"  Whisper finals: {sum(e[0] for e in early)}, {sum(e[1] for e in early)} of them from an early "
                  f"decode ({sum(e[2] for e in early)} early decodes)")
        llm_requests(server.lines)
        print(f"load average (1, 5, 15 min): {os.getloadavg()} on {os.cpu_count()} cores, shared with other work")
    finally:
        server.stop()
        if args.server_log is not None:
            with open(args.server_log, "w") as f:  # noqa: ASYNC230 - once, after the calls
                f.write("".join(server.lines))
    return 0


_LLM_LINE = re.compile(r"local-llama: queued (\d+) ms, prompt (\d+) evaluated \+ (\d+) cached in (\d+) ms, "
                       r"first token (\d+|-)(?: ms)?, (\d+) tokens in (\d+) ms \(([\d.]+)/s\), total (\d+) ms")


def llm_requests(lines: list[str]) -> None:
    """The local model's requests (its per-request log line, ``XLlamaLlm``): where the model's time went."""
    rows = [m.groups() for line in lines if (m := _LLM_LINE.search(line))]
    if not rows:
        return
    cols = list(zip(*rows, strict=True))

    def med(i: int) -> str:
        values = [float(v) for v in cols[i] if v != "-"]
        return f"{statistics.median(values):.0f}" if values else "-"

    print(f"  local model: {len(rows)} requests; medians: queued {med(0)} ms, prompt "
          f"{med(1)} evaluated + {med(2)} cached in {med(3)} ms, first token {med(4)} ms, {med(5)} tokens generated "
          f"at {float(med(7)):.1f}/s, request total {med(8)} ms")
    for row in rows:
        print(f"    queued {row[0]} ms, prompt {row[1]}+{row[2]} cached ({row[3]} ms), first {row[4]} ms, "
              f"{row[5]} tokens in {row[6]} ms ({row[7]}/s), total {row[8]} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llm", choices=("scripted", "local", "auto"), default="local")
    parser.add_argument("--runs", type=int, default=5, help="calls per scenario")
    parser.add_argument("--gap", type=float, default=8.0, help="seconds the caller waits for each answer")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    parser.add_argument("--server-log", default=None, help="write the server's output to this file")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())

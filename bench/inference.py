"""Inference costs on this machine: medians, printed per named section.

    python bench/inference.py                 # every section
    python bench/inference.py --only vad      # one or more sections

Sections register themselves with ``@section("name")`` and return rows of
``Row(what, median_ms, note)``; later sections (STT, TTS, LLM) add themselves the same way.
Models come from the cache (``brisvox models fetch``); a section whose model is missing
says so and is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from brisvox.core.clock import monotonic_ns
from brisvox.inference.errors import ModelNotFound


@dataclass(frozen=True)
class Row:
    what: str
    median_ms: float
    note: str = ""


class Skipped(Exception):
    """A section could not run here (a model or package is missing)."""


SectionFn = Callable[[argparse.Namespace], list[Row]]
SECTIONS: dict[str, SectionFn] = {}


def section(name: str) -> Callable[[SectionFn], SectionFn]:
    def register(fn: SectionFn) -> SectionFn:
        SECTIONS[name] = fn
        return fn

    return register


def median_ms(fn: Callable[[], object], repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = monotonic_ns()
        fn()
        samples.append((monotonic_ns() - t0) / 1e6)
    return statistics.median(samples)


def speech_like(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """Noise shaped like speech bursts (no espeak needed): 300 ms on, 200 ms off."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    x = rng.standard_normal(n) * 3000
    env = (np.arange(n) // int(0.1 * rate)) % 5 < 3
    return np.rint(x * env).astype(np.int16)


@section("audio")
def bench_audio(args: argparse.Namespace) -> list[Row]:
    from brisvox.audio import ResampleQuality, ResampleStream, ulaw_decode, ulaw_encode

    rows: list[Row] = []
    for src, dst in ((8000, 16000), (16000, 8000), (24000, 16000), (24000, 8000)):
        frame = speech_like(0.02, src).tobytes()
        for quality in (ResampleQuality.LOW_LATENCY, ResampleQuality.LOW):
            stream = ResampleStream(src, dst, quality)
            rows.append(
                Row(
                    f"resample one 20 ms frame {src} -> {dst} Hz, {quality.name.lower()}",
                    median_ms(lambda s=stream, f=frame: s.process(f), args.repeat * 10),
                )
            )
    pcm = speech_like(0.02, 8000).tobytes()
    law = ulaw_encode(pcm)
    rows.append(Row("mu-law encode one 20 ms frame (160 samples)", median_ms(lambda: ulaw_encode(pcm), args.repeat * 10)))
    rows.append(Row("mu-law decode one 20 ms frame", median_ms(lambda: ulaw_decode(law), args.repeat * 10)))
    return rows


@section("vad")
def bench_vad(args: argparse.Namespace) -> list[Row]:
    from brisvox.inference.energy import EnergyScorer
    from brisvox.inference.silero import SileroModel

    rows: list[Row] = []
    audio = speech_like(10.0)
    windows = [audio[i : i + 512] for i in range(0, audio.size - 512, 512)]
    try:
        model = SileroModel.load(threads=1)
    except ModelNotFound as exc:
        raise Skipped(str(exc)) from None
    scorer = model.scorer(16000)
    it = iter(range(10**9))

    def one_window() -> None:
        scorer.score(windows[next(it) % len(windows)])

    rows.append(Row("silero VAD, one 32 ms window (512 + 64 samples), 1 thread", median_ms(one_window, args.repeat * 10)))
    energy = EnergyScorer(16000, window_ms=10)
    small = [audio[i : i + 160] for i in range(0, audio.size - 160, 160)]
    rows.append(
        Row("energy VAD, one 10 ms window", median_ms(lambda: energy.score(small[next(it) % len(small)]), args.repeat * 10))
    )
    rows.append(_pool_round_trip(args, model))
    peer = _pipecat()
    if peer is not None:
        from pipecat.audio.vad.silero import SileroVADAnalyzer

        analyzer = SileroVADAnalyzer(sample_rate=16000)
        analyzer.set_sample_rate(16000)
        raw = [w.tobytes() for w in windows]
        theirs = median_ms(lambda: analyzer.voice_confidence(raw[next(it) % len(raw)]), args.repeat * 10)
        ours = rows[0].median_ms
        rows.append(Row("peer: pipecat SileroVADAnalyzer.voice_confidence, one window", theirs, f"ours/peer {ours / theirs:.2f}"))
    return rows


def _pipecat() -> object | None:
    """The peer (bench extra), quiet; None when it is not installed."""
    try:
        import pipecat
        from loguru import logger
    except ImportError:
        return None
    logger.remove()
    return pipecat


def _pool_round_trip(args: argparse.Namespace, model: object) -> Row:
    """A VAD window through the pool: submit on the loop, score on a thread, result back on the loop."""
    from brisvox.inference.pool import InferencePool, Lane, PoolConfig
    from brisvox.inference.silero import SileroModel

    assert isinstance(model, SileroModel)
    scorer = model.scorer(16000)
    window = speech_like(0.032)[:512]

    async def run() -> float:
        async with InferencePool(PoolConfig(name="bench", threads=1)) as pool:
            for _ in range(10):
                await pool.run(scorer.score, window, lane=Lane.VAD)
            samples = []
            for _ in range(args.repeat * 10):
                t0 = monotonic_ns()
                await pool.run(scorer.score, window, lane=Lane.VAD)
                samples.append((monotonic_ns() - t0) / 1e6)
            return statistics.median(samples)

    return Row("silero VAD window through the inference pool (round trip)", asyncio.run(run()))


@section("end_of_turn")
def bench_end_of_turn(args: argparse.Namespace) -> list[Row]:
    from brisvox.inference.mel import log_mel, normalize_waveform
    from brisvox.inference.smart_turn import SmartTurnModel, smart_turn_features

    audio = speech_like(8.0, seed=1)
    x = audio.astype(np.float32) / 32768.0
    rows = [Row("whisper log-mel of 8 s (numpy)", median_ms(lambda: log_mel(normalize_waveform(x)), args.repeat))]
    try:
        model = SmartTurnModel.load(threads=1)
    except ModelNotFound as exc:
        raise Skipped(str(exc)) from None
    feats = smart_turn_features(audio)
    rows.append(Row("smart turn v3.2 model only, 1 thread", median_ms(lambda: model.run_features(feats), args.repeat)))
    ours = median_ms(lambda: model.probability(audio), args.repeat)
    rows.append(Row("smart turn v3.2 analysis (features + model), 1 thread", ours))
    if _pipecat() is not None:
        from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

        peer = LocalSmartTurnAnalyzerV3(cpu_count=1)
        theirs = median_ms(lambda: peer._predict_endpoint(x), args.repeat)
        gap = abs(peer._predict_endpoint(x)["probability"] - model.probability(audio))
        rows.append(
            Row("peer: pipecat LocalSmartTurnAnalyzerV3, one analysis", theirs, f"ours/peer {ours / theirs:.2f}, |p diff| {gap:.1e}")
        )
    return rows


# --- local providers (brisvox.providers.local) ------------------------------------------

BENCH_SENTENCES = (
    "I need to cancel my appointment for next week.",
    "What time does the pharmacy close on Sunday?",
    "I would like to change my delivery address.",
    "Can you tell me the weather in Paris tomorrow?",
    "Could you send me a copy of the invoice?",
    "My name is John and I live in London.",
)


def espeak_pcm16(text: str, rate: int = 16000) -> bytes:
    """espeak-ng speech as headerless PCM16 (raises Skipped when espeak-ng or sox is missing)."""
    import shutil
    import subprocess

    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        raise Skipped("espeak-ng and sox are needed (make apt)")
    wav = subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "--stdout", text], capture_output=True, check=True).stdout
    return subprocess.run(
        ["sox", "-t", "wav", "-", "-r", str(rate), "-c", "1", "-b", "16", "-e", "signed", "-L", "-t", "raw", "-", "pad", "0.1", "0.2"],
        input=wav, capture_output=True, check=True,
    ).stdout  # fmt: skip


async def _transcribe_once(session: object, pcm: bytes) -> tuple[float, str]:
    """Send an utterance, finalize, and time finalize -> final (ms)."""
    from brisvox.providers.local import WhisperSttSession
    from brisvox.providers.stt import Transcript

    assert isinstance(session, WhisperSttSession)
    for i in range(0, len(pcm), 640):
        await session.send_audio(pcm[i : i + 640])
    t0 = monotonic_ns()
    await session.finalize()
    event = await anext(session)
    elapsed = (monotonic_ns() - t0) / 1e6
    if not isinstance(event, Transcript):
        raise RuntimeError(f"local STT failed: {event!r}")
    return elapsed, event.text


async def _hibari_speech(texts: tuple[str, ...]) -> list[bytes]:
    """Each text spoken by the local TTS, resampled to 16 kHz, with 0.1 s of silence either side."""
    from brisvox.audio import resample, silence
    from brisvox.providers.local import HibariTts
    from brisvox.providers.tts import TtsAudio, TtsConfig, TtsFlushed

    tts = HibariTts()
    out: list[bytes] = []
    try:
        async with await tts.connect(TtsConfig()) as session:
            for ctx, text in enumerate(texts):
                await session.send_text(ctx, text)
                await session.flush(ctx)
                pcm = bytearray()
                async for event in session:
                    if isinstance(event, TtsAudio):
                        pcm += event.pcm
                    elif isinstance(event, TtsFlushed):
                        break
                pad = silence(0.1, 16000)
                out.append(pad + resample(bytes(pcm), 24000, 16000) + pad)
    finally:
        await tts.aclose()
    return out


@section("stt")
def bench_stt(args: argparse.Namespace) -> list[Row]:
    from brisvox.providers.local import WhisperConfig, WhisperStt
    from brisvox.providers.stt import SttConfig
    from brisvox.sim.accuracy import word_accuracy

    config = WhisperConfig()
    if not (config.resolve_dir() / "model.bin").is_file():
        raise Skipped("the Whisper model is not fetched (brisvox models fetch)")
    three_s = espeak_pcm16("Book a table by the window for this evening.")  # 2.9 s with its padding
    seconds = len(three_s) / 32000
    sentences = [espeak_pcm16(s) for s in BENCH_SENTENCES]

    async def run() -> list[Row]:
        neural = await _hibari_speech(BENCH_SENTENCES)
        stt = WhisperStt(config)
        try:
            t0 = monotonic_ns()
            await stt.warm()
            warm_ms = (monotonic_ns() - t0) / 1e6
            async with await stt.connect(SttConfig()) as session:
                samples = [(await _transcribe_once(session, three_s))[0] for _ in range(min(args.repeat, 7))]
                texts = [(await _transcribe_once(session, pcm))[1] for pcm in sentences]
                heard = [(await _transcribe_once(session, pcm))[1] for pcm in neural]
        finally:
            await stt.aclose()
        acc = statistics.mean(word_accuracy(ref, hyp) for ref, hyp in zip(BENCH_SENTENCES, texts, strict=True))
        acc_neural = statistics.mean(word_accuracy(ref, hyp) for ref, hyp in zip(BENCH_SENTENCES, heard, strict=True))
        return [
            Row("whisper tiny.en load + first run (warm)", warm_ms, "once"),
            Row(
                f"whisper tiny.en, finalize -> final of a {seconds:.1f} s utterance (int8, 2 threads)",
                statistics.median(samples),
                f"{len(samples)} runs; word accuracy {acc:.3f} on {len(texts)} espeak-ng sentences, "
                f"{acc_neural:.3f} on the same sentences spoken by hibari",
            ),
        ]

    return asyncio.run(run())


@section("tts")
def bench_tts(args: argparse.Namespace) -> list[Row]:
    from brisvox.providers.local import HibariTts
    from brisvox.providers.tts import TtsAudio, TtsConfig, TtsFlushed

    text = "Your table for two is booked for seven thirty tonight. Is there anything else I can help you with?"
    short = "Sure, one moment."

    async def speak(session: object, ctx: int, what: str) -> tuple[float, float, float]:
        """(ms to the first audio, ms to flushed, seconds of audio)."""
        from brisvox.providers.local import HibariTtsSession

        assert isinstance(session, HibariTtsSession)
        t0 = monotonic_ns()
        await session.send_text(ctx, what)
        await session.flush(ctx)
        first = None
        audio = 0.0
        async for event in session:
            if isinstance(event, TtsAudio):
                first = first if first is not None else (monotonic_ns() - t0) / 1e6
                audio += event.duration
            elif isinstance(event, TtsFlushed):
                break
        assert first is not None
        return first, (monotonic_ns() - t0) / 1e6, audio

    async def run() -> list[Row]:
        tts = HibariTts()
        try:
            t0 = monotonic_ns()
            await tts.warm()
            warm_ms = (monotonic_ns() - t0) / 1e6
            n = min(args.repeat, 10)
            async with await tts.connect(TtsConfig()) as session:
                firsts_short = [(await speak(session, i, short))[0] for i in range(n)]
                runs = [await speak(session, 100 + i, text) for i in range(n)]
        finally:
            await tts.aclose()
        first = statistics.median(r[0] for r in runs)
        total = statistics.median(r[1] for r in runs)
        audio = statistics.median(r[2] for r in runs)
        return [
            Row("hibari load + first synthesis (warm)", warm_ms, "once"),
            Row(f"hibari time to first audio, {len(short)}-char reply", statistics.median(firsts_short), f"{n} runs"),
            Row(f"hibari time to first audio, two sentences ({len(text)} chars)", first, f"{n} runs"),
            Row(
                f"hibari whole two-sentence reply ({audio:.2f} s of audio)",
                total,
                f"real-time factor {total / 1000 / audio:.3f}, {audio * 1000 / total:.0f}x real time",
            ),
        ]

    return asyncio.run(run())


@section("llm")
def bench_llm(args: argparse.Namespace) -> list[Row]:
    """The optional local LLM: time to first token and tokens per second (streamed text)."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError:
        raise Skipped("the local-llm extra (xllamacpp) is not installed") from None
    from brisvox.agent import AssistantMessage, Message, SystemMessage, UserMessage
    from brisvox.inference import model_path
    from brisvox.inference.models import QWEN_CODER_0_5B
    from brisvox.providers.llm import Done, LlmRequest, TextDelta
    from brisvox.providers.local.xllama import XLlamaLlm

    if not model_path(QWEN_CODER_0_5B).is_file():
        raise Skipped(f"the GGUF is not fetched (brisvox models fetch {QWEN_CODER_0_5B.name})")
    questions = ("Tell me a fun fact about cats.", "And one about dogs?", "What about owls?", "And parrots?")

    async def run() -> list[Row]:
        llm = XLlamaLlm()
        ttfts: list[float] = []
        rates: list[float] = []
        try:
            t0 = monotonic_ns()
            await llm.warm()
            warm_ms = (monotonic_ns() - t0) / 1e6
            history: list[Message] = [SystemMessage(text="You are a phone assistant. Answer in one short sentence.")]
            for question in questions[: max(2, min(args.repeat, len(questions)))]:
                history.append(UserMessage(text=question))
                t0 = monotonic_ns()
                first = None
                text = ""
                done = None
                async with llm.stream(LlmRequest(messages=tuple(history), max_tokens=32, temperature=0.0)) as stream:
                    async for event in stream:
                        if isinstance(event, TextDelta):
                            first = first if first is not None else (monotonic_ns() - t0) / 1e6
                            text += event.text
                        elif isinstance(event, Done):
                            done = event
                total = (monotonic_ns() - t0) / 1e6
                history.append(AssistantMessage(text=text or "ok"))
                if first is not None and done is not None and done.usage is not None and total > first:
                    ttfts.append(first)
                    rates.append((done.usage.output_tokens - 1) / ((total - first) / 1000))
        finally:
            await llm.aclose()
        return [
            Row("qwen2.5-coder 0.5B Q4_K_M load + first token (warm)", warm_ms, "once"),
            Row(
                "qwen2.5-coder 0.5B time to first token, growing conversation (KV cache reused)",
                statistics.median(ttfts),
                f"{len(ttfts)} turns; {statistics.median(rates):.1f} tokens/s median after the first",
            ),
        ]

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="sections to run (default: all)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per measurement (VAD: x10)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    print(f"# {os.cpu_count()} logical cores, load average {load:.2f} (other work on the machine inflates medians)")
    for name in args.only or list(SECTIONS):
        print(f"== {name}")
        try:
            rows = SECTIONS[name](args)
        except Skipped as why:
            print(f"   skipped: {why}")
            continue
        for row in rows:
            note = f"  ({row.note})" if row.note else ""
            print(f"   {row.median_ms:10.3f} ms  median  {row.what}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

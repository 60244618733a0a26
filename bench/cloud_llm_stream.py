"""Client-side cost of consuming an OpenAI chat-completions stream: our adapter vs the official SDK.

A child process serves one canned stream (text deltas and three parallel tool calls with
interleaved argument fragments, in OpenAI's SSE format) over loopback HTTP/1.1.  This
process consumes it with ``OpenAiCompatLlm`` (httpx + our SSE decoder) and with the
``openai`` SDK (``AsyncOpenAI(base_url=...).chat.completions.create(stream=True)``), and
reports the CPU time of *this* process per streamed event (median of runs), plus the pure
decoders of the three vendors without I/O.  Used for the SDK decision in docs/DECISIONS.md.

    python bench/cloud_llm_stream.py [--requests 40] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

TEXT_CHUNKS = 300
CALL_FRAGMENTS = 30


def canned_events() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": f"word{i} "}) for i in range(TEXT_CHUNKS)]
    for j in range(CALL_FRAGMENTS):
        for i in range(3):
            frag: dict[str, Any] = {"index": i, "function": {"arguments": '"x' if j else '{"city":'}}
            if j == 0:
                frag.update(id=f"call_{i}", type="function")
                frag["function"]["name"] = "get_weather"
            if j == CALL_FRAGMENTS - 1:
                frag["function"]["arguments"] = '"}'
            out.append(chunk({"tool_calls": [frag]}))
    out.append(chunk({}, "tool_calls"))
    out.append(b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
               b'"usage":{"prompt_tokens":10,"completion_tokens":400,"total_tokens":410}}\n\n')
    out.append(b"data: [DONE]\n\n")
    return out


def _write_port(path: str, port: int) -> None:
    with open(path, "w") as f:
        f.write(str(port))


def _read_port(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


def serve(port_file: str) -> None:
    events = canned_events()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                for ev in events:
                    writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        _write_port(port_file, server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


async def consume_ours(base: str, n: int) -> tuple[float, int]:
    from brisvox.agent import Context, ToolSpec
    from brisvox.core.clock import SystemClock
    from brisvox.core.secret import Secret
    from brisvox.providers.cloud.openai_compat import OpenAiCompatLlm, OpenAiCompatOptions
    from brisvox.providers.llm import LlmRequest

    llm = OpenAiCompatLlm(OpenAiCompatOptions.preset("openai", model="m", api_key=Secret("k"), base_url=base),
                          SystemClock())
    ctx = Context()
    ctx.push_user("hi")
    tool = ToolSpec(name="get_weather", description="w", parameters={"type": "object", "properties": {}})
    req = LlmRequest(messages=ctx.messages, tools=(tool,))
    events = 0
    t0 = time.process_time()
    for _ in range(n):
        async with llm.stream(req) as stream:
            async for _event in stream:
                events += 1
    spent = time.process_time() - t0
    await llm.aclose()
    return spent, events


async def consume_sdk(base: str, n: int) -> tuple[float, int]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="k", base_url=base, max_retries=0)
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "description": "w",
                                                    "parameters": {"type": "object", "properties": {}}}}]
    events = 0
    t0 = time.process_time()
    for _ in range(n):
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], tools=tools, stream=True
        )
        async for _chunk in stream:
            events += 1
    spent = time.process_time() - t0
    await client.close()
    return spent, events


def decoders(rounds: int) -> dict[str, float]:
    """Microseconds per SSE event for each vendor's pure decoder (no I/O)."""
    from brisvox.providers.cloud._sse import SseDecoder
    from brisvox.providers.cloud.anthropic import AnthropicStreamDecoder
    from brisvox.providers.cloud.gemini import GeminiStreamDecoder
    from brisvox.providers.cloud.openai_compat import OpenAiStreamDecoder

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from tests.providers.cloud._llm_wire import (  # the loopback scripts double as bench input
        RENDERERS,
        Script,
        T,
        call,
        interleave,
    )

    script = Script([*(T(f"word{i} ") for i in range(TEXT_CHUNKS)),
                     *interleave(*(call(i, f"c{i}", "get_weather", {"city": "x" * 60}, pieces=CALL_FRAGMENTS)
                                   for i in range(3)))], tool_use=True)
    out: dict[str, float] = {}
    for vendor, make in (("openai", OpenAiStreamDecoder), ("anthropic", AnthropicStreamDecoder),
                         ("gemini", GeminiStreamDecoder)):
        wire = b"".join(
            (f"event: {ev}\n" if ev else "").encode() + b"data: " + (d if isinstance(d, str) else json.dumps(d)).encode() + b"\n\n"
            for ev, d in RENDERERS[vendor](script)
        )
        samples = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            sse = SseDecoder().feed(wire)
            dec = make()
            for e in sse:
                dec.feed(e)
            samples.append((time.perf_counter() - t0) / len(sse) * 1e6)
        out[vendor] = statistics.median(samples)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--serve")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return
    port_file = tempfile.mktemp()
    child = subprocess.Popen([sys.executable, __file__, "--serve", port_file])
    try:
        for _ in range(200):
            if _read_port(port_file):
                break
            time.sleep(0.05)
        base = f"http://127.0.0.1:{_read_port(port_file)}"
        results: dict[str, list[float]] = {"brisvox (httpx + own decoder)": [], "openai SDK": []}
        counts: dict[str, int] = {}
        for _ in range(args.runs):
            for name, fn in (("brisvox (httpx + own decoder)", consume_ours), ("openai SDK", consume_sdk)):
                spent, events = asyncio.run(fn(base, args.requests))
                results[name].append(spent / events * 1e6)
                counts[name] = events // args.requests
        print(f"OpenAI stream over loopback: {counts} events per response, {args.requests} responses x {args.runs} runs")
        ours = statistics.median(results["brisvox (httpx + own decoder)"])
        for name, vals in results.items():
            med = statistics.median(vals)
            print(f"  {name:32s} {med:7.1f} us client CPU per event (median)   ratio {med / ours:4.2f}")
        print("Pure decoders (SSE framing + vendor events to deltas), us per event, median of 20:")
        for vendor, us in decoders(20).items():
            print(f"  {vendor:10s} {us:6.2f}")
    finally:
        child.terminate()
        child.wait()
        if os.path.exists(port_file):
            os.unlink(port_file)


if __name__ == "__main__":
    main()

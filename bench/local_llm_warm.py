"""First-turn time to first token of the embedded LLM, with and without the warmed prefix.

The demo agent's first request (its system prompt, the date line, its tools, one caller
sentence) is sent to a freshly loaded model ("cold": the prefix is evaluated with the
turn, as before warm start), then to another freshly loaded model after
:meth:`XLlamaLlm.warm_prefix` evaluated the same prefix with a different sentence ("warm":
what ``brisvox serve`` does at start).  Prints the time to the first token (text or call)
and the prompt tokens the turn evaluated vs took from the cache, per sentence.

Usage: ``python bench/local_llm_warm.py [--sentences N]`` (needs the ``local-llm`` extra and
``brisvox models fetch qwen2_5_coder_0_5b_q4``).  The machine's load is printed with it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import sys
from time import perf_counter

from brisvox.agent import SystemMessage, UserMessage
from brisvox.providers.llm import Done, LlmRequest, TextDelta, ToolCallDelta
from brisvox.providers.local.xllama import XLlamaLlm
from brisvox.server.agent_file import load_agent_file
from brisvox.server.call import warm_request
from brisvox.server.demo import DEMO_AGENT_FILE, demo_tools

SENTENCES = ("A table for two tomorrow at seven, please.", "Hello, are you open on Sunday?",
             "Do you have a table for four at eight tonight?")


async def first_turn(llm: XLlamaLlm, base: LlmRequest, said: str) -> tuple[float, int, int]:
    request = LlmRequest(messages=(*base.messages[:1], UserMessage(text=said)), tools=base.tools)
    start = perf_counter()
    first: float | None = None
    cached = evaluated = 0
    async with llm.stream(request) as stream:
        async for event in stream:
            if first is None and isinstance(event, TextDelta | ToolCallDelta):
                first = perf_counter() - start
            if isinstance(event, Done) and event.usage is not None:
                cached = event.usage.cached_input_tokens or 0
                evaluated = (event.usage.input_tokens or 0) - cached
    return (first if first is not None else float("nan")), evaluated, cached


async def run(sentences: int) -> int:
    tools = demo_tools()
    definition = load_agent_file(DEMO_AGENT_FILE, available_tools=tools)
    base = warm_request(definition, tools, datetime.date.today())
    assert base is not None and isinstance(base.messages[0], SystemMessage)
    rows: dict[str, list[float]] = {"cold": [], "warm": []}
    for said in SENTENCES[:sentences]:
        for how in ("cold", "warm"):
            llm = XLlamaLlm()
            try:
                await llm.warm()  # the model loaded: only the prompt is measured
                if how == "warm":
                    await llm.warm_prefix(base)
                ttft, evaluated, cached = await first_turn(llm, base, said)
            finally:
                await llm.aclose()
            rows[how].append(ttft)
            print(f"{how}: {ttft:5.2f} s to the first token ({evaluated} prompt tokens evaluated, {cached} cached): {said}")
    for how, values in rows.items():
        print(f"{how}: median first-turn time to first token {statistics.median(values):.2f} s")
    print(f"load average while running: {os.getloadavg()[0]:.2f} (2 cores, shared with other work)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=len(SENTENCES), help="how many of the sentences to time")
    sys.exit(asyncio.run(run(parser.parse_args().sentences)))

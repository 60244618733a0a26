"""CPU per call-second with OpenTelemetry tracing on vs off, 50 concurrent calls, same run.

Each call is the simulated call of ``tests/server/test_tracing.py``: two turns, a tool call
and a barge-in (mock providers, virtual time: the CPU is the engine's and the tracer's own,
no waiting).  A round runs 50 calls at once on one virtual-time loop, tracing off (no
tracer: the engine's ``None`` check per event) or on (a ``CallTracer`` per call, the SDK's
batch processor, spans encoded to OTLP protobuf as the HTTP exporter would send them, then
dropped: no socket, so a receiver's CPU is not counted).  Rounds alternate off/on; the
script prints the median CPU seconds per call-second of each and their ratio.

    python bench/tracing.py [--calls 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests.engine.harness

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from tests.engine.harness import two_turns_with_a_tool_and_a_barge_in

from brisvox.core.clock import SimClock, VirtualTimeLoop
from brisvox.engine.events import CallObserver
from brisvox.server.tracing import Tracing


class EncodingExporter(SpanExporter):
    """Encodes each batch as the OTLP/HTTP exporter does, then drops it."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        self.bytes += len(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


async def one_call(tracing: Tracing | None, n: int) -> float:
    clock = SimClock()
    tracer = tracing.call(f"call-{n}", clock) if tracing is not None else None
    start = clock.now()
    await two_turns_with_a_tool_and_a_barge_in(clock, CallObserver(listener=tracer))
    if tracer is not None:
        tracer.close()
    return clock.now() - start


def round_(calls: int, traced: bool) -> tuple[float, int]:
    exporter = EncodingExporter()
    tracing = Tracing(exporter) if traced else None

    async def main() -> list[float]:
        return list(await asyncio.gather(*(one_call(tracing, n) for n in range(calls))))

    loop = VirtualTimeLoop(max_time=86_400.0)
    cpu = time.process_time()
    try:
        seconds = loop.run_until_complete(main())
    finally:
        loop.close()
    if tracing is not None:
        tracing.flush()
        tracing.shutdown()
    cpu = time.process_time() - cpu
    return cpu / sum(seconds), exporter.spans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    off: list[float] = []
    on: list[float] = []
    spans = 0
    for _ in range(args.rounds):
        off.append(round_(args.calls, False)[0])
        cost, spans = round_(args.calls, True)
        on.append(cost)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"{args.calls} calls x {args.rounds} rounds (two turns, a tool call, a barge-in each)")
    print(f"tracing off: {m_off * 1000:.2f} ms CPU per call-second (median)")
    print(f"tracing on:  {m_on * 1000:.2f} ms CPU per call-second (median), {spans / args.calls:.0f} spans per call")
    print(f"on / off: {m_on / m_off:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests.engine.harness

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from tests.engine.harness import two_turns_with_a_tool_and_a_barge_in

from _onoff import cpu_seconds, on_off
from brisvox.core.clock import SimClock
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


def round_(calls: int, traced: bool) -> tuple[float, str]:
    exporter = EncodingExporter()
    tracing = Tracing(exporter) if traced else None

    async def main() -> list[float]:
        return list(await asyncio.gather(*(one_call(tracing, n) for n in range(calls))))

    def flushed() -> None:  # the batch processor's export is the tracer's cost too
        if tracing is not None:
            tracing.flush()
            tracing.shutdown()

    cpu, seconds = cpu_seconds(main, flushed)
    return cpu / sum(seconds), f", {exporter.spans / calls:.0f} spans per call"


if __name__ == "__main__":
    sys.exit(on_off(__doc__ or "", "tracing", "two turns, a tool call, a barge-in each", round_))

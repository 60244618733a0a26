"""OpenTelemetry traces of calls, built from the engine's event stream (a listener).

One trace per call: a ``call`` span; a ``turn`` span per epoch (``brisvox.turn.epoch``,
``brisvox.turn.end_reason``); under it ``stt.final`` (turn start → each final transcript),
``chat {model}`` per model request (GenAI conventions: ``gen_ai.operation.name``,
``gen_ai.request.model``, ``gen_ai.usage.input_tokens``/``output_tokens`` when the provider
reported them, and ``brisvox.llm.time_to_first_token``), ``execute_tool {name}`` per tool
call (``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``brisvox.tool.kind``,
``brisvox.tool.outcome``, ``brisvox.tool.idempotency``; the arguments only when the agent
opts in with ``capture_tool_arguments``), ``tts`` (first text → first audio) and
``playout`` (first audible audio → cut or turn end; ``brisvox.playout.heard_fraction``,
``brisvox.playout.cut``).  Barge-ins, fillers, failures and busy models are span events.

Span times are the engine clock's, moved onto the wall clock once per call (a call on
virtual time gives a trace on virtual time).  Text never enters a span: no transcript, no
reply, no tool result.

Off by default: ``open_tracing(False)`` returns None and nothing is imported or created; the
server then hands no tracer to its calls (the engine's cost is its one ``None`` check per
event).  On, spans go through a batch processor to the OTLP/HTTP exporter, which reads the
standard ``OTEL_EXPORTER_OTLP_*`` variables (endpoint, headers, timeout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from brisvox.agent.tools import Outcome
from brisvox.core.clock import Clock
from brisvox.engine import events as ev

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["CallTracer", "Tracing", "open_tracing"]

_IDEMPOTENCY: Final = frozenset({Outcome.DUPLICATE, Outcome.RECORDED, Outcome.REPEAT_REFUSED})
_KEPT_TURNS: Final = 2  # a turn's span ends once the turn two after it started (a cut reply reports late)


def _ns(offset: int, at: float) -> int:
    return offset + int(at * 1e9)


@dataclass(slots=True)
class _Turn:
    span: Span
    start: float
    last: float
    first_text: float | None = None
    chars: dict[int, int] = field(default_factory=dict)
    tools: dict[str, tuple[Span, float]] = field(default_factory=dict)
    playout: Span | None = None


class CallTracer:
    """One call's trace: call it with each engine event (an ``EventListener``); ``close`` at the end."""

    def __init__(self, tracer: trace.Tracer, call_id: str, clock: Clock, *,
                 capture_tool_arguments: bool = False) -> None:
        now = clock.now()
        self._offset = int(clock.wall().timestamp() * 1e9) - int(now * 1e9)
        self._tracer = tracer
        self._capture = capture_tool_arguments
        self._call = tracer.start_span("call", start_time=self._t(now), attributes={"brisvox.call.id": call_id})
        self._context = trace.set_span_in_context(self._call)
        self._turns: dict[int, _Turn] = {}
        self._last = now

    def _t(self, at: float) -> int:
        return _ns(self._offset, at)

    def _child(self, turn: _Turn, name: str, start: float, attributes: dict[str, str | int | float | bool]) -> Span:
        return self._tracer.start_span(name, context=trace.set_span_in_context(turn.span), start_time=self._t(start),
                                       attributes=attributes)

    def _turn(self, epoch: int, at: float) -> _Turn:
        turn = self._turns.get(epoch)
        if turn is None:  # a greeting (no caller turn) or a late fact of a turn already ended
            span = self._tracer.start_span("turn", context=self._context, start_time=self._t(at),
                                           attributes={"brisvox.turn.epoch": epoch})
            turn = self._turns[epoch] = _Turn(span, at, at)
        turn.last = max(turn.last, at)
        return turn

    def __call__(self, event: ev.EngineEvent) -> None:
        self._last = max(self._last, event.at)
        if isinstance(event, ev.TurnStarted):
            for old in [e for e in self._turns if e <= event.epoch - _KEPT_TURNS]:
                self._end(self._turns.pop(old))
            turn = self._turn(event.epoch, event.at)
            turn.span.set_attribute("brisvox.turn.barge_in", event.barge_in)
            if event.barge_in:
                turn.span.add_event("barge_in", timestamp=self._t(event.at))
                cut = self._turns.get(event.epoch - 1)
                if cut is not None:
                    cut.span.add_event("barge_in", {"brisvox.turn.epoch": event.epoch}, timestamp=self._t(event.at))
            return
        turn = self._turn(event.epoch, event.at)
        if isinstance(event, ev.TurnEnded):
            turn.span.set_attribute("brisvox.turn.end_reason", event.reason.value)
            if event.speech_ended is not None:
                turn.span.set_attribute("brisvox.turn.speech_ended_to_turn_end", event.at - event.speech_ended)
        elif isinstance(event, ev.UserTranscript):
            if event.final:
                start = min(turn.start, event.at)
                self._child(turn, "stt.final", start, {}).end(end_time=self._t(event.at))
        elif isinstance(event, ev.LlmRound):
            self._llm(turn, event)
        elif isinstance(event, ev.ToolCallStarted):
            attributes: dict[str, str | int | float | bool] = {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.name,
                "gen_ai.tool.call.id": event.call_id, "brisvox.tool.kind": event.kind.value if event.kind else "unknown"}
            if self._capture:
                attributes["gen_ai.tool.call.arguments"] = event.arguments
            turn.tools[event.call_id] = (self._child(turn, f"execute_tool {event.name}", event.at, attributes), event.at)
        elif isinstance(event, ev.ToolCallSettled):
            self._tool_settled(turn, event)
        elif isinstance(event, ev.BotText):
            if turn.first_text is None:
                turn.first_text = event.at
            turn.chars[event.round] = turn.chars.get(event.round, 0) + len(event.text)
        elif isinstance(event, ev.TtsFirstAudio):
            start = event.at if turn.first_text is None else turn.first_text
            self._child(turn, "tts", start, {"brisvox.tts.time_to_first_audio": event.at - start}).end(
                end_time=self._t(event.at))
        elif isinstance(event, ev.BotAudible):
            if turn.playout is None:
                turn.playout = self._child(turn, "playout", event.at, {})
        elif isinstance(event, ev.BotHeard):
            self._heard(turn, event)
        elif isinstance(event, ev.FillerStarted):
            turn.span.add_event("filler", {"brisvox.filler.round": event.round}, timestamp=self._t(event.at))
        elif isinstance(event, ev.EngineFailure):
            turn.span.add_event("failure", {"brisvox.failure.stage": event.stage, "error.type": event.error,
                                            "brisvox.failure.fatal": event.fatal}, timestamp=self._t(event.at))
            turn.span.set_status(Status(StatusCode.ERROR, event.error))
            if event.fatal:
                self._call.set_status(Status(StatusCode.ERROR, event.error))
        elif isinstance(event, ev.ModelBusy):
            turn.span.add_event("model_busy", {"brisvox.busy.stage": event.stage.value,
                                               "brisvox.busy.provider": event.provider}, timestamp=self._t(event.at))

    def _llm(self, turn: _Turn, event: ev.LlmRound) -> None:
        attributes: dict[str, str | int | float | bool] = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": event.model, "brisvox.llm.round": event.round}
        if event.first_token is not None:
            attributes["brisvox.llm.time_to_first_token"] = event.first_token - event.requested
        if event.input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = event.input_tokens
        if event.output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = event.output_tokens
        span = self._child(turn, f"chat {event.model}", event.requested, attributes)
        if event.failed:
            span.set_status(Status(StatusCode.ERROR, "no usable answer"))
        span.end(end_time=self._t(event.at))

    def _tool_settled(self, turn: _Turn, event: ev.ToolCallSettled) -> None:
        span, started = turn.tools.pop(event.call_id, (None, event.at))
        if span is None:  # a late result: its call's turn is gone
            span = self._child(turn, f"execute_tool {event.name}", event.at, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.name,
                "gen_ai.tool.call.id": event.call_id})
        span.set_attribute("brisvox.tool.outcome", event.outcome.value)
        span.set_attribute("brisvox.tool.duration", event.at - started)
        span.set_attribute("brisvox.tool.idempotency",
                           event.outcome.value if event.outcome in _IDEMPOTENCY else "first_run")
        if event.is_error:
            span.set_status(Status(StatusCode.ERROR, event.outcome.value))
        span.end(end_time=self._t(event.at))

    def _heard(self, turn: _Turn, event: ev.BotHeard) -> None:
        playout = turn.playout or self._child(turn, "playout", event.at, {})
        turn.playout = None
        total = turn.chars.get(event.round, 0)
        playout.set_attribute("brisvox.playout.cut", True)
        playout.set_attribute("brisvox.playout.heard_fraction", len(event.text) / total if total else 0.0)
        playout.end(end_time=self._t(event.at))

    def _end(self, turn: _Turn) -> None:
        end = self._t(turn.last)
        if turn.playout is not None:
            turn.playout.set_attribute("brisvox.playout.cut", False)
            turn.playout.set_attribute("brisvox.playout.heard_fraction", 1.0)
            turn.playout.end(end_time=end)
        for span, _ in turn.tools.values():  # never settled: the call ended first
            span.set_attribute("brisvox.tool.outcome", "unsettled")
            span.end(end_time=end)
        turn.span.end(end_time=end)

    def close(self) -> None:
        """The call ended: every open span ends at the last event's time."""
        for turn in self._turns.values():
            self._end(turn)
        self._turns.clear()
        self._call.end(end_time=self._t(self._last))


class Tracing:
    """The server's tracer provider (one per process) and its exporter; ``shutdown`` flushes."""

    def __init__(self, exporter: SpanExporter | None = None, *, capture_tool_arguments: bool = False) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.exporter: SpanExporter = exporter if exporter is not None else OTLPSpanExporter()
        self.provider: TracerProvider = TracerProvider(resource=Resource.create({"service.name": "brisvox"}))
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("brisvox")
        self.capture_tool_arguments = capture_tool_arguments

    def call(self, call_id: str, clock: Clock) -> CallTracer:
        return CallTracer(self.tracer, call_id, clock, capture_tool_arguments=self.capture_tool_arguments)

    def flush(self) -> bool:
        return self.provider.force_flush()

    def shutdown(self) -> None:
        self.provider.shutdown()


def open_tracing(enabled: bool, *, capture_tool_arguments: bool = False) -> Tracing | None:
    """The process's tracing when ``enabled``; None (nothing created) when not."""
    return Tracing(capture_tool_arguments=capture_tool_arguments) if enabled else None

"""Call traces: a simulated call's spans, exported over OTLP/HTTP to a receiver on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from brisvox.core.clock import SimClock
from brisvox.engine.events import CallObserver
from brisvox.server.agent_file import parse_agent_file
from brisvox.server.settings import Settings, SettingsError
from brisvox.server.tracing import open_tracing
from tests.engine.harness import two_turns_with_a_tool_and_a_barge_in


class _Receiver:
    """An OTLP/HTTP trace receiver: every POSTed ExportTraceServiceRequest's spans, decoded."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.paths.append(self.path)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        receiver.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test's output stays quiet

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Receiver]:
    r = _Receiver()
    r.thread.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.url)
    yield r
    r.server.shutdown()
    r.server.server_close()
    r.thread.join()


def _attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


async def test_a_call_with_two_turns_a_tool_and_a_barge_in_is_one_trace_with_turn_llm_tool_tts_playout_spans(
    receiver: _Receiver,
) -> None:
    tracing = open_tracing(True)
    assert tracing is not None
    tracer = tracing.call("call-1", SimClock())
    observer = CallObserver(listener=tracer)
    await two_turns_with_a_tool_and_a_barge_in(SimClock(), observer)
    tracer.close()
    assert tracing.flush()
    tracing.shutdown()

    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    spans = receiver.spans
    assert len({s.trace_id for s in spans}) == 1  # one trace per call
    by_id = {s.span_id: s for s in spans}
    [call] = [s for s in spans if s.name == "call"]
    assert not call.parent_span_id and _attrs(call)["brisvox.call.id"] == "call-1"
    turns = sorted((s for s in spans if s.name == "turn"), key=lambda s: _attrs(s)["brisvox.turn.epoch"])
    assert [_attrs(t)["brisvox.turn.epoch"] for t in turns] == [0, 1]
    assert all(t.parent_span_id == call.span_id for t in turns)
    assert [_attrs(t)["brisvox.turn.end_reason"] for t in turns] == ["silence", "silence"]
    assert _attrs(turns[1])["brisvox.turn.barge_in"] is True
    assert "barge_in" in [e.name for e in turns[1].events] and "barge_in" in [e.name for e in turns[0].events]

    def children(turn: Any) -> list[str]:
        return sorted(s.name for s in spans if s.parent_span_id == turn.span_id)

    first = children(turns[0])
    assert first.count("chat scripted-llm") == 2  # the tool call's request and the reply's
    assert {"stt.final", "execute_tool check_availability", "tts", "playout"} <= set(first)
    assert {"stt.final", "chat scripted-llm", "tts", "playout"} <= set(children(turns[1]))

    [tool] = [s for s in spans if s.name == "execute_tool check_availability"]
    tool_attrs = _attrs(tool)
    assert tool_attrs["gen_ai.tool.name"] == "check_availability"
    assert tool_attrs["brisvox.tool.kind"] == "read_only" and tool_attrs["brisvox.tool.outcome"] == "ok"
    assert tool_attrs["brisvox.tool.idempotency"] == "first_run"
    assert "gen_ai.tool.call.arguments" not in tool_attrs  # never the arguments unless opted in
    assert not any("friday" in str(v) for s in spans for v in _attrs(s).values())

    chats = [s for s in spans if s.name.startswith("chat ")]
    assert all(_attrs(c)["gen_ai.operation.name"] == "chat" for c in chats)
    assert all(_attrs(c)["gen_ai.request.model"] == "scripted-llm" for c in chats)
    assert all(_attrs(c)["brisvox.llm.time_to_first_token"] >= 0 for c in chats)
    assert all(c.start_time_unix_nano <= c.end_time_unix_nano for c in chats)

    playouts = {by_id[s.parent_span_id].span_id: _attrs(s) for s in spans if s.name == "playout"}
    cut = playouts[turns[0].span_id]
    assert cut["brisvox.playout.cut"] is True and 0 < cut["brisvox.playout.heard_fraction"] < 1
    full = playouts[turns[1].span_id]
    assert full["brisvox.playout.cut"] is False and full["brisvox.playout.heard_fraction"] == 1.0
    [tts] = [s for s in spans if s.name == "tts" and s.parent_span_id == turns[1].span_id]
    assert _attrs(tts)["brisvox.tts.time_to_first_audio"] >= 0
    # Children sit inside their turn on the trace's time axis.
    for s in spans:
        if s.parent_span_id in by_id and s.name != "turn":
            parent = by_id[s.parent_span_id]
            assert parent.start_time_unix_nano <= s.start_time_unix_nano <= parent.end_time_unix_nano


def test_with_tracing_off_no_exporter_is_created(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.http import trace_exporter

    created: list[object] = []
    real_init = trace_exporter.OTLPSpanExporter.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        created.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(trace_exporter.OTLPSpanExporter, "__init__", counting_init)
    assert Settings.from_env({}).tracing is False  # off unless asked for
    assert open_tracing(Settings.from_env({}).tracing) is None and not created
    on = open_tracing(Settings.from_env({"BRISVOX_TRACING": "on"}).tracing)
    assert on is not None and len(created) == 1  # the probe sees the one exporter tracing creates
    on.shutdown()


def test_tracing_setting_names_what_it_expects() -> None:
    with pytest.raises(SettingsError, match="BRISVOX_TRACING='yes': expected on or off"):
        Settings.from_env({"BRISVOX_TRACING": "yes"})


def test_an_agent_file_opts_its_traces_into_tool_arguments_with_the_tracing_section() -> None:
    plain = '[agent]\nname = "a"\nprompt = "p"\n'
    assert parse_agent_file(plain).trace_tool_arguments is False
    assert parse_agent_file(plain + "[tracing]\ntool_arguments = true\n").trace_tool_arguments is True


async def test_with_tool_arguments_opted_in_the_tool_span_carries_them(receiver: _Receiver) -> None:
    tracing = open_tracing(True, capture_tool_arguments=True)
    assert tracing is not None
    tracer = tracing.call("call-2", SimClock())
    await two_turns_with_a_tool_and_a_barge_in(SimClock(), CallObserver(listener=tracer))
    tracer.close()
    assert tracing.flush()
    tracing.shutdown()
    [tool] = [s for s in receiver.spans if s.name == "execute_tool check_availability"]
    assert "friday" in _attrs(tool)["gen_ai.tool.call.arguments"].lower()

from __future__ import annotations

import contextlib
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brisvox.recording import RecordingError, parse_recording
from brisvox.recording.format import FORMAT, VERSION

HEADER = {"format": FORMAT, "version": VERSION, "brisvox": "0.1.0", "agent": "a", "agent_file": None,
          "clock": "virtual", "rates": {"input": 16000, "output": 24000}, "started": "2026-01-01T00:00:00"}


def lines(*records: object, header: object = HEADER) -> list[str]:
    return [json.dumps(header), *(json.dumps(r) for r in records)]


def test_a_valid_recording_loads_its_records_in_order() -> None:
    rec = parse_recording(lines({"t": 0.0, "k": "audio", "pcm": "AAA="},
                                {"t": 0.5, "k": "stt", "text": "hi", "final": True, "speech_final": False,
                                 "from_finalize": True},
                                {"t": 0.6, "k": "llm", "events": [[0.1, {"text": "Hi"}], [0.0, {"done": "stop",
                                                                                              "usage": [3, 1]}]]},
                                {"t": 0.9, "k": "end", "dropped": 2}))
    assert [r["k"] for r in rec.records] == ["audio", "stt", "llm", "end"]
    assert rec.dropped == 2 and rec.header.input_rate == 16000 and rec.end == 0.9


@pytest.mark.parametrize(("record", "message"), [
    ({"k": "audio", "pcm": "AAA="}, "line 2: missing field 't'"),
    ({"t": 1, "k": "audio", "pcm": "A"}, "line 2 (audio): field 'pcm' is not base64"),
    ({"t": 1, "k": "audio", "pcm": "AA=="}, "whole 16-bit samples"),
    ({"t": 1, "k": "stt", "text": "x", "final": "yes", "speech_final": False, "from_finalize": False},
     "line 2 (stt): field 'final' must be bool, got str"),
    ({"t": 1, "k": "llm", "events": [[0.1, {"what": 1}]]}, "line 2 (llm), events[0]: expected one of"),
    ({"t": 1, "k": "tts", "chars": -1, "audio": []}, "field 'chars' must be >= 0"),
    ({"t": 1, "k": "tts", "chars": 3, "audio": [[0.1, -1]]}, "line 2 (tts), audio[0]: expected [dt, seconds]"),
    ({"t": 1, "k": "tool", "name": "x"}, "missing field 'result'"),
    ({"t": -1, "k": "end", "dropped": 0}, "field 't' must be >= 0"),
    ({"t": 1, "k": "video"}, "unknown record kind 'video'"),
    ({"t": True, "k": "end", "dropped": 0}, "field 't' must be int or float, got a boolean"),
    ({"t": 1, "k": "llm", "use": "turn", "events": []}, "field 'use' must be 'summary' when present"),
    ({"t": 1, "k": "s2s", "ev": "smile"}, "line 2 (s2s): unknown ev 'smile' (known: audio"),
    ({"t": 1, "k": "s2s", "ev": "audio", "samples": -3}, "field 'samples' must be >= 0"),
    ({"t": 1, "k": "s2s", "ev": "audio", "samples": 3, "item": 4}, "field 'item' must be str or null"),
    ({"t": 1, "k": "s2s", "ev": "transcript", "speaker": "dog", "text": "x", "final": True},
     "field 'speaker' must be 'caller' or 'model'"),
    ({"t": 1, "k": "s2s", "ev": "tool_call", "call_id": "c", "name": "n", "arguments": []},
     "line 2 (s2s) tool_call: field 'arguments' must be dict, got list"),
    ({"t": 1, "k": "s2s_in", "op": "results", "results": [{"call_id": "c", "name": "n", "content": 1}]},
     "line 2 (s2s_in), results[0]: field 'content' must be str, got int"),
    ({"t": 1, "k": "s2s_in", "op": "truncate", "item": None}, "line 2 (s2s_in) truncate: missing field 'ms'"),
    ({"t": 1, "k": "agent", "cmd": "dance"}, "line 2 (agent): unknown cmd 'dance' (known: context.update, end, say"),
    ({"t": 1, "k": "agent", "cmd": "say", "text": "x"}, "line 2 (agent) say: missing field 'interrupt'"),
    ({"t": 1, "k": "agent", "cmd": "tools.set", "names": [1]}, "line 2 (agent): field 'names' must hold strings"),
    ({"t": 1, "k": "brain"}, "line 2 (brain): missing field 'fallback'"),
    ({"t": 1, "k": "event", "e": "CallerInput", "epoch": 0, "kind": "text", "text": "x", "reply": "sung"},
     "field 'reply' must be 'spoken', 'text' or null, got 'sung'"),
])
def test_a_bad_record_is_refused_naming_its_line_and_field(record: object, message: str) -> None:
    with pytest.raises(RecordingError, match=re.escape(message)):
        parse_recording(lines(record))


def test_a_header_without_the_later_fields_reads_as_a_cascaded_call_without_summaries_or_stored_tools() -> None:
    header = parse_recording(lines()).header
    assert (header.pipeline, header.summaries, header.tools) == ("cascade", False, None)
    full = {**HEADER, "pipeline": "s2s", "summaries": True,
            "tools": [{"name": "x", "kind": "read_only", "description": "d", "parameters": {"type": "object"}}]}
    header = parse_recording(lines(header=full)).header
    assert header.pipeline == "s2s" and header.summaries and header.tools == tuple(full["tools"])


@pytest.mark.parametrize(("change", "message"), [
    ({"pipeline": "tubes"}, "field 'pipeline' must be 'cascade' or 's2s'"),
    ({"summaries": "yes"}, "field 'summaries' must be a boolean"),
    ({"tools": {"x": 1}}, "field 'tools' must be a list or null"),
    ({"tools": [{"name": "x", "kind": "read_only", "description": "d"}]}, "tools[0]: missing field 'parameters'"),
    ({"tools": [{"name": "x", "kind": "read_only", "description": "d", "parameters": {}, "agent_link": True,
                 "repeatable": False, "timeout": -1}]}, "tools[0]: field 'timeout' must be a number > 0, got -1"),
    ({"tools": [{"name": "x", "kind": "read_only", "description": "d", "parameters": {}, "agent_link": True,
                 "timeout": 2.0}]}, "tools[0]: missing field 'repeatable'"),
    ({"agent_link": True}, "field 'agent_link' must be an object or null"),
    ({"agent_link": {"answers_turns": "yes"}}, "agent_link: field 'answers_turns' must be bool, got str"),
])
def test_a_bad_header_field_is_refused_by_name(change: dict[str, object], message: str) -> None:
    with pytest.raises(RecordingError, match=re.escape(message)):
        parse_recording(lines(header={**HEADER, **change}))


def test_a_recording_of_a_newer_version_is_refused_naming_its_version_and_the_ones_this_brisvox_reads() -> None:
    with pytest.raises(RecordingError, match=re.escape(
            f"recording format version {VERSION + 1} is not readable by this brisvox (it reads versions 1, 2); "
            "replay it with the brisvox that made it (0.3.0)")):
        parse_recording(lines(header={**HEADER, "version": VERSION + 1, "brisvox": "0.3.0"}))


def test_a_version_1_recording_still_loads_but_may_not_hold_the_records_version_2_added() -> None:
    v1 = {**HEADER, "version": 1}
    assert parse_recording(lines({"t": 0.5, "k": "stop"}, header=v1)).header.version == 1
    with pytest.raises(RecordingError, match=re.escape(
            "line 2 (agent): record kind 'agent' came in format version 2; this recording says version 1")):
        parse_recording(lines({"t": 1, "k": "agent", "cmd": "end", "farewell": ""}, header=v1))


def test_a_linked_agents_commands_and_brain_fallbacks_load_with_the_link_in_the_header() -> None:
    rec = parse_recording(lines({"t": 1, "k": "agent", "cmd": "say", "text": "Hi", "interrupt": False},
                                {"t": 2, "k": "agent", "cmd": "tools.set", "names": ["a"]},
                                {"t": 3, "k": "brain", "fallback": "the agent sent no line in time"},
                                header={**HEADER, "agent_link": {"answers_turns": True}}))
    assert [r["k"] for r in rec.records] == ["agent", "agent", "brain"] and rec.header.brain
    assert not parse_recording(lines(header={**HEADER, "agent_link": {"answers_turns": False}})).header.brain


def test_a_file_that_is_not_a_recording_says_so() -> None:
    with pytest.raises(RecordingError, match="not a brisvox recording"):
        parse_recording(['{"hello": 1}'])
    with pytest.raises(RecordingError, match="line 2: not JSON"):
        parse_recording([json.dumps(HEADER), "{"])
    with pytest.raises(RecordingError, match="empty"):
        parse_recording([])


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                 max_size=4), max_leaves=12)
_records = st.fixed_dictionaries({"t": st.one_of(st.floats(), st.integers()),
                                  "k": st.sampled_from(["audio", "stt", "llm", "tts", "tool", "event", "s2s",
                                                        "s2s_in", "agent", "brain", "end", "x"])},
                                 optional={"pcm": st.text(max_size=8), "text": _json, "final": _json,
                                           "ev": st.sampled_from(["audio", "transcript", "tool_call", "error",
                                                                  "tools_cancelled", "x"]) | _json,
                                           "op": st.sampled_from(["results", "note", "truncate", "x"]) | _json,
                                           "samples": _json, "speaker": _json, "item": _json, "call_id": _json,
                                           "call_ids": _json, "arguments": _json, "results": _json, "use": _json,
                                           "interrupted": _json, "fatal": _json, "error": _json, "ms": _json,
                                           "events": _json, "chars": _json, "audio": _json,
                                           "name": _json, "result": _json, "raised": _json, "message": _json,
                                           "e": _json, "epoch": _json, "dropped": _json, "speech_final": _json,
                                           "from_finalize": _json, "cmd": st.sampled_from(
                                               ["say", "end", "context.update", "tools.set", "transfer"]) | _json,
                                           "interrupt": _json, "farewell": _json, "note": _json, "names": _json,
                                           "to": _json, "fallback": _json, "reply": _json, "kind": _json})


_headers = st.fixed_dictionaries({}, optional={"pipeline": _json, "summaries": _json, "tools": _json,
                                               "agent_link": _json, "version": st.sampled_from([1, 2, 3])}).map(
    lambda extra: {**HEADER, **extra})


@given(st.lists(st.one_of(_records, _json), max_size=5), st.one_of(st.just(HEADER), _headers, _json))
def test_the_loader_either_loads_or_raises_a_recording_error(records: list[object], header: object) -> None:
    with contextlib.suppress(RecordingError):  # the one error a bad file may give
        parse_recording(lines(*records, header=header))


@given(st.binary(max_size=200))
def test_arbitrary_bytes_either_load_or_raise_a_recording_error(data: bytes) -> None:
    with contextlib.suppress(RecordingError):  # the one error a bad file may give
        parse_recording(data.splitlines())

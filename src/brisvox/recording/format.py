"""The recording format (version 2): one call in one gzip-compressed JSON-lines file.

Line 1 is the header::

    {"format": "brisvox-recording", "version": 2, "brisvox": "0.1.0", "agent": "demo",
     "agent_file": "/srv/agent.toml", "clock": "real", "rates": {"input": 16000, "output": 24000},
     "started": "2026-12-04T09:00:00+00:00", "vad": "silero", "smart_turn": true,
     "pipeline": "cascade", "summaries": true,
     "tools": [{"name": "lookup", "kind": "read_only", "description": "...", "parameters": {...}}],
     "agent_link": {"answers_turns": false}}

``clock`` is ``virtual`` for a call run on virtual time (a simulation, a test: its replay
must match to the millisecond) and ``real`` for a production call (its replay is compared
with a tolerance); ``vad`` names the voice-activity detector it heard with and
``smart_turn`` says whether the Smart Turn model judged its turns (the replay uses the
same).  ``rates.input`` is the rate of the caller audio records (what the speech-to-text
got, or a speech-to-speech model), ``rates.output`` the rate the bot's audio was made at.
``pipeline`` is ``cascade`` (STT, LLM, TTS) or ``s2s`` (a speech-to-speech model);
``summaries`` says whether the call made window summaries (their model requests are
``llm`` records with ``use: "summary"``); ``tools`` lists the tools the call offered as it
had them (name, kind, description, the arguments' JSON Schema), so a replay against an
agent whose tools changed says which; a tool its agent link served (docs/AGENT_PROTOCOL.md) has
``agent_link: true``, its ``timeout`` and ``repeatable`` (the replay, which has no link, offers
it as recorded).  The last three came later in version 1: a
recording without them is a cascaded call without summaries whose tools were not stored.
``agent_link`` (version 2) is null, or the call's agent link was open: ``answers_turns`` says
whether its agent answered the turns (brain mode: the call's model requests went to the agent).

Every further line is a record ``{"t": seconds since the call started, "k": kind, ...}``:

* ``audio``: ``pcm``, base64 of 16-bit little-endian mono caller audio at ``rates.input``;
* ``stt``: a transcript: ``text``, ``final``, ``speech_final``, ``from_finalize``;
* ``llm``: one model request (``t``: when it was sent), ``events``: ``[dt, event]`` pairs,
  ``dt`` seconds after the previous one; an event is ``{"text": ...}``, ``{"tool": {"index",
  "id", "name", "arguments"}}`` (a fragment), ``{"done": finish_reason, "usage": [in, out]}``
  or ``{"error": kind, "message": ...}``; ``closed: true`` when the engine closed it early;
  ``use: "summary"`` for a window summary's request (a flow's ``ResetWithSummary`` too);
* ``tts``: one synthesis context (``t``: its first text): ``chars`` of text it got and
  ``audio``: ``[dt, seconds]`` pairs, the audio it gave ``dt`` seconds after ``t``;
* ``tool``: a tool function's return: ``name``, and ``result`` (its JSON value) or
  ``raised`` (the exception's type name) with ``message``;
* ``event``: an engine event (:mod:`brisvox.engine.events`): ``e`` its class name,
  ``epoch`` and its other fields (enums as their values);
* ``s2s``: an event of a speech-to-speech model, ``ev`` its kind: ``audio`` (``samples`` at
  ``rates.output``, ``item``), ``transcript`` (``speaker``, ``text``, ``final``, ``item``),
  ``tool_call`` (``call_id``, ``name``, ``arguments``, ``arguments_error``),
  ``tools_cancelled`` (``call_ids``), ``speech_started`` / ``speech_stopped`` (``at_ms``,
  ``item``), ``interrupted``, ``response_done`` (``interrupted``, ``response_id``),
  ``interaction_ended`` (``interrupted``), ``error`` (``error``, ``message``, ``fatal``),
  ``ready``;
* ``s2s_in``: what the call sent a speech-to-speech model, ``op``: ``results`` (``results``:
  ``call_id``, ``name``, ``content``, ``is_error`` each), ``request``, ``cancel``, ``note``
  (``text``), ``truncate`` (``item``, ``ms``);
* ``agent`` (version 2): a command of the call's linked agent as it entered the call, ``cmd``
  its protocol name: ``say`` (``text``, ``interrupt``), ``end`` (``farewell``: "" ends the call
  once the bot is silent), ``context.update`` (``note``), ``tools.set`` (``names``),
  ``transfer`` (``to``);
* ``brain`` (version 2): in brain mode, the agent file's model answered a request in the
  agent's place: ``fallback``, why;
* ``stop``: the call stopped hearing the caller (its speech-to-text closed: the caller hung
  up, or the call ended); the replay hangs up then;
* ``end``: the last line: ``dropped`` records the bounded writer lost (0: complete).

:func:`parse_recording` is the pure loader: it checks every line and raises
:class:`RecordingError` naming the line and the field that is wrong.  A recording whose
``version`` is not one of :data:`READABLE` is refused with a message naming its version and
the ones this brisvox reads; a version 1 recording reads as before (it holds no ``agent`` or
``brain`` records: a linked agent's commands were not recorded then).  Recordings hold the caller's audio and words: see docs/OBSERVABILITY.md.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

from brisvox.core.errors import BrisvoxError

__all__ = [
    "FORMAT",
    "KINDS",
    "PIPELINES",
    "READABLE",
    "SUMMARY",
    "VERSION",
    "Header",
    "RecordSettings",
    "Recording",
    "RecordingError",
    "encode_line",
    "event_record",
    "parse_recording",
    "tool_record",
]

FORMAT: Final = "brisvox-recording"
VERSION: Final = 2
READABLE: Final = (1, 2)  # the versions this brisvox replays
KINDS: Final = frozenset({"audio", "stt", "llm", "tts", "tool", "event", "s2s", "s2s_in", "agent", "brain",
                          "stop", "end"})
_SINCE: Final = {"agent": 2, "brain": 2}  # record kinds a version added
_CLOCKS: Final = frozenset({"virtual", "real"})
PIPELINES: Final = frozenset({"cascade", "s2s"})
SUMMARY: Final = "summary"  # an ``llm`` record's ``use`` for a window summary's request


@dataclass(frozen=True, slots=True)
class RecordSettings:
    """An agent's ``[record]`` (enabled): where its calls are written and how many are kept."""

    dir: Path
    keep: int


class RecordingError(BrisvoxError):
    """A recording that cannot be read: the message names the line and the field."""


@dataclass(frozen=True, slots=True)
class Header:
    version: int
    brisvox: str
    agent: str
    agent_file: str | None
    clock: str  # "virtual" or "real"
    input_rate: int
    output_rate: int
    started: str
    vad: str | None = None  # the voice-activity detector the call used ("energy", "silero")
    smart_turn: bool = False  # the call's turns were judged by the Smart Turn model too
    pipeline: str = "cascade"  # or "s2s": a speech-to-speech model heard and spoke
    summaries: bool = False  # the call made window summaries
    tools: tuple[dict[str, Any], ...] | None = None  # the offered tools (tool_record); None: not stored
    agent_link: dict[str, Any] | None = None  # the open agent link: {"answers_turns": bool}; None: none

    @property
    def brain(self) -> bool:
        """The call's agent answered its turns (brain mode)."""
        return self.agent_link is not None and self.agent_link.get("answers_turns") is True

    def line(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": self.version, "brisvox": self.brisvox, "agent": self.agent,
                "agent_file": self.agent_file, "clock": self.clock,
                "rates": {"input": self.input_rate, "output": self.output_rate}, "started": self.started,
                "vad": self.vad, "smart_turn": self.smart_turn, "pipeline": self.pipeline,
                "summaries": self.summaries, "tools": list(self.tools) if self.tools is not None else None,
                "agent_link": self.agent_link}


@dataclass(frozen=True, slots=True)
class Recording:
    """A loaded recording: its header and its records in order (each a checked dict)."""

    header: Header
    records: tuple[dict[str, Any], ...]
    dropped: int  # records the writer lost (the recording is incomplete when > 0)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["k"] == kind]

    @property
    def end(self) -> float:
        """The call's last moment (seconds since it started)."""
        return max((r["t"] for r in self.records), default=0.0)


def encode_line(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def tool_record(spec: Any, *, remote: bool = False) -> dict[str, Any]:
    """A :class:`~brisvox.agent.tools.spec.ToolSpec` as the header keeps it; ``remote``: a tool
    the call's agent link served (``agent_link: true``, with its ``timeout`` and ``repeatable``:
    a replay has no link and offers it as recorded)."""
    record = {"name": spec.name, "kind": _plain(spec.kind), "description": spec.description,
              "parameters": _json_copy(spec.parameters)}
    if remote:
        record |= {"agent_link": True, "timeout": spec.timeout, "repeatable": spec.repeatable}
    return record


def _json_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_copy(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    return value


def event_record(event: Any, t: float) -> dict[str, Any]:
    """The ``event`` record of an engine event at ``t`` (its ``parsed`` arguments are left out:
    ``arguments`` holds them as the model sent them)."""
    record: dict[str, Any] = {"t": t, "k": "event", "e": type(event).__name__}
    for f in fields(event):
        if f.name not in ("at", "parsed"):
            record[f.name] = _plain(getattr(event, f.name))
    return record


# --- the loader (pure) ----------------------------------------------------------------------


def _need(record: Mapping[str, Any], name: str, kinds: type | tuple[type, ...], where: str) -> Any:
    if name not in record:
        raise RecordingError(f"{where}: missing field {name!r}")
    value = record[name]
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise RecordingError(f"{where}: field {name!r} must be {_names(kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise RecordingError(f"{where}: field {name!r} must be {_names(kinds)}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise RecordingError(f"{where}: field {name!r} must be finite, got {value}")
    return value


def _names(kinds: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))


_NUMBER = (int, float)


def _header(raw: Any) -> Header:
    where = "line 1 (the header)"
    if not isinstance(raw, dict):
        raise RecordingError(f"{where}: expected a JSON object")
    if raw.get("format") != FORMAT:
        raise RecordingError(f"{where}: field 'format' must be {FORMAT!r}: this is not a brisvox recording")
    version = _need(raw, "version", int, where)
    if version not in READABLE:
        raise RecordingError(f"{where}: recording format version {version} is not readable by this brisvox "
                             f"(it reads versions {', '.join(map(str, READABLE))}); replay it with the brisvox "
                             f"that made it ({raw.get('brisvox', 'unknown')})")
    rates = _need(raw, "rates", dict, where)
    rate_in = _need(rates, "input", int, f"{where}, rates")
    rate_out = _need(rates, "output", int, f"{where}, rates")
    for name, rate in (("input", rate_in), ("output", rate_out)):
        if not 8000 <= rate <= 48000:
            raise RecordingError(f"{where}: rates.{name} must be from 8000 to 48000 Hz, got {rate}")
    clock = _need(raw, "clock", str, where)
    if clock not in _CLOCKS:
        raise RecordingError(f"{where}: field 'clock' must be 'virtual' or 'real', got {clock!r}")
    agent_file = raw.get("agent_file")
    if agent_file is not None and not isinstance(agent_file, str):
        raise RecordingError(f"{where}: field 'agent_file' must be str or null")
    smart_turn = raw.get("smart_turn", False)
    if not isinstance(smart_turn, bool):
        raise RecordingError(f"{where}: field 'smart_turn' must be a boolean")
    vad = raw.get("vad")
    if vad is not None and not isinstance(vad, str):
        raise RecordingError(f"{where}: field 'vad' must be str or null")
    pipeline = raw.get("pipeline", "cascade")
    if not isinstance(pipeline, str) or pipeline not in PIPELINES:
        raise RecordingError(f"{where}: field 'pipeline' must be 'cascade' or 's2s', got {pipeline!r}")
    summaries = raw.get("summaries", False)
    if not isinstance(summaries, bool):
        raise RecordingError(f"{where}: field 'summaries' must be a boolean")
    return Header(version=version, brisvox=_need(raw, "brisvox", str, where), agent=_need(raw, "agent", str, where),
                  agent_file=agent_file, clock=clock, input_rate=rate_in, output_rate=rate_out,
                  started=_need(raw, "started", str, where), vad=vad, smart_turn=smart_turn, pipeline=pipeline,
                  summaries=summaries, tools=_tools(raw.get("tools"), where),
                  agent_link=_agent_link(raw.get("agent_link"), where))


def _agent_link(raw: Any, where: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RecordingError(f"{where}: field 'agent_link' must be an object or null")
    _need(raw, "answers_turns", bool, f"{where}, agent_link")
    return raw


def _tools(raw: Any, where: str) -> tuple[dict[str, Any], ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise RecordingError(f"{where}: field 'tools' must be a list or null")
    for i, tool in enumerate(raw):
        at = f"{where}, tools[{i}]"
        if not isinstance(tool, dict):
            raise RecordingError(f"{at}: expected an object")
        for name in ("name", "kind", "description"):
            _need(tool, name, str, at)
        _need(tool, "parameters", dict, at)
        if tool.get("agent_link", False) is not False:
            _need(tool, "agent_link", bool, at)
            _need(tool, "repeatable", bool, at)
            timeout = tool.get("timeout")
            if isinstance(timeout, bool) or not isinstance(timeout, _NUMBER) or not math.isfinite(timeout) or timeout <= 0:
                raise RecordingError(f"{at}: field 'timeout' must be a number > 0, got {timeout!r}")
    return tuple(raw)


def _llm_event(raw: Any, where: str) -> None:
    if not (isinstance(raw, list) and len(raw) == 2 and isinstance(raw[1], dict)):
        raise RecordingError(f"{where}: expected [dt, event]")
    dt = raw[0]
    if isinstance(dt, bool) or not isinstance(dt, _NUMBER) or not math.isfinite(dt) or dt < 0:
        raise RecordingError(f"{where}: dt must be a number >= 0, got {dt!r}")
    event = raw[1]
    if "text" in event:
        _need(event, "text", str, where)
    elif "tool" in event:
        tool = _need(event, "tool", dict, where)
        _need(tool, "index", int, f"{where}, tool")
        for name in ("id", "name", "arguments"):
            if tool.get(name) is not None and not isinstance(tool[name], str):
                raise RecordingError(f"{where}, tool: field {name!r} must be str or null")
    elif "done" in event:
        _need(event, "done", str, where)
        usage = event.get("usage")
        if usage is not None and not (isinstance(usage, list) and len(usage) == 2
                                      and all(isinstance(n, int) and not isinstance(n, bool) for n in usage)):
            raise RecordingError(f"{where}: field 'usage' must be [input_tokens, output_tokens]")
    elif "error" in event:
        _need(event, "error", str, where)
        _need(event, "message", str, where)
    else:
        raise RecordingError(f"{where}: expected one of 'text', 'tool', 'done', 'error'")


def _check(record: dict[str, Any], where: str) -> None:
    t = _need(record, "t", _NUMBER, where)
    if t < 0:
        raise RecordingError(f"{where}: field 't' must be >= 0, got {t}")
    kind = _need(record, "k", str, where)
    where = f"{where} ({kind})"
    if kind == "audio":
        pcm = _need(record, "pcm", str, where)
        try:
            data = base64.b64decode(pcm, validate=True)
        except (binascii.Error, ValueError):
            raise RecordingError(f"{where}: field 'pcm' is not base64") from None
        if len(data) % 2:
            raise RecordingError(f"{where}: field 'pcm' must hold whole 16-bit samples, got {len(data)} bytes")
    elif kind == "stt":
        _need(record, "text", str, where)
        for name in ("final", "speech_final", "from_finalize"):
            _need(record, name, bool, where)
    elif kind == "llm":
        if record.get("use", SUMMARY) != SUMMARY:
            raise RecordingError(f"{where}: field 'use' must be {SUMMARY!r} when present")
        events = _need(record, "events", list, where)
        for i, event in enumerate(events):
            _llm_event(event, f"{where}, events[{i}]")
    elif kind == "tts":
        if _need(record, "chars", int, where) < 0:
            raise RecordingError(f"{where}: field 'chars' must be >= 0")
        for i, piece in enumerate(_need(record, "audio", list, where)):
            if not (isinstance(piece, list) and len(piece) == 2 and all(
                    isinstance(x, _NUMBER) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
                    for x in piece)):
                raise RecordingError(f"{where}, audio[{i}]: expected [dt, seconds], numbers >= 0")
    elif kind == "tool":
        _need(record, "name", str, where)
        if "raised" in record:
            _need(record, "raised", str, where)
            _need(record, "message", str, where)
        elif "result" not in record:
            raise RecordingError(f"{where}: missing field 'result' (or 'raised')")
    elif kind == "event":
        _need(record, "e", str, where)
        _need(record, "epoch", int, where)
        if record["e"] == "CallerInput" and record.get("reply") not in (None, "spoken", "text"):
            raise RecordingError(f"{where}: field 'reply' must be 'spoken', 'text' or null, got {record['reply']!r}")
    elif kind == "s2s":
        _fields(record, _S2S_EVENTS, "ev", where)
    elif kind == "s2s_in":
        _fields(record, _S2S_INPUTS, "op", where)
        for i, result in enumerate(record["results"] if record["op"] == "results" else ()):
            if not isinstance(result, dict):
                raise RecordingError(f"{where}, results[{i}]: expected an object")
            _fields_of(result, _RESULT, f"{where}, results[{i}]")
    elif kind == "agent":
        _fields(record, _AGENT, "cmd", where)
        if record["cmd"] == "tools.set" and not all(isinstance(n, str) for n in record["names"]):
            raise RecordingError(f"{where}: field 'names' must hold strings")
    elif kind == "brain":
        _need(record, "fallback", str, where)
    elif kind == "end":
        _need(record, "dropped", int, where)
    elif kind == "stop":
        pass
    else:
        raise RecordingError(f"{where}: unknown record kind {kind!r} (known: {', '.join(sorted(KINDS))})")


_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
_Fields = Mapping[str, type | tuple[type, ...]]
_S2S_EVENTS: Final[Mapping[str, _Fields]] = {
    "ready": {},
    "audio": {"samples": int, "item": _OPT_STR},
    "transcript": {"speaker": str, "text": str, "final": bool, "item": _OPT_STR},
    "tool_call": {"call_id": str, "name": str, "arguments": dict, "arguments_error": _OPT_STR},
    "tools_cancelled": {"call_ids": list},
    "speech_started": {"at_ms": _OPT_INT, "item": _OPT_STR},
    "speech_stopped": {"at_ms": _OPT_INT, "item": _OPT_STR},
    "interrupted": {},
    "response_done": {"interrupted": bool, "response_id": _OPT_STR},
    "interaction_ended": {"interrupted": bool},
    "error": {"error": str, "message": str, "fatal": bool},
}
_S2S_INPUTS: Final[Mapping[str, _Fields]] = {
    "results": {"results": list}, "request": {}, "cancel": {}, "note": {"text": str},
    "truncate": {"item": _OPT_STR, "ms": int},
}
_AGENT: Final[Mapping[str, _Fields]] = {
    "say": {"text": str, "interrupt": bool}, "end": {"farewell": str}, "context.update": {"note": str},
    "tools.set": {"names": list}, "transfer": {"to": str},
}
_RESULT: Final[_Fields] = {"call_id": str, "name": str, "content": str, "is_error": bool}
_SPEAKERS: Final = frozenset({"caller", "model"})


def _fields(record: Mapping[str, Any], table: Mapping[str, _Fields], key: str, where: str) -> None:
    """``record[key]`` names one of ``table``'s shapes, and the record has its fields."""
    name = _need(record, key, str, where)
    shape = table.get(name)
    if shape is None:
        raise RecordingError(f"{where}: unknown {key} {name!r} (known: {', '.join(sorted(table))})")
    _fields_of(record, shape, f"{where} {name}")
    if name == "transcript" and record["speaker"] not in _SPEAKERS:
        raise RecordingError(f"{where}: field 'speaker' must be 'caller' or 'model'")
    if name == "audio" and record["samples"] < 0:
        raise RecordingError(f"{where}: field 'samples' must be >= 0")
    if name == "tools_cancelled" and not all(isinstance(c, str) for c in record["call_ids"]):
        raise RecordingError(f"{where}: field 'call_ids' must hold strings")


def _fields_of(record: Mapping[str, Any], shape: _Fields, where: str) -> None:
    for field_name, kinds in shape.items():
        if kinds is _OPT_STR or kinds is _OPT_INT:
            value = record.get(field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
                raise RecordingError(f"{where}: field {field_name!r} must be {_names(kinds[0])} or null")
        else:
            _need(record, field_name, kinds, where)


def parse_recording(lines: Iterable[str | bytes]) -> Recording:
    """A recording from its text lines (the file decompressed); raises :class:`RecordingError`."""
    header: Header | None = None
    records: list[dict[str, Any]] = []
    dropped = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RecordingError(f"line {number}: not JSON ({exc})") from None
        if header is None:
            if number != 1:
                raise RecordingError("line 1 (the header): the recording starts with an empty line")
            header = _header(raw)
            continue
        if not isinstance(raw, dict):
            raise RecordingError(f"line {number}: expected a JSON object, got {type(raw).__name__}")
        _check(raw, f"line {number}")
        if _SINCE.get(raw["k"], 1) > header.version:
            raise RecordingError(f"line {number} ({raw['k']}): record kind {raw['k']!r} came in format version "
                                 f"{_SINCE[raw['k']]}; this recording says version {header.version}")
        if raw["k"] == "end":
            dropped = raw["dropped"]
        records.append(raw)
    if header is None:
        raise RecordingError("line 1 (the header): the recording is empty")
    return Recording(header, tuple(records), dropped)

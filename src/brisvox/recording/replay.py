"""The recorded providers a replay runs on, and how a replay is judged against its recording.

:func:`brisvox.server.replay.replay_recording` runs a recorded call again on virtual time
with these in place of the real providers and tools:

* :class:`ReplayStt` emits the recorded transcripts at their recorded times;
* :class:`ReplayLlm` answers the n-th request with the n-th recorded response, each event
  after its recorded delay (a response the engine closed early hangs after its last event);
* :class:`ReplayTts` gives each synthesis context, in order, audio of the recorded length
  on the recorded schedule (the audio spread over the text as it comes);
* :func:`recorded_tool` returns a tool's recorded results in order (or raises the recorded error);
* :func:`agent_command` is the command of a linked agent's ``agent`` record, which the replay
  puts into the call at its recorded time (it opens no link);
* :class:`ReplayS2s` (a speech-to-speech call) gives the model's recorded events at their
  recorded times (its audio as sound of the recorded length) and notes what the call sends
  it (``s2s_in`` records), whatever that is: the model's side is played back, not re-asked.

A window summary's requests (``use: "summary"``) are answered from their own recorded
responses (``ReplayLlm(..., use=SUMMARY)``), apart from the turns'.

:func:`judge` sets the replay's events beside the recorded ones: the turn boundaries
(``TurnStarted``, ``TurnEnded``), what was heard (final transcripts, ``UserTurn``,
``BotHeard``), the caller's typed text and keys (``CallerInput``), tool calls, flow
transitions (``FlowEntered``), failures and, for a speech-to-speech call, what was sent to
the model, each with its time; and the tools the call offered (name, kind, description and
arguments' schema) beside the replaying agent's, when the recording stored them.  They differ when the sequence
differs or a time differs by more than the tolerance: 1 ms for a recording made on virtual
time; ``DEFAULT_REAL_TOLERANCE`` for a production call made on real time, whose models
(VAD, Smart Turn) took real time that the replay does not spend, and whose client reported
its playout with its own delay (so there a ``BotHeard`` matches when one text starts the other).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from brisvox.agent.tools import Tool, ToolCallContext, ToolError
from brisvox.core.clock import Clock
from brisvox.core.tasks import TaskScope
from brisvox.engine.agent_input import AgentCommand, BotLine, EndWhenSilent, Note, OfferTools, Transfer
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    GeneratorLlmStream,
    LlmError,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from brisvox.providers.s2s import (
    S2sAudio,
    S2sConfig,
    S2sError,
    S2sEvent,
    S2sInteractionEnded,
    S2sInterrupted,
    S2sReady,
    S2sResponseDone,
    S2sSpeechStarted,
    S2sSpeechStopped,
    S2sToolCall,
    S2sToolCallsCancelled,
    S2sToolResult,
    S2sTranscript,
    Speaker,
)
from brisvox.providers.session import SessionBase
from brisvox.providers.stt import SttConfig, SttEvent, SttProvider, Transcript
from brisvox.providers.tts import (
    QueuedTtsSession,
    TtsAudio,
    TtsConfig,
    TtsProvider,
    TtsWords,
    even_word_timings,
)
from brisvox.recording.format import Recording
from brisvox.recording.tap import s2s_results

__all__ = [
    "DEFAULT_REAL_TOLERANCE",
    "VIRTUAL_TOLERANCE",
    "Difference",
    "Judgement",
    "ReplayLlm",
    "ReplayS2s",
    "ReplayStt",
    "ReplayTts",
    "Seen",
    "agent_command",
    "compare",
    "compared_events",
    "judge",
    "recorded_tool",
    "render",
    "s2s_event",
    "tolerance_for",
    "tool_lines",
]

log = logging.getLogger(__name__)

VIRTUAL_TOLERANCE: Final = 0.001
DEFAULT_REAL_TOLERANCE: Final = 0.5
_CHARS_PER_SECOND: Final = 14.0  # a context the recording has no length for
_CHUNK: Final = 0.04
_HANG: Final = 3600.0
_CAPACITY: Final = 32


# --- recorded providers ----------------------------------------------------------------------


class ReplayStt(SttProvider):
    """The recorded transcripts at their recorded times (after ``start``)."""

    def __init__(self, clock: Clock, recording: Recording, start: float) -> None:
        self._clock, self._records, self._start = clock, recording.of("stt"), start

    @property
    def name(self) -> str:
        return "replay-stt"

    async def connect(self, config: SttConfig) -> _ReplaySttSession:
        return _ReplaySttSession(self._clock, self._records, self._start)


class _ReplaySttSession(SessionBase[SttEvent]):
    def __init__(self, clock: Clock, records: list[dict[str, Any]], start: float) -> None:
        super().__init__(name="replay-stt session")
        self._scope = TaskScope("replay-stt")
        self._scope.spawn(self._run(clock, records, start), name="transcripts")

    async def _run(self, clock: Clock, records: list[dict[str, Any]], start: float) -> None:
        for r in records:
            await clock.sleep_until(start + r["t"])
            await self._emit(Transcript(text=r["text"], is_final=r["final"], speech_final=r["speech_final"],
                                        from_finalize=r["from_finalize"]))

    async def send_audio(self, pcm: bytes) -> None:
        self._check_open()

    async def finalize(self) -> None:
        self._check_open()

    async def _shutdown(self) -> None:
        await self._scope.aclose()


class ReplayLlm(LlmProvider):
    """The recorded responses, in order, with their recorded delays (``use``: the requests of
    that use only, ``SUMMARY`` for a window summarizer; None: the turns')."""

    def __init__(self, clock: Clock, recording: Recording, use: str | None = None) -> None:
        self._clock = clock
        self._responses = [r for r in recording.of("llm") if r.get("use") == use]
        self.requests = 0

    @property
    def name(self) -> str:
        return "replay-llm"

    def stream(self, request: LlmRequest) -> GeneratorLlmStream:
        return GeneratorLlmStream(self.name, self._respond())

    async def _respond(self) -> AsyncGenerator[LlmEvent, None]:
        n = self.requests
        self.requests += 1
        if n >= len(self._responses):
            yield LlmError(error=ProviderError(self.name, ProviderErrorKind.PROTOCOL,
                                               f"the recording has {len(self._responses)} model responses; "
                                               f"the replay asked for a response #{n + 1}"))
            return
        response = self._responses[n]
        for dt, event in response["events"]:
            await self._clock.sleep(dt)
            yield _llm_event(event, self.name)
        while True:  # the engine closed it early when it was recorded: it waits to be closed again
            await self._clock.sleep(_HANG)


def _llm_event(event: dict[str, Any], provider: str) -> LlmEvent:
    if "text" in event:
        return TextDelta(text=event["text"])
    if "tool" in event:
        tool = event["tool"]
        return ToolCallDelta(index=tool["index"], id=tool.get("id"), name=tool.get("name"),
                             arguments_fragment=tool.get("arguments") or "")
    if "done" in event:
        usage = event.get("usage")
        try:
            reason = FinishReason(event["done"])
        except ValueError:
            reason = FinishReason.OTHER
        return Done(finish_reason=reason,
                    usage=Usage(input_tokens=usage[0], output_tokens=usage[1]) if usage else None)
    try:
        kind = ProviderErrorKind(event["error"])
    except ValueError:
        kind = ProviderErrorKind.SERVER
    return LlmError(error=ProviderError(provider, kind, event["message"]))


@dataclass(frozen=True, slots=True)
class _Schedule:
    """One recorded context: seconds of audio per character, and when its audio came."""

    per_char: float
    arrivals: tuple[tuple[float, float], ...]  # (seconds after the first text, audio seconds so far)

    def due(self, upto: float) -> float:
        """When the recorded context had given ``upto`` seconds of audio (after its first text)."""
        for dt, total in self.arrivals:
            if total >= upto - 1e-6:
                return dt
        return self.arrivals[-1][0] if self.arrivals else 0.0


class ReplayTts(TtsProvider):
    """Audio of the recorded lengths at the recorded times, context by context."""

    def __init__(self, clock: Clock, recording: Recording) -> None:
        self._clock = clock
        self._contexts = recording.of("tts")
        self._used = 0

    @property
    def name(self) -> str:
        return "replay-tts"

    def next_context(self) -> _Schedule:
        """The next recorded context (one at the mock voice's pace when the recording has no more)."""
        n = self._used
        self._used += 1
        if n < len(self._contexts) and self._contexts[n]["chars"] > 0:
            r = self._contexts[n]
            total, arrivals = 0.0, []
            for dt, seconds in r["audio"]:
                total += seconds
                arrivals.append((float(dt), total))
            return _Schedule(total / r["chars"], tuple(arrivals))
        return _Schedule(1.0 / _CHARS_PER_SECOND, ())

    async def connect(self, config: TtsConfig) -> _ReplayTtsSession:
        return _ReplayTtsSession(self._clock, self, config.sample_rate)


@dataclass(slots=True)
class _Voiced:
    schedule: _Schedule
    started: float  # when its first text came (clock)
    offset: float = 0.0  # seconds of audio given so far


class _ReplayTtsSession(QueuedTtsSession):
    def __init__(self, clock: Clock, provider: ReplayTts, rate: int) -> None:
        super().__init__(name="replay-tts session", capacity=_CAPACITY)
        self._clock, self._provider, self._rate = clock, provider, rate
        self._contexts: dict[int, _Voiced] = {}

    def _accept(self, context_id: int, text: str) -> bool:
        if not text:  # whitespace counts: the recorded length is in characters
            return False
        if context_id not in self._contexts:
            self._contexts[context_id] = _Voiced(self._provider.next_context(), self._clock.now())
        return True

    async def _speak(self, ctx: int, text: str) -> bool:
        voiced = self._contexts[ctx]
        duration = len(text) * voiced.schedule.per_char
        await self._emit(TtsWords(context_id=ctx, words=even_word_timings(text, voiced.offset, duration)))
        samples = round(duration * self._rate)
        chunk = max(1, round(_CHUNK * self._rate))
        start = voiced.offset
        for first_sample in range(0, samples, chunk):
            n = min(chunk, samples - first_sample)
            await self._clock.sleep_until(voiced.started + voiced.schedule.due(start + (first_sample + n) / self._rate))
            if self.is_cancelled(ctx):
                return True
            await self._emit(TtsAudio(context_id=ctx, pcm=b"\x00\x01" * n, sample_rate=self._rate))
        voiced.offset = start + samples / self._rate
        return True


class ReplayS2s:
    """The recorded speech-to-speech model (see the module docs); ``note`` gets each ``s2s_in``
    record of what the call sent it, in order with the call's events."""

    def __init__(self, clock: Clock, recording: Recording, start: float,
                 note: Callable[[dict[str, Any]], None]) -> None:
        self._clock, self._records, self._start, self._note = clock, recording.of("s2s"), start, note

    @property
    def name(self) -> str:
        return "replay-s2s"

    async def connect(self, config: S2sConfig) -> _ReplayS2sSession:
        return _ReplayS2sSession(self._clock, self._records, self._start, self._note)


class _ReplayS2sSession(SessionBase[S2sEvent]):
    def __init__(self, clock: Clock, records: list[dict[str, Any]], start: float,
                 note: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(name="replay-s2s session")
        self._clock, self._start, self._note = clock, start, note
        self._scope = TaskScope("replay-s2s")
        self._scope.spawn(self._run(records), name="model events")

    async def _run(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            await self._clock.sleep_until(self._start + r["t"])
            await self._emit(s2s_event(r, "replay-s2s"))

    def _sent(self, op: str, **fields: Any) -> None:
        self._check_open()
        self._note({"t": round(self._clock.now() - self._start, 6), "k": "s2s_in", "op": op, **fields})

    async def send_audio(self, pcm: bytes) -> None:
        self._check_open()

    async def send_tool_results(self, results: Sequence[S2sToolResult]) -> None:
        self._sent("results", results=s2s_results(results))

    async def request_response(self) -> None:
        self._sent("request")

    async def cancel_response(self) -> None:
        self._sent("cancel")

    async def add_note(self, text: str) -> None:
        self._sent("note", text=text)

    async def add_user_text(self, text: str) -> None:
        self._sent("user_text", text=text)

    async def truncate(self, item_id: str | None, heard_ms: int) -> None:
        self._sent("truncate", item=item_id, ms=heard_ms)

    async def _shutdown(self) -> None:
        await self._scope.aclose()


def s2s_event(r: dict[str, Any], provider: str) -> S2sEvent:
    """The speech-to-speech event of an ``s2s`` record (checked by the loader)."""
    ev = r["ev"]
    if ev == "audio":
        return S2sAudio(pcm=b"\x00\x01" * r["samples"], item_id=r.get("item"))
    if ev == "transcript":
        return S2sTranscript(speaker=Speaker(r["speaker"]), text=r["text"], final=r["final"], item_id=r.get("item"))
    if ev == "tool_call":
        return S2sToolCall(call_id=r["call_id"], name=r["name"], arguments=r["arguments"],
                           arguments_error=r.get("arguments_error"))
    if ev == "tools_cancelled":
        return S2sToolCallsCancelled(call_ids=tuple(r["call_ids"]))
    if ev == "speech_started":
        return S2sSpeechStarted(at_ms=r.get("at_ms"), item_id=r.get("item"))
    if ev == "speech_stopped":
        return S2sSpeechStopped(at_ms=r.get("at_ms"), item_id=r.get("item"))
    if ev == "interrupted":
        return S2sInterrupted()
    if ev == "response_done":
        return S2sResponseDone(interrupted=r["interrupted"], response_id=r.get("response_id"))
    if ev == "interaction_ended":
        return S2sInteractionEnded(interrupted=r["interrupted"])
    if ev == "error":
        try:
            kind = ProviderErrorKind(r["error"])
        except ValueError:
            kind = ProviderErrorKind.SERVER
        return S2sError(error=ProviderError(provider, kind, r["message"]), fatal=r["fatal"])
    return S2sReady()


def agent_command(r: dict[str, Any]) -> AgentCommand:
    """The command of an ``agent`` record (checked by the loader)."""
    cmd = r["cmd"]
    if cmd == "say":
        return BotLine(r["text"], interrupt=r["interrupt"])
    if cmd == "end":
        return BotLine(r["farewell"], farewell=True) if r["farewell"] else EndWhenSilent()
    if cmd == "context.update":
        return Note(r["note"])
    if cmd == "tools.set":
        return OfferTools(tuple(r["names"]))
    return Transfer(r["to"])


class ReplayedToolError(ToolError):
    """A tool call the recording has no result for, or whose recorded run raised."""


def recorded_tool(name: str, results: list[dict[str, Any]]) -> Tool:
    """A tool that returns ``results`` (the recording's ``tool`` records of ``name``) in order."""
    async def tool(arguments: dict[str, Any], ctx: ToolCallContext) -> Any:
        if not results:
            raise ReplayedToolError(f"the recording has no more results of {name}")
        r = results.pop(0)
        if "raised" in r:
            raise ReplayedToolError(f"{r['raised']}: {r['message']}")
        return r["result"]

    return tool


# --- the comparison -------------------------------------------------------------------------

_COMPARED: Final = {
    "CallerInput": ("kind", "text", "reply"),
    "FlowEntered": ("node", "previous"),
    "TurnStarted": ("barge_in",),
    "TurnEnded": ("reason",),
    "UserTurn": ("text",),
    "BotHeard": ("round", "text"),
    "ToolCallStarted": ("name", "arguments"),
    "ToolCallSettled": ("name", "outcome", "is_error"),
    "EngineFailure": ("stage", "fatal"),
}


@dataclass(frozen=True, slots=True)
class Seen:
    """One compared event: its time, how it reads, and (``BotHeard``) the text heard."""

    t: float
    line: str
    heard: str | None = None

    def key(self, loose_heard: bool) -> str:
        """What must be equal: the line, less the heard text when heard texts are compared loosely."""
        if loose_heard and self.heard is not None:
            return self.line.split(" text=", 1)[0]
        return self.line

    def __str__(self) -> str:
        return f"{self.t:8.3f} {self.line}"


def _seen(record: dict[str, Any]) -> Seen | None:
    if record["k"] == "s2s_in":
        return _to_model(record)
    if record["k"] != "event":
        return None
    name, t = record["e"], float(record["t"])
    if name == "UserTranscript":
        return Seen(t, f"heard {record.get('text')!r}") if record.get("final") else None
    keys = _COMPARED.get(name)
    if keys is None:
        return None
    if name == "CallerInput" and record.get("kind") == "text" and record.get("reply") is None:
        record = {**record, "reply": "spoken"}  # typed before the reply mode was recorded: it was replayed spoken
    line = " ".join([f"{name} epoch={record['epoch']}", *(f"{k}={record.get(k)!r}" for k in keys)])
    return Seen(t, line, str(record.get("text")) if name == "BotHeard" else None)


def _to_model(record: dict[str, Any]) -> Seen:
    """What the call sent a speech-to-speech model (a truncation by its item: ``BotHeard`` has what was heard)."""
    op, t = record["op"], float(record["t"])
    if op == "results":
        what = [(r["name"], r["content"], r["is_error"]) for r in record["results"]]
        return Seen(t, f"ToModel results={what!r}")
    if op == "note":
        return Seen(t, f"ToModel note={record['text']!r}")
    if op == "truncate":
        return Seen(t, f"ToModel truncate item={record.get('item')!r}")
    return Seen(t, f"ToModel {op}")


def compared_events(records: list[dict[str, Any]]) -> list[Seen]:
    """The events a replay is judged by, in order."""
    return [seen for r in records if (seen := _seen(r)) is not None]


def tool_lines(tools: Sequence[Mapping[str, Any]]) -> list[Seen]:
    """The offered tools as compared lines (at 0 s): name, kind, and short digests of the
    description and the arguments' schema (the line says which changed)."""
    lines = []
    for tool in sorted(tools, key=lambda t: str(t["name"])):
        parameters = tool["parameters"]
        declared = parameters.get("properties")
        properties = sorted(str(name) for name in declared) if isinstance(declared, Mapping) else []
        lines.append(Seen(0.0, f"Tool {tool['name']!r} kind={tool['kind']!r} description=#{_digest(tool.get('description'))} "
                               f"arguments={properties} schema=#{_digest(parameters)}"))
    return lines


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class Difference:
    """One place the replay differs: ``recorded`` / ``replayed`` (None: missing on that side)."""

    recorded: Seen | None
    replayed: Seen | None

    def __str__(self) -> str:
        return f"recorded {self.recorded or '(none)'}\n  replay {self.replayed or '(none)'}"


Row = tuple[Seen | None, Seen | None, bool]


def compare(recorded: list[Seen], replayed: list[Seen], tolerance: float, *,
            loose_heard: bool = False) -> tuple[list[Row], list[Difference]]:
    """Rows of (recorded, replayed, same) in order, and the differences.  ``loose_heard``: a
    ``BotHeard`` matches when one text is the start of the other (a production client reports
    its playout later than the replay's transport does)."""
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(a=[x.key(loose_heard) for x in recorded],
                                      b=[x.key(loose_heard) for x in replayed], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for a, b in zip(recorded[i1:i2], replayed[j1:j2], strict=True):
                same = abs(a.t - b.t) <= tolerance + 1e-9 and (
                    a.heard is None or b.heard is None or a.heard.startswith(b.heard) or b.heard.startswith(a.heard))
                rows.append((a, b, same))
            continue
        left, right = recorded[i1:i2], replayed[j1:j2]
        for k in range(max(len(left), len(right))):
            rows.append((left[k] if k < len(left) else None, right[k] if k < len(right) else None, False))
    return rows, [Difference(a, b) for a, b, same in rows if not same]


def render(rows: list[Row]) -> str:
    """The two event streams side by side, ``!`` marking each row that differs."""
    width = max([len(str(a)) for a, _, _ in rows if a is not None] + [len("recorded")])
    lines = [f"  {'recorded'.ljust(width)} | replay"]
    lines += [f"{' ' if same else '!'} {str(a or '').ljust(width)} | {b or ''}" for a, b, same in rows]
    return "\n".join(lines)


def tolerance_for(recording: Recording) -> float:
    """How far event times may differ by default: 1 ms on virtual time, more for a production call."""
    return VIRTUAL_TOLERANCE if recording.header.clock == "virtual" else DEFAULT_REAL_TOLERANCE


@dataclass(frozen=True, slots=True)
class Judgement:
    """A replay set beside its recording: ``rows`` (both streams), the ``differences``, the tolerance."""

    rows: list[Row]
    differences: list[Difference]
    tolerance: float


def judge(recording: Recording, replayed: list[dict[str, Any]], tolerance: float | None = None,
          offered: Sequence[Mapping[str, Any]] | None = None) -> Judgement:
    """The replay's events against the recording's (default tolerance: :func:`tolerance_for`;
    heard texts compared loosely for a recording made on real time); ``offered``: the tools
    the replay offered (``tool_record``s), set beside the recorded ones when it stored them."""
    tol = tolerance if tolerance is not None else tolerance_for(recording)
    before, after = compared_events(list(recording.records)), compared_events(replayed)
    if recording.header.tools is not None and offered is not None:
        before, after = tool_lines(recording.header.tools) + before, tool_lines(offered) + after
    rows, differences = compare(before, after, tol, loose_heard=recording.header.clock == "real")
    return Judgement(rows, differences, tol)

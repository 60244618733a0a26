"""Recording a call: taps on its providers and tools, and a bounded writer.

:class:`CallRecorder` is one call's recording. ``providers`` wraps the call's STT, LLM and
TTS providers (each wrapper passes everything through and notes what it saw, with the call
clock's time), ``summarizer`` the call's window summarizer (its requests are ``llm`` records
with ``use: "summary"``), ``s2s`` a speech-to-speech model (the caller audio it heard, its
events, what the call sent it), ``tool`` wraps one of the agent's tool functions, and
``listen`` is an event listener for the call's observer; ``agent`` is the tap of a linked
agent's commands (``AgentInput.tap``: each as it enters the call) and ``brain_fallback`` that
of brain mode's fallback (``BrainLlm.tap``: the agent file's model answered a request). Every note becomes one JSON line
(:mod:`brisvox.recording.format`) put on a bounded queue (``QUEUE_LINES``) without waiting:
when the queue is full the line is dropped and counted (``dropped``, logged once per call,
written in the ``end`` record) — the call never waits on the disk. The writer task (``run``,
spawned in the call's scope) gzips what is queued into ``<dir>/<call id>.jsonl.gz`` every
``WRITE_EVERY`` seconds, in a worker thread; a write that fails is logged with its traceback
and counted (``failures``) and the recording stops; the call goes on. ``finish`` writes the
``end`` record, closes the file and keeps the directory to ``keep`` recordings (oldest
deleted).

Nothing here runs unless an agent turns recording on (``[record]``): the server wraps
nothing otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Final, Self, TypeVar

from brisvox.agent.tools import Tool, ToolCallContext
from brisvox.agent.window import Summarizer
from brisvox.core.clock import Clock, bounded, hold_time_for
from brisvox.core.errors import DeadlineExceeded
from brisvox.engine import Providers
from brisvox.engine import events as ev
from brisvox.engine.agent_input import AgentCommand, BotLine, EndWhenSilent, Note, OfferTools, Transfer
from brisvox.providers.llm import (
    Done,
    LlmError,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    LlmStream,
    TextDelta,
    ToolCallDelta,
)
from brisvox.providers.s2s import (
    S2sAudio,
    S2sConfig,
    S2sError,
    S2sEvent,
    S2sInteractionEnded,
    S2sInterrupted,
    S2sProvider,
    S2sReady,
    S2sResponseDone,
    S2sSession,
    S2sSpeechStarted,
    S2sSpeechStopped,
    S2sToolCall,
    S2sToolCallsCancelled,
    S2sToolResult,
    S2sTranscript,
)
from brisvox.providers.stt import SttConfig, SttEvent, SttProvider, SttSession, Transcript
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsEvent, TtsProvider, TtsSession
from brisvox.recording.format import SUMMARY, VERSION, Header, RecordSettings, encode_line, event_record

__all__ = ["QUEUE_LINES", "WRITE_EVERY", "CallRecorder", "agent_fields", "header", "s2s_fields", "s2s_results"]

log = logging.getLogger(__name__)
T = TypeVar("T")

QUEUE_LINES: Final = 4096  # about 80 s of caller audio ahead of the disk
WRITE_EVERY: Final = 0.5  # seconds between the writer's batches
_SUFFIX: Final = ".jsonl.gz"


class CallRecorder:
    """One call's recording (see the module docs)."""

    def __init__(self, settings: RecordSettings, call_id: str, clock: Clock, header: Header,
                 origin: float | None = None) -> None:
        self._settings = settings
        self._clock = clock
        # Times count from ``origin``, the call's start (its transport session's opening): caller
        # audio stamped while an agent link was still opening comes before the recorder exists.
        self._start = clock.now() if origin is None else min(origin, clock.now())
        self.path = settings.dir / f"{_safe(call_id)}{_SUFFIX}"
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()  # bounded by note(); the end passes
        self.dropped = 0
        self.failures = 0
        self._broken = False
        self._finished = asyncio.Event()
        self.note(header.line())

    # --- notes ------------------------------------------------------------------------------

    def t(self) -> float:
        return round(self._clock.now() - self._start, 6)

    def note(self, record: dict[str, Any]) -> None:
        if self._broken:
            return
        if self._queue.qsize() < QUEUE_LINES:
            self._queue.put_nowait(encode_line(record))
        else:
            if self.dropped == 0:
                log.warning("recording %s: the writer is behind; records are dropped (counted in the file)",
                            self.path.name)
            self.dropped += 1

    def audio(self, pcm: bytes) -> None:
        self.note({"t": self.t(), "k": "audio", "pcm": base64.b64encode(pcm).decode()})

    def listen(self, event: ev.EngineEvent) -> None:
        """The observer listener: every engine event."""
        self.note(event_record(event, round(event.at - self._start, 6)))

    def agent(self, command: AgentCommand) -> None:
        """``AgentInput.tap``: a command of the linked agent, as it enters the call."""
        self.note({"t": self.t(), "k": "agent", **agent_fields(command)})

    def brain_fallback(self, why: str) -> None:
        """``BrainLlm.tap``: the agent file's model answers a request in the agent's place."""
        self.note({"t": self.t(), "k": "brain", "fallback": why})

    # --- the writer -------------------------------------------------------------------------

    async def run(self) -> None:
        """Write lines until ``finish``; a failure is logged and counted and stops the recording
        (any failure: the writer runs in the call's scope, and a recording never ends a call)."""
        try:
            self.path, out = await _in_thread(_open, self.path)
            try:
                await self._write(out)
            finally:
                await _in_thread(out.close)
            await _in_thread(_prune, self._settings.dir, self._settings.keep)
        except Exception as exc:
            self._broken = True
            self.failures += 1
            log.error("recording %s failed; the call goes on unrecorded", self.path, exc_info=exc)
            while not self._queue.empty():  # nothing will write what is queued
                self._queue.get_nowait()

    async def _write(self, out: _Gzip) -> None:
        while True:
            line = await self._queue.get()
            batch = [line] if line is not None else []
            ended = line is None
            while not ended and not self._queue.empty():
                more = self._queue.get_nowait()
                if more is None:
                    ended = True
                else:
                    batch.append(more)
            if batch:
                await _in_thread(out.write, b"".join(batch))
            if ended:
                return
            # One thread hop per interval, not per 20 ms frame; the call's end wakes it at once.
            with contextlib.suppress(DeadlineExceeded):  # the interval passed, the call goes on
                await bounded(self._clock, WRITE_EVERY, self._finished.wait(), "recording interval")

    def finish(self) -> None:
        """The call ended: the ``end`` record, then the writer closes the file (both past the bound)."""
        if not self._broken:
            self._queue.put_nowait(encode_line({"t": self.t(), "k": "end", "dropped": self.dropped}))
        self._queue.put_nowait(None)
        self._finished.set()

    # --- wrapping ---------------------------------------------------------------------------

    def providers(self, providers: Providers) -> Providers:
        return replace(providers, stt=_Stt(providers.stt, self), llm=_Llm(providers.llm, self),
                       tts=_Tts(providers.tts, self))

    def summarizer(self, summarizer: Summarizer) -> Summarizer:
        """The window summarizer, its model requests recorded apart from the turns' (``use: "summary"``)."""
        if isinstance(summarizer, LlmSummarizer):
            return replace(summarizer, provider=_Llm(summarizer.provider, self, SUMMARY))
        # Only an application's own summarizer lands here (serve builds LlmSummarizers): a replay
        # of this call has no summaries to give, which its diff shows.
        log.warning("recording %s: the summarizer %s is not a model's; its summaries are not recorded",
                    self.path.name, type(summarizer).__name__)
        return summarizer

    def s2s(self, provider: S2sProvider) -> S2sProvider:
        return _S2s(provider, self)

    def tool(self, name: str, tool: Tool) -> Tool:
        async def recorded(arguments: dict[str, Any], ctx: ToolCallContext) -> Any:
            try:
                result = await tool(arguments, ctx)
            except Exception as exc:  # noted, then raised on to the tool engine as it was
                self.note({"t": self.t(), "k": "tool", "name": name, "raised": type(exc).__name__,
                           "message": str(exc)})
                raise
            self.note({"t": self.t(), "k": "tool", "name": name, "result": _json_value(result)})
            return result

        return recorded


def header(agent: str, agent_file: str | None, *, virtual: bool, input_rate: int, output_rate: int,
           started: str, vad: str | None = None, smart_turn: bool = False, pipeline: str = "cascade",
           summaries: bool = False, tools: tuple[dict[str, Any], ...] = (), brain: bool | None = None) -> Header:
    """``brain``: None when the call has no open agent link, else whether its agent answers the turns."""
    from brisvox import __version__

    return Header(version=VERSION, brisvox=__version__, agent=agent, agent_file=agent_file,
                  clock="virtual" if virtual else "real", input_rate=input_rate, output_rate=output_rate,
                  started=started, vad=vad, smart_turn=smart_turn, pipeline=pipeline, summaries=summaries,
                  tools=tools, agent_link=None if brain is None else {"answers_turns": brain})


def agent_fields(command: AgentCommand) -> dict[str, Any]:
    """A linked agent's command as an ``agent`` record's fields (its protocol name and arguments)."""
    match command:
        case BotLine(text=text, farewell=True):
            return {"cmd": "end", "farewell": text}
        case BotLine(text=text, interrupt=interrupt):
            return {"cmd": "say", "text": text, "interrupt": interrupt}
        case EndWhenSilent():
            return {"cmd": "end", "farewell": ""}
        case Note(text=text):
            return {"cmd": "context.update", "note": text}
        case OfferTools(names=names):
            return {"cmd": "tools.set", "names": list(names)}
        case Transfer(to=to):
            return {"cmd": "transfer", "to": to}


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread; a virtual-time loop waits for it (no timer jumps ahead)."""
    fut = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    hold_time_for(fut)
    return await fut


def _safe(call_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in call_id)[:100] or "call"


def _open(path: Path) -> tuple[Path, _Gzip]:
    """A new file at ``path``, or ``<name>-2`` ... when a recording of that name exists (a call id
    seen again after a restart)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stem = path.name.removesuffix(_SUFFIX)
    for n in range(1, 1000):
        candidate = path if n == 1 else path.with_name(f"{stem}-{n}{_SUFFIX}")
        try:
            raw = candidate.open("xb")
        except FileExistsError:
            continue
        return candidate, _Gzip(raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, filename=""))
    raise FileExistsError(f"{path}: 999 recordings of this call id exist")


@dataclass(frozen=True, slots=True)
class _Gzip:
    raw: BinaryIO
    out: gzip.GzipFile

    def write(self, data: bytes) -> None:
        self.out.write(data)

    def close(self) -> None:
        try:
            self.out.close()
        finally:
            self.raw.close()  # GzipFile leaves the file it was given open


def _prune(directory: Path, keep: int) -> None:
    """Keep the newest ``keep`` recordings of ``directory``."""
    files = sorted(directory.glob(f"*{_SUFFIX}"), key=lambda p: p.stat().st_mtime)
    for old in files[: max(0, len(files) - keep)]:
        old.unlink(missing_ok=True)


def _json_value(value: Any) -> Any:
    """A tool's return as JSON (the engine puts text or JSON values in the context)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


# --- provider taps -------------------------------------------------------------------------


class _Provider:
    """What every provider tap passes straight through: the name and ``warm``."""

    def __init__(self, inner: SttProvider | LlmProvider | TtsProvider, rec: CallRecorder) -> None:
        self._inner, self._rec = inner, rec

    @property
    def name(self) -> str:
        return self._inner.name

    async def warm(self) -> None:
        await self._inner.warm()


class _Stream:
    """A session or stream tap: an async iterator and a context manager that closes it."""

    async def aclose(self) -> None:
        raise NotImplementedError

    def __aiter__(self) -> Self:
        return self

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class _Stt(_Provider):
    _inner: SttProvider

    async def connect(self, config: SttConfig) -> SttSession:
        return _SttSession(await self._inner.connect(config), self._rec)


class _SttSession(_Stream):
    def __init__(self, inner: SttSession, rec: CallRecorder) -> None:
        self._inner, self._rec = inner, rec

    async def send_audio(self, pcm: bytes) -> None:
        self._rec.audio(pcm)
        await self._inner.send_audio(pcm)

    async def finalize(self) -> None:
        await self._inner.finalize()

    async def aclose(self) -> None:
        self._rec.note({"t": self._rec.t(), "k": "stop"})
        await self._inner.aclose()

    async def __anext__(self) -> SttEvent:
        event = await anext(self._inner)
        if isinstance(event, Transcript):
            self._rec.note({"t": self._rec.t(), "k": "stt", "text": event.text, "final": event.is_final,
                            "speech_final": event.speech_final, "from_finalize": event.from_finalize})
        return event


class _Llm(_Provider):
    _inner: LlmProvider

    def __init__(self, inner: LlmProvider, rec: CallRecorder, use: str | None = None) -> None:
        super().__init__(inner, rec)
        self._use = use

    def stream(self, request: LlmRequest) -> LlmStream:
        return _LlmStream(self._inner.stream(request), self._rec, self._use)


class _LlmStream(_Stream):
    def __init__(self, inner: LlmStream, rec: CallRecorder, use: str | None) -> None:
        self._inner, self._rec, self._use = inner, rec, use
        self._t = rec.t()
        self._last = self._t
        self._events: list[list[Any]] = []
        self._written = False

    def _note(self, event: LlmEvent) -> None:
        note: dict[str, Any] | None
        if isinstance(event, TextDelta):
            note = {"text": event.text}
        elif isinstance(event, ToolCallDelta):
            note = {"tool": {"index": event.index, "id": event.id, "name": event.name,
                             "arguments": event.arguments_fragment}}
        elif isinstance(event, Done):
            usage = [event.usage.input_tokens, event.usage.output_tokens] if event.usage is not None else None
            note = {"done": event.finish_reason.value, "usage": usage}
        elif isinstance(event, LlmError):
            note = {"error": event.error.kind.value, "message": str(event.error)}
        else:  # ProviderDataDelta: opaque provider data a replay has no use for
            note = None
        now = self._rec.t()
        if note is not None:
            self._events.append([round(now - self._last, 6), note])
            self._last = now
        if isinstance(event, Done | LlmError):
            self._write(closed=False)

    def _write(self, *, closed: bool) -> None:
        if not self._written:
            self._written = True
            record: dict[str, Any] = {"t": self._t, "k": "llm", "events": self._events}
            if self._use is not None:
                record["use"] = self._use
            if closed:
                record["closed"] = True
            self._rec.note(record)

    async def __anext__(self) -> LlmEvent:
        try:
            event = await anext(self._inner)
        except StopAsyncIteration:
            self._write(closed=False)
            raise
        self._note(event)
        return event

    async def aclose(self) -> None:
        self._write(closed=True)
        await self._inner.aclose()


class _Tts(_Provider):
    _inner: TtsProvider

    async def connect(self, config: TtsConfig) -> TtsSession:
        return _TtsSession(await self._inner.connect(config), self._rec)


_MERGE: Final = 0.01  # audio arriving within this many seconds of the last piece is noted with it


@dataclass(slots=True)
class _Context:
    t: float
    chars: int = 0
    audio: list[list[float]] = field(default_factory=list)  # [seconds after t, seconds of audio]


class _TtsSession(_Stream):
    """Notes each context's text length and when its audio came, how much; written when the session closes."""

    def __init__(self, inner: TtsSession, rec: CallRecorder) -> None:
        self._inner, self._rec = inner, rec
        self._contexts: dict[int, _Context] = {}

    async def send_text(self, context_id: int, text: str) -> None:
        ctx = self._contexts.setdefault(context_id, _Context(self._rec.t()))
        ctx.chars += len(text)
        await self._inner.send_text(context_id, text)

    async def flush(self, context_id: int) -> None:
        await self._inner.flush(context_id)

    def cancel(self, context_id: int) -> None:
        self._inner.cancel(context_id)

    async def aclose(self) -> None:
        for ctx in sorted(self._contexts.values(), key=lambda c: c.t):
            self._rec.note({"t": ctx.t, "k": "tts", "chars": ctx.chars,
                            "audio": [[round(dt, 6), round(seconds, 6)] for dt, seconds in ctx.audio]})
        self._contexts.clear()
        await self._inner.aclose()

    async def __anext__(self) -> TtsEvent:
        event = await anext(self._inner)
        if isinstance(event, TtsAudio):
            ctx = self._contexts.get(event.context_id)
            if ctx is not None:
                dt, seconds = self._rec.t() - ctx.t, event.duration
                if ctx.audio and dt - ctx.audio[-1][0] <= _MERGE:
                    ctx.audio[-1][1] += seconds
                else:
                    ctx.audio.append([dt, seconds])
        return event


class _S2s:
    """A speech-to-speech model's tap."""

    def __init__(self, inner: S2sProvider, rec: CallRecorder) -> None:
        self._inner, self._rec = inner, rec

    @property
    def name(self) -> str:
        return self._inner.name

    async def connect(self, config: S2sConfig) -> S2sSession:
        return _S2sSession(await self._inner.connect(config), self._rec)


class _S2sSession(_Stream):
    """Notes the caller audio the model hears, each of its events and each thing the call sends it."""

    def __init__(self, inner: S2sSession, rec: CallRecorder) -> None:
        self._inner, self._rec = inner, rec

    def _sent(self, op: str, **fields: Any) -> None:
        self._rec.note({"t": self._rec.t(), "k": "s2s_in", "op": op, **fields})

    async def __anext__(self) -> S2sEvent:
        event = await anext(self._inner)
        self._rec.note({"t": self._rec.t(), "k": "s2s", **s2s_fields(event)})
        return event

    async def send_audio(self, pcm: bytes) -> None:
        self._rec.audio(pcm)
        await self._inner.send_audio(pcm)

    async def send_tool_results(self, results: Sequence[S2sToolResult]) -> None:
        self._sent("results", results=s2s_results(results))
        await self._inner.send_tool_results(results)

    async def request_response(self) -> None:
        self._sent("request")
        await self._inner.request_response()

    async def cancel_response(self) -> None:
        self._sent("cancel")
        await self._inner.cancel_response()

    async def add_note(self, text: str) -> None:
        self._sent("note", text=text)
        await self._inner.add_note(text)

    async def add_user_text(self, text: str) -> None:
        self._sent("user_text", text=text)
        await self._inner.add_user_text(text)

    async def truncate(self, item_id: str | None, heard_ms: int) -> None:
        self._sent("truncate", item=item_id, ms=heard_ms)
        await self._inner.truncate(item_id, heard_ms)

    async def aclose(self) -> None:
        self._rec.note({"t": self._rec.t(), "k": "stop"})
        await self._inner.aclose()


def s2s_results(results: Sequence[S2sToolResult]) -> list[dict[str, Any]]:
    """Tool results sent to a speech-to-speech model, as an ``s2s_in`` ``results`` record holds them."""
    return [{"call_id": r.call_id, "name": r.name, "content": r.content, "is_error": r.is_error} for r in results]


def s2s_fields(event: S2sEvent) -> dict[str, Any]:
    """A speech-to-speech event as an ``s2s`` record's fields (the model's audio by its length)."""
    match event:
        case S2sAudio(pcm=pcm, item_id=item):
            return {"ev": "audio", "samples": len(pcm) // 2, "item": item}
        case S2sTranscript(speaker=speaker, text=text, final=final, item_id=item):
            return {"ev": "transcript", "speaker": speaker.value, "text": text, "final": final, "item": item}
        case S2sToolCall(call_id=call_id, name=name, arguments=arguments, arguments_error=error):
            return {"ev": "tool_call", "call_id": call_id, "name": name, "arguments": _json_value(arguments),
                    "arguments_error": error}
        case S2sToolCallsCancelled(call_ids=call_ids):
            return {"ev": "tools_cancelled", "call_ids": list(call_ids)}
        case S2sSpeechStarted(at_ms=at_ms, item_id=item):
            return {"ev": "speech_started", "at_ms": at_ms, "item": item}
        case S2sSpeechStopped(at_ms=at_ms, item_id=item):
            return {"ev": "speech_stopped", "at_ms": at_ms, "item": item}
        case S2sInterrupted():
            return {"ev": "interrupted"}
        case S2sResponseDone(interrupted=interrupted, response_id=response_id):
            return {"ev": "response_done", "interrupted": interrupted, "response_id": response_id}
        case S2sInteractionEnded(interrupted=interrupted):
            return {"ev": "interaction_ended", "interrupted": interrupted}
        case S2sError(error=error, fatal=fatal):
            return {"ev": "error", "error": error.kind.value, "message": str(error), "fatal": fatal}
        case S2sReady():
            return {"ev": "ready"}
    raise TypeError(f"not a speech-to-speech event: {type(event).__name__}")

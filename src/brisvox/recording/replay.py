"""Replaying a recorded call on virtual time against the current code.

:func:`replay_recording` runs the recorded call again through ``run_call`` on a loopback
transport, with recorded providers in place of the real ones:

* the caller's audio records are sent at their recorded times (the VAD and the turn
  machine are the current code's: they decide the turns again); the call hangs up after
  the last one;
* :class:`ReplayStt` emits the recorded transcripts at their recorded times;
* :class:`ReplayLlm` answers the n-th request with the n-th recorded response, each event
  after its recorded delay (a response the engine closed early hangs after its last event);
* :class:`ReplayTts` gives each synthesis context, in order, audio of the recorded length
  (the recorded samples spread over the text as it comes), after the recorded delay;
* each tool returns its recorded results in order (or raises the recorded error).

It must run on a :class:`~brisvox.core.clock.VirtualTimeLoop`.  :func:`compare` sets the
replay's events beside the recorded ones: the turn boundaries (``TurnStarted``,
``TurnEnded``), what was heard (final transcripts, ``UserTurn``, ``BotHeard``), tool calls
and failures, each with its time; they differ when the sequence differs or a time differs
by more than the tolerance (1 ms for a recording made on virtual time; a recording of a
production call, made on real time, needs one: ``DEFAULT_REAL_TOLERANCE``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import difflib
import logging
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Final

from brisvox.agent.tools import FillerPolicy, Tool, ToolCallContext, ToolError
from brisvox.agent.turn import FixedSilence
from brisvox.core.channel import Channel
from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope
from brisvox.engine import CallFailed, CallObserver, Providers, run_call
from brisvox.engine import events as ev
from brisvox.engine.config import SummaryConfig
from brisvox.inference.vad import energy_vad
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
from brisvox.providers.session import SessionBase
from brisvox.providers.stt import SttConfig, SttEvent, SttProvider, Transcript
from brisvox.providers.tts import (
    FlushInput,
    TextInput,
    TtsAudio,
    TtsConfig,
    TtsFlushed,
    TtsInput,
    TtsProvider,
    TtsSessionBase,
    TtsWords,
)
from brisvox.recording.format import Recording, event_record
from brisvox.server.agent_file import AgentDefinition
from brisvox.server.call import engine_config
from brisvox.server.tools import ToolSet
from brisvox.sim.mock_tts import _word_timings
from brisvox.transport import LoopbackTransport, TransportSession

__all__ = [
    "DEFAULT_REAL_TOLERANCE",
    "VIRTUAL_TOLERANCE",
    "Difference",
    "ReplayLlm",
    "ReplayStt",
    "ReplayTts",
    "compare",
    "compared_events",
    "render",
    "replay_recording",
    "replay_tools",
    "tolerance_for",
]

log = logging.getLogger(__name__)

VIRTUAL_TOLERANCE: Final = 0.001
DEFAULT_REAL_TOLERANCE: Final = 0.25
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
    """The recorded responses, in order, with their recorded delays."""

    def __init__(self, clock: Clock, recording: Recording) -> None:
        self._clock = clock
        self._responses = recording.of("llm")
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


class ReplayTts(TtsProvider):
    """Audio of the recorded lengths, context by context."""

    def __init__(self, clock: Clock, recording: Recording) -> None:
        self._clock = clock
        self._contexts = recording.of("tts")
        self._rate = recording.header.output_rate
        self._used = 0

    @property
    def name(self) -> str:
        return "replay-tts"

    def next_context(self) -> tuple[float, float]:
        """The next context's seconds of audio per character and its first-audio delay."""
        n = self._used
        self._used += 1
        if n < len(self._contexts):
            r = self._contexts[n]
            if r["chars"] > 0:
                return r["samples"] / self._rate / r["chars"], r["first"]
        return 1.0 / _CHARS_PER_SECOND, 0.0

    async def connect(self, config: TtsConfig) -> _ReplayTtsSession:
        return _ReplayTtsSession(self._clock, self, config.sample_rate)


class _ReplayTtsSession(TtsSessionBase):
    def __init__(self, clock: Clock, provider: ReplayTts, rate: int) -> None:
        super().__init__(name="replay-tts session")
        self._clock, self._provider, self._rate = clock, provider, rate
        self._input: Channel[TtsInput] = Channel(_CAPACITY, name="replay-tts text")
        self._contexts: dict[int, tuple[float, float]] = {}  # seconds per char, offset so far
        self._scope = TaskScope("replay-tts")
        self._scope.spawn(self._run(), name="synthesize")

    async def send_text(self, context_id: int, text: str) -> None:
        self._check_open()
        if text and not self.is_cancelled(context_id):
            await self._input.send(TextInput(context_id, text))

    async def flush(self, context_id: int) -> None:
        self._check_open()
        if not self.is_cancelled(context_id):
            await self._input.send(FlushInput(context_id))

    def _on_cancel(self, context_id: int) -> None:
        self._input.purge(lambda cmd: cmd.context_id == context_id)

    async def _shutdown(self) -> None:
        self._input.abort()
        await self._scope.aclose()

    async def _run(self) -> None:
        with contextlib.suppress(ChannelClosed):  # the session closed
            async for cmd in self._input:
                if self.is_cancelled(cmd.context_id):
                    continue
                if isinstance(cmd, FlushInput):
                    await self._emit(TtsFlushed(context_id=cmd.context_id))
                else:
                    await self._speak(cmd.context_id, cmd.text)

    async def _speak(self, ctx: int, text: str) -> None:
        if ctx not in self._contexts:
            per_char, first = self._provider.next_context()
            self._contexts[ctx] = (per_char, 0.0)
            await self._clock.sleep(first)
        per_char, offset = self._contexts[ctx]
        duration = len(text) * per_char
        await self._emit(TtsWords(context_id=ctx, words=_word_timings(text, offset, duration)))
        samples = round(duration * self._rate)
        chunk = max(1, round(_CHUNK * self._rate))
        for first_sample in range(0, samples, chunk):
            if self.is_cancelled(ctx):
                return
            n = min(chunk, samples - first_sample)
            await self._emit(TtsAudio(context_id=ctx, pcm=b"\x00\x01" * n, sample_rate=self._rate))
        self._contexts[ctx] = (per_char, offset + samples / self._rate)


class ReplayedToolError(ToolError):
    """A tool call the recording has no result for, or whose recorded run raised."""


def replay_tools(tools: ToolSet, recording: Recording) -> ToolSet:
    """``tools`` with each function replaced by the recording's results for it, in order."""
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in recording.of("tool"):
        results[r["name"]].append(r)
    out = ToolSet()
    for name in tools:
        spec = tools.spec(name)
        if spec is not None:
            out.add(spec, _recorded_tool(name, results[name]))
    return out


def _recorded_tool(name: str, results: list[dict[str, Any]]) -> Tool:
    async def tool(arguments: dict[str, Any], ctx: ToolCallContext) -> Any:
        if not results:
            raise ReplayedToolError(f"the recording has no more results of {name}")
        r = results.pop(0)
        if "raised" in r:
            raise ReplayedToolError(f"{r['raised']}: {r['message']}")
        return r["result"]

    return tool


# --- the run --------------------------------------------------------------------------------


async def replay_recording(recording: Recording, definition: AgentDefinition, tools: ToolSet, clock: Clock, *,
                           silence: float | None = None,
                           vad: Callable[[int], Any] | None = None) -> list[dict[str, Any]]:
    """Run the recorded call again (see the module docs); returns the new ``event`` records.

    ``silence``: end turns after this many seconds of silence (a fixed-silence turn policy)
    in place of the agent's own policy.  ``vad``: the detector factory (default: the energy
    detector when the call used it, else the one ``brisvox serve`` uses).
    """
    config = engine_config(definition)
    if silence is not None:
        config = dataclasses.replace(config, turn=FixedSilence(silence=silence))
    config = dataclasses.replace(config, summary=SummaryConfig(enabled=False))
    closers: list[Any] = []
    if vad is None and recording.header.vad == "energy":
        vad = energy_vad
    if vad is None:
        from brisvox.server.call_providers import vad_factory

        vad, _label, pool = vad_factory()
        if pool is not None:
            closers.append(pool.aclose)
    events: list[dict[str, Any]] = []
    start = clock.now()
    end_of_turn = None
    if recording.header.smart_turn:
        from brisvox.server.call_providers import end_of_turn_factory

        turn = end_of_turn_factory()
        if turn is None:
            log.warning("the call used Smart Turn, which is unavailable here: its turns may end differently")
        else:
            end_of_turn, close_turn = turn
            closers.append(close_turn)
    registry_tools = replay_tools(tools, recording)
    registry = registry_tools.registry(definition.tools, definition.confirm_tools) if definition.tools else None
    providers = Providers(stt=ReplayStt(clock, recording, start), llm=ReplayLlm(clock, recording),
                          tts=ReplayTts(clock, recording), vad=vad, end_of_turn=end_of_turn)

    def listen(event: ev.EngineEvent) -> None:
        events.append(event_record(event, round(event.at - start, 6)))

    try:
        async with LoopbackTransport(clock) as transport, TaskScope("replay") as scope:
            client = await transport.connect(metadata={"sample_rate": str(recording.header.input_rate)})
            session = await TransportSession.open(clock, await transport.accept())
            observer = CallObserver(listener=listen)
            call = scope.spawn(run_call(session, config, providers, clock, tools=registry,
                                        filler=FillerPolicy.from_config(config.llm.filler), observer=observer),
                               name="replay-call")
            scope.spawn(_drain(client), name="replay-listener")
            await _speak(client, recording, clock, start)
            try:
                await call
            except CallFailed:
                log.info("the replayed call failed (its EngineFailure is in the events)")
    finally:
        for close in closers:
            await close()
    return events


async def _drain(client: Any) -> None:
    with contextlib.suppress(ChannelClosed):  # the call ended
        while True:
            await client.recv()


async def _speak(client: Any, recording: Recording, clock: Clock, start: float) -> None:
    """The caller's recorded audio at its times, then the hang-up one frame after the last."""
    rate = recording.header.input_rate
    last = 0.0
    with contextlib.suppress(ChannelClosed):  # the call ended first
        for r in recording.of("audio"):
            await clock.sleep_until(start + r["t"])
            pcm = base64.b64decode(r["pcm"])
            await client.send_audio(pcm, rate)
            last = r["t"] + len(pcm) / (2 * rate)
        await clock.sleep_until(start + max(last, 0.0))
        await client.hangup()


# --- the comparison -------------------------------------------------------------------------

_COMPARED: Final = {
    "TurnStarted": ("barge_in",),
    "TurnEnded": ("reason",),
    "UserTurn": ("text",),
    "BotHeard": ("round", "text"),
    "ToolCallStarted": ("name", "arguments"),
    "ToolCallSettled": ("name", "outcome", "is_error"),
    "EngineFailure": ("stage", "fatal"),
}


def tolerance_for(recording: Recording) -> float:
    """How far event times may differ by default: 1 ms on virtual time, more for a production call."""
    return VIRTUAL_TOLERANCE if recording.header.clock == "virtual" else DEFAULT_REAL_TOLERANCE


def _line(record: dict[str, Any]) -> str | None:
    name = record["e"]
    if name == "UserTranscript":
        return f"heard {record.get('text')!r}" if record.get("final") else None
    keys = _COMPARED.get(name)
    if keys is None:
        return None
    return " ".join([f"{name} epoch={record['epoch']}", *(f"{k}={record.get(k)!r}" for k in keys)])


def compared_events(records: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """The events a replay is judged by, as (time, description)."""
    out = []
    for r in records:
        if r["k"] == "event":
            line = _line(r)
            if line is not None:
                out.append((float(r["t"]), line))
    return out


@dataclass(frozen=True, slots=True)
class Difference:
    """One place the replay differs: ``recorded`` / ``replayed`` (None: missing on that side)."""

    recorded: tuple[float, str] | None
    replayed: tuple[float, str] | None

    def __str__(self) -> str:
        def side(x: tuple[float, str] | None) -> str:
            return "(none)" if x is None else f"{x[0]:9.3f}  {x[1]}"
        return f"recorded {side(self.recorded)}\n  replay {side(self.replayed)}"


def compare(recorded: list[tuple[float, str]], replayed: list[tuple[float, str]],
            tolerance: float) -> tuple[list[tuple[tuple[float, str] | None, tuple[float, str] | None, bool]],
                                       list[Difference]]:
    """Pairs of (recorded, replayed, same) in order, and the differences."""
    rows: list[tuple[tuple[float, str] | None, tuple[float, str] | None, bool]] = []
    matcher = difflib.SequenceMatcher(a=[x[1] for x in recorded], b=[x[1] for x in replayed], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for a, b in zip(recorded[i1:i2], replayed[j1:j2], strict=True):
                rows.append((a, b, abs(a[0] - b[0]) <= tolerance + 1e-9))
            continue
        left, right = recorded[i1:i2], replayed[j1:j2]
        for k in range(max(len(left), len(right))):
            rows.append((left[k] if k < len(left) else None, right[k] if k < len(right) else None, False))
    return rows, [Difference(a, b) for a, b, same in rows if not same]


def render(rows: list[tuple[tuple[float, str] | None, tuple[float, str] | None, bool]]) -> str:
    """The two event streams side by side, ``!`` marking each row that differs."""
    def cell(x: tuple[float, str] | None) -> str:
        return "" if x is None else f"{x[0]:8.3f} {x[1]}"
    width = max([len(cell(a)) for a, _, _ in rows] + [len("recorded")])
    lines = [f"  {'recorded'.ljust(width)} | replay"]
    lines += [f"{' ' if same else '!'} {cell(a).ljust(width)} | {cell(b)}" for a, b, same in rows]
    return "\n".join(lines)

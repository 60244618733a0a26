"""Stage 1: the caller's audio in, VAD events and transcripts out.

Caller audio is first converted to the rate the call is listened to
(``EngineConfig.listen_rate``) when the call's differs; the VAD and the end-of-turn audio
read that rate, and the STT gets it resampled to its own (``EngineConfig.stt_rate``) when
that differs too.  Each conversion is one streaming ResampleStream per call.

The user side of a call keeps every frame (it stays on epoch 0 and never drops): the VAD
and the STT stream follow the caller, not the bot's turns.  Audio is consumed here; the
VAD's start/stop frames and the STT's transcripts go downstream to the turn driver.

A caller frame is heard in the task that delivered it (``hear_now``, the session's caller-audio
sink) while the stage's own task waits with nothing queued: the same steps in the same order as
the task would take, without a task wake-up per 20 ms frame.  Whatever cannot be done without
waiting (windows for the VAD model, VAD events to push, an STT session that cannot take the
audio at once, or an error) goes to the stage's task as the frame's rest (``_Rest``), queued
where the frame would have been, so everything after it waits behind it.

A speech-to-text session that fails for good (its event stream raises, or reports a fatal
error) leaves the call deaf: the transcript reader raises :class:`HearingLost` and the
call ends with an error.  A failed ``send_audio``/``finalize`` is logged and counted
(``stt_errors``); the call goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from brisvox.audio.resample import ResampleStream
from brisvox.core.errors import BrisvoxError, ChannelClosed
from brisvox.core.frames import (
    BusyStage,
    DataFrame,
    Direction,
    Frame,
    InputAudioFrame,
    ModelBusyFrame,
    StopFrame,
    TranscriptFrame,
    VadStoppedFrame,
)
from brisvox.core.inbox import REALTIME_INPUT_POLICIES, OverflowPolicies
from brisvox.core.processor import EpochPolicy, Processor, ProcessorContext
from brisvox.core.tasks import TaskScope
from brisvox.inference.smart_turn import TurnAudio
from brisvox.inference.vad import VadEvent, VoiceActivityDetector
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.stt import SendsAudioNow, SttError, SttSession, Transcript

__all__ = ["HearingLost", "ListenStage"]

log = logging.getLogger(__name__)


class HearingLost(BrisvoxError):
    """The speech-to-text session failed for good: the call can no longer hear the caller."""


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class _Rest(DataFrame):
    """What is left of a caller frame heard in the delivering task, for the stage's task: the VAD
    events found, the windows still to score, the audio for the STT (not yet sent), or the error
    hearing it raised.  Not audio by overflow class: never evicted behind later frames."""

    events: Sequence[VadEvent] = ()
    windows: Sequence[object] = ()
    stt: bytes = b""
    error: Exception | None = None


class ListenStage(Processor):
    epoch_policy: ClassVar[EpochPolicy] = EpochPolicy.KEEP_ALL
    overflow: ClassVar[OverflowPolicies] = REALTIME_INPUT_POLICIES

    def __init__(
        self,
        vad: VoiceActivityDetector,
        stt: SttSession,
        scope: TaskScope,
        turn_audio: TurnAudio | None = None,
        resample: ResampleStream | None = None,
        convert: ResampleStream | None = None,
    ) -> None:
        self._resample = resample if resample is not None and not resample.passthrough else None
        self._convert = convert if convert is not None and not convert.passthrough else None
        self._vad = vad
        self._turn_audio = turn_audio  # shared with the turn driver for end-of-turn analyses
        self._stt = stt
        self._scope = scope
        self._reader_started = False
        self._ctx: ProcessorContext | None = None  # the stage's task's, from its first frame (Start)
        self._stt_now = stt if isinstance(stt, SendsAudioNow) else None  # takes audio without waiting
        self._vad_busy = False  # in a saturation episode of the VAD pool (reported once at its start)
        self.stt_errors = 0

    @property
    def name(self) -> str:
        return "listen"

    def hear_now(self, frame: InputAudioFrame) -> bool:
        """Hear ``frame`` in the calling task when the stage's task waits with nothing queued
        (see the module docs); False: not taken, queue it for the task."""
        ctx = self._ctx
        if ctx is None or self._stt_now is None or not ctx.inbox.receiver_waiting:
            return False
        ctx.stats.processed += 1  # as the task's loop counts a frame it takes
        try:
            begun = self._begin(frame, ctx)
            if begun is None:
                return True
            events, windows, pcm = begun
            if not events and not windows and self._vad.saturated == self._vad_busy:
                if not pcm or self._send_audio_now(pcm):
                    return True
                rest = _Rest(epoch=0, stt=pcm)
            else:
                rest = _Rest(epoch=0, events=events, windows=windows, stt=pcm)
        except Exception as exc:  # raised in the stage's task, as if the task had heard the frame
            rest = _Rest(epoch=0, error=exc)
        ctx.inbox.try_put(rest, Direction.DOWNSTREAM)  # into an empty inbox: queued
        return True

    def _send_audio_now(self, pcm: bytes) -> bool:
        assert self._stt_now is not None
        try:
            return self._stt_now.try_send_audio(pcm)
        except ProviderError as exc:  # as _stt_call: the call goes on without transcripts
            self.stt_errors += 1
            log.warning("speech-to-text failed: %s", exc)
            return True

    def _begin(self, frame: InputAudioFrame,
               ctx: ProcessorContext) -> tuple[list[VadEvent], Sequence[object], bytes] | None:
        """A frame's hearing up to what may wait: at the listening rate (None: nothing yet), kept
        for end-of-turn analyses, the VAD's ``prepare``; its events, windows left, and STT audio."""
        heard = frame.pcm if self._convert is None else self._convert.process(frame.pcm)
        if not heard:
            return None
        if self._turn_audio is not None:
            self._turn_audio.append(heard)
        events, windows = self._vad.prepare(heard, frame.at or ctx.clock.now() - frame.duration)
        return events, windows, heard if self._resample is None else self._resample.process(heard)

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if not self._reader_started:
            self._reader_started = True
            self._ctx = ctx
            self._scope.spawn(self._read_transcripts(ctx), name="stt-reader")
        if isinstance(frame, InputAudioFrame):
            begun = self._begin(frame, ctx)
            if begun is not None:
                await self._after_prepare(*begun, ctx)
            return
        if isinstance(frame, _Rest):
            if frame.error is not None:
                raise frame.error
            await self._after_prepare(frame.events, frame.windows, frame.stt, ctx)
            return
        if isinstance(frame, StopFrame):
            end = self._vad.finish(ctx.clock.now())
            if end is not None:
                await ctx.push(end)
        await ctx.push(frame, direction)

    async def _after_prepare(self, events: Sequence[VadEvent], windows: Sequence[object], pcm: bytes,
                             ctx: ProcessorContext) -> None:
        """A frame's hearing after the VAD's ``prepare``: its windows scored, its events pushed
        (an STT finalize at the VAD stop), then its audio to the STT."""
        vad_events = [*events, *await self._vad.score(windows)] if windows else events
        if self._vad.saturated != self._vad_busy:
            self._vad_busy = self._vad.saturated
            if self._vad_busy:  # the caller's speech may be lost: say so once per episode
                await ctx.push(ModelBusyFrame(stage=BusyStage.VAD, provider="vad"))
        for event in vad_events:
            await ctx.push(event)
            if isinstance(event, VadStoppedFrame):
                await self._stt_call(self._stt.finalize())
        if pcm:
            await self._stt_call(self._stt.send_audio(pcm))

    async def _stt_call(self, aw: Awaitable[None]) -> None:
        try:
            await aw
        except ProviderError as exc:
            # The call goes on without transcripts; the turn machine falls back to silence.
            self.stt_errors += 1
            log.warning("speech-to-text failed: %s", exc)

    async def _read_transcripts(self, ctx: ProcessorContext) -> None:
        # A failed provider ends the call (HearingLost); a stopped pipeline ends the reader.
        try:
            async for event in self._stt:
                if isinstance(event, Transcript):
                    frame = TranscriptFrame(epoch=0, text=event.text, is_final=event.is_final,
                                            speech_final=event.speech_final, from_finalize=event.from_finalize,
                                            at=ctx.clock.now())
                    try:
                        await ctx.push(frame)
                    except ChannelClosed:
                        return  # the pipeline has stopped: the call is ending
                elif isinstance(event, SttError):
                    self.stt_errors += 1
                    if event.fatal:
                        raise HearingLost(f"speech-to-text failed: {event.error}") from event.error
                    log.warning("speech-to-text error: %s", event.error)
                    if event.error.kind is ProviderErrorKind.BUSY:  # the caller's words are lost: say so
                        try:
                            await ctx.push(ModelBusyFrame(stage=BusyStage.STT, provider=event.error.provider))
                        except ChannelClosed:
                            return  # the pipeline has stopped: the call is ending
        except ProviderError as exc:
            self.stt_errors += 1
            raise HearingLost(f"speech-to-text failed: {exc}") from exc

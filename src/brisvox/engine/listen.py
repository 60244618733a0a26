"""Stage 1: the caller's audio in, VAD events and transcripts out.

Caller audio is first converted to the rate the call is listened to
(``EngineConfig.listen_rate``) when the call's differs; the VAD and the end-of-turn audio
read that rate, and the STT gets it resampled to its own (``EngineConfig.stt_rate``) when
that differs too.  Each conversion is one streaming ResampleStream per call.

The user side of a call keeps every frame (it stays on epoch 0 and never drops): the VAD
and the STT stream follow the caller, not the bot's turns.  Audio is consumed here; the
VAD's start/stop frames and the STT's transcripts go downstream to the turn driver.

A speech-to-text session that fails for good (its event stream raises, or reports a fatal
error) leaves the call deaf: the transcript reader raises :class:`HearingLost` and the
call ends with an error.  A failed ``send_audio``/``finalize`` is logged and counted
(``stt_errors``); the call goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import ClassVar

from brisvox.audio.resample import ResampleStream
from brisvox.core.errors import BrisvoxError, ChannelClosed
from brisvox.core.frames import (
    BusyStage,
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
from brisvox.inference.vad import VoiceActivityDetector
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.stt import SttError, SttSession, Transcript

__all__ = ["HearingLost", "ListenStage"]

log = logging.getLogger(__name__)


class HearingLost(BrisvoxError):
    """The speech-to-text session failed for good: the call can no longer hear the caller."""


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
        self._vad_busy = False  # in a saturation episode of the VAD pool (reported once at its start)
        self.stt_errors = 0

    @property
    def name(self) -> str:
        return "listen"

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if not self._reader_started:
            self._reader_started = True
            self._scope.spawn(self._read_transcripts(ctx), name="stt-reader")
        if isinstance(frame, InputAudioFrame):
            at = frame.at or ctx.clock.now() - frame.duration
            heard = frame.pcm if self._convert is None else self._convert.process(frame.pcm)
            if not heard:
                return
            if self._turn_audio is not None:
                self._turn_audio.append(heard)
            vad_events = await self._vad.process(heard, at)
            if self._vad.saturated != self._vad_busy:
                self._vad_busy = self._vad.saturated
                if self._vad_busy:  # the caller's speech may be lost: say so once per episode
                    await ctx.push(ModelBusyFrame(stage=BusyStage.VAD, provider="vad"))
            for event in vad_events:
                await ctx.push(event)
                if isinstance(event, VadStoppedFrame):
                    await self._stt_call(self._stt.finalize())
            pcm = heard if self._resample is None else self._resample.process(heard)
            if pcm:
                await self._stt_call(self._stt.send_audio(pcm))
            return
        if isinstance(frame, StopFrame):
            end = self._vad.finish(ctx.clock.now())
            if end is not None:
                await ctx.push(end)
        await ctx.push(frame, direction)

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

"""Stage 4: text to speech.

One utterance (one TTS context) per LLM round.  LLM text is cut into pieces by the
segmenter and sent as soon as a piece is ready; the round's end flushes the context.  A
reader task turns the TTS events into frames: audio of the utterance's epoch and, once
every utterance of a response is flushed, ``BotResponseDone``.  The text sent and the word
timings go to the PlayoutBook only: TransportOut, the only stage after this one, acts on
audio, ``BotResponseDone`` and system frames, so nothing else is pushed to it (every frame
pushed is a wake-up of its task).  A barge-in cancels the open contexts of older epochs on the
provider's priority channel; their late audio is dropped by the epoch check of ``push``.

A TTS session that fails for good (a fatal error, or its event stream ends) ends the
utterances it held, so the turn machine hears that the bot went silent, and the stage
reconnects (at most ``RECONNECT_ATTEMPTS`` tries with a doubling backoff on the clock);
what was already said stays said, the next response speaks through the new session.
When no new session comes, the reader raises :class:`SpeechLost`: a call without speech
cannot go on, so it ends with an error.  A session method that raises anything but a
``ProviderError`` is a bug: it fails the stage, and the call ends with an error.

Events: each piece of reply text as it arrives (``BotText``) and the runner's
``BotResponseDone`` (``BotDone``: no more text will come for the epoch).

A text-only round (``LlmResponseStarted.reply`` is ``ReplyMode.TEXT``: the caller asked for
the answer on screen) opens no utterance: its text is emitted as ``BotText`` with that reply
and nothing of it reaches the TTS or the PlayoutBook.

Filler clips (:mod:`brisvox.engine.clips`): a round whose ``LlmResponseStarted`` names a
clip the store holds at the call's output rate is spoken by the clip, not the provider
(its text is recorded as sent and never reaches the provider; a clip it cannot play
falls back to the provider, counted in ``clip_fallbacks``).  At the round's end a clip
task plays it once every earlier utterance is done, so it follows the audio before it:
its word timings, then its audio, then the end of its utterance.  A provider context
opened while a clip waits to play waits for it (at most ``CLIP_WAIT_LIMIT``; a barge-in
ends the wait), because the provider's audio would otherwise overtake the clip.  A
barge-in drops a clip that has not played (``clips_dropped``) and never sends its
utterance id to the provider; a clip cut mid-way is cut to its heard words like speech.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from brisvox.agent.segmenter import Segmenter, SegmenterConfig
from brisvox.core.clock import deadline
from brisvox.core.errors import BrisvoxError, ChannelClosed, DeadlineExceeded
from brisvox.core.frames import (
    BotResponseDone,
    BusyStage,
    Direction,
    Frame,
    FrameClass,
    InterruptFrame,
    LlmResponseEnded,
    LlmResponseStarted,
    LlmTextFrame,
    OutputAudioFrame,
    ReplyMode,
    UtteranceFlushed,
)
from brisvox.core.processor import Processor, ProcessorContext
from brisvox.core.tasks import TaskScope
from brisvox.core.timeline import TimelineRecorder, TurnEvent
from brisvox.engine.clips import FillerClip, FillerClipStore
from brisvox.engine.events import BotDone, BotText, CallEvents, ModelBusy, TtsFirstAudio
from brisvox.engine.playout import PlayoutBook
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.tts import TtsAudio, TtsCancelled, TtsError, TtsEvent, TtsFlushed, TtsSession, TtsWords

__all__ = ["CLIP_WAIT_LIMIT", "RECONNECT_ATTEMPTS", "SpeakStage", "SpeechLost"]

log = logging.getLogger(__name__)

RECONNECT_ATTEMPTS: Final = 3
RECONNECT_BACKOFF: Final = 0.5  # seconds before the first retry; doubles after each
CLIP_WAIT_LIMIT: Final = 30.0  # seconds a clip waits for the audio before it, and a context for a clip


class SpeechLost(BrisvoxError):
    """The TTS session is gone and no new one could be opened: the call cannot speak."""


class SpeakStage(Processor):
    def __init__(
        self,
        tts: TtsSession,
        book: PlayoutBook,
        segmenter: SegmenterConfig,
        scope: TaskScope,
        timeline: TimelineRecorder | None = None,
        reconnect: Callable[[], Awaitable[TtsSession]] | None = None,
        clips: FillerClipStore | None = None,
        clip_rate: int = 0,
        events: CallEvents | None = None,
    ) -> None:
        """``clips`` (optional) are played at ``clip_rate``, the call's output rate."""
        self._events = events or CallEvents("")
        self._timeline = timeline or TimelineRecorder()
        self._reconnect = reconnect
        self.reconnects = 0
        self._tts = tts
        self._book = book
        self._segmenter_config = segmenter
        self._scope = scope
        self._reader_started = False
        self._owned: list[TtsSession] = []
        self._current: int | None = None  # the open utterance
        self._reply = ReplyMode.SPOKEN  # how the current round reaches the caller
        self._segmenter = Segmenter(segmenter)
        self._open: dict[int, int] = {}  # utterance -> epoch, until flushed or cancelled
        self._done_epochs: set[int] = set()  # BotResponseDone seen, waiting for flushes
        self._clips, self._clip_rate = clips, clip_rate
        self._clip_of: dict[int, FillerClip] = {}  # clip utterances, until their clip task ends
        self._clip_playing: int | None = None
        self._clip_task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()  # set whenever an utterance leaves _open
        self.tts_errors = 0
        self.clips_played = 0
        self.clips_dropped = 0
        self.clip_fallbacks = 0
        self.clip_waits = 0

    @property
    def name(self) -> str:
        return "speak"

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if not self._reader_started:
            self._reader_started = True
            self._scope.spawn(self._read(ctx), name="tts-reader")
        if isinstance(frame, LlmResponseStarted) and frame.reply is ReplyMode.TEXT:
            self._reply, self._current = frame.reply, None  # shown, never spoken: no utterance
        elif isinstance(frame, LlmResponseStarted):
            self._reply = frame.reply
            await self._wait_for_clip(ctx)
            self._current = self._book.open_utterance(frame.epoch, frame.round)
            self._open[self._current] = frame.epoch
            self._segmenter = Segmenter(self._segmenter_config)
            if frame.clip is not None:
                clip = self._clips.get(frame.clip, self._clip_rate) if self._clips is not None else None
                if clip is None:
                    self.clip_fallbacks += 1
                else:
                    self._clip_of[self._current] = clip
        elif isinstance(frame, LlmTextFrame):
            self._events.emit(BotText(epoch=frame.epoch, at=ctx.clock.now(), round=frame.round, text=frame.text,
                                      reply=self._reply))
            if self._current is not None:
                for piece in self._segmenter.push(frame.text):
                    await self._send(self._current, frame.epoch, piece, ctx)
            return
        elif isinstance(frame, LlmResponseEnded):
            utt, self._current = self._current, None
            if utt is not None:
                rest = self._segmenter.flush()
                if rest:
                    await self._send(utt, frame.epoch, rest, ctx)
                clip = self._clip_of.get(utt)
                if clip is None:
                    await self._tts_call(self._tts.flush(utt))
                else:
                    self._clip_task = self._scope.spawn(self._play_clip(utt, frame.epoch, clip, ctx),
                                                        name=f"filler-clip-{utt}")
        elif isinstance(frame, BotResponseDone):
            self._events.emit(BotDone(epoch=frame.epoch, at=ctx.clock.now()))
            self._done_epochs.add(frame.epoch)
            await self._maybe_done(frame.epoch, ctx)
            return
        elif isinstance(frame, InterruptFrame):
            for utt, epoch in list(self._open.items()):
                if epoch < frame.new_epoch:
                    if utt not in self._clip_of:
                        self._tts.cancel(utt)
                    elif utt != self._clip_playing:
                        self.clips_dropped += 1  # never played (the provider never heard of it)
                    self._close(utt)
            self._current = None
        if direction is Direction.DOWNSTREAM and frame.frame_class is not FrameClass.SYSTEM:
            return  # turn and response markers end here: TransportOut does nothing with them
        await ctx.push(frame, direction)

    async def _send(self, utt: int, epoch: int, text: str, ctx: ProcessorContext) -> None:
        self._book.push_sent(utt, text)
        self._timeline.mark(epoch, TurnEvent.FIRST_TTS_TEXT, ctx.clock.now())
        if utt not in self._clip_of:
            await self._tts_call(self._tts.send_text(utt, text))

    def _close(self, utt: int) -> int | None:
        """Take ``utt`` out of the open utterances; its epoch, or None when it was not open."""
        epoch = self._open.pop(utt, None)
        if epoch is not None:
            self._closed.set()
        return epoch

    async def _ended(self, utt: int, ctx: ProcessorContext) -> None:
        """``utt`` will get no more audio: TransportOut learns it behind the last of it (a
        transfer waits for the words before it), then the epoch may be done."""
        epoch = self._close(utt)
        if epoch is not None:
            await ctx.push(UtteranceFlushed(epoch=epoch, utterance=utt))
            await self._maybe_done(epoch, ctx)

    async def _wait_for_clip(self, ctx: ProcessorContext) -> None:
        """Hold a new context while a clip waits to play (see the module docs)."""
        task = self._clip_task
        if task is None or task.done() or ctx.inbox.newest_interrupt > ctx.epoch:
            return  # nothing to wait for, or a barge-in is already queued behind this frame
        self.clip_waits += 1
        barge_in = ctx.inbox.interrupt_watcher()
        try:
            async with deadline(ctx.clock, CLIP_WAIT_LIMIT, "a filler clip"):
                await asyncio.wait((task, barge_in), return_when=asyncio.FIRST_COMPLETED)
        except DeadlineExceeded:
            log.warning("a filler clip held the next reply for %.0f s; the reply goes ahead", CLIP_WAIT_LIMIT)
        finally:
            barge_in.cancel()
            ctx.inbox.forget_watcher(barge_in)

    async def _play_clip(self, utt: int, epoch: int, clip: FillerClip, ctx: ProcessorContext) -> None:
        try:
            try:
                async with deadline(ctx.clock, CLIP_WAIT_LIMIT, "the audio before a filler clip"):
                    while utt in self._open and any(u < utt for u in self._open):  # earlier audio first
                        self._closed.clear()
                        await self._closed.wait()
            except DeadlineExceeded:
                log.warning("a filler clip waited %.0f s for the audio before it; dropped", CLIP_WAIT_LIMIT)
                self.clips_dropped += 1
                await self._ended(utt, ctx)
                return
            if utt not in self._open:
                return  # a barge-in dropped it (counted there)
            self._clip_playing = utt
            self._book.push_words(utt, clip.words)
            self._first_audio(epoch, ctx.clock.now())
            await ctx.push(OutputAudioFrame(epoch=epoch, pcm=clip.pcm, sample_rate=clip.sample_rate, utterance=utt))
            self.clips_played += 1
            await self._ended(utt, ctx)
        finally:
            self._clip_of.pop(utt, None)
            if self._clip_playing == utt:
                self._clip_playing = None

    async def _tts_call(self, aw: Awaitable[None]) -> None:
        try:
            await aw
        except ProviderError as exc:
            self.tts_errors += 1
            log.warning("text-to-speech failed: %s", exc)

    async def _maybe_done(self, epoch: int, ctx: ProcessorContext) -> None:
        if epoch in self._done_epochs and not any(e == epoch for e in self._open.values()):
            self._done_epochs.discard(epoch)
            self._book.response_done(epoch)
            await ctx.push(BotResponseDone(epoch=epoch))

    async def _read(self, ctx: ProcessorContext) -> None:
        with contextlib.suppress(ChannelClosed):  # the pipeline behind us has stopped (a push failed): so do we
            await self._read_loop(ctx)

    async def _read_loop(self, ctx: ProcessorContext) -> None:
        while True:
            try:
                await self._read_session(ctx)
            except ProviderError as exc:
                self.tts_errors += 1
                log.warning("text-to-speech session failed: %s", exc)
            # The session is gone: end what it held, then try to get a new one.
            for utt in list(self._open):
                if utt not in self._clip_of:  # a clip does not need the provider
                    await self._ended(utt, ctx)
            self._current = None
            if not await self._renew(ctx):
                raise SpeechLost("text-to-speech is gone and could not be reopened")

    async def _renew(self, ctx: ProcessorContext) -> bool:
        if self._reconnect is None:
            return False
        await _close_quietly(self._tts)
        delay = RECONNECT_BACKOFF
        for attempt in range(1, RECONNECT_ATTEMPTS + 1):
            await ctx.clock.sleep(delay)
            try:
                self._tts = await self._reconnect()
            except ProviderError as exc:
                log.warning("text-to-speech reconnect %d/%d failed: %s", attempt, RECONNECT_ATTEMPTS, exc)
                delay *= 2
                continue
            self.reconnects += 1
            self._owned.append(self._tts)
            log.info("text-to-speech reconnected (attempt %d)", attempt)
            return True
        log.warning("text-to-speech is gone after %d reconnects", RECONNECT_ATTEMPTS)
        return False

    async def aclose(self) -> None:
        """Close the sessions this stage opened itself (the first one belongs to the call)."""
        for session in self._owned:
            await _close_quietly(session)

    async def _next_event(self) -> TtsEvent | None:
        """The session's next event; None when it ended.  A session whose own channel closed
        under it failed like any provider (the ChannelClosed ``_read`` ends on is the pipeline's)."""
        try:
            return await anext(self._tts)
        except StopAsyncIteration:
            return None
        except ChannelClosed as exc:
            raise ProviderError("text-to-speech", ProviderErrorKind.CLOSED, "the session closed under the call") from exc

    def _first_audio(self, epoch: int, at: float) -> None:
        if self._timeline.mark(epoch, TurnEvent.FIRST_TTS_AUDIO, at):
            self._events.emit(TtsFirstAudio(epoch=epoch, at=at))

    async def _read_session(self, ctx: ProcessorContext) -> None:
        while (event := await self._next_event()) is not None:
            if isinstance(event, TtsAudio):
                epoch = self._book.epoch_of(event.context_id)
                if epoch is not None:
                    self._first_audio(epoch, ctx.clock.now())
                    await ctx.push(
                        OutputAudioFrame(
                            epoch=epoch, pcm=event.pcm, sample_rate=event.sample_rate, utterance=event.context_id
                        )
                    )
            elif isinstance(event, TtsWords):
                self._book.push_words(event.context_id, event.words)
            elif isinstance(event, TtsFlushed | TtsCancelled):
                await self._ended(event.context_id, ctx)
            elif isinstance(event, TtsError):
                self.tts_errors += 1
                log.warning("text-to-speech error: %s", event.error)
                if event.error.kind is ProviderErrorKind.BUSY:  # nothing can be said: the client is told
                    busy_epoch = self._book.epoch_of(event.context_id) if event.context_id is not None else None
                    self._events.emit(ModelBusy(epoch=ctx.epoch if busy_epoch is None else busy_epoch,
                                                at=ctx.clock.now(), stage=BusyStage.TTS,
                                                provider=event.error.provider))
                if event.context_id is not None:
                    await self._ended(event.context_id, ctx)
                if event.fatal:
                    return


async def _close_quietly(session: TtsSession) -> None:
    """Close a session that failed or is no longer needed; its close error changes nothing."""
    try:
        await session.aclose()
    except ProviderError as exc:
        log.info("closing a text-to-speech session failed: %s", exc)

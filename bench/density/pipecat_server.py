"""Pipecat 1.14 density bot (the reference of /work/shared/bench, unchanged but for one blank line): one pipeline per websocket, all sessions in ONE process.

Transport : FastAPIWebsocketTransport + ProtobufFrameSerializer, 16 kHz PCM16 mono in/out
VAD       : SileroVADAnalyzer (in LLMUserAggregatorParams, as 1.14 expects), stop_secs=0.2
Turn stop : SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.1)  (no Smart Turn)
Services  : mock STT (150 ms), mock LLM (300 ms TTFT + 20 tokens @10 ms),
            mock TTS (100 ms TTFB, then the sentence's whole PCM at once in 40 ms chunks:
            a 220 Hz tone of real-time length, 60 ms per character)
Ideal V2V : VAD stop 200 + STT 150 + TTFT 300 + 1 token gap (sentence lookahead) 10
            + TTS TTFB 100 = 760 ms; everything above that is framework overhead.
RTVI      : disabled.  Logging: WARNING (loguru default is DEBUG, which costs extra CPU).

Run:  taskset -c 0 python pipecat_density_server.py --port 8765
"""

import argparse
import asyncio
import sys

import numpy as np
import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.serializers.protobuf import ProtobufFrameSerializer
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings, STTSettings, TTSSettings
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.services.tts_service import TTSService
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_stop.speech_timeout_user_turn_stop_strategy import (
    SpeechTimeoutUserTurnStopStrategy,
)
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.utils.time import time_now_iso8601
from pipecat.workers.runner import WorkerRunner

SR = 16000
VAD_STOP_S = 0.2  # Pipecat default VAD_STOP_SECS
USER_SPEECH_TIMEOUT_S = 0.1  # < STT latency, so the finalized transcript ends the turn
STT_LATENCY_S = 0.150
LLM_TTFT_S = 0.300
LLM_TOKEN_GAP_S = 0.010
TTS_TTFB_S = 0.100
TTS_SEC_PER_CHAR = 0.060  # "real-time size": ~16 chars/s of speech
TTS_CHUNK_BYTES = 1280  # 40 ms, same as the output transport's default chunk
TRANSCRIPT = "Hi I would like to check the status of my order."
# 20 tokens. The first sentence ("Sure.") is closed by the 2nd token, 10 ms after TTFT.
TOKENS = ["Sure.", " I", " can", " help", " with", " that", " right", " away", " let",
          " me", " look", " up", " your", " order", " status", " in", " our", " system",
          " now", "."]
_t = np.arange(SR * 30) / SR
TONE = (np.sin(2 * np.pi * 220 * _t) * 8000).astype("<i2").tobytes()  # 30 s, non-silent


def _none_settings(cls, *names):  # complete "store-mode" settings, avoids validation errors
    return cls(model=None, **{n: None for n in names})


class MockSTT(SegmentedSTTService):
    def __init__(self, **kwargs):
        super().__init__(settings=_none_settings(STTSettings, "language"), **kwargs)

    async def run_stt(self, audio: bytes):
        await asyncio.sleep(STT_LATENCY_S)
        yield TranscriptionFrame(TRANSCRIPT, self._user_id, time_now_iso8601())


class MockLLM(LLMService):
    def __init__(self, **kwargs):
        names = ("system_instruction", "temperature", "max_tokens", "top_p", "top_k",
                 "frequency_penalty", "presence_penalty", "seed", "filter_incomplete_user_turns",
                 "user_turn_completion_config")
        super().__init__(settings=_none_settings(LLMSettings, *names), **kwargs)

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self.push_frame(LLMFullResponseStartFrame())
            await asyncio.sleep(LLM_TTFT_S)
            for i, tok in enumerate(TOKENS):
                if i:
                    await asyncio.sleep(LLM_TOKEN_GAP_S)
                await self.push_frame(LLMTextFrame(tok))
            await self.push_frame(LLMFullResponseEndFrame())
        else:
            await self.push_frame(frame, direction)


class MockTTS(TTSService):
    def __init__(self, **kwargs):
        super().__init__(push_start_frame=True, push_stop_frames=True, sample_rate=SR,
                         settings=_none_settings(TTSSettings, "voice", "language"), **kwargs)

    async def run_tts(self, text: str, context_id: str):
        await asyncio.sleep(TTS_TTFB_S)
        pcm = TONE[: int(len(text) * TTS_SEC_PER_CHAR * SR) * 2]
        for off in range(0, len(pcm), TTS_CHUNK_BYTES):
            yield TTSAudioRawFrame(pcm[off : off + TTS_CHUNK_BYTES], SR, 1, context_id=context_id)


async def run_bot(websocket: WebSocket):
    transport = FastAPIWebsocketTransport(
        websocket=websocket,
        params=FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_in_sample_rate=SR,
            audio_out_enabled=True,
            audio_out_sample_rate=SR,
            add_wav_header=False,
            serializer=ProtobufFrameSerializer(),
        ),
    )
    context = LLMContext([{"role": "system", "content": "You are a helpful agent."}])
    aggregators = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(
            vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=VAD_STOP_S)),
            user_turn_strategies=UserTurnStrategies(
                start=[VADUserTurnStartStrategy()],
                stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=USER_SPEECH_TIMEOUT_S)],
            ),
        ),
    )
    pipeline = Pipeline([
        transport.input(),
        MockSTT(ttfs_p99_latency=VAD_STOP_S + STT_LATENCY_S),
        aggregators.user(),
        MockLLM(),
        MockTTS(),
        transport.output(),
        aggregators.assistant(),
    ])
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=SR, audio_out_sample_rate=SR),
        enable_rtvi=False,
    )

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport, ws):
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


app = FastAPI()


@app.websocket("/ws")
async def ws_endpoint(websocket: WebSocket):
    await websocket.accept()
    await run_bot(websocket)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args()
    logger.remove()
    logger.add(sys.stderr, level=args.log_level)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)

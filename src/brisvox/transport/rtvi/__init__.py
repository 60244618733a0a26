"""RTVI over WebSocket: Pipecat's client SDKs (``@pipecat-ai/client-js`` and the React client)
talk to brisvox.  ``wire`` is the protobuf framing; see docs/RTVI.md."""

from __future__ import annotations

from brisvox.transport.rtvi.connection import RtviCall, RtviConfig, run_rtvi_call
from brisvox.transport.rtvi.wire import (
    InboundAudio,
    InboundFrame,
    InboundMessage,
    InboundText,
    WireError,
    WireErrorKind,
    decode_frame,
    encode_audio,
    encode_message,
)

__all__ = [
    "InboundAudio",
    "InboundFrame",
    "InboundMessage",
    "InboundText",
    "RtviCall",
    "RtviConfig",
    "WireError",
    "WireErrorKind",
    "decode_frame",
    "encode_audio",
    "encode_message",
    "run_rtvi_call",
]

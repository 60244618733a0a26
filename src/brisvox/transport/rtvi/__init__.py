"""RTVI over WebSocket: Pipecat's client SDKs (``@pipecat-ai/client-js`` and the React client)
talk to brisvox.  ``wire`` is the protobuf framing, ``ui`` the agent's typed UI actions and app
events (``typescript`` their TypeScript types); see docs/RTVI.md."""

from __future__ import annotations

from brisvox.transport.rtvi.connection import RtviCall, RtviConfig, run_rtvi_call
from brisvox.transport.rtvi.typescript import typescript_types
from brisvox.transport.rtvi.ui import (
    Action,
    AppEvent,
    CallUi,
    UiContract,
    UiError,
    UiErrorKind,
    UiEventError,
)
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
    "Action",
    "AppEvent",
    "CallUi",
    "InboundAudio",
    "InboundFrame",
    "InboundMessage",
    "InboundText",
    "RtviCall",
    "RtviConfig",
    "UiContract",
    "UiError",
    "UiErrorKind",
    "UiEventError",
    "WireError",
    "WireErrorKind",
    "decode_frame",
    "encode_audio",
    "encode_message",
    "run_rtvi_call",
    "typescript_types",
]

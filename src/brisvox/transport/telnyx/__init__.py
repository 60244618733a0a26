"""Telnyx media streaming transport (bidirectional RTP mode): ``protocol`` (pure parsing and
encoding), ``reorder`` (pure reorder buffers of media and DTMF), ``connection`` (one call over
an accepted WebSocket, on the transport core), ``config`` (settings, counters, the one-stream-
per-call registry).

Mounted in ``brisvox serve`` at ``BRISVOX_TELNYX_PATH`` (:mod:`brisvox.server.telnyx_endpoint`);
docs/TELEPHONY.md is the operator's guide.
"""

from brisvox.transport.telnyx.config import CallRegistry, HangupHook, TelnyxConfig, TelnyxStats
from brisvox.transport.telnyx.connection import run_call
from brisvox.transport.telnyx.protocol import (
    AUTH_HEADER,
    Codec,
    OutboundEncoder,
    parse_message,
)
from brisvox.transport.telnyx.reorder import DtmfOrder, Reorder

__all__ = [
    "AUTH_HEADER",
    "CallRegistry",
    "Codec",
    "DtmfOrder",
    "HangupHook",
    "OutboundEncoder",
    "Reorder",
    "TelnyxConfig",
    "TelnyxStats",
    "parse_message",
    "run_call",
]

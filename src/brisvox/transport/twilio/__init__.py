"""Twilio Media Streams transport: ``protocol`` (pure parsing and encoding, signatures),
``connection`` (one call over an accepted WebSocket, on the transport core), ``config``.

Mounted in ``brisvox serve`` at ``BRISVOX_TWILIO_PATH`` (:mod:`brisvox.server.twilio_endpoint`);
docs/TELEPHONY.md is the operator's guide.
"""

from brisvox.transport.twilio.config import TwilioConfig, TwilioStats
from brisvox.transport.twilio.connection import run_call
from brisvox.transport.twilio.protocol import (
    OutboundEncoder,
    parse_message,
    signature,
    signature_valid,
)

__all__ = [
    "OutboundEncoder",
    "TwilioConfig",
    "TwilioStats",
    "parse_message",
    "run_call",
    "signature",
    "signature_valid",
]

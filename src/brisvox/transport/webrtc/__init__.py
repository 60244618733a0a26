"""brisvox.transport.webrtc: browsers over WebRTC (aiortc), on the transport core.

:func:`answer_offer` answers a browser's SDP offer and returns a :class:`WebRtcCall`;
:meth:`WebRtcCall.run` hands the call to the engine once ICE and DTLS are up.  Audio
conversion is :mod:`brisvox.transport.webrtc.media` (pure), the Opus encoder
:mod:`brisvox.transport.webrtc.opus`; signaling helpers (WHIP
request checks, TURN credentials) are :mod:`brisvox.transport.webrtc.signaling` (pure);
the HTTP endpoint is :mod:`brisvox.server.webrtc_endpoint`.  docs/WEBRTC.md.
"""

from brisvox.transport.webrtc.config import WebRtcConfig, WebRtcStats
from brisvox.transport.webrtc.peer import EndReason, OfferRejected, WebRtcCall, answer_offer, host_addresses

__all__ = ["EndReason", "OfferRejected", "WebRtcCall", "WebRtcConfig", "WebRtcStats", "answer_offer", "host_addresses"]

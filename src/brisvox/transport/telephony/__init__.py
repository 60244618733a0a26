"""Shared code of the telephony adapters (Twilio, Telnyx): pure, no I/O.

* :class:`MarkBook`: the marks an adapter has sent to the carrier and not seen echoed yet
  (engine marks ``e<n>``, progress marks ``p<n>``), so an echo resolves to what the caller
  heard and an echo of a mark a clear flushed is never taken for a played one.
* :class:`FaultKind` and :class:`CarrierProtocolError`: what was wrong on a carrier's stream.
* the parser helpers both carriers' protocols use (``wire``): :func:`load_event`,
  :func:`field_object`, :func:`field_text`, :func:`dtmf_digit`, :func:`media_fields`,
  :func:`decode_media` (strict base64 of a bounded size), :func:`lenient_int` (the carriers
  print numbers as JSON strings; read either), :func:`b64decode` / :func:`b64encode`.
* :class:`UpgradeRefusal` and :func:`secret_equal`: refusing a WebSocket upgrade before it
  is accepted (the server's endpoint sends it as an HTTP denial response).

``carrier`` (not imported here: it is the asyncio shell) is the connection loop both carrier
adapters run on.
"""

from brisvox.transport.telephony.marks import DEFAULT_MAX_MARKS, Echo, MarkBook, MarkKind
from brisvox.transport.telephony.wire import (
    CarrierProtocolError,
    FaultKind,
    UpgradeRefusal,
    b64decode,
    b64encode,
    decode_media,
    lenient_int,
    secret_equal,
)

__all__ = [
    "DEFAULT_MAX_MARKS",
    "CarrierProtocolError",
    "Echo",
    "FaultKind",
    "MarkBook",
    "MarkKind",
    "UpgradeRefusal",
    "b64decode",
    "b64encode",
    "decode_media",
    "lenient_int",
    "secret_equal",
]

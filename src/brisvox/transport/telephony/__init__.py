"""Shared code of the telephony adapters (Twilio, Telnyx): pure, no I/O.

* :class:`MarkBook`: the marks an adapter has sent to the carrier and not seen echoed yet
  (engine marks ``e<n>``, progress marks ``p<n>``), so an echo resolves to what the caller
  heard and an echo of a mark a clear flushed is never taken for a played one.
* :func:`lenient_int`: the carriers print numbers as JSON strings; read either.
* :func:`b64decode` / :func:`b64encode`: strict base64 for audio payloads.
* :class:`UpgradeRefusal` and :func:`secret_equal`: refusing a WebSocket upgrade before it
  is accepted (the server's endpoint sends it as an HTTP denial response).
"""

from brisvox.transport.telephony.marks import DEFAULT_MAX_MARKS, Echo, MarkBook, MarkKind
from brisvox.transport.telephony.wire import UpgradeRefusal, b64decode, b64encode, lenient_int, secret_equal

__all__ = [
    "DEFAULT_MAX_MARKS",
    "Echo",
    "MarkBook",
    "MarkKind",
    "UpgradeRefusal",
    "b64decode",
    "b64encode",
    "lenient_int",
    "secret_equal",
]

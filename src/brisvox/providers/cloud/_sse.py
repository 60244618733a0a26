"""An incremental Server-Sent Events decoder (the framing of every streaming LLM API here).

Bytes go in as they arrive from the socket, in pieces cut anywhere (inside a line, inside a
UTF-8 sequence, between ``\\r`` and ``\\n``); complete events come out.  Only the fields the
vendors use are kept: ``event`` and ``data`` (several ``data`` lines join with ``\\n``).
Comments (``: ping``) and ``id``/``retry`` lines are ignored.  Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SseDecoder", "SseEvent"]

MAX_EVENT_BYTES = 4 * 1024 * 1024
"""An event larger than this is a protocol error (no vendor sends multi-megabyte deltas)."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str
    data: str

    def __repr__(self) -> str:
        return f"SseEvent({self.event!r}, <{len(self.data)} chars>)"


class SseDecoder:
    """Feed bytes with :meth:`feed`; each call returns the events completed by those bytes."""

    __slots__ = ("_buf", "_data", "_event", "_pending_cr", "_size")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._event = ""
        self._data: list[str] = []
        self._size = 0
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        out: list[SseEvent] = []
        buf = self._buf
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = False
        buf += chunk
        start = 0
        n = len(buf)
        while start < n:
            nl = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, nl if nl >= 0 else n)
            if cr >= 0:
                end, nxt = cr, cr + 1
                if nxt < n and buf[nxt] == 0x0A:
                    nxt += 1
                elif nxt == n:
                    self._pending_cr = True
            elif nl >= 0:
                end, nxt = nl, nl + 1
            else:
                break
            self._line(bytes(buf[start:end]), out)
            start = nxt
        del buf[:start]
        if len(buf) + self._size > MAX_EVENT_BYTES:
            raise ValueError(f"an SSE event exceeds {MAX_EVENT_BYTES} bytes")
        return out

    def _line(self, raw: bytes, out: list[SseEvent]) -> None:
        if not raw:
            if self._data or self._event:
                out.append(SseEvent(self._event or "message", "\n".join(self._data)))
            self._event = ""
            self._data = []
            self._size = 0
            return
        if raw[0] == 0x3A:  # ":" comment
            return
        line = raw.decode("utf-8", errors="replace")
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._size += len(raw)
            if self._size > MAX_EVENT_BYTES:
                raise ValueError(f"an SSE event exceeds {MAX_EVENT_BYTES} bytes")
        elif name == "event":
            self._event = value

    def pending(self) -> bool:
        """True when a partial event is buffered (a stream that ends now was cut)."""
        return bool(self._buf) or bool(self._data)

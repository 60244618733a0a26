"""The load client's wire, pure: WebSocket framing (RFC 6455) and the audio of a pipecat Frame.

``brisvox loadtest`` sends the same few frames from every caller (a silence frame and each
20 ms frame of the speech), so each is encoded and masked once, for every caller and every
turn, and a send is one socket write of ready bytes.  The mask is fixed: RFC 6455 asks for
unpredictable masks so that a hostile page cannot steer what an HTTP proxy between the
browser and the server sees; a load test writes its own constant audio to its own server,
and the server unmasks whatever key it is given.

Server frames are parsed without copying (payloads are views of the bytes the socket
returned) and only as far as the measurement needs: the audio of a Frame (its PCM and rate),
everything else skipped.  Inbound bytes are untrusted: a protocol error raises
:class:`ServerBytesError` naming the rule that was broken.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from dataclasses import dataclass

__all__ = [
    "MASK",
    "MAX_HEAD",
    "MAX_MESSAGE",
    "Kind",
    "ServerBytesError",
    "ServerFrames",
    "WsMessage",
    "accept_key",
    "client_frame",
    "frame_audio",
    "handshake_request",
    "parse_handshake",
]

MASK = b"\x5a\x3c\xa5\xc3"
MAX_MESSAGE = 1 << 24  # bytes: a server message larger than this is refused (the bot's frames are ~1 KB)
MAX_HEAD = 16 * 1024  # bytes: the longest handshake response read
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class ServerBytesError(ValueError):
    """Bytes from the server that break the WebSocket protocol, its handshake, or protobuf."""


class Kind(enum.IntEnum):
    """Opcodes of RFC 6455 section 5.2."""

    CONTINUATION = 0x0
    TEXT = 0x1
    BINARY = 0x2
    CLOSE = 0x8
    PING = 0x9
    PONG = 0xA


@dataclass(frozen=True, slots=True)
class WsMessage:
    """A whole message (TEXT or BINARY, fragments joined) or a control frame from the server."""

    kind: Kind
    payload: memoryview


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer to ``key``."""
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def handshake_request(host: str, path: str, key: str) -> bytes:
    """The opening GET (``host`` as the Host header, with its port when not the default)."""
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()


def parse_handshake(head: bytes, key: str) -> None:
    """Check the server's response head (up to, without, the blank line): a 101 that accepts ``key``."""
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    if len(status) < 2 or not status[0].startswith("HTTP/1.") or status[1] != "101":
        raise ServerBytesError(f"the server refused the WebSocket upgrade: {lines[0][:200]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if headers.get("upgrade", "").lower() != "websocket":
        raise ServerBytesError("the server's 101 has no 'Upgrade: websocket'")
    if headers.get("sec-websocket-accept") != accept_key(key):
        raise ServerBytesError("the server's Sec-WebSocket-Accept does not answer our key")
    if headers.get("sec-websocket-extensions"):
        raise ServerBytesError("the server chose an extension we did not offer")


def _masked(payload: bytes, mask: bytes) -> bytes:
    n = len(payload)
    if not n:
        return b""
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(payload, "big") ^ key).to_bytes(n, "big")


def client_frame(kind: Kind, payload: bytes, mask: bytes = MASK) -> bytes:
    """One whole (FIN) client frame, masked with ``mask``: the bytes a send writes."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | kind, 0x80 | n))
    elif n < 1 << 16:
        head = bytes((0x80 | kind, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | kind, 0x80 | 127)) + n.to_bytes(8, "big")
    return head + mask + _masked(payload, mask)


class ServerFrames:
    """Incremental parser of the server's frames: ``feed`` the socket's bytes, get the messages
    they complete.  Raises ServerBytesError on a masked frame, reserved bits, an unknown opcode,
    a fragmented or long control frame, a stray or missing continuation, or a message over
    MAX_MESSAGE bytes; the parser is then unusable (the connection must be dropped)."""

    __slots__ = ("_buf", "_frag_kind", "_frag_size", "_fragments")

    def __init__(self) -> None:
        self._buf = b""
        self._fragments: list[memoryview] = []
        self._frag_kind: Kind | None = None
        self._frag_size = 0

    def feed(self, data: bytes) -> list[WsMessage]:
        buf = self._buf + data if self._buf else data
        view = memoryview(buf)
        end, pos, out = len(buf), 0, []
        while end - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            if b0 & 0x70:
                raise ServerBytesError("a server frame sets reserved bits (no extension was agreed)")
            if b1 & 0x80:
                raise ServerBytesError("a server frame is masked (servers must not mask)")
            op, n, at = b0 & 0x0F, b1 & 0x7F, pos + 2
            if n == 126:
                if end - at < 2:
                    break
                n, at = int.from_bytes(buf[at : at + 2], "big"), at + 2
            elif n == 127:
                if end - at < 8:
                    break
                n, at = int.from_bytes(buf[at : at + 8], "big"), at + 8
            if n > MAX_MESSAGE:
                raise ServerBytesError(f"a server frame of {n} bytes (more than {MAX_MESSAGE})")
            if end - at < n:
                break
            pos = at + n
            message = self._frame(b0 & 0x80 != 0, op, n, view[at:pos])
            if message is not None:
                out.append(message)
        self._buf = buf[pos:] if pos < end else b""
        return out

    def _frame(self, fin: bool, op: int, n: int, payload: memoryview) -> WsMessage | None:
        try:
            kind = Kind(op)
        except ValueError:
            raise ServerBytesError(f"a server frame with the unknown opcode {op:#x}") from None
        if kind >= Kind.CLOSE:
            if not fin or n > 125:
                raise ServerBytesError(f"a {kind.name} frame that is fragmented or longer than 125 bytes")
            return WsMessage(kind, payload)
        if kind is Kind.CONTINUATION:
            if self._frag_kind is None:
                raise ServerBytesError("a continuation frame with no message to continue")
        elif self._frag_kind is not None:
            raise ServerBytesError(f"a new {kind.name} message inside a fragmented one")
        if fin and kind is not Kind.CONTINUATION:
            return WsMessage(kind, payload)  # the common case: one frame, no copy
        self._frag_kind = self._frag_kind or kind
        self._frag_size += n
        if self._frag_size > MAX_MESSAGE:
            raise ServerBytesError(f"a fragmented server message of more than {MAX_MESSAGE} bytes")
        self._fragments.append(payload)
        if not fin:
            return None
        whole = WsMessage(self._frag_kind, memoryview(b"".join(self._fragments)))
        self._fragments, self._frag_kind, self._frag_size = [], None, 0
        return whole


# --- the audio of a pipecat Frame (frames.proto: Frame.audio = 2, AudioRawFrame.audio = 3, .sample_rate = 4) ---


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ServerBytesError("a protobuf varint runs past its message")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: memoryview) -> list[tuple[int, int, int | memoryview]]:
    """The (field number, wire type, value) of each field of one protobuf message, values of
    length-delimited fields as views; raises ServerBytesError for bytes that are not a message."""
    out: list[tuple[int, int, int | memoryview]] = []
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ServerBytesError("a protobuf field numbered 0")
        value: int | memoryview
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if n > end - pos:
                raise ServerBytesError("a protobuf field runs past its message")
            value, pos = buf[pos : pos + n], pos + n
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if size > end - pos:
                raise ServerBytesError("a protobuf field runs past its message")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        else:  # groups (3, 4) are not in frames.proto; 6 and 7 do not exist
            raise ServerBytesError(f"a protobuf field with wire type {wire}")
        out.append((number, wire, value))
    return out


def frame_audio(message: memoryview) -> tuple[memoryview, int] | None:
    """The PCM (a view, not a copy) and sample rate (0 when unset) of a pipecat Frame holding
    audio; None for any other kind.  Protobuf's rules hold: the last member of the ``frame``
    oneof wins, repeated ``audio`` members merge, a member with the wrong wire type is an
    unknown field."""
    pcm: memoryview | None = None
    rate = 0
    for number, wire, value in _fields(message):
        if number not in (1, 2, 3, 4) or wire != 2:
            continue  # an unknown field
        if number != 2:
            pcm = None  # another member of the oneof clears the audio
            continue
        assert isinstance(value, memoryview)
        if pcm is None:
            pcm, rate = memoryview(b""), 0
        for inner, inner_wire, inner_value in _fields(value):
            if inner == 3 and inner_wire == 2:
                assert isinstance(inner_value, memoryview)
                pcm = inner_value
            elif inner == 4 and inner_wire == 0:
                assert isinstance(inner_value, int)
                rate = inner_value & 0xFFFFFFFF  # uint32: protobuf keeps the low 32 bits
    return None if pcm is None else (pcm, rate)

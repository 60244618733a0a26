"""brisvox.transport.websocket: the generic WebSocket transport (protocol: docs/WEBSOCKET_PROTOCOL.md)."""

from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.connection import run_call
from brisvox.transport.websocket.loop import PeerClosed, WsPeer
from brisvox.transport.websocket.protocol import CloseCode, ErrorCode
from brisvox.transport.websocket.server import WebSocketServer, WebsocketsPeer
from brisvox.transport.websocket.stats import ServerStats

__all__ = [
    "CloseCode",
    "ErrorCode",
    "PeerClosed",
    "ServerConfig",
    "ServerStats",
    "WebSocketServer",
    "WebsocketsPeer",
    "WsPeer",
    "run_call",
]

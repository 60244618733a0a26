import brisvox.transport.websocket


def test_the_websocket_package_exports_exactly_its_public_api() -> None:
    assert brisvox.transport.websocket.__all__ == [
        "CloseCode", "ErrorCode", "PeerClosed", "ServerConfig", "ServerStats", "WebSocketServer",
        "WebsocketsPeer", "WsPeer", "run_call",
    ]


def test_the_close_codes_of_the_protocol_table_are_pinned() -> None:
    from brisvox.transport.websocket import CloseCode

    assert sorted(int(c) for c in CloseCode) == [1000, 1001, 1002, 1008, 1009, 1011, 1013]

"""The load client's call socket against websockets' own server: pings, messages, the server's close."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.server import ServerConnection, serve

from brisvox.loadtest import _audio_frame, bot_audio
from brisvox.loadtest_conn import open_call
from brisvox.transport.rtvi.wire import encode_audio, encode_message


@pytest.mark.realtime
async def test_a_call_answers_pings_hears_audio_and_names_the_servers_close() -> None:
    received: list[bytes] = []

    async def bot(ws: ServerConnection) -> None:
        received.append(bytes(await ws.recv(decode=False)))
        pong = await ws.ping(b"alive")
        await asyncio.wait_for(pong, 5)  # the client answered the ping
        await ws.send(encode_message({"type": "bot-ready"}))
        await ws.send(encode_audio(b"\x10\x27" * 320, 24000))
        await ws.close(1001, "going away")

    heard: list[tuple[bytes, int]] = []  # (b"", 0) for a message that is not audio
    async with serve(bot, "127.0.0.1", 0, ping_interval=None) as server:
        port = server.sockets[0].getsockname()[1]
        conn = await open_call(f"ws://127.0.0.1:{port}/rtvi", 5.0, lambda now, message: heard.append(
            bot_audio(bytes(message)) or (b"", 0)))
        conn.send(_audio_frame(bytes(640)))
        await asyncio.wait_for(asyncio.shield(conn.lost), 5)
        await conn.close()
    assert received == [encode_audio(bytes(640), 16000)]  # the pre-masked frame arrives as the plain Frame
    assert heard == [(b"", 0), (b"\x10\x27" * 320, 24000)]
    with pytest.raises(ConnectionError, match=r"the server ended the call .*code 1001"):
        conn.send(b"")

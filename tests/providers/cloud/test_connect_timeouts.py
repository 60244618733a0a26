"""A server that accepts the connection and never answers: the connect deadline (5 s) ends the wait."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.secret import Secret
from brisvox.providers.cloud.cartesia import CartesiaOptions, CartesiaTts
from brisvox.providers.cloud.deepgram import DeepgramOptions, DeepgramStt
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import LlmError
from brisvox.providers.stt import SttConfig
from brisvox.providers.tts import TtsConfig

from .test_llm_scenarios import VENDORS, make, run, start


@contextlib.asynccontextmanager
async def mute_server() -> AsyncIterator[str]:
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for w in held:
            w.transport.abort()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_llm_whose_server_never_answers_times_out_at_the_connect_deadline(vendor: str) -> None:
    clock = SimClock()
    async with mute_server() as host:
        t0 = clock.now()
        got = await run(make(vendor, f"http://{host}"), start())
        waited = clock.now() - t0
    assert isinstance(got.terminal, LlmError) and got.terminal.error.kind is ProviderErrorKind.TIMEOUT
    assert waited == pytest.approx(5.0, abs=0.01)


async def test_a_websocket_upgrade_that_never_completes_times_out_at_the_connect_deadline() -> None:
    clock = SimClock()
    async with mute_server() as host:
        t0 = clock.now()
        with pytest.raises(ProviderError) as stt_info:
            await DeepgramStt(DeepgramOptions(api_key=Secret("k"), base_url=f"ws://{host}"), clock).connect(SttConfig())
        with pytest.raises(ProviderError) as tts_info:
            await CartesiaTts(CartesiaOptions(api_key=Secret("k"), base_url=f"ws://{host}"), clock).connect(TtsConfig())
        waited = clock.now() - t0
    assert stt_info.value.kind is ProviderErrorKind.TIMEOUT and tts_info.value.kind is ProviderErrorKind.TIMEOUT
    assert waited == pytest.approx(10.0, abs=0.02)

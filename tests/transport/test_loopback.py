from __future__ import annotations

from brisvox.transport import LoopbackConfig, Stop, StopReason
from brisvox.transport.events import WireAudioOut, WireClear, WireHangupOut
from tests.transport._helpers import audio, loopback_call, tag_of


async def test_a_zero_latency_loopback_delivers_audio_as_it_is_written_in_order_and_then_the_hang_up() -> None:
    async with loopback_call(loop_config=LoopbackConfig(latency=0.0)) as (clock, client, session):
        t0 = clock.now()
        for i in range(5):
            await session.send(audio(i))
        heard = [await client.recv() for _ in range(5)]
        assert [tag_of(h.item) for h in heard] == list(range(5))
        assert [round(h.at - t0, 6) for h in heard] == [round(i * 0.02, 6) for i in range(5)]
        await session.send(Stop())
        assert await session.wait_stopped() is StopReason.REQUESTED
        rest = await client.read_until_hangup(within=1.0)
        assert isinstance(rest[-1].item, WireHangupOut)


async def test_a_clear_on_a_delayed_loopback_drops_the_audio_still_on_the_line() -> None:
    async with loopback_call(loop_config=LoopbackConfig(latency=0.5)) as (clock, client, session):
        for i in range(3):
            await session.send(audio(i))
        await clock.sleep(0.1)  # three frames written, none delivered yet
        session.commands().clear(1)
        first = await client.recv()
        assert isinstance(first.item, WireClear)
        await session.send(audio(9, epoch=1))
        nxt = await client.recv()
        assert isinstance(nxt.item, WireAudioOut) and tag_of(nxt.item) == 9

from __future__ import annotations

import asyncio

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.providers.channel import Channel, Overflow, SessionBase


async def test_a_full_backpressure_channel_makes_the_writer_wait_until_the_reader_takes_one() -> None:
    ch: Channel[int] = Channel(2)
    await ch.put(1)
    await ch.put(2)
    writer = asyncio.ensure_future(ch.put(3))
    await asyncio.sleep(0)
    assert not writer.done()
    assert await ch.get() == 1
    await writer
    assert [await ch.get(), await ch.get()] == [2, 3]
    assert ch.dropped == 0


async def test_drop_oldest_evicts_the_oldest_item_and_counts_it() -> None:
    ch: Channel[int] = Channel(2, Overflow.DROP_OLDEST)
    for i in range(4):
        await ch.put(i)
    assert ch.dropped == 2
    assert [ch.get_nowait(), ch.get_nowait(), ch.get_nowait()] == [2, 3, None]


def test_drop_newest_refuses_the_new_item_and_counts_it() -> None:
    ch: Channel[int] = Channel(1, Overflow.DROP_NEWEST)
    assert ch.put_nowait(1)
    assert not ch.put_nowait(2)
    assert ch.dropped == 1
    assert ch.get_nowait() == 1


def test_a_full_backpressure_channel_refuses_put_nowait_without_counting_a_drop() -> None:
    ch: Channel[int] = Channel(1)
    assert ch.put_nowait(1)
    assert not ch.put_nowait(2)
    assert ch.dropped == 0


async def test_close_lets_the_reader_drain_then_ends_iteration() -> None:
    ch: Channel[int] = Channel(4)
    await ch.put(1)
    await ch.put(2)
    ch.close()
    assert [x async for x in ch] == [1, 2]
    with pytest.raises(ChannelClosed):
        await ch.put(3)


async def test_abort_drops_queued_items_and_releases_a_waiting_writer_with_channel_closed() -> None:
    ch: Channel[int] = Channel(1)
    await ch.put(1)
    writer = asyncio.ensure_future(ch.put(2))
    await asyncio.sleep(0)
    assert ch.abort() == 1
    with pytest.raises(ChannelClosed):
        await writer
    assert [x async for x in ch] == []


async def test_a_waiting_reader_wakes_at_close() -> None:
    ch: Channel[int] = Channel(1)
    clock = SimClock()
    reader = asyncio.ensure_future(ch.get())
    await clock.sleep(5.0)
    ch.close()
    with pytest.raises(ChannelClosed):
        await reader


async def test_remove_if_purges_matching_items_and_makes_room_for_a_writer() -> None:
    ch: Channel[int] = Channel(3)
    for i in (1, 2, 3):
        await ch.put(i)
    writer = asyncio.ensure_future(ch.put(4))
    await asyncio.sleep(0)
    assert ch.remove_if(lambda x: x % 2 == 1) == 2
    await writer
    assert [ch.get_nowait(), ch.get_nowait(), ch.get_nowait()] == [2, 4, None]


def test_a_channel_needs_a_capacity_of_at_least_one() -> None:
    with pytest.raises(ConfigError, match="capacity"):
        Channel(0, name="stt audio")


class _Counting(SessionBase[str]):
    def __init__(self) -> None:
        super().__init__(capacity=2, name="counting")
        self.shutdowns = 0

    async def _shutdown(self) -> None:
        self.shutdowns += 1


async def test_leaving_a_session_block_shuts_it_down_once_and_drops_unread_events() -> None:
    session = _Counting()
    async with session:
        await session._emit("a")
        await session._emit("b")
    await session.aclose()
    assert session.shutdowns == 1
    assert session.closed
    assert [e async for e in session] == []


async def test_a_session_that_finishes_on_its_own_yields_its_queued_events_then_stops() -> None:
    session = _Counting()
    await session._emit("a")
    session._finish()
    assert [e async for e in session] == ["a"]
    await session.aclose()

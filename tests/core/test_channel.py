"""The bounded channel: per-item and channel-wide overflow policies, waiting, purge, wake, close and abort."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from brisvox.core.channel import WAKE, Channel, ItemPolicy, Overflow
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed, ConfigError
from tests._heap import tracked_per_object


@dataclass(frozen=True)
class Item:
    kind: str  # "audio" (drop oldest), "pos" (displace by key), "new" (drop newest), else lossless
    value: int
    key: int = 0


def policy(it: Item) -> ItemPolicy:
    if it.kind == "audio":
        return ItemPolicy(Overflow.DROP_OLDEST, "audio")
    if it.kind == "video":
        return ItemPolicy(Overflow.DROP_OLDEST, "video")
    if it.kind == "pos":
        return ItemPolicy(Overflow.DISPLACE, ("pos", it.key))
    if it.kind == "new":
        return ItemPolicy(Overflow.DROP_NEWEST)
    return ItemPolicy(Overflow.BACKPRESSURE)


def drain(ch: Channel[Item]) -> list[tuple[str, int]]:
    out = []
    while (it := ch.try_recv()) is not None:
        out.append((it.kind, it.value))
    return out


def test_drop_oldest_evicts_only_its_own_class_and_a_lossless_item_in_front_survives() -> None:
    ch: Channel[Item] = Channel(3, policy=policy)
    ch.try_send(Item("dtmf", 1))
    ch.try_send(Item("audio", 1))
    ch.try_send(Item("audio", 2))
    ch.try_send(Item("audio", 3))
    assert drain(ch) == [("dtmf", 1), ("audio", 2), ("audio", 3)]
    assert ch.dropped == 1


def test_drop_oldest_with_nothing_of_its_class_queued_drops_the_new_item_and_counts_it() -> None:
    ch: Channel[Item] = Channel(2, policy=policy)
    ch.try_send(Item("audio", 1))
    ch.try_send(Item("dtmf", 1))
    assert ch.try_send(Item("video", 9))
    assert drain(ch) == [("audio", 1), ("dtmf", 1)]
    assert ch.dropped == 1


def test_displace_replaces_the_queued_item_of_the_same_key_and_evicts_lossy_items_when_full() -> None:
    ch: Channel[Item] = Channel(3, policy=policy)
    ch.try_send(Item("pos", 1, key=7))
    ch.try_send(Item("audio", 1))
    ch.try_send(Item("pos", 2, key=7))
    ch.try_send(Item("dtmf", 1))
    ch.try_send(Item("pos", 3, key=8))  # full: evicts the audio
    assert drain(ch) == [("pos", 2), ("dtmf", 1), ("pos", 3)]


def test_drop_newest_drops_the_new_item_when_full() -> None:
    ch: Channel[Item] = Channel(1, policy=policy)
    ch.try_send(Item("new", 1))
    ch.try_send(Item("new", 2))
    assert drain(ch) == [("new", 1)]
    assert ch.dropped == 1


async def test_backpressure_waits_for_room_and_loses_nothing_under_a_slow_consumer() -> None:
    clock = SimClock()
    ch: Channel[Item] = Channel(2, policy=policy)
    got: list[int] = []

    async def consume() -> None:
        for _ in range(10):
            got.append((await ch.recv()).value)
            await clock.sleep(0.01)

    task = asyncio.get_running_loop().create_task(consume())
    for i in range(10):
        await ch.send(Item("dtmf", i))
    await task
    assert got == list(range(10))
    assert ch.dropped == 0


async def test_purge_removes_matching_items_and_frees_room_for_waiting_senders() -> None:
    ch: Channel[Item] = Channel(2, policy=policy)
    await ch.send(Item("dtmf", 1))
    await ch.send(Item("mark", 2))
    sender = asyncio.get_running_loop().create_task(ch.send(Item("dtmf", 3)))
    await asyncio.sleep(0)
    assert not sender.done()
    assert [i.value for i in ch.purge(lambda i: i.kind == "mark")] == [2]
    await sender
    assert drain(ch) == [("dtmf", 1), ("dtmf", 3)]


async def test_wake_makes_a_blocked_receiver_return_wake_once() -> None:
    ch: Channel[Item] = Channel(2, policy=policy)
    recv = asyncio.get_running_loop().create_task(ch.recv_or_wake())
    await asyncio.sleep(0)
    ch.wake()
    assert await recv is WAKE
    ch.try_send(Item("dtmf", 1))
    got = await ch.recv_or_wake()
    assert got == Item("dtmf", 1)


async def test_close_refuses_senders_and_lets_the_receiver_drain_first() -> None:
    ch: Channel[Item] = Channel(2, policy=policy)
    await ch.send(Item("dtmf", 1))
    ch.close()
    with pytest.raises(ChannelClosed):
        await ch.send(Item("dtmf", 2))
    assert (await ch.recv()).value == 1
    with pytest.raises(ChannelClosed):
        await ch.recv()


async def test_close_wakes_a_blocked_sender_with_channel_closed() -> None:
    ch: Channel[Item] = Channel(1, policy=policy)
    await ch.send(Item("dtmf", 1))
    sender = asyncio.get_running_loop().create_task(ch.send(Item("dtmf", 2)))
    await asyncio.sleep(0)
    ch.close()
    with pytest.raises(ChannelClosed):
        await sender


# --- one overflow policy for the whole channel ------------------------------------------


async def test_a_full_backpressure_channel_makes_the_writer_wait_until_the_reader_takes_one() -> None:
    ch: Channel[int] = Channel(2)
    await ch.send(1)
    await ch.send(2)
    writer = asyncio.ensure_future(ch.send(3))
    await asyncio.sleep(0)
    assert not writer.done()
    assert await ch.recv() == 1
    await writer
    assert [await ch.recv(), await ch.recv()] == [2, 3]
    assert ch.dropped == 0


async def test_drop_oldest_evicts_the_oldest_item_and_counts_it() -> None:
    ch: Channel[int] = Channel(2, Overflow.DROP_OLDEST)
    for i in range(4):
        await ch.send(i)
    assert ch.dropped == 2
    assert [ch.try_recv(), ch.try_recv(), ch.try_recv()] == [2, 3, None]


def test_drop_newest_drops_the_new_item_without_waiting_and_counts_it() -> None:
    ch: Channel[int] = Channel(1, Overflow.DROP_NEWEST)
    assert ch.try_send(1)
    assert ch.try_send(2)  # lossy items never wait: True, and the drop is counted
    assert ch.dropped == 1
    assert ch.try_recv() == 1
    assert ch.try_recv() is None


def test_a_full_backpressure_channel_refuses_try_send_without_counting_a_drop() -> None:
    ch: Channel[int] = Channel(1)
    assert ch.try_send(1)
    assert not ch.try_send(2)
    assert ch.dropped == 0


async def test_close_lets_the_reader_drain_then_ends_iteration() -> None:
    ch: Channel[int] = Channel(4)
    await ch.send(1)
    await ch.send(2)
    ch.close()
    assert [x async for x in ch] == [1, 2]
    with pytest.raises(ChannelClosed):
        await ch.send(3)


async def test_abort_drops_queued_items_and_releases_a_waiting_writer_with_channel_closed() -> None:
    ch: Channel[int] = Channel(1)
    await ch.send(1)
    writer = asyncio.ensure_future(ch.send(2))
    await asyncio.sleep(0)
    assert ch.abort() == 1
    with pytest.raises(ChannelClosed):
        await writer
    assert [x async for x in ch] == []


async def test_a_waiting_reader_wakes_at_close() -> None:
    ch: Channel[int] = Channel(1)
    clock = SimClock()
    reader = asyncio.ensure_future(ch.recv())
    await clock.sleep(5.0)
    ch.close()
    with pytest.raises(ChannelClosed):
        await reader


async def test_purge_returns_the_matching_items_and_makes_room_for_a_writer() -> None:
    ch: Channel[int] = Channel(3)
    for i in (1, 2, 3):
        await ch.send(i)
    writer = asyncio.ensure_future(ch.send(4))
    await asyncio.sleep(0)
    assert ch.purge(lambda x: x % 2 == 1) == [1, 3]
    await writer
    assert [ch.try_recv(), ch.try_recv(), ch.try_recv()] == [2, 4, None]


def test_a_channel_needs_a_capacity_of_at_least_one() -> None:
    with pytest.raises(ConfigError, match="capacity"):
        Channel(0, name="stt audio")


def test_one_policy_for_the_channel_and_a_policy_per_item_exclude_each_other() -> None:
    with pytest.raises(ConfigError, match="not both"):
        Channel(2, Overflow.DROP_OLDEST, policy=policy)


async def test_a_woken_sender_that_is_cancelled_hands_the_room_to_the_next_sender() -> None:
    ch: Channel[int] = Channel(1)
    await ch.send(0)
    first = asyncio.ensure_future(ch.send(1))
    second = asyncio.ensure_future(ch.send(2))
    await asyncio.sleep(0)
    assert ch.try_recv() == 0  # wakes the first sender only
    first.cancel()  # before it ran: it leaves without putting
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert second.done()
    assert first.cancelled()
    assert ch.try_recv() == 2


def test_try_recv_on_a_closed_and_drained_channel_raises_channel_closed() -> None:
    ch: Channel[int] = Channel(1)
    ch.close()
    with pytest.raises(ChannelClosed):
        ch.try_recv()


async def test_receiver_waiting_only_while_the_receiver_waits_with_nothing_queued() -> None:
    ch: Channel[int] = Channel(4)
    assert not ch.receiver_waiting
    receiver = asyncio.ensure_future(ch.recv())
    await asyncio.sleep(0)
    assert ch.receiver_waiting
    ch.try_send(1)
    assert not ch.receiver_waiting  # woken, the item still to take
    assert await receiver == 1
    receiver = asyncio.ensure_future(ch.recv())
    await asyncio.sleep(0)
    ch.close()
    assert not ch.receiver_waiting
    with pytest.raises(ChannelClosed):
        await receiver
def test_a_channel_that_never_filled_holds_two_tracked_objects_its_own_and_its_queue() -> None:
    # no waiter deque until a sender waits, and the uniform policy is shared between channels
    assert tracked_per_object(lambda: Channel(8)) == 2
    assert tracked_per_object(lambda: Channel(8, Overflow.DROP_OLDEST)) == 2

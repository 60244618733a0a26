from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.transport.channel import WAKE, Channel, ItemPolicy, Overflow


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

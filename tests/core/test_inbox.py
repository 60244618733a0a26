from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.core.channel import Overflow
from brisvox.core.clock import run_virtual
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import (
    DataFrame,
    Direction,
    Frame,
    InputAudioFrame,
    InterruptFrame,
    LlmTextFrame,
    OverflowClass,
    StartFrame,
    WordTimingsFrame,
)
from brisvox.core.inbox import (
    REALTIME_INPUT_POLICIES,
    Inbox,
    InboxState,
    OverflowPolicies,
    PutOutcome,
    QueueConfig,
)
from tests._heap import tracked_per_object

DOWN, UP = Direction.DOWNSTREAM, Direction.UPSTREAM


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class MetricsFrame(DataFrame):
    """A data frame of the metrics overflow class (the inbox's drop-newest default)."""

    overflow: ClassVar[OverflowClass] = OverflowClass.METRICS
    name: str
    value: float


def audio(seq: int, epoch: int = 0) -> InputAudioFrame:
    return InputAudioFrame(epoch=epoch, pcm=b"\0\0" * 160, sample_rate=8000, seq=seq)


def text(t: str, epoch: int = 0) -> LlmTextFrame:
    return LlmTextFrame(epoch=epoch, text=t)


def drain(inbox: Inbox) -> list[tuple[Frame, Direction]]:
    out = []
    while (item := inbox.get_nowait()) is not None:
        out.append((item[0], item[1]))
    return out


def test_system_frames_come_first_downstream_before_upstream() -> None:
    inbox = Inbox()
    inbox.try_put(text("d1"), DOWN)
    inbox.try_put(InterruptFrame(new_epoch=1), UP)
    inbox.try_put(StartFrame(), DOWN)
    got = drain(inbox)
    assert [type(f).__name__ for f, _ in got] == ["StartFrame", "InterruptFrame", "LlmTextFrame"]
    assert got[1][1] is UP


def test_data_lanes_alternate_directions_when_both_hold_frames() -> None:
    inbox = Inbox()
    for i in range(3):
        inbox.try_put(text(f"d{i}"), DOWN)
        inbox.try_put(text(f"u{i}"), UP)
    assert [f.text for f, _ in drain(inbox)] == ["d0", "u0", "d1", "u1", "d2", "u2"]  # type: ignore[attr-defined]


def test_a_full_backpressure_lane_refuses_without_dropping() -> None:
    inbox = Inbox(config=QueueConfig(system=1, data=2))
    assert inbox.try_put(text("a"), DOWN) is PutOutcome.QUEUED
    assert inbox.try_put(text("b"), DOWN) is PutOutcome.QUEUED
    assert inbox.try_put(text("c"), DOWN) is PutOutcome.FULL
    assert inbox.try_put(StartFrame(), DOWN) is PutOutcome.QUEUED
    assert inbox.try_put(StartFrame(), DOWN) is PutOutcome.FULL
    assert inbox.stats.dropped == 0


async def test_a_blocked_put_resumes_when_the_consumer_takes_a_frame() -> None:
    inbox = Inbox(config=QueueConfig(data=1))
    inbox.try_put(text("a"), DOWN)
    put = asyncio.create_task(inbox.put(text("b"), DOWN))
    await asyncio.sleep(0)
    assert not put.done()
    first = await inbox.get()
    assert first is not None and first[0].text == "a"  # type: ignore[attr-defined]
    assert await put is PutOutcome.QUEUED
    second = await inbox.get()
    assert second is not None and second[0].text == "b"  # type: ignore[attr-defined]


def test_drop_oldest_evicts_the_oldest_audio_frame_and_keeps_the_order_of_the_rest() -> None:
    inbox = Inbox(config=QueueConfig(data=3), policies=REALTIME_INPUT_POLICIES)
    inbox.try_put(text("keep"), DOWN)
    inbox.try_put(audio(1), DOWN)
    inbox.try_put(audio(2), DOWN)
    assert inbox.try_put(audio(3), DOWN) is PutOutcome.DROPPED
    got = [f.seq if isinstance(f, InputAudioFrame) else f.text for f, _ in drain(inbox)]  # type: ignore[attr-defined]
    assert got == ["keep", 2, 3]
    assert inbox.stats.dropped_oldest == 1


def test_drop_oldest_with_no_audio_queued_drops_the_new_frame() -> None:
    inbox = Inbox(config=QueueConfig(data=1), policies=REALTIME_INPUT_POLICIES)
    inbox.try_put(text("t"), DOWN)
    assert inbox.try_put(audio(1), DOWN) is PutOutcome.DROPPED
    assert inbox.stats.dropped_newest == 1
    assert [type(f) for f, _ in drain(inbox)] == [LlmTextFrame]


def test_metrics_are_dropped_newest_by_default_and_other_data_still_waits() -> None:
    inbox = Inbox(config=QueueConfig(data=1))
    inbox.try_put(MetricsFrame(epoch=0, name="a", value=1), DOWN)
    assert inbox.try_put(MetricsFrame(epoch=0, name="b", value=2), DOWN) is PutOutcome.DROPPED
    assert inbox.try_put(text("x"), DOWN) is PutOutcome.FULL
    assert inbox.stats.dropped_newest == 1


def test_system_lanes_always_apply_backpressure_whatever_the_policies() -> None:
    policies = OverflowPolicies(audio=Overflow.DROP_NEWEST, metrics=Overflow.DROP_OLDEST)
    inbox = Inbox(config=QueueConfig(system=1), policies=policies)
    inbox.try_put(StartFrame(), DOWN)
    assert inbox.try_put(InterruptFrame(new_epoch=1), DOWN) is PutOutcome.FULL


def test_purge_drops_stale_data_but_never_frames_about_what_was_heard() -> None:
    inbox = Inbox()
    inbox.try_put(text("old", epoch=1), DOWN)
    inbox.try_put(WordTimingsFrame(epoch=1, utterance=2, words=()), DOWN)
    inbox.try_put(WordTimingsFrame(epoch=1, utterance=3, words=()), UP)
    inbox.try_put(text("new", epoch=2), DOWN)
    inbox.try_put(InterruptFrame(new_epoch=2), DOWN)
    assert inbox.purge_stale(2) == 1
    kinds = [type(f).__name__ for f, _ in drain(inbox)]
    assert kinds == ["InterruptFrame", "WordTimingsFrame", "WordTimingsFrame", "LlmTextFrame"]
    assert inbox.stats.purged == 1


def test_the_inbox_remembers_the_newest_interrupt_epoch_enqueued() -> None:
    inbox = Inbox()
    assert inbox.newest_interrupt == -1
    inbox.try_put(InterruptFrame(new_epoch=3), DOWN)
    inbox.try_put(InterruptFrame(new_epoch=2), UP)
    assert inbox.newest_interrupt == 3


async def test_closing_releases_blocked_senders_with_channel_closed() -> None:
    inbox = Inbox(name="stage-x", config=QueueConfig(data=1))
    inbox.try_put(text("a"), DOWN)
    put = asyncio.create_task(inbox.put(text("b"), DOWN))
    await asyncio.sleep(0)
    inbox.close()
    with pytest.raises(ChannelClosed, match="stage-x"):
        await put
    with pytest.raises(ChannelClosed):
        inbox.try_put(text("c"), DOWN)


def test_a_stopped_inbox_discards_quietly_and_counts() -> None:
    inbox = Inbox()
    inbox.close(InboxState.STOPPED)
    assert inbox.try_put(text("late"), UP) is PutOutcome.DISCARDED
    assert inbox.stats.discarded_after_stop == 1


async def test_get_returns_none_once_every_sender_is_gone_and_the_lanes_are_empty() -> None:
    inbox = Inbox()
    inbox.add_sender()
    inbox.add_sender()
    inbox.try_put(text("last"), DOWN)
    inbox.remove_sender()
    inbox.remove_sender()
    item = await inbox.get()
    assert item is not None
    assert await inbox.get() is None


def test_queue_capacities_below_one_are_rejected_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"QueueConfig\.data"):
        QueueConfig(data=0)


def test_a_frame_repr_never_prints_text_or_samples() -> None:
    assert "secret" not in repr(text("secret words"))
    assert "\\x00" not in repr(audio(1))


# --- properties ------------------------------------------------------------------------

_kinds = st.sampled_from(["sys", "text", "audio", "metrics"])
_ops = st.lists(st.tuples(_kinds, st.sampled_from([DOWN, UP])), max_size=80)


def _make(kind: str, n: int) -> Frame:
    if kind == "sys":
        return InterruptFrame(new_epoch=n)
    if kind == "text":
        return text(str(n))
    if kind == "audio":
        return audio(n)
    return MetricsFrame(epoch=0, name=str(n), value=n)


def _key(frame: Frame) -> int:
    if isinstance(frame, InterruptFrame):
        return frame.new_epoch
    if isinstance(frame, InputAudioFrame):
        return frame.seq
    if isinstance(frame, MetricsFrame):
        return int(frame.value)
    assert isinstance(frame, LlmTextFrame)
    return int(frame.text)


@settings(max_examples=200, deadline=None)
@given(ops=_ops, policy=st.sampled_from([o for o in Overflow if o is not Overflow.DISPLACE]), cap=st.integers(1, 6))
def test_every_put_is_received_dropped_or_refused_and_lanes_stay_fifo(
    ops: list[tuple[str, Direction]], policy: Overflow, cap: int
) -> None:
    inbox = Inbox(config=QueueConfig(system=cap, data=cap), policies=OverflowPolicies(audio=policy, metrics=policy))
    queued: dict[tuple[str, Direction], list[int]] = {}
    refused = 0
    for n, (kind, direction) in enumerate(ops):
        outcome = inbox.try_put(_make(kind, n), direction)
        if outcome is PutOutcome.FULL:
            refused += 1
        else:
            lane = ("sys" if kind == "sys" else "data", direction)
            queued.setdefault(lane, []).append(n)
    got = drain(inbox)
    assert len(got) + inbox.stats.dropped + refused == len(ops)
    # Within a lane: FIFO (a subsequence of the order queued, since drops only remove).
    for lane, sent in queued.items():
        received = [_key(f) for f, d in got if ("sys" if isinstance(f, InterruptFrame) else "data", d) == lane]
        it = iter(sent)
        assert all(any(r == s for s in it) for r in received)
    # System frames before data; downstream system before upstream system.
    classes = ["sys" if isinstance(f, InterruptFrame) else "data" for f, _ in got]
    assert classes == sorted(classes, key=lambda c: c != "sys")
    sys_dirs = [d for f, d in got if isinstance(f, InterruptFrame)]
    assert sys_dirs == sorted(sys_dirs, key=lambda d: d is UP)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 5), min_size=1, max_size=8))
def test_blocked_producers_all_complete_and_every_frame_arrives_once(sizes: list[int]) -> None:
    async def main() -> list[int]:
        inbox = Inbox(config=QueueConfig(data=1))
        got: list[int] = []

        async def producer(base: int, count: int) -> None:
            for i in range(count):
                await inbox.put(text(str(base * 100 + i)), DOWN)

        producers = [asyncio.create_task(producer(b, c)) for b, c in enumerate(sizes)]
        for _ in range(sum(sizes)):
            item = await inbox.get()
            assert item is not None
            got.append(int(item[0].text))  # type: ignore[attr-defined]
        await asyncio.gather(*producers)
        return got

    got = run_virtual(main)
    assert sorted(got) == sorted(b * 100 + i for b, c in enumerate(sizes) for i in range(c))
    for b in range(len(sizes)):
        mine = [g for g in got if g // 100 == b]
        assert mine == sorted(mine)


async def test_a_woken_sender_that_is_cancelled_passes_its_wakeup_to_the_next_blocked_sender() -> None:
    inbox = Inbox(config=QueueConfig(data=1))
    inbox.try_put(text("x"), DOWN)
    first = asyncio.ensure_future(inbox.put(text("a"), DOWN))
    second = asyncio.ensure_future(inbox.put(text("b"), DOWN))
    await asyncio.wait({first, second}, timeout=0.01)  # both block on the full lane
    assert not first.done() and not second.done()
    assert inbox.get_nowait() is not None  # room for one: the first sender is woken ...
    first.cancel()  # ... and leaves before it can put
    done, _ = await asyncio.wait({second}, timeout=1.0)
    await asyncio.gather(first, return_exceptions=True)
    if not done:
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
    assert done == {second}
    assert [f.text for f, _ in drain(inbox)] == ["b"]  # type: ignore[attr-defined]


async def test_a_purge_wakes_as_many_live_senders_as_it_freed_slots_skipping_finished_waiters() -> None:
    inbox = Inbox(config=QueueConfig(data=1))
    inbox.try_put(text("old", epoch=0), DOWN)
    gone = inbox.space_waiter(text("g"), DOWN)
    gone.cancel()  # a waiter that already finished stays listed until its owner discards it
    sender = asyncio.ensure_future(inbox.put(text("new", epoch=1), DOWN))
    await asyncio.wait({sender}, timeout=0.01)
    assert inbox.purge_stale(1) == 1
    done, _ = await asyncio.wait({sender}, timeout=1.0)
    if not done:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
    assert done == {sender}


def test_displace_is_refused_as_an_inbox_policy_because_frames_have_no_key() -> None:
    with pytest.raises(ConfigError, match=r"OverflowPolicies\.audio"):
        OverflowPolicies(audio=Overflow.DISPLACE)


async def test_receiver_waiting_only_while_the_owner_waits_in_get_with_every_lane_empty() -> None:
    inbox = Inbox("x")
    assert not inbox.receiver_waiting  # nobody waits yet
    getter = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    assert inbox.receiver_waiting
    inbox.try_put(audio(1), Direction.DOWNSTREAM)
    assert not inbox.receiver_waiting  # woken, the frame still to take: a frame now would overtake it
    assert (await getter)[0] == audio(1)
    getter = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    inbox.close()
    assert not inbox.receiver_waiting and await getter is None
def test_an_inbox_that_never_filled_makes_no_waiter_deques() -> None:
    # the inbox, its four lanes and their tuple, the lanes' waiter list, the config's and the
    # policies' objects, the stats and the interrupt watchers: no deque per lane for waiters
    assert tracked_per_object(Inbox) <= 11

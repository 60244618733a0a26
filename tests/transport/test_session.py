from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.tasks import TaskScope, live_tasks, wait_for_task_baseline
from brisvox.transport import (
    CallEnds,
    CallerAudio,
    CallFailure,
    CallInfo,
    Clear,
    Dtmf,
    FailureKind,
    LoopbackConfig,
    Mark,
    MarkCleared,
    MarkPlayed,
    PlaybackLead,
    PlaybackPosition,
    SessionConfig,
    Started,
    Stop,
    Stopped,
    StopReason,
    TransportError,
    TransportSession,
    call_pair,
)
from brisvox.transport.events import (
    TypedText,
    WireAudio,
    WireAudioOut,
    WireClear,
    WireDtmf,
    WireHangup,
    WireHangupOut,
    WireLead,
    WireMark,
    WireMarkEcho,
    WireStarted,
)
from tests.transport._helpers import TICKED, audio, drain_events, loopback_call, tag_of, tagged_pcm


@pytest.fixture(autouse=True, params=["own pacer", "shared ticker"])
def _pacing(request: pytest.FixtureRequest) -> None:
    """Every session test runs with the per-call pacer and with a server's shared pacing tick
    (whose frames may go to the wire in the tick's callback)."""
    TICKED.set(request.param == "shared ticker")


async def test_caller_audio_and_dtmf_arrive_in_order_retagged_with_the_current_epoch() -> None:
    async with loopback_call() as (clock, client, session):
        assert isinstance(await session.recv(), Started)
        await client.send_audio(tagged_pcm(1))
        a1 = await session.recv()  # tagged on arrival, before the clear
        await session.send(Clear(3))
        await client.send_dtmf("5")
        await client.send_audio(tagged_pcm(2))
        d, a2 = await session.recv(), await session.recv()
        assert isinstance(a1, CallerAudio) and isinstance(a2, CallerAudio) and isinstance(d, Dtmf)
        assert (a1.frame.epoch, a1.frame.seq) == (0, 0)
        assert (a2.frame.epoch, a2.frame.seq) == (3, 1)
        assert d.digit == "5" and d.at == clock.now()


async def test_typed_text_arrives_as_a_typed_event_in_order_without_its_text_in_the_repr() -> None:
    async with loopback_call() as (clock, client, session):
        assert isinstance(await session.recv(), Started)
        await client.send_text("my card is 4111")
        await client.send_dtmf("5")
        typed, d = await session.recv(), await session.recv()
        assert isinstance(typed, TypedText) and typed.text == "my card is 4111" and typed.at == clock.now()
        assert isinstance(d, Dtmf) and "4111" not in repr(typed)


async def test_routed_caller_audio_reaches_the_sink_in_order_and_every_other_event_still_comes_by_recv() -> None:
    async with loopback_call() as (clock, client, session):
        assert isinstance(await session.recv(), Started)
        await client.send_audio(tagged_pcm(1))
        await asyncio.sleep(0)  # queued as an event before the sink is in place
        got: list[tuple[int, int, float]] = []
        session.route_caller_audio(lambda f: got.append((f.seq, f.epoch, f.at)))
        assert got == [(0, 0, clock.now())]  # the queued frame first
        t_clear = clock.now()
        await session.send(Clear(2))
        await clock.sleep(0.02)
        await client.send_dtmf("7")
        await client.send_audio(tagged_pcm(2))
        dtmf = await session.recv()
        assert isinstance(dtmf, Dtmf) and dtmf.digit == "7"
        assert got == [(0, 0, t_clear), (1, 2, clock.now())]  # re-tagged, stamped on arrival
        session.route_caller_audio(None)
        await client.send_audio(tagged_pcm(3))
        back = await session.recv()
        assert isinstance(back, CallerAudio) and back.frame.seq == 2 and len(got) == 2


async def test_output_is_paced_on_the_20_ms_grid_and_takes_its_real_duration() -> None:
    async with loopback_call() as (clock, client, session):
        t0 = clock.now()
        for i in range(50):
            await session.send(audio(i))
        heard = [await client.recv() for _ in range(50)]
        assert [tag_of(h.item) for h in heard] == list(range(50))
        latency = 0.03
        assert [round(h.at - t0 - latency, 6) for h in heard] == [round(i * 0.02, 6) for i in range(50)]


async def test_long_audio_commands_are_cut_into_20_ms_frames() -> None:
    async with loopback_call() as (_clock, client, session):
        await session.send(audio(7, ms=100))
        heard = [await client.recv() for _ in range(5)]
        assert all(len(h.item.frame.pcm) == 640 for h in heard if isinstance(h.item, WireAudioOut))
        assert heard[-1].at - heard[0].at == pytest.approx(0.08)


async def test_a_clear_drops_queued_old_audio_and_reports_the_cut_utterances_final_position() -> None:
    async with loopback_call() as (clock, client, session):
        for i in range(50):
            await session.send(audio(i, utterance=4))
        await clock.sleep(0.13)
        await session.send(Clear(1))
        t_clear = clock.now()
        await session.send(audio(1000, epoch=1, utterance=5))
        heard = []
        while True:
            h = await client.recv()
            heard.append(h)
            if isinstance(h.item, WireAudioOut) and tag_of(h.item) == 1000:
                break
        after = heard[next(i for i, h in enumerate(heard) if isinstance(h.item, WireClear)):]
        assert [tag_of(h.item) for h in after if isinstance(h.item, WireAudioOut)] == [1000]
        assert after[0].at - t_clear < 0.02
        positions = [e for e in drain_events(session) if isinstance(e, PlaybackPosition) and e.utterance == 4]
        # Frames 0..6 were released by 130 ms (at 0, 20, ..., 120 ms): 140 ms of audio.
        assert positions[-1].played == pytest.approx(0.14)


async def test_a_clear_behind_100_queued_frames_reaches_the_client_within_a_frame_time() -> None:
    async with loopback_call(SessionConfig(pacer_capacity=128)) as (clock, client, session):
        for i in range(100):
            await session.send(audio(i))
        await clock.sleep(0.1)
        t_clear = clock.now()
        await session.send(Clear(1))
        while not isinstance((h := await client.recv()).item, WireClear):
            pass
        assert h.at - t_clear < 0.02


async def test_at_most_one_old_frame_is_written_to_the_wire_after_a_clear() -> None:
    clock = SimClock()
    link, ends = call_pair(CallInfo(call_id="raw"))
    session = await TransportSession.open(clock, link)
    try:
        for i in range(40):
            await session.send(audio(i))
        await clock.sleep(1.0)  # the adapter reads nothing: the wire queue (8) is full, one write blocked
        assert len(ends.out) == 8
        await session.send(Clear(1))
        await clock.sleep(0.1)
        items = []
        while (it := ends.out.try_recv()) is not None:
            items.append(it)
        first_clear = next(i for i, it in enumerate(items) if isinstance(it, WireClear))
        assert first_clear <= 1
        assert all(isinstance(it, WireAudioOut) for it in items[:first_clear])
    finally:
        ends.events.close()
        await session.close()


async def test_a_mark_arrives_right_behind_its_audio_and_its_echo_becomes_mark_played() -> None:
    async with loopback_call() as (_clock, client, session):
        assert isinstance(await session.recv(), Started)
        for i in range(3):
            await session.send(audio(i))
        await session.send(Mark("m1"))
        await session.send(audio(3))
        heard = [await client.recv() for _ in range(5)]
        kinds = [type(h.item).__name__ for h in heard]
        assert kinds == ["WireAudioOut"] * 3 + ["WireMark", "WireAudioOut"]
        assert heard[3].at == heard[2].at
        await client.echo_mark("m1")
        while not isinstance(ev := await session.recv(), MarkPlayed):
            pass
        assert ev.id == "m1"


async def test_a_mark_cut_by_a_clear_becomes_mark_cleared_never_reaches_the_client_and_a_late_echo_is_ignored() -> None:
    async with loopback_call() as (clock, client, session):
        for i in range(20):
            await session.send(audio(i))
        await session.send(Mark("cut"))
        await clock.sleep(0.1)
        await session.send(Clear(1))
        for i in range(30):  # enough new audio to pass the cut mark's old position
            await session.send(audio(100 + i, epoch=1))
        await clock.sleep(0.8)
        await client.echo_mark("cut")
        await clock.sleep(0.1)
        heard = drain_heard(client)
        assert not any(isinstance(h.item, WireMark) for h in heard)
        evs = drain_events(session)
        assert [e.id for e in evs if isinstance(e, MarkCleared)] == ["cut"]
        assert not any(isinstance(e, MarkPlayed) for e in evs)


async def test_audio_is_in_the_pacer_when_send_returns_with_no_command_task_between() -> None:
    async with loopback_call() as (_, _client, session):
        await session.send(audio(1, ms=60))
        assert len(session.pacer) == 3  # cut into 20 ms frames in the sender's task
        assert not any(t.get_name().endswith("/commands") for t in asyncio.all_tasks())


async def test_a_mark_behind_audio_still_in_the_pacer_when_a_clear_applies_is_cut() -> None:
    async with loopback_call() as (clock, client, session):
        for i in range(128):  # fills the pacer
            await session.send(audio(i))
        await session.send(Mark("queued"))
        await session.send(Clear(1))
        await clock.sleep(0.5)
        assert [e.id for e in drain_events(session) if isinstance(e, MarkCleared)] == ["queued"]
        assert not any(isinstance(h.item, WireMark) for h in drain_heard(client))


async def test_a_mark_already_sent_when_the_clear_arrives_is_cut_and_its_echo_is_ignored() -> None:
    async with loopback_call() as (clock, client, session):
        await session.send(audio(1))
        await session.send(Mark("sent"))
        await session.send(audio(2))
        await clock.sleep(0.025)  # the mark is on its way (in the adapter's buffer)
        await session.send(Clear(1))
        await client.echo_mark("sent")
        await clock.sleep(0.1)
        evs = drain_events(session)
        assert [e.id for e in evs if isinstance(e, MarkCleared)] == ["sent"]
        assert not any(isinstance(e, MarkPlayed) for e in evs)


async def test_a_mark_registered_after_a_clear_never_overtakes_the_clear_on_the_wire() -> None:
    clock = SimClock()
    link, ends = call_pair(CallInfo(call_id="raw"))
    session = await TransportSession.open(clock, link)
    try:
        for i in range(20):
            await session.send(audio(i))
        await clock.sleep(0.5)  # wire queue full
        await session.send(Clear(1))
        await session.send(Mark("after"))
        await clock.sleep(0.1)
        items = []
        for _ in range(20):
            while (it := ends.out.try_recv()) is not None:
                items.append(it)
            await clock.sleep(0.02)
        kinds = [type(it).__name__ for it in items]
        assert kinds.index("WireClear") < kinds.index("WireMark")
    finally:
        ends.events.close()
        await session.close()


async def test_the_cut_utterances_final_position_is_exact_and_comes_from_the_clear() -> None:
    cfg = SessionConfig(position_interval=0.1)
    async with loopback_call(cfg) as (clock, _client, session):
        t0 = clock.now()
        for i in range(20):
            await session.send(audio(i, utterance=1))
        await clock.sleep_until(t0 + 0.105)
        pos = [e for e in drain_events(session) if isinstance(e, PlaybackPosition)]
        assert [round(p.played, 3) for p in pos] == [0.1]  # the interval report (frames 0..4)
        await clock.sleep_until(t0 + 0.11)
        await session.send(Clear(1))
        await clock.sleep(0.05)
        pos = [e for e in drain_events(session) if isinstance(e, PlaybackPosition)]
        # Released at 0, 20, ..., 100 ms: 6 frames = 120 ms, reported by the clear.
        assert [round(p.played, 3) for p in pos] == [0.12]


async def test_positions_are_monotonic_and_equal_the_released_audio_when_utterances_interleave() -> None:
    async with loopback_call() as (clock, _client, session):
        for i in range(12):
            await session.send(audio(i, utterance=i % 2))
        await clock.sleep(0.5)
        await session.send(Clear(1))
        for i in range(3):
            await session.send(audio(i, epoch=1, utterance=0))  # same id, new epoch: starts at zero
        await clock.sleep(0.5)
        await session.send(Stop())
        await session.wait_stopped()
        pos = [e for e in drain_events(session) if isinstance(e, PlaybackPosition)]
        last: dict[tuple[int, int], float] = {}
        for p in pos:
            key = (p.epoch, p.utterance)
            assert p.played >= last.get(key, 0.0)
            last[key] = p.played
        assert last == {(0, 0): pytest.approx(0.12), (0, 1): pytest.approx(0.12), (1, 0): pytest.approx(0.06)}


async def test_an_engine_that_never_reads_events_can_still_send_20_s_of_audio() -> None:
    async with loopback_call() as (clock, client, session):
        t0 = clock.now()
        for i in range(1000):
            await session.send(audio(i % 1000))
        got = 0
        while got < 1000:
            h = await client.recv()
            got += isinstance(h.item, WireAudioOut)
        assert clock.now() - t0 == pytest.approx(20.0, abs=0.1)


async def test_stop_drops_pending_audio_and_ends_both_directions() -> None:
    async with loopback_call() as (_clock, client, session):
        for i in range(30):
            await session.send(audio(i))
        await session.send(Stop())
        assert await session.wait_stopped() is StopReason.REQUESTED
        heard = await client.read_until_hangup(within=2.0)
        assert isinstance(heard[-1].item, WireHangupOut)
        assert sum(isinstance(h.item, WireAudioOut) for h in heard) < 30
        with pytest.raises(ChannelClosed):
            await session.send(audio(99))


async def test_held_command_senders_are_refused_after_the_end() -> None:
    async with loopback_call() as (_clock, _client, session):
        sender = session.commands()
        await session.close()
        with pytest.raises(ChannelClosed):
            await sender.send(audio(1))
        with pytest.raises(ChannelClosed):
            sender.clear(5)


async def test_concurrent_clears_from_two_senders_apply_in_epoch_order() -> None:
    async with loopback_call() as (_clock, _client, session):
        a, b = session.commands(), session.commands()
        assert a.clear(2)
        assert not b.clear(1)
        assert not b.clear(2)
        assert b.clear(3)


async def test_stale_epoch_audio_and_an_old_clear_are_ignored() -> None:
    async with loopback_call() as (clock, client, session):
        await session.send(Clear(2))
        await session.send(Clear(1))
        await session.send(audio(1, epoch=1))
        await session.send(audio(3, epoch=3))  # a newer epoch must follow its own clear
        await session.send(audio(2, epoch=2))
        await clock.sleep(0.2)
        heard = [h for h in drain_heard(client) if isinstance(h.item, WireAudioOut)]
        assert [tag_of(h.item) for h in heard] == [2]
        assert session.stale_audio_dropped == 2


async def test_a_hang_up_and_a_vanished_client_map_to_peer_hangup_and_peer_disconnected() -> None:
    async with loopback_call() as (_clock, client, session):
        await client.hangup()
        assert await session.wait_stopped() is StopReason.PEER_HANGUP
        assert isinstance([e for e in drain_events(session)][-1], Stopped)
    async with loopback_call() as (_clock, client, session):
        client.disconnect()
        assert await session.wait_stopped() is StopReason.PEER_DISCONNECTED


async def test_an_adapter_that_queued_a_hang_up_and_left_delivers_it_and_what_preceded_it() -> None:
    clock = SimClock()
    link, ends = call_pair(CallInfo(call_id="raw"))
    session = await TransportSession.open(clock, link)
    await session.send(audio(1))
    await session.send(Mark("m"))
    await clock.sleep(0.05)
    while ends.out.try_recv() is not None:
        pass
    await ends.events.send(WireDtmf("9", clock.now()))
    await ends.events.send(WireMarkEcho("m"))
    await ends.events.send(WireHangup())
    ends.out.close()  # the adapter leaves; the output finds the wire closed first
    await session.send(audio(2))
    assert await session.wait_stopped() is StopReason.PEER_HANGUP
    evs = drain_events(session)
    assert [type(e).__name__ for e in evs if not isinstance(e, PlaybackPosition)] == [
        "Dtmf", "MarkPlayed", "Stopped"]
    await session.close()


async def test_the_hang_up_is_queued_before_ended_is_set_even_when_the_wire_queue_is_full() -> None:
    clock = SimClock()
    link, ends = call_pair(CallInfo(call_id="raw"))
    session = await TransportSession.open(clock, link)
    for i in range(20):
        await session.send(audio(i))
    await clock.sleep(0.5)
    assert len(ends.out) == 8
    t0 = clock.now()
    stop = asyncio.get_running_loop().create_task(session.close())
    await clock.sleep(0.3)
    while ends.out.try_recv() is not None:  # the adapter wakes up and reads
        pass
    await ends.ended.wait()
    assert clock.now() - t0 < 1.0
    await stop
    ends.events.close()


async def test_an_adapter_that_reads_nothing_for_10_s_fails_the_session_with_a_timeout() -> None:
    clock = SimClock()
    link, ends = call_pair(CallInfo(call_id="raw"))
    session = await TransportSession.open(clock, link)
    t0 = clock.now()
    for i in range(30):
        await session.send(audio(i))
    assert await session.wait_stopped() is StopReason.TIMEOUT
    assert 10.0 <= clock.now() - t0 < 12.5
    assert ends.ended.is_set()
    await session.close()


async def test_a_protocol_fault_becomes_an_error_event() -> None:
    async with loopback_call() as (_clock, client, session):
        await client.fault("bad_json", "line 1", fatal=False)
        await session.recv()
        ev = await session.recv()
        assert ev == TransportError("bad_json", "line 1", False)


async def test_stop_reason_survives_a_lost_stopped_event() -> None:
    cfg = SessionConfig(events_capacity=2)
    async with loopback_call(cfg) as (_clock, client, session):
        await client.send_dtmf("1")
        await client.send_dtmf("2")  # Started + one Dtmf fill the queue; the input task now waits
        await session.send(Stop())
        assert await session.wait_stopped() is StopReason.REQUESTED
        assert session.stop_reason() is StopReason.REQUESTED


async def test_a_slow_engine_loses_only_input_audio_and_keeps_dtmf_in_order() -> None:
    cfg = SessionConfig(events_capacity=8)
    async with loopback_call(cfg) as (clock, client, session):
        evs: list[object] = []

        async def slow_engine() -> None:
            while True:
                try:
                    evs.append(await session.recv())
                except ChannelClosed:
                    return
                await clock.sleep(0.05)  # reads one event per 50 ms, input comes at one per 20 ms

        engine = asyncio.get_running_loop().create_task(slow_engine())
        for i in range(200):
            await client.send_audio(tagged_pcm(i))
            if i % 20 == 0:
                await client.send_dtmf(str(i // 20))
            await clock.sleep(0.02)
        await clock.sleep(2.0)
        await session.close()
        await engine
        digits = [e.digit for e in evs if isinstance(e, Dtmf)]
        assert digits == [str(i) for i in range(10)]
        seqs = [e.frame.seq for e in evs if isinstance(e, CallerAudio)]
        assert seqs == sorted(seqs) and len(seqs) < 200
        assert isinstance(evs[-1], Stopped)


async def test_a_client_that_stops_reading_for_too_long_ends_the_call() -> None:
    loop_cfg = LoopbackConfig(heard_capacity=4, send_timeout=1.0)
    async with loopback_call(None, loop_cfg) as (_clock, _client, session):
        for i in range(100):
            await session.send(audio(i))
        assert await session.wait_stopped() in (StopReason.PEER_DISCONNECTED, StopReason.PEER_HANGUP)


async def test_stop_and_cancel_with_a_client_that_never_reads_leave_no_task_behind() -> None:
    loop_cfg = LoopbackConfig(heard_capacity=1)
    async with loopback_call(None, loop_cfg) as (_clock, _client, session):
        for i in range(40):
            await session.send(audio(i))
        await session.send(Stop())
        await session.close()
    async with loopback_call(None, loop_cfg) as (_clock, _client, session):
        for i in range(40):
            await session.send(audio(i))
        await session.close(timeout=0.5)
    # The test plugin fails the test if any task is still running.


def test_session_config_validation_names_the_bad_field() -> None:
    with pytest.raises(ConfigError, match="sink_capacity"):
        SessionConfig(sink_capacity=0).validate()
    with pytest.raises(ConfigError, match="wire_write_timeout"):
        SessionConfig(wire_write_timeout=0).validate()


async def test_wire_started_becomes_started_with_the_call_info() -> None:
    clock = SimClock()
    info = CallInfo(call_id="x", metadata={"sample_rate": "8000"})
    link, ends = call_pair(info)
    await ends.events.send(WireStarted(info))
    await ends.events.send(WireAudio(b"\0\0", 8000, 0, 0.0))
    session = await TransportSession.open(clock, link)
    ev = await session.recv()
    assert isinstance(ev, Started) and ev.info.sample_rate() is not None
    ends.events.close()
    await session.close()


def drain_heard(client: object) -> list:  # type: ignore[type-arg]
    out = []
    try:
        while (h := client.try_recv()) is not None:  # type: ignore[attr-defined]
            out.append(h)
    except ChannelClosed:
        pass
    return out


async def test_no_task_is_left_after_stop_hang_up_disconnect_timeout_and_close() -> None:
    clock = SimClock()
    baseline = live_tasks()
    async with loopback_call() as (_clock, client, session):
        await session.send(audio(1))
        await session.send(Stop())
        await session.wait_stopped()
    async with loopback_call() as (_clock, client, session):
        await client.hangup()
        await session.wait_stopped()
    async with loopback_call() as (_clock, client, session):
        client.disconnect()
        await session.wait_stopped()
    link, _ends = call_pair(CallInfo(call_id="raw"))
    session = await TransportSession.open(clock, link)
    for i in range(30):
        await session.send(audio(i))
    await session.wait_stopped()
    await session.close()
    await wait_for_task_baseline(clock, baseline, timeout=1.0)


async def test_playback_lead_from_the_adapter_reaches_the_engine_and_the_latest_wins() -> None:
    clock = SimClock()
    link, ends = call_pair(CallInfo(call_id="raw"))
    session = await TransportSession.open(clock, link)
    for lead in (0.3, 0.2, 0.1):
        await ends.events.send(WireLead(lead))
    await clock.sleep(0.01)
    assert [e for e in drain_events(session) if isinstance(e, PlaybackLead)] == [PlaybackLead(0.1)]
    ends.events.close()
    await session.close()


async def test_an_utterance_that_played_out_reports_its_last_position_without_a_next_utterance() -> None:
    async with loopback_call() as (clock, client, session):
        for i in range(7):  # 140 ms: not a multiple of the 100 ms report interval
            await session.send(audio(i, utterance=3))
        for _ in range(7):
            await client.recv()
        await clock.sleep(0.1)
        positions = [e for e in drain_events(session) if isinstance(e, PlaybackPosition) and e.utterance == 3]
        assert positions[-1].played == pytest.approx(0.14)


async def test_a_session_closed_with_a_failure_hangs_up_carrying_it_and_a_second_close_changes_nothing() -> None:
    failure = CallFailure(FailureKind.CALL_FAILED, "deepgram: connect")
    async with loopback_call() as (_clock, client, session):
        await session.close(failure=failure)
        await session.close(failure=CallFailure(FailureKind.INTERNAL_ERROR, "later"))  # idempotent
        heard = await client.read_until_hangup(within=2.0)
    assert heard[-1].item == WireHangupOut(failure)


async def test_a_failure_after_the_call_already_ended_is_not_sent() -> None:
    async with loopback_call() as (_clock, client, session):
        await session.send(Stop())
        await session.wait_stopped()
        await session.close(failure=CallFailure(FailureKind.INTERNAL_ERROR, "too late"))
        heard = await client.read_until_hangup(within=2.0)
    assert heard[-1].item == WireHangupOut()


async def test_a_clear_that_cuts_nothing_the_client_could_play_is_not_written_to_the_client() -> None:
    async with loopback_call() as (clock, client, session):
        for i in range(5):
            await session.send(audio(i))
        await clock.sleep(1.0)  # the audio played out long ago (past the playout grace)
        assert session.commands().clear(1)  # the epoch advances all the same
        await session.send(audio(99, epoch=1))
        heard = [await client.recv() for _ in range(6)]
        assert not any(isinstance(h.item, WireClear) for h in heard)
        assert tag_of(heard[-1].item) == 99


async def test_a_clear_right_after_the_last_audio_went_out_is_written_the_client_may_still_play_it() -> None:
    async with loopback_call(SessionConfig(playout_grace=0.3)) as (clock, client, session):
        for i in range(5):
            await session.send(audio(i))
        await clock.sleep(0.2)  # every frame released; the client's buffer may still hold them
        session.commands().clear(1)
        heard = [await client.recv() for _ in range(6)]
        assert isinstance(heard[-1].item, WireClear)


def test_a_negative_playout_grace_is_refused() -> None:
    with pytest.raises(ConfigError, match="playout_grace"):
        SessionConfig(playout_grace=-1.0).validate()


async def test_routed_position_reports_reach_the_sink_in_the_output_task_and_the_final_ones_at_the_hang_up() -> None:
    async with loopback_call() as (clock, client, session):
        got: list[tuple[int, float, float]] = []

        async def sink(report: PlaybackPosition) -> None:
            got.append((report.utterance, report.played, clock.now()))

        session.route_playout(sink)
        for i in range(10):
            await session.commands().audio(audio(i, utterance=3).frame)  # no SendAudio wrapper
        for _ in range(3):
            await client.recv()
        await clock.sleep(0.05)
        assert got and got[0][0] == 3 and got[0][2] <= 0.13  # reported as released, not read from a queue
        await clock.sleep(0.03)  # a frame released after the last report: the final one has news
        t_hangup = clock.now()
        await client.hangup()
        await session.wait_stopped()
        assert not [e for e in drain_events(session) if isinstance(e, PlaybackPosition)]
        final = [g for g in got if g[2] >= t_hangup]
        assert len(final) == 1 and final[0][1] > got[-2][1]  # the final report came to the sink too


async def test_a_sink_whose_owner_ended_drops_the_report_and_the_session_plays_on() -> None:
    async with loopback_call() as (clock, client, session):
        async def gone(report: PlaybackPosition) -> None:
            raise ChannelClosed("the engine has ended")

        session.route_playout(gone)
        for i in range(10):
            await session.send(audio(i, utterance=3))
        heard = [await client.recv() for _ in range(10)]
        assert [tag_of(h.item) for h in heard] == list(range(10))
        assert session.stop_reason() is None
        session.route_playout(None)
        await session.send(audio(10, utterance=4))
        await client.recv()
        await clock.sleep(0.2)
        assert any(isinstance(e, PlaybackPosition) for e in drain_events(session))  # back to events


@contextlib.asynccontextmanager
async def _routed_carrier_call() -> AsyncIterator[tuple[SimClock, CallEnds, TransportSession, list[PlaybackLead]]]:
    """A session whose playout reports go to a sink (the leads a clear flushed are collected) and
    whose writes a carrier takes; closed at the end."""
    clock = SimClock()
    link, ends = call_pair(CallInfo(call_id="raw"))
    session = await TransportSession.open(clock, link)
    leads: list[PlaybackLead] = []

    async def sink(report: PlaybackPosition | PlaybackLead) -> None:
        if isinstance(report, PlaybackLead):
            leads.append(report)

    async def carrier() -> None:  # takes everything the session writes
        with contextlib.suppress(ChannelClosed):
            while True:
                await ends.out.recv()

    async with TaskScope("carrier") as scope:
        scope.spawn(carrier(), name="carrier")
        session.route_playout(sink)
        yield clock, ends, session, leads
        ends.events.close()
        await session.close()
        scope.cancel()


async def test_a_clear_hands_the_playout_sink_what_the_client_held_unplayed_by_its_last_lead() -> None:
    async with _routed_carrier_call() as (clock, ends, session, cut):
        for i in range(40):  # 0.8 s, released in real time
            await session.send(audio(i, utterance=1))
        await clock.sleep(0.3)
        await ends.events.send(WireLead(0.4))  # the carrier's echo: 0.4 s sent and not played
        await clock.sleep(0.05)
        assert not [e for e in drain_events(session) if isinstance(e, PlaybackLead)]  # routed: kept in the session
        assert session.commands().unplayed() == pytest.approx(0.4, abs=0.03)
        await session.send(Clear(1))  # while it speaks: the carrier held about 0.4 s, flushed now
        await clock.sleep(0.05)
        assert len(cut) == 1 and cut[0].epoch == 0 and cut[0].lead == pytest.approx(0.4, abs=0.03)
        for i in range(10):  # 0.2 s of the next reply, then 0.1 s of silence before the next clear
            await session.send(audio(i, epoch=1, utterance=2))
        await clock.sleep(0.3)
        cut.clear()
        await session.send(Clear(2))  # the lag (0.4 s less the 20 ms frame then playing) is what is left
        await clock.sleep(0.05)
        assert len(cut) == 1 and cut[0].epoch == 1 and cut[0].lead == pytest.approx(0.28, abs=0.03)


async def test_a_lead_measured_after_the_audio_ended_holds_then_and_into_the_next_reply() -> None:
    """A reply's last echo comes after brisvox released its end when the phone buffers: the phone then
    trails the release schedule by that lead plus the time since the schedule ended, and a clear
    right then, or early in the next reply (before any echo of it), flushes that much."""
    async with _routed_carrier_call() as (clock, ends, session, cut):
        for i in range(40):  # 0.8 s, released in real time from now
            await session.send(audio(i, utterance=1))
        await clock.sleep(1.2)  # the release schedule ended 0.4 s ago
        await ends.events.send(WireLead(0.2))  # the last echo: the phone still holds 0.2 s, so trails by 0.6 s
        await clock.sleep(0.01)
        assert session.commands().unplayed() == pytest.approx(0.19, abs=0.02)  # what the echo just said
        await session.send(Clear(1))  # the caller speaks over the phone's tail: 0.19 s flushed unheard
        await clock.sleep(0.05)
        assert len(cut) == 1 and cut[0].epoch == 0 and cut[0].lead == pytest.approx(0.19, abs=0.02), cut
        for i in range(20):  # 0.4 s of the next reply: the phone plays it behind the same lag
            await session.send(audio(i, epoch=1, utterance=2))
        await clock.sleep(0.3)
        cut.clear()
        await session.send(Clear(2))  # before any echo of it: the lag learnt from the last one holds
        await clock.sleep(0.05)
        assert len(cut) == 1 and cut[0].epoch == 1 and cut[0].lead == pytest.approx(0.6, abs=0.05), cut


async def test_a_client_that_reports_no_lead_gets_no_flushed_lead_at_a_clear() -> None:
    async with loopback_call() as (clock, _client, session):
        got: list[PlaybackPosition | PlaybackLead] = []

        async def sink(report: PlaybackPosition | PlaybackLead) -> None:
            got.append(report)

        session.route_playout(sink)
        for i in range(10):
            await session.send(audio(i, utterance=1))
        await clock.sleep(0.1)
        await session.send(Clear(1))
        await clock.sleep(0.05)
        assert got and not [r for r in got if isinstance(r, PlaybackLead)]


async def test_caller_audio_sent_through_the_link_reaches_the_sink_in_the_adapters_task_and_after_queued_events() -> None:
    clock = SimClock()
    link, ends = call_pair(CallInfo(call_id="direct"))
    session = await TransportSession.open(clock, link)
    got: list[int] = []
    session.route_caller_audio(lambda f: got.append(f.seq))
    await asyncio.sleep(0)  # the input task waits on the empty channel
    assert ends.audio.send(WireAudio(b"\x00\x00" * 320, 16000, 0, clock.now()))
    assert got == [0]  # taken at once, without a wake-up of the session's input task
    ends.events.try_send(WireDtmf("1", clock.now()))
    assert ends.audio.send(WireAudio(b"\x00\x00" * 320, 16000, 1, clock.now()))
    assert got == [0]  # an event waits in the channel: the frame queues behind it, in order
    assert isinstance(await session.recv(), Dtmf)
    await asyncio.sleep(0)
    assert got == [0, 1]
    await session.close()
    assert ends.audio.send(WireAudio(b"\x00\x00" * 320, 16000, 2, clock.now()))
    assert got == [0, 1]  # the session ended: nothing reaches its sink any more

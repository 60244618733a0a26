from __future__ import annotations

import asyncio
import json

import pytest
from websockets.exceptions import InvalidStatus

from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import OutputAudioFrame
from brisvox.core.tasks import live_tasks, wait_for_task_baseline
from brisvox.transport import (
    CallerAudio,
    CallInfo,
    Clear,
    Dtmf,
    Mark,
    MarkPlayed,
    SendAudio,
    Started,
    Stop,
    StopReason,
    TransportError,
    TransportSession,
)
from brisvox.transport.events import PlaybackPosition, WireAudioOut
from brisvox.transport.websocket import ServerConfig
from tests.transport._helpers import drain_events
from tests.transport.websocket._helpers import client, read_until_closed, start, texts, ws_server


def frame(tag: int, n: int = 640) -> bytes:
    return bytes([tag % 256]) * n


async def test_a_valid_start_is_answered_with_started_and_the_engine_gets_the_call_info() -> None:
    async with ws_server(echo=False) as (clock, server, _scope), client(server.url) as ws:
        reply = await start(ws, call_id="abc", metadata={"tenant": "t1", "transport": "spoofed"})
        link = await server.accept()
        session = await TransportSession.open(clock, link)
        ev = await session.recv()
        assert isinstance(ev, Started)
        meta = ev.info.metadata
        assert ev.info.call_id == reply["call_id"]
        assert meta["tenant"] == "t1" and meta["client_call_id"] == "abc"
        assert meta["transport"] == "websocket"  # server keys win
        assert meta[CallInfo.SAMPLE_RATE_KEY] == "16000" and meta["encoding"] == "pcm16"
        assert meta["peer_addr"].startswith("127.0.0.1:")
        await ws.send(json.dumps({"type": "stop"}))
        assert await session.wait_stopped() is StopReason.PEER_HANGUP
        await session.close()


@pytest.mark.parametrize(
    ("first", "code"),
    [
        (b"\x00\x01", "invalid_start"),
        ("not json", "invalid_start"),
        (json.dumps({"type": "dtmf", "digit": "1"}), "invalid_start"),
        (json.dumps({"type": "start", "sample_rate": 12345}), "invalid_start"),
        (json.dumps({"type": "start", "encoding": "opus"}), "invalid_start"),
        (json.dumps({"type": "start", "bogus": 1}), "invalid_start"),
    ],
)
async def test_an_invalid_start_is_refused_with_an_error_and_close_1008(first: bytes | str, code: str) -> None:
    async with ws_server() as (_clock, server, _scope):
        async with client(server.url) as ws:
            await ws.send(first)
            msgs, close = await read_until_closed(ws)
            assert texts(msgs)[0]["code"] == code and texts(msgs)[0]["fatal"] is True
            assert close == 1008
        assert server.stats.refused_start == 1 and server.stats.calls_started == 0


async def test_a_missing_start_times_out_with_close_1008() -> None:
    async with ws_server(ServerConfig(start_timeout=2.0)) as (clock, server, _scope):  # noqa: SIM117 (the client needs the server's url)
        async with client(server.url) as ws:
            t0 = clock.now()
            msgs, close = await read_until_closed(ws)
            assert texts(msgs)[0]["code"] == "start_timeout" and close == 1008
            assert 2.0 <= clock.now() - t0 < 3.0


async def test_an_oversized_start_is_refused_with_close_1009() -> None:
    cfg = ServerConfig(max_control_bytes=1024, max_audio_bytes=4096)
    async with ws_server(cfg) as (_clock, server, _scope), client(server.url) as ws:
        await ws.send(json.dumps({"type": "start", "metadata": {"k": "v" * 500, "j": "w" * 500}}))
        msgs, close = await read_until_closed(ws)
        assert texts(msgs)[0]["code"] == "message_too_big" and close == 1009


@pytest.mark.parametrize("encoding", ["pcm16", "mulaw"])
async def test_audio_flows_both_ways_in_order(encoding: str) -> None:
    async with ws_server() as (clock, server, _scope), client(server.url) as ws:
        await start(ws, encoding=encoding)
        n = 320 if encoding == "mulaw" else 640
        sent = [ulaw_encode(ulaw_decode(bytes([i * 3 % 256]) * n)) if encoding == "mulaw" else frame(i)
                for i in range(30)]
        for _i, data in enumerate(sent):
            await ws.send(data)
            await clock.sleep(0.02)
        got: list[bytes] = []
        while len(got) < 30:
            m = await ws.recv()
            if isinstance(m, bytes):
                got.append(m)
        assert got == sent


async def test_an_engine_clear_drops_queued_audio_cuts_marks_and_reaches_the_client() -> None:
    async with ws_server(echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        session = await TransportSession.open(clock, await server.accept())
        for i in range(50):
            await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=frame(i), sample_rate=16000)))
        await session.send(Mark("late"))
        await clock.sleep(0.2)
        await session.send(Clear(1))
        await session.send(SendAudio(OutputAudioFrame(epoch=1, pcm=frame(200), sample_rate=16000)))
        got: list[bytes | dict[str, object]] = []
        while True:
            m = await ws.recv()
            got.append(m if isinstance(m, bytes) else json.loads(m))
            if m == frame(200):
                break
        i_clear = next(i for i, m in enumerate(got) if isinstance(m, dict) and m["type"] == "clear")
        assert got[i_clear] == {"type": "clear", "epoch": 1}
        assert [m for m in got[i_clear + 1:]] == [frame(200)]
        assert 8 <= i_clear <= 22  # about 200 ms of audio plus the pipeline's few frames
        assert not any(isinstance(m, dict) and m["type"] == "mark" for m in got)
        await session.close()


async def test_a_mark_goes_out_behind_its_audio_and_its_echo_is_mark_played() -> None:
    async with ws_server(echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        session = await TransportSession.open(clock, await server.accept())
        assert isinstance(await session.recv(), Started)
        await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=frame(1), sample_rate=16000)))
        await session.send(Mark("m-1"))
        assert await ws.recv() == frame(1)
        assert json.loads(await ws.recv()) == {"type": "mark", "id": "m-1"}
        await ws.send(json.dumps({"type": "mark", "id": "m-1"}))
        event = await session.recv()
        while isinstance(event, PlaybackPosition):  # the played-out frame's position comes first
            event = await session.recv()
        assert event == MarkPlayed("m-1")
        await session.close()


async def test_dtmf_reaches_the_engine_in_order() -> None:
    async with ws_server(echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        session = await TransportSession.open(clock, await server.accept())
        for d in "12#":
            await ws.send(json.dumps({"type": "dtmf", "digit": d}))
        evs = [await session.recv() for _ in range(4)]
        assert [e.digit for e in evs if isinstance(e, Dtmf)] == ["1", "2", "#"]
        await session.close()


async def test_non_fatal_faults_are_reported_and_counted_and_the_call_survives() -> None:
    async with ws_server(echo=False) as (clock, server, _scope):  # noqa: SIM117 (the client needs the server's url)
        async with client(server.url) as ws:
            await start(ws)
            session = await TransportSession.open(clock, await server.accept())
            await ws.send("{nope")
            await ws.send(frame(1, 641))
            await ws.send(json.dumps({"type": "start"}))
            await ws.send(json.dumps({"type": "wiggle"}))
            await ws.send(json.dumps({"type": "dtmf", "digit": "X"}))
            await ws.send(frame(2))
            codes = [json.loads(await ws.recv())["code"] for _ in range(5)]
            assert codes == ["malformed_message", "half_sample", "second_start", "unknown_type", "malformed_message"]
            evs = [await session.recv() for _ in range(7)]
            assert [e.kind for e in evs if isinstance(e, TransportError)] == codes
            assert isinstance(evs[-1], CallerAudio)
            assert server.stats.faults == 5
            await session.close()


async def test_the_seventeenth_fault_ends_the_call_with_close_1008() -> None:
    async with ws_server() as (_clock, server, _scope):  # noqa: SIM117 (the client needs the server's url)
        async with client(server.url) as ws:
            await start(ws)
            for _ in range(17):
                await ws.send("{nope")
            msgs, close = await read_until_closed(ws)
            assert texts(msgs)[-2]["code"] == "too_many_faults" and texts(msgs)[-1] == {"type": "stop", "reason": "error"}
            assert close == 1008


async def test_an_audio_frame_over_the_app_limit_ends_the_call_with_close_1009() -> None:
    cfg = ServerConfig(max_audio_bytes=1000, max_control_bytes=4096)
    async with ws_server(cfg) as (_clock, server, _scope), client(server.url) as ws:
        await start(ws)
        await ws.send(frame(1, 2000))
        msgs, close = await read_until_closed(ws)
        assert texts(msgs)[0]["code"] == "message_too_big" and close == 1009


async def test_a_frame_over_the_websocket_layers_limit_is_closed_with_1009() -> None:
    cfg = ServerConfig(max_audio_bytes=1000, max_control_bytes=1000)
    async with ws_server(cfg) as (_clock, server, _scope), client(server.url) as ws:
        await start(ws)
        await ws.send(frame(1, 5000))
        _, close = await read_until_closed(ws)
        assert close == 1009


async def test_a_flooding_client_loses_the_oldest_input_and_the_call_survives() -> None:
    # the audio rate limit is off: this is the core's drop-oldest under an engine that reads late
    async with ws_server(ServerConfig(audio_rate=None), echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        session = await TransportSession.open(clock, await server.accept())
        for i in range(2000):
            await ws.send(frame(i))
        await clock.sleep(0.5)
        got = []
        while (ev := session.try_recv()) is not None:
            if isinstance(ev, CallerAudio):
                got.append(ev.frame.seq)
        assert got == sorted(got) and len(got) < 2000 and got[-1] == 1999
        await ws.send(json.dumps({"type": "dtmf", "digit": "5"}))
        assert isinstance(await session.recv(), Dtmf)
        await session.close()


async def test_past_the_call_limit_a_connection_gets_503_with_retry_after_and_slots_are_freed() -> None:
    async with ws_server(ServerConfig(max_calls=2, retry_after=7)) as (clock, server, _scope):
        async with client(server.url) as a, client(server.url) as b:
            await start(a)
            await start(b)
            with pytest.raises(InvalidStatus) as info:
                async with client(server.url):
                    pass
            assert info.value.response.status_code == 503
            assert info.value.response.headers["Retry-After"] == "7"
        await clock.sleep(0.5)
        assert server.active_calls == 0
        async with client(server.url) as c:
            await start(c)
        assert server.stats.refused_limit == 1


async def test_a_wrong_path_gets_404() -> None:
    async with ws_server() as (_clock, server, _scope):
        with pytest.raises(InvalidStatus) as info:
            async with client(server.url.replace("/ws", "/other")):
                pass
        assert info.value.response.status_code == 404


async def test_a_silent_client_that_answers_no_pings_is_closed_after_the_ping_timeout() -> None:
    cfg = ServerConfig(ping_interval=1.0, ping_timeout=3.0)
    async with ws_server(cfg) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        t0 = clock.now()
        ws.transport.pause_reading()  # no pongs, no frames
        await clock.sleep(4.0)
        ws.transport.resume_reading()
        msgs, close = await read_until_closed(ws)
        assert any(m.get("code") == "ping_timeout" for m in texts(msgs))
        assert close == 1008
        assert clock.now() - t0 < 6.0
        assert server.stats.ping_timeouts == 1


async def test_pings_keep_an_idle_client_alive() -> None:
    cfg = ServerConfig(ping_interval=1.0, ping_timeout=3.0)
    async with ws_server(cfg) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        await clock.sleep(10.0)
        await ws.send(frame(1))
        assert await ws.recv() == frame(1)
        assert server.stats.ping_timeouts == 0


async def test_a_client_that_reads_nothing_is_dropped_after_the_write_timeout_while_the_engine_hears_it() -> None:
    cfg = ServerConfig(write_timeout=2.0, max_audio_bytes=1 << 20)
    async with ws_server(cfg, echo=False) as (clock, server, scope), client(server.url) as ws:
        await start(ws)
        link = await server.accept()
        ws.transport.pause_reading()
        big = OutputAudioFrame(epoch=0, pcm=bytes(1 << 20), sample_rate=16000)
        t0 = clock.now()

        async def flood() -> None:
            try:
                for _ in range(12):
                    await link.out.send(WireAudioOut(big))
            except ChannelClosed:
                pass

        flooder = scope.spawn(flood(), name="flood")
        for i in range(3):
            await ws.send(frame(i))
        heard = []
        while len(heard) < 3:
            ev = await link.events.recv()
            if type(ev).__name__ == "WireAudio":
                heard.append(ev)
        while not link.events.closed:
            await clock.sleep(0.1)
        assert 2.0 <= clock.now() - t0 < 4.0
        assert server.stats.write_timeouts == 1
        await flooder


@pytest.mark.parametrize("how", ["stop", "close", "drop", "engine"])
async def test_each_way_of_hanging_up_ends_the_call_with_its_reason_and_close_code(how: str) -> None:
    async with ws_server(echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        session = await TransportSession.open(clock, await server.accept())
        if how == "stop":
            await ws.send(json.dumps({"type": "stop"}))
            msgs, close = await read_until_closed(ws)
            assert texts(msgs) == [{"type": "stop", "reason": "ended"}] and close == 1000
            expected = StopReason.PEER_HANGUP
        elif how == "close":
            await ws.close()
            expected = StopReason.PEER_HANGUP
            assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == 1000
        elif how == "drop":
            ws.transport.abort()
            expected = StopReason.PEER_DISCONNECTED
        else:
            await session.send(Stop())
            msgs, close = await read_until_closed(ws)
            assert texts(msgs) == [{"type": "stop", "reason": "ended"}] and close == 1000
            expected = StopReason.REQUESTED
        assert await session.wait_stopped() is expected
        evs = drain_events(session)
        assert not any(isinstance(e, TransportError) for e in evs)
        await session.close()


async def test_shutdown_says_goodbye_with_stop_shutdown_and_close_1001() -> None:
    async with ws_server() as (_clock, server, scope):
        async with client(server.url) as ws:
            await start(ws)
            closing = scope.spawn(server.shutdown(), name="shutdown")
            msgs, close = await read_until_closed(ws)
            assert texts(msgs)[-1] == {"type": "stop", "reason": "shutdown"} and close == 1001
            await closing
        with pytest.raises(ChannelClosed):
            await server.accept()


async def test_a_call_the_engine_does_not_accept_in_time_is_refused_with_server_busy_and_1013() -> None:
    cfg = ServerConfig(accept_queue=1, send_timeout=0.5)
    async with ws_server(cfg, echo=False) as (_clock, server, _scope):
        async with client(server.url) as a:
            await start(a)  # fills the accept queue: nobody accepts
            async with client(server.url) as b:
                await b.send(json.dumps({"type": "start"}))
                msgs, close = await read_until_closed(b)
                assert texts(msgs)[0]["code"] == "server_busy" and close == 1013
        link = await server.accept()
        link.events.close()


async def test_an_engine_that_reads_no_events_ends_the_call_as_overloaded_with_1013() -> None:
    cfg = ServerConfig(send_timeout=0.5)
    async with ws_server(cfg, echo=False) as (_clock, server, _scope), client(server.url) as ws:
        await start(ws)
        await server.accept()  # nobody reads this call's events
        for _ in range(80):
            await ws.send(json.dumps({"type": "dtmf", "digit": "1"}))
        msgs, close = await read_until_closed(ws)
        assert texts(msgs)[0]["code"] == "overloaded" and close == 1013


async def test_a_mark_id_over_256_bytes_is_not_sent_and_reported_as_a_fault() -> None:
    async with ws_server(echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        session = await TransportSession.open(clock, await server.accept())
        await session.send(Mark("x" * 300))
        await session.send(Mark("ok"))
        msgs = [json.loads(await ws.recv()) for _ in range(2)]
        assert msgs[0]["code"] == "mark_id_too_long" and msgs[1] == {"type": "mark", "id": "ok"}
        await session.close()


async def test_bot_audio_at_another_rate_is_dropped_with_one_fault_per_call() -> None:
    async with ws_server(echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws, sample_rate=8000)
        session = await TransportSession.open(clock, await server.accept())
        for i in range(100):
            await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=frame(i), sample_rate=16000)))
        await clock.sleep(3.0)
        evs = []
        while (ev := session.try_recv()) is not None:
            evs.append(ev)
        assert [e.kind for e in evs if isinstance(e, TransportError)] == ["output_rate_mismatch"]
        assert server.stats.output_rate_mismatches == 100
        await session.close()


def test_server_config_validation_refuses_bad_values() -> None:
    bad = [
        dict(ping_timeout=5.0, ping_interval=5.0),
        dict(ping_interval=0.005, ping_timeout=1.0),
        dict(write_timeout=0),
        dict(close_grace=0),
        dict(max_calls=0),
        dict(accept_queue=0),
        dict(max_audio_bytes=1),
        dict(max_control_bytes=511),
    ]
    for kwargs in bad:
        with pytest.raises(ConfigError, match=next(iter(kwargs))):
            ServerConfig(**kwargs).validate()  # type: ignore[arg-type]
    ServerConfig().validate()


async def test_no_task_is_left_after_calls_refusals_fatal_closes_and_shutdown() -> None:
    baseline = live_tasks()
    async with ws_server(ServerConfig(max_calls=1)) as (clock, server, _scope):
        async with client(server.url) as ws:
            await start(ws)
            await ws.send(frame(1))
            await ws.recv()
            with pytest.raises(InvalidStatus):
                async with client(server.url):
                    pass
        async with client(server.url) as ws:
            await ws.send("garbage")
            await read_until_closed(ws)
        async with client(server.url) as ws:
            await start(ws)
            ws.transport.abort()
        await clock.sleep(0.5)  # the server notices the abort on its own schedule; then the slot is free
        assert server.active_calls == 0
        async with client(server.url) as ws:
            await start(ws)
    await wait_for_task_baseline(clock, baseline, timeout=2.0)
    await asyncio.sleep(0)


async def test_a_stuck_client_does_not_hold_its_permit_past_an_engine_hang_up() -> None:
    cfg = ServerConfig(write_timeout=5.0, close_grace=1.0, max_audio_bytes=1 << 20)
    async with ws_server(cfg, echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        link = await server.accept()
        session = await TransportSession.open(clock, link)
        ws.transport.pause_reading()
        big = bytes(1 << 20)
        for _ in range(8):  # megabytes the client never reads: the writer blocks
            await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=big[:640], sample_rate=16000)))
        # Stuff the socket directly so the writer is blocked before the hang-up.
        for _ in range(6):
            link.out.try_send(WireAudioOut(OutputAudioFrame(epoch=0, pcm=big, sample_rate=16000)))
        await clock.sleep(0.5)
        t0 = clock.now()
        await session.close()
        while server.active_calls:
            await clock.sleep(0.1)
        assert clock.now() - t0 < 3.5  # about close_grace, not several write timeouts
        ws.transport.abort()


async def test_any_client_frame_keeps_the_call_alive_without_pongs() -> None:
    cfg = ServerConfig(ping_interval=1.0, ping_timeout=3.0)
    async with ws_server(cfg, echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        session = await TransportSession.open(clock, await server.accept())
        ws.transport.pause_reading()  # no pongs
        for i in range(20):
            await ws.send(frame(i))
            await clock.sleep(0.5)
        assert server.stats.ping_timeouts == 0
        ws.transport.resume_reading()
        await session.close()


async def test_an_abrupt_disconnect_before_start_frees_the_slot_and_reaches_no_engine() -> None:
    async with ws_server(echo=False) as (clock, server, _scope):
        async with client(server.url) as ws:
            ws.transport.abort()
        await clock.sleep(0.2)
        assert server.active_calls == 0
        assert server.stats.calls_started == 0 and len(server._accept) == 0


# --- limits (issue 19) ---------------------------------------------------------------------


@pytest.mark.parametrize("after_start", [False, True])
async def test_json_nested_4000_deep_is_refused_cleanly_before_and_after_start(after_start: bool) -> None:
    async with ws_server() as (_clock, server, _scope), client(server.url) as ws:
        if not after_start:
            await ws.send("[" * 4000)
            msgs, close = await read_until_closed(ws)
            assert texts(msgs)[0]["code"] == "invalid_start" and "deeper than 8" in texts(msgs)[0]["message"]
            assert close == 1008
            return
        await start(ws)
        await ws.send("[" * 4000)
        err = json.loads(await ws.recv())
        assert err == {"type": "error", "code": "malformed_message", "fatal": False,
                       "message": "the message nests arrays or objects deeper than 8 levels"}
        await ws.send(frame(3))
        assert await ws.recv() == frame(3)


async def test_caller_audio_beyond_the_rate_is_dropped_counted_and_reported_once_and_the_call_goes_on() -> None:
    async with ws_server(echo=False) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        session = await TransportSession.open(clock, await server.accept())
        for i in range(200):  # 4 s of 16 kHz audio at once: the 2 s burst passes, the rest is dropped
            await ws.send(frame(i))
        notice = json.loads(await ws.recv())
        assert notice["code"] == "audio_too_fast" and notice["fatal"] is False
        await clock.sleep(0.5)
        got = []
        while (ev := session.try_recv()) is not None:
            if isinstance(ev, CallerAudio):
                got.append(ev.frame.seq)
        dropped = server.stats.audio_dropped_frames
        assert 95 <= dropped <= 105
        assert got[-1] == 199 - dropped  # admitted frames are numbered; the core kept the newest of them
        await clock.sleep(2.0)  # tokens accrue again at real time
        await ws.send(json.dumps({"type": "dtmf", "digit": "5"}))
        await ws.send(frame(1))
        assert isinstance(await session.recv(), Dtmf)
        assert isinstance(await session.recv(), CallerAudio)
        await session.close()


async def test_a_sustained_audio_flood_ends_the_call_with_audio_flood_and_1008() -> None:
    async with ws_server() as (_clock, server, _scope), client(server.url) as ws:
        await start(ws)
        for i in range(2000):  # 40 s of audio at once
            await ws.send(frame(i))
        msgs, close = await read_until_closed(ws)
        codes = [m["code"] for m in texts(msgs) if m.get("type") == "error"]
        assert codes == ["audio_too_fast", "audio_flood"] and close == 1008
        assert server.stats.audio_floods == 1


async def test_a_client_that_answers_pings_but_sends_no_audio_is_closed_after_the_idle_timeout() -> None:
    cfg = ServerConfig(ping_interval=1.0, ping_timeout=3.0, idle_timeout=10.0)
    async with ws_server(cfg) as (clock, server, _scope), client(server.url) as ws:
        await start(ws)
        t0 = clock.now()
        await ws.send(json.dumps({"type": "dtmf", "digit": "1"}))  # control messages are not audio
        msgs, close = await read_until_closed(ws)
        assert [m["code"] for m in texts(msgs) if m.get("type") == "error"] == ["idle_timeout"] and close == 1008
        assert 10.0 <= clock.now() - t0 < 12.0
        assert server.stats.idle_timeouts == 1 and server.stats.ping_timeouts == 0


async def test_a_call_that_sends_audio_ends_at_its_maximum_duration_with_max_duration_and_1008() -> None:
    cfg = ServerConfig(max_call_duration=5.0)
    async with ws_server(cfg) as (clock, server, scope), client(server.url) as ws:
        await start(ws)
        t0 = clock.now()

        async def talk() -> None:
            for i in range(100):
                await ws.send(frame(i))
                await clock.sleep(0.5)

        talker = scope.spawn(talk(), name="talker")
        msgs, close = await read_until_closed(ws)
        talker.cancel()
        assert [m["code"] for m in texts(msgs) if m.get("type") == "error"] == ["max_duration"] and close == 1008
        assert 5.0 <= clock.now() - t0 < 6.5
        assert server.stats.duration_limits == 1

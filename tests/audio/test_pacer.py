from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from brisvox.audio.pacer import OutputPacer, PaceGrid, PaceTicker
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed


@dataclass(frozen=True)
class F:
    epoch: int
    n: int
    duration: float = 0.02


def test_frames_available_early_are_released_on_an_absolute_grid() -> None:
    grid = PaceGrid()
    assert [grid.schedule(0.0, 0.02) for _ in range(3)] == [0.0, 0.02, 0.04]
    assert grid.schedule(0.045, 0.02) == pytest.approx(0.06)
    assert grid.underruns == 0


def test_a_slightly_late_frame_keeps_the_grid_phase() -> None:
    grid = PaceGrid(resync_after=0.02)
    grid.schedule(0.0, 0.02)
    assert grid.schedule(0.03, 0.02) == pytest.approx(0.02)  # late by 10 ms: released at once, grid kept
    assert grid.next_due == pytest.approx(0.04)
    assert grid.underruns == 0


def test_an_underrun_restarts_the_grid_where_the_next_frame_arrives() -> None:
    grid = PaceGrid(resync_after=0.02)
    grid.schedule(0.0, 0.02)
    assert grid.schedule(0.5, 0.02) == 0.5
    assert grid.schedule(0.5, 0.02) == pytest.approx(0.52)
    assert grid.underruns == 1


def test_a_reset_grid_starts_a_new_run_without_counting_an_underrun() -> None:
    grid = PaceGrid()
    grid.schedule(0.0, 0.02)
    grid.reset()
    assert grid.schedule(3.0, 0.02) == 3.0
    assert grid.underruns == 0


async def _run_pacer(pacer: OutputPacer[F], body: object) -> None:
    task = asyncio.get_running_loop().create_task(pacer.run())
    try:
        await body  # type: ignore[misc]
    finally:
        pacer.close()
        with pytest.raises(ChannelClosed):
            await task


async def test_the_pacer_releases_one_frame_per_tick_in_real_time() -> None:
    clock = SimClock()
    out: list[tuple[int, float]] = []

    async def sink(f: F) -> None:
        out.append((f.n, clock.now()))

    pacer: OutputPacer[F] = OutputPacer(clock, sink, capacity=64)
    t0 = clock.now()

    async def body() -> None:
        for i in range(50):
            await pacer.push(F(0, i))
        while len(out) < 50:
            await clock.sleep(0.01)

    await _run_pacer(pacer, body())
    assert [n for n, _ in out] == list(range(50))
    assert [round(t - t0, 6) for _, t in out] == [round(i * 0.02, 6) for i in range(50)]


async def test_push_waits_while_the_queue_is_full() -> None:
    clock = SimClock()
    out: list[float] = []

    async def sink(f: F) -> None:
        out.append(clock.now())

    pacer: OutputPacer[F] = OutputPacer(clock, sink, capacity=2)
    t0 = clock.now()

    async def body() -> None:
        for i in range(10):
            await pacer.push(F(0, i))
        # Two queued plus the one waiting for its slot: the tenth push gets in when frame 7 is taken.
        assert clock.now() - t0 == pytest.approx(6 * 0.02)
        while len(out) < 10:
            await clock.sleep(0.01)

    await _run_pacer(pacer, body())


async def test_an_interrupt_purges_old_frames_and_abandons_the_one_waiting_for_its_slot() -> None:
    clock = SimClock()
    out: list[F] = []

    async def sink(f: F) -> None:
        out.append(f)

    pacer: OutputPacer[F] = OutputPacer(clock, sink, capacity=64)

    async def body() -> None:
        for i in range(20):
            await pacer.push(F(0, i))
        await clock.sleep(0.05)  # frames 0, 1, 2 released; 3 waits for its slot at 60 ms
        purged = pacer.interrupt(1)
        await pacer.push(F(1, 100))
        await clock.sleep(0.1)
        assert purged == 16
        assert pacer.interrupt(1) == 0  # not newer: ignored

    await _run_pacer(pacer, body())
    assert [f.n for f in out] == [0, 1, 2, 100]
    assert pacer.stats.abandoned == 1


async def test_a_slow_sink_makes_the_pacer_resync_with_an_underrun_instead_of_bursting() -> None:
    clock = SimClock()
    out: list[float] = []

    async def sink(f: F) -> None:
        out.append(clock.now())
        if len(out) == 3:
            await clock.sleep(0.2)  # the wire stalls for 200 ms

    pacer: OutputPacer[F] = OutputPacer(clock, sink, capacity=64)
    t0 = clock.now()

    async def body() -> None:
        for i in range(6):
            await pacer.push(F(0, i))
        while len(out) < 6:
            await clock.sleep(0.01)

    await _run_pacer(pacer, body())
    rel = [round(t - t0, 6) for t in out]
    assert rel == [0.0, 0.02, 0.04, 0.24, 0.26, 0.28]
    assert pacer.stats.underruns == 1


def test_a_bad_pacer_setting_is_a_config_error_naming_the_setting() -> None:
    from brisvox.core.errors import ConfigError

    with pytest.raises(ConfigError, match="resync_after"):
        PaceGrid(resync_after=-1.0)

    async def sink(frame: object) -> None:
        return None

    with pytest.raises(ConfigError, match="capacity"):
        OutputPacer(SimClock(), sink, capacity=0)


async def test_a_woken_pusher_that_is_cancelled_hands_the_free_slot_to_the_next_pusher() -> None:
    clock = SimClock()

    async def sink(f: F) -> None:
        return None

    pacer: OutputPacer[F] = OutputPacer(clock, sink, capacity=1)
    await pacer.push(F(0, 0))
    first = asyncio.ensure_future(pacer.push(F(0, 1)))
    second = asyncio.ensure_future(pacer.push(F(0, 2)))
    await asyncio.wait({first, second}, timeout=0.01)  # both wait for room
    await pacer._next()  # the loop takes a frame: the first pusher is woken ...
    first.cancel()  # ... and leaves before it can queue
    done, _ = await asyncio.wait({second}, timeout=1.0)
    await asyncio.gather(first, return_exceptions=True)
    if not done:
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
    assert done == {second}
    assert [f.n for f, _ in pacer._queue] == [2]


# --- the shared ticker (one timer for the pacers of every call) -----------------------------


def _ticked(clock: SimClock, ticker: PaceTicker, out: list[tuple[int, float]], *, capacity: int = 64,
            take: object = None) -> OutputPacer[F]:
    def try_sink(f: F) -> bool:
        if take is not None and not take(f):  # type: ignore[operator]
            return False
        out.append((f.n, clock.now()))
        return True

    async def sink(f: F) -> None:
        await clock.sleep(0.2)  # the wire was full: it takes 200 ms to drain
        out.append((f.n, clock.now()))

    return OutputPacer(clock, sink, capacity=capacity, ticker=ticker, try_sink=try_sink)


async def test_a_ticked_pacer_releases_one_frame_per_tick_on_the_same_grid() -> None:
    clock = SimClock()
    ticker = PaceTicker(clock)
    out: list[tuple[int, float]] = []
    pacer = _ticked(clock, ticker, out)
    t0 = clock.now()

    async def body() -> None:
        for i in range(50):
            await pacer.push(F(0, i))
        while len(out) < 50:
            await clock.sleep(0.01)

    await _run_pacer(pacer, body())
    assert [n for n, _ in out] == list(range(50))
    assert [round(t - t0, 6) for _, t in out] == [round(i * 0.02, 6) for i in range(50)]
    assert ticker.wakeups == 49  # the first frame went out as the task started, one wake-up per later frame


async def test_the_ticker_releases_frames_of_many_calls_due_close_together_in_one_wake_up() -> None:
    clock = SimClock()
    ticker = PaceTicker(clock, window=0.005)
    outs: list[list[tuple[int, float]]] = [[] for _ in range(10)]
    pacers = [_ticked(clock, ticker, out) for out in outs]
    tasks = [asyncio.get_running_loop().create_task(p.run()) for p in pacers]
    starts = []
    for p in pacers:  # each call's reply starts 0.5 ms after the previous one's
        starts.append(clock.now())
        for i in range(25):
            await p.push(F(0, i))
        await clock.sleep(0.0005)
    while any(len(o) < 25 for o in outs):
        await clock.sleep(0.01)
    for p in pacers:
        p.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    for start, out in zip(starts, outs, strict=True):
        early = [start + n * 0.02 - t for n, t in out]
        assert all(-1e-9 <= e <= 0.005 + 1e-9 for e in early)  # never late, at most the window early
    assert ticker.wakeups <= 2 * 24  # 240 frames waited for their slots; about one wake-up per 20 ms tick


async def test_push_into_a_ticked_pacer_waits_while_the_queue_is_full() -> None:
    clock = SimClock()
    out: list[tuple[int, float]] = []
    pacer = _ticked(clock, PaceTicker(clock), out, capacity=2)
    t0 = clock.now()

    async def body() -> None:
        for i in range(10):
            await pacer.push(F(0, i))
        assert clock.now() - t0 == pytest.approx(6 * 0.02)
        while len(out) < 10:
            await clock.sleep(0.01)

    await _run_pacer(pacer, body())


async def test_an_interrupt_of_a_ticked_pacer_abandons_the_frame_waiting_for_its_slot_at_once() -> None:
    clock = SimClock()
    out: list[tuple[int, float]] = []
    pacer = _ticked(clock, PaceTicker(clock), out)

    async def body() -> None:
        for i in range(20):
            await pacer.push(F(0, i))
        await clock.sleep(0.05)  # frames 0, 1, 2 released; 3 waits for its slot at 60 ms
        assert pacer.interrupt(1) == 16
        assert pacer.stats.abandoned == 1  # not at its slot: now
        await pacer.push(F(1, 100))
        await clock.sleep(0.1)

    await _run_pacer(pacer, body())
    assert [n for n, _ in out] == [0, 1, 2, 100]
    assert out[-1][1] == pytest.approx(0.08)  # on the grid, where the per-call pacer puts it too


async def test_a_full_sink_makes_a_ticked_pacer_wait_and_resync_with_an_underrun() -> None:
    clock = SimClock()
    out: list[tuple[int, float]] = []
    pacer = _ticked(clock, PaceTicker(clock), out, take=lambda f: f.n != 3)
    t0 = clock.now()

    async def body() -> None:
        for i in range(6):
            await pacer.push(F(0, i))
        while len(out) < 6:
            await clock.sleep(0.01)

    await _run_pacer(pacer, body())
    assert [round(t - t0, 6) for _, t in out] == [0.0, 0.02, 0.04, 0.26, 0.26, 0.28]
    assert pacer.stats.underruns == 1


async def test_a_failed_release_ends_that_pacer_and_the_tick_goes_on_for_the_others() -> None:
    clock = SimClock()
    ticker = PaceTicker(clock)
    good: list[tuple[int, float]] = []

    def broken(f: F) -> bool:
        if f.n == 2:
            raise RuntimeError("sink bug")
        return True

    bad = _ticked(clock, ticker, [], take=broken)
    ok = _ticked(clock, ticker, good)
    loop = asyncio.get_running_loop()
    bad_task, ok_task = loop.create_task(bad.run()), loop.create_task(ok.run())
    for i in range(5):
        await bad.push(F(0, i))
        await ok.push(F(0, i))
    with pytest.raises(RuntimeError, match="sink bug"):
        await bad_task
    while len(good) < 5:
        await clock.sleep(0.01)
    ok.close()
    with pytest.raises(ChannelClosed):
        await ok_task


async def test_a_ticked_pacer_whose_task_ended_releases_nothing_more() -> None:
    clock = SimClock()
    out: list[tuple[int, float]] = []
    pacer = _ticked(clock, PaceTicker(clock), out)
    task = asyncio.get_running_loop().create_task(pacer.run())
    for i in range(5):
        await pacer.push(F(0, i))
    await clock.sleep(0.03)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await clock.sleep(0.2)
    assert [n for n, _ in out] == [0, 1]


def test_a_ticker_needs_a_sink_that_does_not_wait_and_a_window_under_a_frame() -> None:
    from brisvox.core.errors import ConfigError

    async def sink(frame: object) -> None:
        return None

    with pytest.raises(ConfigError, match="try_sink"):
        OutputPacer(SimClock(), sink, ticker=PaceTicker(SimClock()))
    with pytest.raises(ConfigError, match="window"):
        PaceTicker(SimClock(), window=0.02)

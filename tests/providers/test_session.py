from __future__ import annotations

from brisvox.providers.session import SessionBase


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

"""One structured trace event per call on the brisvox.tools logger, never an argument value."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, call, engine, scripted, spec

SECRET = "+90-555-SECRET"


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _captured() -> Iterator[_Capture]:
    handler = _Capture()
    loggers = [logging.getLogger("brisvox.tools"), logging.getLogger("brisvox.agent")]
    old = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for lg, level in old:
            lg.removeHandler(handler)
            lg.setLevel(level)


def _events(cap: _Capture) -> list[logging.LogRecord]:
    return [r for r in cap.records if r.name == "brisvox.tools"]


async def test_every_outcome_is_traced_with_its_fields_and_no_argument_value_anywhere() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("look", RO), scripted(probe, "look", 0.25))
    reg.register(spec("hang", RO, timeout=0.5), scripted(probe, "hang", 9.0))
    reg.register(spec("book", SE, timeout=0.5), scripted(probe, "book", 1.0))
    reg.register(
        spec("typed", params={"type": "object", "properties": {"n": {"type": "integer"}}}),
        scripted(probe, "typed"),
    )
    with _captured() as cap:
        async with engine(reg, clock) as eng:
            ex = await eng.execute(
                [
                    call("t1.0", "look", phone=SECRET),
                    call("t1.1", "hang", phone=SECRET),
                    call("t1.2", "book", phone=SECRET),
                    call("t1.3", "typed", n=SECRET),
                    call("t1.4", "nope", phone=SECRET),
                ],
                1,
                CancelToken(),
            )
            ex.mark_delivered()
            s = await eng.speculate([call("t1.5", "book", phone="other" + SECRET)], 1, CancelToken())
            await clock.sleep(1.0)
            (await eng.commit(s, CancelToken())).mark_delivered()
            await clock.sleep(1.0)
    events = _events(cap)
    settled = {r.call: r for r in events if r.getMessage().startswith("tool call settled")}  # type: ignore[attr-defined]
    outcomes = {cid: r.outcome for cid, r in settled.items()}  # type: ignore[attr-defined]
    assert outcomes == {
        "t1.0": "ok",
        "t1.1": "timed_out",
        "t1.2": "timed_out_running",
        "t1.3": "invalid_arguments",
        "t1.4": "unknown_tool",
        "t1.5": "timed_out_running",
    }
    assert settled["t1.0"].duration_us == 250_000  # type: ignore[attr-defined]
    assert settled["t1.1"].duration_us == 500_000  # type: ignore[attr-defined]
    assert settled["t1.4"].duration_us == 0  # type: ignore[attr-defined]
    for r in settled.values():
        assert r.session == "sess-1" and r.epoch == 1 and r.retries == 1  # type: ignore[attr-defined]
        assert r.levelno == logging.DEBUG
    held = [r for r in events if r.getMessage().startswith("tool call held")]
    assert [r.call for r in held] == ["t1.5"]  # type: ignore[attr-defined]
    late = [r for r in events if r.getMessage().startswith("late_result")]
    assert sorted(r.call for r in late) == ["t1.2", "t1.5"]  # type: ignore[attr-defined]
    for r in cap.records:
        assert SECRET not in r.getMessage()
        assert all(SECRET not in repr(v) for v in vars(r).values())


async def test_side_effect_executions_are_logged_at_info_with_the_key_digest() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("book", SE), scripted(probe, "book", 0.0))
    with _captured() as cap:
        async with engine(reg, clock) as eng:
            (await eng.execute([call("t1.0", "book", phone=SECRET)], 1, CancelToken())).mark_delivered()
    infos = [r for r in cap.records if r.levelno == logging.INFO]
    assert len(infos) == 1
    from brisvox.agent.tools.store import IdempotencyKey

    assert IdempotencyKey("sess-1", 1, "t1.0").hex() in infos[0].getMessage()
    assert "book" in infos[0].getMessage() and SECRET not in infos[0].getMessage()


async def test_a_confirmed_execution_is_logged_with_the_request_it_confirms() -> None:
    from brisvox.agent.context import ToolCall

    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("transfer_call", SE, confirm=True), scripted(probe, "transfer_call", 0.0))
    with _captured() as cap:
        async with engine(reg, clock) as eng:
            (await eng.execute([call("t1.0", "transfer_call", number=SECRET)], 1, CancelToken())).mark_delivered()
            eng.confirmations.note_user_turn()
            confirm = ToolCall(id="t2.0", name="confirm_pending", arguments={"call_id": "t1.0"})
            (await eng.execute([confirm], 2, CancelToken())).mark_delivered()
    infos = [r.getMessage() for r in cap.records if r.levelno == logging.INFO]
    assert len(infos) == 1 and "confirms=t1.0" in infos[0] and SECRET not in infos[0]

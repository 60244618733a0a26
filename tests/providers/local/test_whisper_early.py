"""The Whisper session decodes while the caller speaks: the early decode, interims, and a final
that is always the decode of the whole utterance (a fake model: no model file, fast)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.core.tasks import TaskScope
from brisvox.inference import InferencePool, PoolConfig
from brisvox.providers.local.whisper import SAMPLE_RATE, WhisperConfig, WhisperSttSession, _Model, _Result
from brisvox.providers.stt import SttEvent, Transcript

FRAME = 640  # 20 ms


def tone(seconds: float) -> bytes:
    t = np.arange(round(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16).tobytes()


def quiet(seconds: float) -> bytes:
    return bytes(2 * round(seconds * SAMPLE_RATE))


def digest(pcm: bytes) -> str:
    return hashlib.sha256(pcm).hexdigest()[:16] + "."


class FakeModel(_Model):
    """Answers each decode with a digest of exactly the audio it was given; can hold a decode."""

    def __init__(self) -> None:  # no model file
        self.calls: list[bytes] = []
        self.entered = threading.Event()
        self.hold = threading.Event()
        self.hold.set()

    def transcribe(self, pcm: bytes) -> _Result:
        self.entered.set()
        self.hold.wait(10)
        self.calls.append(pcm)
        return _Result(digest(pcm), 0.9)


async def until(what: Callable[[], bool]) -> None:
    clock = SimClock()
    for _ in range(2000):
        if what():
            return
        await clock.sleep(0.01)
    raise AssertionError("condition not reached")


async def send(session: WhisperSttSession, pcm: bytes) -> None:
    for i in range(0, len(pcm), FRAME):
        await session.send_audio(pcm[i : i + FRAME])


async def send_live(session: WhisperSttSession, pcm: bytes) -> None:
    """Frame by frame, each decode finishing before the next frame (the worst case for the final)."""
    for i in range(0, len(pcm), FRAME):
        await session.send_audio(pcm[i : i + FRAME])
        await until(lambda: not session._early_queued)


async def collect(session: WhisperSttSession, out: list[SttEvent]) -> None:
    async for event in session:
        out.append(event)


def finals(events: list[SttEvent]) -> list[Transcript]:
    return [e for e in events if isinstance(e, Transcript) and e.is_final]


async def run_session(config: WhisperConfig, script: Callable[[WhisperSttSession, FakeModel], object],
                      finals_wanted: int = 1, interims: bool = True) -> tuple[list[SttEvent], FakeModel, WhisperSttSession]:
    model = FakeModel()
    events: list[SttEvent] = []
    async with InferencePool(PoolConfig(name="test-whisper", threads=1, jobs_per_thread=4)) as pool:
        session = WhisperSttSession(model, pool, config, interims=interims)
        async with session, TaskScope("t") as scope:
            scope.spawn(collect(session, events), name="reader")
            await script(session, model)  # type: ignore[misc]
            await until(lambda: len(finals(events)) >= finals_wanted)
            await session.aclose()
    return events, model, session


UTTERANCE = quiet(0.3) + tone(1.2)
CONFIG = WhisperConfig(model_dir="/unused")
QUIET_BYTES = 2 * round(0.08 * SAMPLE_RATE)


async def test_a_final_after_quiet_is_the_early_decode_and_costs_no_second_decode() -> None:
    async def script(session: WhisperSttSession, model: FakeModel) -> None:
        await send(session, UTTERANCE + quiet(0.12))  # the early decode starts 80 ms into the quiet
        await until(lambda: session.early_decodes == 1)
        await session.finalize()  # the VAD's stop comes after its 100 ms hangover

    events, model, session = await run_session(CONFIG, script)
    [final] = finals(events)
    assert final.text == digest(UTTERANCE + quiet(0.08)) and final.from_finalize
    assert len(model.calls) == 1 and session.early_finals == 1


async def test_an_early_decode_still_running_at_the_stop_becomes_the_final() -> None:
    async def script(session: WhisperSttSession, model: FakeModel) -> None:
        model.hold.clear()  # the decode is slow: still running when finalize() comes
        await send(session, UTTERANCE + quiet(0.12))
        # (Virtual time stands still while a pool job runs, so wait on the thread itself.)
        for _ in range(100):
            await asyncio.sleep(0)  # the worker submits the early decode
        assert model.entered.wait(5)
        await session.finalize()
        model.hold.set()

    events, model, session = await run_session(CONFIG, script)
    assert [f.text for f in finals(events)] == [digest(UTTERANCE + quiet(0.08))]
    assert len(model.calls) == 1 and session.early_finals == 1


async def test_sound_after_the_early_decode_makes_the_final_decode_the_whole_utterance_again() -> None:
    more = tone(0.4)

    async def script(session: WhisperSttSession, model: FakeModel) -> None:
        await send(session, UTTERANCE + quiet(0.12))
        await until(lambda: session.early_decodes == 1)
        await send(session, more)  # the caller goes on: the early result is stale
        await session.finalize()

    events, model, session = await run_session(CONFIG, script)
    assert [f.text for f in finals(events)] == [digest(UTTERANCE + quiet(0.12) + more)]
    assert len(model.calls) == 2 and session.early_finals == 0


@pytest.mark.parametrize("every", [None, 0.4])
async def test_the_final_equals_the_decode_of_the_whole_utterance_whatever_was_decoded_before(
    every: float | None,
) -> None:
    """Interim decodes every 0.4 s of sound or none: the final is the same decode of the whole."""
    speech = quiet(0.2) + tone(0.7) + quiet(0.05) + tone(0.9)

    async def script(session: WhisperSttSession, model: FakeModel) -> None:
        await send_live(session, speech)
        await send(session, quiet(0.1))
        await session.finalize()

    events, model, _session = await run_session(WhisperConfig(model_dir="/unused", partial_every=every), script)
    assert [f.text for f in finals(events)] == [digest(speech + quiet(0.08))]
    interims = [e for e in events if isinstance(e, Transcript) and not e.is_final]
    if every is None:
        assert interims == []
    else:
        assert len(interims) >= 3  # during the sound, each of a longer prefix
        assert all(i.text in {digest(c) for c in model.calls} for i in interims)
        assert [len(c) for c in model.calls] == sorted(len(c) for c in model.calls)


async def test_interims_are_not_sent_when_the_call_asked_for_none() -> None:
    async def script(session: WhisperSttSession, model: FakeModel) -> None:
        await send_live(session, UTTERANCE + quiet(0.1))
        assert session.early_decodes >= 3
        await session.finalize()

    events, _model, _session = await run_session(WhisperConfig(model_dir="/unused", partial_every=0.4), script,
                                                interims=False)
    assert [e.is_final for e in events if isinstance(e, Transcript)] == [True]


async def test_without_the_gate_the_whole_buffer_is_decoded_once_at_finalize() -> None:
    async def script(session: WhisperSttSession, model: FakeModel) -> None:
        await send(session, UTTERANCE + quiet(0.5))
        await session.finalize()

    events, model, session = await run_session(WhisperConfig(model_dir="/unused", trailing_quiet=None), script)
    assert [f.text for f in finals(events)] == [digest(UTTERANCE + quiet(0.5))]
    assert len(model.calls) == 1 and session.early_decodes == 0


async def test_a_segment_with_no_sound_is_transcribed_whole_and_never_early() -> None:
    hush = (np.full(SAMPLE_RATE, 30, dtype=np.int16)).tobytes()  # -61 dBFS: below the gate

    async def script(session: WhisperSttSession, model: FakeModel) -> None:
        await send(session, hush)
        await session.finalize()

    events, _model, session = await run_session(CONFIG, script)
    assert [f.text for f in finals(events)] == [digest(hush)]
    assert session.early_decodes == 0


async def test_each_utterance_gets_its_own_final_in_order() -> None:
    second = tone(0.5)

    async def script(session: WhisperSttSession, model: FakeModel) -> None:
        await send(session, UTTERANCE + quiet(0.12))
        await session.finalize()
        await send(session, quiet(0.2) + second + quiet(0.12))
        await session.finalize()

    events, _model, _session = await run_session(CONFIG, script, finals_wanted=2)
    assert [f.text for f in finals(events)] == [digest(UTTERANCE + quiet(0.08)),
                                                digest(quiet(0.2) + second + quiet(0.08))]


@pytest.mark.parametrize("bad", [{"trailing_quiet": 0.0}, {"trailing_quiet": 2.0}, {"partial_every": 0.05},
                                 {"partial_every": 1.0, "trailing_quiet": None}])
def test_early_decoding_settings_out_of_range_are_a_config_error(bad: dict[str, float | None]) -> None:
    with pytest.raises(ConfigError, match="WhisperConfig"):
        WhisperConfig(model_dir=Path("/unused"), **bad)  # type: ignore[arg-type]

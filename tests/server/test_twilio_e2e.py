"""End to end: ``brisvox serve`` with the demo agent (scripted LLM, local models) answers a phone call
placed by ``streamdouble``, a Twilio Media Streams simulator, with an 8 kHz mu-law recording; the
caller talks over the answer, and the call's log shows the context kept what the phone played."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from brisvox.audio import read_wav, write_wav
from tests._speech import espeak_wav
from tests.server._demo_server import DemoServer, need_models
from tests.server._phone_calls import ASK, ASK_TRAIL, BARGE_IN, Playout, assert_context_holds_what_was_played
from tests.server.test_demo_e2e import GREETING_WAIT, voiced_seconds
from tests.server.test_telnyx_e2e import TOLERANCE

MULAW_SECOND = 8000  # mu-law bytes per second of Twilio audio


def _streamdouble() -> str:
    exe = shutil.which("streamdouble", path=str(Path(sys.executable).parent)) or shutil.which("streamdouble")
    if exe is None:
        pytest.skip("streamdouble is not installed (the test extra)")
    return exe


def test_a_twilio_call_gets_a_spoken_answer_with_marks_echoed_and_a_barge_in_cuts_it_to_what_was_played(
        tmp_path: Path) -> None:
    need_models()
    exe = _streamdouble()
    request = espeak_wav(ASK, tmp_path, rate=8000, speed=150, lead=GREETING_WAIT, trail=ASK_TRAIL)
    barge = espeak_wav(BARGE_IN, tmp_path, rate=8000, speed=150, lead=0.0, trail=6.0)
    wav = tmp_path / "in8k.wav"
    write_wav(wav, request.pcm + barge.pcm, 8000)
    # The barge-in lands inside the reply only if the local STT answers within its usual time; on a
    # loaded machine it can come before the reply starts (no cut to see), so the call is placed at most twice.
    for attempt in (1, 2):
        report, reply, log, code, call, playout = _call(exe, wav, tmp_path)
        ended = re.search(r"call CA\w+ ended \([^)]*\): (\d+) turns, (\d+) interrupts", log)
        if report["clears_received"] >= 1 and ended is not None and int(ended.group(2)) >= 1:
            break
        print(f"attempt {attempt}: no barge-in seen (clears {report['clears_received']})\n{log}")
    assert report["violations"] == [] and report["unknown_events"] == [], report
    assert voiced_seconds(reply.pcm, reply.sample_rate) > 2.0, (report, log)  # the greeting and an answer
    # every mark is echoed but the one that may still be queued with the last audio when the caller hangs up
    assert report["marks_received"] >= 2 and report["marks_received"] - 1 <= report["marks_echoed"], report
    assert report["clears_received"] >= 1, (report, log)  # the barge-in cut the reply
    ended = re.search(r"call CA\w+ ended \([^)]*\): (\d+) turns, (\d+) interrupts", log)
    assert ended is not None and int(ended.group(1)) >= 1 and int(ended.group(2)) >= 1, log
    # streamdouble plays the audio as it arrives (no buffer): the marks' echoes say so, so the
    # context keeps the seconds released before the clear, which the phone played (test_telnyx_e2e's
    # phone holds a second of audio, which must not count).
    assert_context_holds_what_was_played(call, playout, tolerance=TOLERANCE)
    assert code == 0, log


def _call(exe: str, wav: Path, tmp_path: Path) -> tuple[dict[str, Any], Any, str, int, dict[str, Any], Playout]:
    server = DemoServer("scripted")
    trace = tmp_path / "trace.jsonl"
    try:
        url = server.url().replace("http://", "ws://") + "/twilio"
        done = subprocess.run([exe, "call", url, "--audio", str(wav), "--out", str(tmp_path / "reply.wav"),
                               "--param", "agent=demo", "--quiet-period", "3", "--max-drain", "20", "--json",
                               "--trace", str(trace)],
                              capture_output=True, text=True, timeout=120)
        call = server.only_call()
    finally:
        code = server.stop()
    return json.loads(done.stdout), read_wav(tmp_path / "reply.wav"), server.log(), code, call, _played(trace)


def _played(trace: Path) -> Playout:
    """streamdouble's playout of the bot's audio, replayed from its trace (it plays each ``media`` as it
    arrives, after what it holds, and drops what it holds at a ``clear``)."""
    playout = Playout()
    for line in trace.read_text().splitlines():
        frame = json.loads(line)
        if frame["dir"] != "in":
            continue
        if frame["event"] == "media":  # bytes: the base64 payload's length
            playout.audio(frame["t"], frame["bytes"] * 3 / 4 / MULAW_SECOND)
        elif frame["event"] == "clear":
            playout.clear(frame["t"])
    return playout

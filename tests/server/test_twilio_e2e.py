"""End to end: ``brisvox serve`` with the demo agent (scripted LLM, local models) answers a phone call
placed by ``streamdouble``, a Twilio Media Streams simulator, with an 8 kHz mu-law recording."""

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
from tests.server.test_demo_e2e import GREETING_WAIT, REQUEST, voiced_seconds

BARGE_IN = "Wait, sorry, make it five people instead."


def _streamdouble() -> str:
    exe = shutil.which("streamdouble", path=str(Path(sys.executable).parent)) or shutil.which("streamdouble")
    if exe is None:
        pytest.skip("streamdouble is not installed (the test extra)")
    return exe


def test_a_twilio_call_gets_a_spoken_answer_with_marks_echoed_and_a_barge_in_cuts_it(tmp_path: Path) -> None:
    need_models()
    exe = _streamdouble()
    # the barge-in starts 3.5 s after the request: inside the reply whether the local STT is fast or slow
    request = espeak_wav(REQUEST, tmp_path, rate=8000, speed=150, lead=GREETING_WAIT, trail=3.5)
    barge = espeak_wav(BARGE_IN, tmp_path, rate=8000, speed=150, lead=0.0, trail=6.0)
    wav = tmp_path / "in8k.wav"
    write_wav(wav, request.pcm + barge.pcm, 8000)
    # The barge-in lands inside the reply only if the local STT answers within its usual time; on a
    # loaded machine it can come before the reply starts (no cut to see), so the call is placed at most twice.
    for attempt in (1, 2):
        report, reply, log, code = _call(exe, wav, tmp_path)
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
    assert code == 0, log


def _call(exe: str, wav: Path, tmp_path: Path) -> tuple[dict[str, Any], Any, str, int]:
    server = DemoServer("scripted")
    try:
        url = server.url().replace("http://", "ws://") + "/twilio"
        done = subprocess.run([exe, "call", url, "--audio", str(wav), "--out", str(tmp_path / "reply.wav"),
                               "--param", "agent=demo", "--quiet-period", "3", "--max-drain", "20", "--json"],
                              capture_output=True, text=True, timeout=120)
    finally:
        code = server.stop()
    return json.loads(done.stdout), read_wav(tmp_path / "reply.wav"), server.log(), code

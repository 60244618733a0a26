"""The call timeline of a real call: ``/api/calls``, the ``/calls/<id>`` page in headless Chromium,
and ``brisvox tail`` under a pty, against ``brisvox serve``."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brisvox.server.tail import render
from brisvox.transport.websocket.client import ClientOptions, run
from tests._speech import espeak_wav
from tests.server._call_page import CHROMIUM, draw_call_page
from tests.server._nodes import ROOT, Node, get

AGENT = ('[agent]\nname = "host"\nprompt = "You take table bookings."\ngreeting = "Trattoria, hello!"\n'
         '[llm]\nprovider = "scripted"\n')


def test_tail_draws_a_line_per_call_and_marks_a_stage_over_its_budget() -> None:
    calls = [{"call_id": "ws-1-aaaa", "transport": "websocket", "live": True, "turns": 2,
              "last_turn": {"stages": {"turn_detection": 0.42, "llm_first_token": 0.9, "first_audio": 0.1,
                                       "voice_to_voice": 1.42}}},
             {"call_id": "tw-9", "transport": "twilio", "live": False, "outcome": "peer_hangup", "turns": 0,
              "last_turn": None}]
    lines = render("http://h", calls, "09:00:00")
    assert lines[0] == "brisvox tail http://h: 1 live, 1 ended (09:00:00)"
    assert lines[2].split() == ["ws-1-aaaa", "websocket", "live", "2", "420", "900!", "100", "1420"]
    assert lines[3].split() == ["tw-9", "twilio", "peer_hangup", "0", "-", "-", "-", "-"]
    assert render("http://h", [], "09:00:00")[-1] == "(no calls yet)"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, str]]:
    """One served call with a spoken request (a turn, the scripted host's answer), ended."""
    tmp = tmp_path_factory.mktemp("calls")
    agent = tmp / "host.toml"
    agent.write_text(AGENT)
    speech = espeak_wav("What time do you open tonight?", tmp, lead=2.5, trail=4.0)
    node = Node(agent)
    try:
        result = asyncio.run(run(ClientOptions(url=node.url.replace("http://", "ws://") + "/ws", audio=speech,
                                               linger=1.0, connect_timeout=10.0)))
        assert result.ok and result.call_id, node.log()
        _until_ended(node, result.call_id)
        yield node, result.call_id
    finally:
        node.kill()


def _until_ended(node: Node, call_id: str, within: float = 30.0) -> None:
    """The client has hung up; the server ends the call after its engine returns (the last events
    forwarded, the report logged), later on a busy machine (after the demo page's test)."""
    deadline = time.monotonic() + within
    while True:
        listed = [c for c in _api(node, "/api/calls")["calls"] if c["call_id"] == call_id]
        if listed and not listed[0]["live"]:
            return
        assert time.monotonic() < deadline, (listed, node.log())
        time.sleep(0.1)


def _api(node: Node, path: str) -> Any:
    status, body = get(f"{node.url}{path}")
    assert status == 200, (status, body)
    return json.loads(body)


@pytest.mark.realtime
def test_an_ended_call_is_listed_with_its_turns_and_their_stages(served: tuple[Node, str]) -> None:
    node, call_id = served
    (listed,) = [c for c in _api(node, "/api/calls")["calls"] if c["call_id"] == call_id]
    assert not listed["live"] and listed["outcome"] == "peer_hangup" and listed["turns"] >= 1
    rows = _api(node, f"/api/calls/{call_id}")["turn_rows"]
    assert any(r["speech_ended"] is not None and r["ended"] > r["speech_ended"] for r in rows), rows
    answered = [r for r in rows if r["first_audio"] is not None]  # the scripted host answered the request
    assert answered and answered[-1]["stages"]["turn_end_to_audio"] > 0 and answered[-1]["rounds"], rows
    assert get(f"{node.url}/api/calls/no-such-call")[0] == 404


@pytest.mark.realtime
def test_the_call_page_draws_the_turns_as_a_waterfall_in_chromium(served: tuple[Node, str], tmp_path: Path) -> None:
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (apt-get install chromium; `make test` does it)")
    node, call_id = served
    drawn = draw_call_page(node.url, call_id, tmp_path / "call.png")
    labels = drawn.labels
    assert labels[0].startswith("greeting: ") and all(label.startswith("turn ") for label in labels[1:]), labels
    assert any(" ms" in label for label in labels), labels  # the answered turn's time
    assert drawn.bars >= 3  # turn detection, first token, first audio (and the playout)
    assert "ended (peer_hangup)" in drawn.meta


@pytest.mark.realtime
def test_tail_under_a_pty_shows_the_call_and_ends_on_ctrl_c(served: tuple[Node, str]) -> None:
    node, call_id = served
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "brisvox", "tail", node.url, "--interval", "0.2"],
                            stdin=child, stdout=child, stderr=child, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, start_new_session=True)
    os.close(child)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while call_id.encode() not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                seen += os.read(main, 65536)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)
    screen = seen.decode(errors="replace")
    assert "\x1b[2J" in screen  # redrawn, not scrolled
    assert call_id in screen and "peer_hangup" in screen

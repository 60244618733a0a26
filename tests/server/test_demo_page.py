"""The demo page in headless Chromium (slow, real time): a fake microphone speaks to the demo agent.

Chromium (Debian ``chromium``) is driven by Playwright with no browser download; its
fake microphone plays an espeak-ng request (1.5 s of leading silence: the file starts
playing at getUserMedia, before the call is up), then talks over the agent a few times.
The page calls over WebRTC (its default; the server offers 127.0.0.1 only) and must show the caller's transcript, the agent's reply and the tool call, and then
a reply cut by a barge-in with the part the caller heard (``bot_heard``), and the call's waterfall.  The screenshots
go to ``artifacts/demo_page.png`` and ``artifacts/demo_page_barge_in.png``.

The interruptions are repeated because the agent's reply time on a busy machine is not
known in advance: whichever one lands while the agent speaks is a barge-in.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from brisvox.audio import write_wav
from tests._speech import espeak_wav
from tests.server._demo_server import ROOT, DemoServer, chromium_flags, need_models

CHROMIUM = "/usr/bin/chromium"
REQUEST = "I would like a table for four people tomorrow at seven."
AGAIN = "A table for four people tomorrow at seven please."
OVER = "Wait, wait. My name is Anna Smith."

pytestmark = pytest.mark.slow

WATERFALL_COMPLETE = """() => {
  const svg = document.querySelector('#waterfall');
  const labels = [...svg.querySelectorAll('text.turn-label')].map((t) => t.textContent);
  const tools = [...svg.querySelectorAll('text.tool-label')].map((t) => t.textContent);
  return labels.some((l) => l.endsWith(' ms')) && tools.some((t) => t.startsWith('check_availability'))
    && svg.querySelectorAll('rect.bar.cut').length > 0;
}"""


def test_the_demo_page_shows_the_callers_words_the_agents_reply_and_a_barge_in(tmp_path: Path) -> None:
    need_models()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
    if shutil.which(CHROMIUM) is None:
        pytest.skip("chromium is not installed (apt-get install chromium; `make test` does it)")
    first = espeak_wav(REQUEST, tmp_path, speed=150, lead=1.5, trail=7.0)
    again = espeak_wav(AGAIN, tmp_path, speed=150, lead=0.0, trail=3.5)
    over = espeak_wav(OVER, tmp_path, speed=170, lead=0.0, trail=2.5)
    wav = tmp_path / "microphone.wav"
    write_wav(wav, first.pcm + again.pcm + over.pcm * 5 + bytes(first.sample_rate * 2 * 8), first.sample_rate)
    artifacts = ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    server = DemoServer()
    try:
        url = server.url()
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=chromium_flags(wav)
            )
            try:
                page = browser.new_page()
                page.goto(f"{url}/?raw=1")
                page.wait_for_selector("#agent:has-text('scripted')", timeout=10_000)
                page.click("#talk")
                page.wait_for_selector("#status:has-text('in call over WebRTC')", timeout=15_000)
                user = page.locator(".msg.user:not(.interim)").first
                user.wait_for(timeout=45_000)
                bot = page.locator(".msg.bot").first
                bot.wait_for(timeout=30_000)
                page.wait_for_selector(".msg.tool", timeout=30_000)
                page.wait_for_selector(".latency", timeout=30_000)
                page.screenshot(path=str(artifacts / "demo_page.png"), full_page=True)
                user_texts = page.locator(".msg.user").all_inner_texts()
                bot_texts = page.locator(".msg.bot").all_inner_texts()
                tool_texts = page.locator(".msg.tool").all_inner_texts()
                # A reply the caller talked over: marked, with the unheard rest struck through.
                cut = page.locator(".msg.bot.interrupted:has(s.unheard)").first
                cut.wait_for(timeout=60_000)
                page.screenshot(path=str(artifacts / "demo_page_barge_in.png"), full_page=True)
                cut_text = cut.inner_text()
                unheard = cut.locator("s.unheard").first.inner_text()
                # The call's waterfall under the transcript (static/waterfall.js, from /api/calls/<id>).
                # Redrawn every second: wait for the draw that holds the answer, its tool call and the cut.
                page.wait_for_function(WATERFALL_COMPLETE, timeout=15_000)
                turn_labels = page.locator("#waterfall text.turn-label").all_text_contents()
                tool_labels = page.locator("#waterfall text.tool-label").all_text_contents()
                cuts = page.locator("#waterfall rect.bar.cut").count()
                timeline_link = page.get_attribute("#call-link", "href") or ""
                page.click("#talk")  # hang up
                page.wait_for_selector("#status:has-text('call')", timeout=10_000)
            finally:
                browser.close()
    finally:
        code = server.stop()
    assert any("table" in t.lower() for t in user_texts), user_texts
    assert any(t.strip() for t in bot_texts), bot_texts
    assert any("check_availability" in t for t in tool_texts), tool_texts
    assert unheard.strip() and unheard.strip() in cut_text, (cut_text, unheard)
    # Every row: the greeting, the request's turn answered (its time), its tool call, the barge-in's cut.
    assert turn_labels[0].startswith("greeting: "), turn_labels
    assert all(label.startswith("turn ") for label in turn_labels[1:]) and len(turn_labels) >= 2, turn_labels
    assert any(label.endswith(" ms") for label in turn_labels[1:]), turn_labels
    assert any("(barge-in)" in label for label in turn_labels), turn_labels
    assert "check_availability (ok)" in tool_labels and cuts >= 1, (tool_labels, cuts)
    assert timeline_link.startswith("/calls/") and len(timeline_link) > len("/calls/"), timeline_link
    assert code == 0, server.log()

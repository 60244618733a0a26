"""The ``/calls/<id>`` page of a served call, drawn by headless Chromium (Debian ``chromium``,
driven by Playwright): what it drew, and a screenshot (the page test's and
``bench/call_timeline_screenshot.py``'s)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"


@dataclass(frozen=True, slots=True)
class DrawnCall:
    labels: list[str]  # the turn rows' labels, in order
    tools: list[str]  # the tool rows' labels
    bars: int
    cuts: int  # the red marks of replies the caller cut
    meta: str  # the line under the title: transport, start, how it ended


def draw_call_page(url: str, call_id: str, shot: Path) -> DrawnCall:
    """Open ``{url}/calls/{call_id}``, wait for its first draw and screenshot the whole page to ``shot``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 200})
            page.goto(f"{url}/calls/{call_id}")
            page.wait_for_selector("body[data-loaded='1']", timeout=15_000)
            drawn = DrawnCall(labels=page.locator("text.turn-label").all_text_contents(),
                              tools=page.locator("text.tool-label").all_text_contents(),
                              bars=page.locator("rect.bar").count(), cuts=page.locator("rect.bar.cut").count(),
                              meta=page.locator("#meta").text_content() or "")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    return drawn

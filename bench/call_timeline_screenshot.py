"""Makes docs/images/call_timeline.png, the waterfall of docs/OBSERVABILITY.md, from the current page.

Not a measurement: it serves the demo agent (``brisvox serve``, the scripted host, the local STT
and TTS, as the demo page test does), calls it over the WebSocket with espeak-ng speech (the
caller talks over the greeting, asks for a table, which calls ``check_availability``, and cuts
the answer), then opens ``/calls/<id>`` in headless Chromium and screenshots the page.  Needs
the local extra and its models, espeak-ng, sox, Playwright and Debian's chromium (``make test``
installs them).  Where the cut lands depends on the machine's speed: the script says which
rows it drew, and ``--out`` writes elsewhere to look before replacing the docs' image.

    python bench/call_timeline_screenshot.py [--out docs/images/call_timeline.png]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests._speech, tests.server

from tests._speech import espeak_wav
from tests.server._call_page import draw_call_page
from tests.server._demo_server import DemoServer

from brisvox.audio.wav import WavAudio
from brisvox.transport.websocket.client import ClientOptions, run

ROOT = Path(__file__).resolve().parent.parent
WORDS = (("I would like a table for four people tomorrow at seven.", 1.2, 3.0),  # (text, silence before, after)
         ("Wait, wait. My name is Anna Smith.", 0.0, 4.0))


def caller_audio(directory: Path) -> WavAudio:
    """The caller's side: over the greeting, the request, then over the answer."""
    parts = [espeak_wav(text, directory, lead=lead, trail=trail, speed=150) for text, lead, trail in WORDS]
    return WavAudio(b"".join(p.pcm for p in parts), parts[0].sample_rate)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "call_timeline.png")
    args = parser.parse_args(argv)
    server = DemoServer()
    try:
        url = server.url()
        with tempfile.TemporaryDirectory() as tmp:
            audio = caller_audio(Path(tmp))
        result = asyncio.run(run(ClientOptions(url=url.replace("http://", "ws://") + "/ws", audio=audio,
                                               linger=1.0, connect_timeout=10.0)))
        if not result.ok or result.call_id is None:
            print(f"the call failed: {result.failure}\n{server.log()}", file=sys.stderr)
            return 1
        drawn = draw_call_page(url, result.call_id, args.out)
    finally:
        code = server.stop()
    rows = [*drawn.labels, *drawn.tools]
    print(f"{args.out}: {len(rows)} rows, {drawn.cuts} cut(s)", *rows, sep="\n  ")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

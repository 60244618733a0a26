"""Headless Chromium calls the server over WebRTC (slow, real time; docs/WEBRTC.md).

Chromium (Debian ``chromium``, driven by Playwright with no browser download) gets a fake
microphone fed from an espeak-ng WAV and a small page of this test that does WHIP: POST the
offer, set the answer, play the remote track and measure its level in the page.  The server
runs the transport's echo engine, so the audio that comes back is the caller's own speech,
through Opus both ways.

The calls run inside a network namespace that holds only loopback (``unshare -n``), so
neither side can offer another address: :func:`test_browser_calls_in_a_loopback_only_namespace`
re-runs this file there (as root) and the ``test_inner_*`` tests run only inside it.
Where ``unshare -n`` is not permitted the inner tests run on the host, on 127.0.0.1 only
(the server offers nothing else; Chromium may offer its other addresses too), and the
outer test says so.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from brisvox.audio import write_wav
from brisvox.core.clock import SystemClock, bounded
from brisvox.core.secret import Secret
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.settings import Settings
from brisvox.server.webrtc_endpoint import TurnConfig, WebRtcEndpoint, WhipConfig
from brisvox.server.ws_endpoint import TransportEndpoint
from tests._speech import espeak_wav
from tests.server._demo_server import chromium_flags
from tests.server._echo import echo_runner
from tests.server._webrtc import whip_server

CHROMIUM = "/usr/bin/chromium"
NETNS_VARIABLE = "BRISVOX_WEBRTC_NETNS"
ROOT = Path(__file__).resolve().parents[2]
TURN_SECRET = "turn-test-secret"

PAGE = """<!doctype html><html><body><audio id="out" autoplay></audio><script>
window.result = {state: "new", maxRms: 0, location: null, error: null};
async function call(relay) {
  try {
    const stream = await navigator.mediaDevices.getUserMedia(
      {audio: {echoCancellation: false, noiseSuppression: false, autoGainControl: false}});
    let config = {};
    if (relay) {
      const ice = await (await fetch('/whip/ice')).json();
      config = {iceServers: ice.iceServers, iceTransportPolicy: 'relay'};
    }
    const pc = new RTCPeerConnection(config);
    window.pc = pc;
    pc.addTrack(stream.getAudioTracks()[0], stream);
    pc.ontrack = (ev) => {
      const el = document.getElementById('out');
      el.srcObject = new MediaStream([ev.track]);
      el.play();
      const ctx = new AudioContext();
      const analyser = ctx.createAnalyser();
      analyser.fftSize = 2048;
      ctx.createMediaStreamSource(el.srcObject).connect(analyser);
      const buf = new Float32Array(2048);
      setInterval(() => {
        analyser.getFloatTimeDomainData(buf);
        let sum = 0;
        for (const v of buf) sum += v * v;
        window.result.maxRms = Math.max(window.result.maxRms, Math.sqrt(sum / buf.length));
      }, 50);
    };
    pc.onconnectionstatechange = () => { window.result.state = pc.connectionState; };
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise((done) => {
      if (pc.iceGatheringState === 'complete') return done();
      pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === 'complete') done(); };
      setTimeout(done, 5000);
    });
    const res = await fetch('/whip', {method: 'POST', headers: {'Content-Type': 'application/sdp'},
                                      body: pc.localDescription.sdp});
    if (res.status !== 201) { window.result.error = res.status + ' ' + await res.text(); return; }
    window.result.location = res.headers.get('Location');
    window.result.answer = await res.text();
    await pc.setRemoteDescription({type: 'answer', sdp: window.result.answer});
  } catch (e) { window.result.error = String(e); }
}
async function hangup() {
  await fetch(window.result.location, {method: 'DELETE'});
  window.pc.close();
}
async function localCandidateType() {
  const stats = await window.pc.getStats();
  let pair = null;
  stats.forEach((s) => { if (s.type === 'candidate-pair' && s.nominated && s.state === 'succeeded') pair = s; });
  return pair ? stats.get(pair.localCandidateId).candidateType : null;
}
</script></body></html>"""


def _need_browser() -> Any:
    async_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed (the test extra)")
    if shutil.which(CHROMIUM) is None:
        pytest.skip("chromium is not installed (apt-get install chromium; `make test` does it)")
    return async_api


@pytest.mark.slow
def test_browser_calls_in_a_loopback_only_namespace() -> None:
    _need_browser()
    inner = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__)), "-k", "inner"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", NETNS_VARIABLE: "1"}
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True, check=False) \
        if shutil.which("unshare") else None
    if probe is not None and probe.returncode == 0:
        command = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *inner]
    else:
        why = probe.stderr.strip() if probe is not None else "unshare is not installed"
        print(f"unshare -n is not permitted here ({why}): the browser calls run on the host's 127.0.0.1")
        env[NETNS_VARIABLE] = "host"
        command = inner
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\b2 passed", done.stdout), done.stdout[-2000:]


inner = pytest.mark.skipif(os.environ.get(NETNS_VARIABLE) is None,
                           reason="runs inside the loopback-only namespace (test_browser_calls_in_a_loopback_only_"
                                  "namespace runs it)")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def chromium(tmp_path: Path) -> AsyncIterator[Any]:
    async_api = _need_browser()
    speech = espeak_wav("Hello, I would like to book a table for two.", tmp_path, lead=1.5, trail=1.0)
    wav = tmp_path / "microphone.wav"
    write_wav(wav, speech.pcm * 3, speech.sample_rate)
    async with async_api.async_playwright() as p:
        context = await p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=chromium_flags(wav))
        try:
            yield context
        finally:
            await context.close()


async def _talk(tmp_path: Path, config: WhipConfig, relay: bool) -> tuple[dict[str, Any], str | None, WebRtcEndpoint]:
    clock = SystemClock()
    async def page(request: Request) -> Response:
        return HTMLResponse(PAGE)

    async with whip_server(config, extra_routes=(Route("/", page),)) as (base, endpoint), \
            chromium(tmp_path) as browser:
        page = await browser.new_page()
        await page.goto(f"{base}/")
        await page.evaluate(f"call({'true' if relay else 'false'})")
        await page.wait_for_function("window.result.state === 'connected' || window.result.error", timeout=15_000)
        end = clock.now() + 12
        result: dict[str, Any] = await page.evaluate("window.result")
        while clock.now() < end and result["maxRms"] < 0.02 and not result["error"]:
            await clock.sleep(0.2)
            result = await page.evaluate("window.result")
        kind = await page.evaluate("localCandidateType()")
        await page.evaluate("hangup()")
        while endpoint.pending_calls:
            await clock.sleep(0.05)
        return result, kind, endpoint


@inner
@pytest.mark.realtime
async def test_inner_the_pages_call_reaches_the_engine_and_its_audio_comes_back(tmp_path: Path) -> None:
    result, _, endpoint = await _talk(tmp_path, WhipConfig(), relay=False)
    assert result["error"] is None and result["state"] == "connected", result
    assert endpoint.stats.calls_started == 1 and endpoint.stats.frames_in > 25
    assert result["maxRms"] > 0.02, f"the echoed speech is not heard in the page: {result}"
    assert endpoint.stats.closes == {"hangup": 1}
    candidates = [line for line in result["answer"].splitlines() if line.startswith("a=candidate:")]
    assert candidates and all(line.split()[4] == "127.0.0.1" for line in candidates), candidates


@inner
@pytest.mark.realtime
async def test_inner_a_relay_only_call_flows_through_coturn(tmp_path: Path) -> None:
    if shutil.which("turnserver") is None:
        pytest.skip("coturn is not installed (apt-get install coturn; `make test` does it)")
    port = _free_port()
    turn = await asyncio.create_subprocess_exec(
        "turnserver", "-n", "--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1", f"--listening-port={port}",
         "--allow-loopback-peers", "--use-auth-secret", f"--static-auth-secret={TURN_SECRET}", "--realm=test",
         "--no-tls", "--no-dtls", "--no-cli", "--no-stdout-log", f"--log-file={tmp_path / 'turn.log'}",
         "--min-port=49160", "--max-port=49200",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        config = WhipConfig(turn=TurnConfig(urls=(f"turn:127.0.0.1:{port}?transport=udp",), secret=Secret(TURN_SECRET)))
        result, kind, endpoint = await _talk(tmp_path, config, relay=True)
    finally:
        turn.terminate()
        await bounded(SystemClock(), 10, turn.wait(), "turnserver stop")
    assert result["error"] is None and result["state"] == "connected", result
    assert kind == "relay", f"the browser's side of the pair is {kind}"
    assert result["maxRms"] > 0.02, f"the echoed speech is not heard in the page: {result}"
    assert endpoint.stats.calls_started == 1


@pytest.mark.slow
@pytest.mark.realtime
async def test_the_demo_page_falls_back_to_the_websocket_and_says_so(tmp_path: Path) -> None:
    """A server without the WHIP endpoint: the page's offer has nowhere to go, and the call goes over
    the WebSocket (the echo engine answers ``started``)."""
    from brisvox.server.page import page_routes

    clock = SystemClock()
    parts = ServerParts(runner=echo_runner(clock), call_endpoint=TransportEndpoint(clock), description="echo",
                        extra_routes=tuple(page_routes({"agent": "echo", "llm": "-", "vad": "-", "stt": "-",
                                                        "tts": "-"})))
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(Settings(port=0, max_calls=2), parts, clock=clock, stops=stops,
                                         out=io.StringIO(), on_ready=ready.set_result))
    try:
        base = f"http://127.0.0.1:{await asyncio.wait_for(ready, 20)}"
        async with chromium(tmp_path) as browser:
            page = await browser.new_page()
            await page.goto(f"{base}/?raw=1")
            await page.click("#talk")
            await page.wait_for_selector("#status:has-text('in call over WebSocket')", timeout=15_000)
            note = await page.locator(".note").first.inner_text()
            assert "WebRTC unavailable" in note and "no WebRTC endpoint" in note, note
            await page.click("#talk")
    finally:
        stops.request("test stop")
        assert await asyncio.wait_for(server, 30) == 0

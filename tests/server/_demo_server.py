"""``brisvox serve`` with the demo agent as a subprocess, for the slow end-to-end tests."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import pytest

from brisvox.inference.models import QWEN_CODER_0_5B, SILERO_VAD, model_path

ROOT = Path(__file__).resolve().parents[2]
LLM_VARIABLES = ("BRISVOX_LLM_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "BRISVOX_AGENT_FILE")


def need_models() -> None:
    """Skip unless the local extra is installed and the models are fetched."""
    pytest.importorskip("faster_whisper", reason="the local extra is not installed")
    pytest.importorskip("hibari", reason="the local extra is not installed")
    if not model_path(SILERO_VAD).exists():
        pytest.skip("models not fetched (brisvox models fetch)")


LLM_LABELS = {"scripted": "llm auto: scripted (", "local": "llm auto: local ("}
"""What the start-up line says for each LLM a test asks for."""


def need_local_llm() -> None:
    """Skip unless asked for (like every real-model test) and the local-llm extra and its model are there."""
    if os.environ.get("BRISVOX_LOCAL_LLM_TESTS") != "1":
        pytest.skip("set BRISVOX_LOCAL_LLM_TESTS=1 to run the local LLM (local-llm extra, fetched GGUF)")
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("the local-llm extra is not installed (xllamacpp)")
    if not model_path(QWEN_CODER_0_5B).exists():
        pytest.skip("the local LLM is not fetched (brisvox models fetch qwen2_5_coder_0_5b_q4)")


class DemoServer:
    """``brisvox serve`` (no agent file: the demo) on a free port of 127.0.0.1, its output collected.

    ``llm``: ``scripted`` (the rules host, even where the local LLM is installed) or ``local``.
    """

    def __init__(self, llm: str = "scripted") -> None:
        env = {**os.environ, "BRISVOX_PORT": "0", "BRISVOX_HOST": "127.0.0.1", "PYTHONPATH": str(ROOT / "src")}
        for name in (*LLM_VARIABLES, "BRISVOX_LLM_SCRIPTED"):
            env.pop(name, None)
        self.llm = llm
        if llm == "scripted":
            env["BRISVOX_LLM_SCRIPTED"] = "1"
        self.proc = subprocess.Popen([sys.executable, "-m", "brisvox", "serve", "--workers", "1"], env=env, cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out: list[str] = []
        self.err: list[str] = []
        self.warm = threading.Event()
        self.started = threading.Event()
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        for line in stream:
            into.append(line)
            if "listening on" in line:
                self.started.set()
            if "call providers warm" in line:
                self.warm.set()

    def url(self) -> str:
        """The server's URL once it listens and its models are warm."""
        warm_for = 300 if self.llm == "local" else 90  # llama.cpp loads and runs its model once
        assert self.started.wait(60) and self.warm.wait(warm_for), self.log()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", "".join(self.out))
        assert m is not None and LLM_LABELS[self.llm] in self.out[0], self.log()
        return m.group(1)

    def only_call(self) -> dict[str, Any]:
        """The call log of the one call this server took (``GET /api/calls``, then ``/api/calls/<id>``)."""
        base = self.url()
        with urllib.request.urlopen(f"{base}/api/calls", timeout=10) as answer:
            calls = json.load(answer)["calls"]
        assert len(calls) == 1, calls
        with urllib.request.urlopen(f"{base}/api/calls/{quote(calls[0]['call_id'], safe='')}", timeout=10) as answer:
            call: dict[str, Any] = json.load(answer)
        return call

    def stop(self) -> int:
        """SIGTERM, then the exit status (killed after 40 s)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=40)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for reader in self._readers:
                reader.join(5)

    def log(self) -> str:
        return "".join(self.out) + "".join(line for line in self.err if "faster_whisper" not in line)


def chromium_flags(wav: Path) -> list[str]:
    """Headless Chromium with a fake microphone playing ``wav`` once (docs: ../shared/TESTING.md)."""
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}%noloop", "--autoplay-policy=no-user-gesture-required",
            # WebRTC on 127.0.0.1 (the server offers only that address): without these Chromium gathers no
            # loopback candidate and hides its addresses behind mDNS names the server does not resolve
            "--allow-loopback-in-peer-connection", "--disable-features=WebRtcHideLocalIpsWithMdns"]

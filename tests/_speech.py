"""Real speech for tests: espeak-ng recordings made on the fly (``make test`` installs espeak-ng and sox)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from brisvox.audio import WavAudio, read_wav


def espeak_wav(
    text: str, directory: Path, *, rate: int = 16000, lead: float = 0.5, trail: float = 1.5, speed: int = 160
) -> WavAudio:
    """``text`` spoken by espeak-ng (en-us) as mono PCM16 at ``rate``, padded with silence.

    Skips the test, saying why, when espeak-ng or sox is not installed.
    """
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install espeak-ng sox; `make test` does it)")
    out = directory / f"speech-{abs(hash((text, rate, lead, trail, speed)))}.wav"
    espeak = subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", str(speed), "--stdout", text], capture_output=True, check=True, timeout=30
    )
    # Through sox: espeak's --stdout header carries a bogus length.
    subprocess.run(
        ["sox", "-t", "wav", "-", "-r", str(rate), "-c", "1", "-b", "16", str(out), "pad", str(lead), str(trail)],
        input=espeak.stdout,
        capture_output=True,
        check=True,
        timeout=30,
    )
    return read_wav(out)

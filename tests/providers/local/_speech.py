"""espeak-ng speech for the local-provider tests (espeak-ng and sox are Debian packages in the Makefile)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def espeak_pcm16(text: str, sample_rate: int = 16_000, pad: tuple[float, float] = (0.2, 0.3)) -> bytes:
    """Headerless PCM16 mono of ``text`` spoken by espeak-ng (160 words/min), padded with silence."""
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox are needed (make apt)")
    speech = subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", "160", "--stdout", text], capture_output=True, check=True, timeout=30
    ).stdout
    return subprocess.run(
        ["sox", "-t", "wav", "-", "-r", str(sample_rate), "-c", "1", "-b", "16", "-e", "signed", "-L", "-t", "raw", "-",
         "pad", str(pad[0]), str(pad[1])],
        input=speech, capture_output=True, check=True, timeout=30,
    ).stdout  # fmt: skip

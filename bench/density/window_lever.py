"""The VAD windowing lever: cutting caller frames into Silero windows, the numpy way (concatenate
and copy per frame, brisvox before) against the bytes buffer VoiceActivityDetector uses now.
Prints the best of 15 rounds of 5000 20 ms frames, in microseconds per frame.

    taskset -c 0 python bench/density/window_lever.py
"""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from brisvox.audio.pcm import PCM16_DTYPE, pcm16_to_array
from brisvox.inference.vad import VoiceActivityDetector, _Window


class S:
    sample_rate = 16000; window_samples = 512
    def score(self, w): return 0.0
    def reset(self): pass
class Old:
    _win = 512; _rate = 16000
    def __init__(self): self._buf = np.zeros(0, dtype=PCM16_DTYPE); self._anchor_at = 0.0; self._anchor_pos = 0
    def _windows(self, pcm, at):
        samples = pcm16_to_array(pcm)
        if self._buf.size == 0:
            self._anchor_at = at; self._anchor_pos = 0; buf = samples
        else:
            buf = np.concatenate((self._buf, samples))
        out = []; pos = 0
        while buf.size - pos >= self._win:
            out.append(_Window(self._anchor_at + (self._anchor_pos + pos) / self._rate, buf[pos : pos + self._win])); pos += self._win
        self._buf = buf[pos:].copy(); self._anchor_pos += pos
        return out
new, old = VoiceActivityDetector(S()), Old()
frame = (np.random.randn(320)*1000).astype(np.int16).tobytes()
best = {"old": 1e9, "new": 1e9}
for rnd in range(15):
    for name, d in (("old", old), ("new", new)):
        t = time.perf_counter()
        for i in range(5000): d._windows(frame, i*0.02)
        best[name] = min(best[name], (time.perf_counter()-t)/5000*1e6)
print({k: round(v, 2) for k, v in best.items()}, "us/frame (min of 15 rounds of 5000 frames)")

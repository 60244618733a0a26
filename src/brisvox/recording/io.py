"""Reading a recording file (the I/O shell around the pure loader)."""

from __future__ import annotations

import gzip
from pathlib import Path

from brisvox.recording.format import Recording, RecordingError, parse_recording

__all__ = ["load_recording"]


def load_recording(path: str | Path) -> Recording:
    """The recording at ``path`` (gzip or plain JSON lines); raises RecordingError."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise RecordingError(f"{p}: cannot read the recording: {exc}") from None
    try:
        return parse_recording(data.splitlines())
    except RecordingError as exc:
        raise RecordingError(f"{p}: {exc}") from None

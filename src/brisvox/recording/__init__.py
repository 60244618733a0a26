"""Recorded calls: the file format, the recorder the server wires in, and the replay.

See docs/OBSERVABILITY.md (Recordings) and :mod:`brisvox.recording.format`.
"""

from brisvox.recording.format import VERSION, Recording, RecordingError, parse_recording
from brisvox.recording.io import load_recording

__all__ = ["VERSION", "Recording", "RecordingError", "load_recording", "parse_recording"]

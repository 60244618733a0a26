"""A subprocess for the end-to-end tests: its output collected line by line, a marker line awaited, stopped with SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path


class Watched:
    """``command`` started with stdout and stderr collected in ``lines``; ``ready`` is set at the first line
    containing ``marker``."""

    def __init__(self, command: Sequence[str], *, env: Mapping[str, str], marker: str, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(list(command), env=dict(env), cwd=cwd, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.marker = marker
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.marker in line:
                self.ready.set()

    def output_once_ready(self, timeout: float) -> str:
        """Everything printed so far, once the marker line came (fails the test, showing the output, if not)."""
        assert self.ready.wait(timeout), "".join(self.lines)
        return "".join(self.lines)

    def stop(self, timeout: float) -> None:
        """SIGTERM, then killed if still running after ``timeout`` seconds."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(5)

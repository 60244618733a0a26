"""Helpers shared by the benchmarks that run a server in a child process."""

from __future__ import annotations

import os

__all__ = ["cpu_seconds", "read_port", "write_port"]


def write_port(path: str, port: int) -> None:
    with open(path, "w") as f:
        f.write(str(port))


def read_port(path: str) -> int:
    """The port a child wrote to ``path``; 0 while it has not yet."""
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except FileNotFoundError:
        return 0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

"""The pure turn-taking modules import no asyncio, sockets, threads or clocks: time comes in as an argument."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "src" / "brisvox" / "agent"
PURE = ["turn.py", "interrupt.py", "played.py", "_deadline.py"]
FORBIDDEN = {"asyncio", "socket", "time", "threading", "selectors", "datetime", "concurrent"}


def imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_scanner_sees_plain_and_from_imports() -> None:
    assert imported_roots("import time\nfrom asyncio import sleep\nimport os.path\n") == {"time", "asyncio", "os"}


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_imports_no_io_or_clock(module: str) -> None:
    assert not imported_roots((AGENT / module).read_text()) & FORBIDDEN

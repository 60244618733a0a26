"""Logic reads time only through brisvox.core.clock: scan the package for direct clock reads."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "brisvox"
ALLOWED = {PACKAGE / "core" / "clock.py"}
FORBIDDEN_ATTRS = {
    ("time", "time"),
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "perf_counter"),
    ("time", "perf_counter_ns"),
    ("time", "time_ns"),
    ("time", "sleep"),
    ("asyncio", "sleep"),
    ("asyncio", "timeout"),
    ("asyncio", "timeout_at"),
    ("asyncio", "wait_for"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
}
FORBIDDEN_IMPORTS = {("time", n) for n in ("time", "monotonic", "sleep", "perf_counter", "time_ns")} | {
    ("asyncio", n) for n in ("sleep", "timeout", "timeout_at", "wait_for")
}


def violations(source: str) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in FORBIDDEN_ATTRS:
                found.append((node.lineno, f"{node.value.id}.{node.attr}"))
            elif node.attr in ("call_later", "call_at"):  # a loop timer on loop time
                found.append((node.lineno, f".{node.attr}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and (node.func.value.id, node.func.attr) == ("asyncio", "wait")
            and any(k.arg == "timeout" for k in node.keywords)
        ):
            found.append((node.lineno, "asyncio.wait(timeout=)"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (node.module, alias.name) in FORBIDDEN_IMPORTS:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
    return found


def test_the_scanner_finds_each_kind_of_direct_clock_read() -> None:
    src = "import time, asyncio\nfrom time import monotonic\nx = time.time()\nawait_ = asyncio.sleep(1)\n"
    assert [v for _, v in violations(src)] == ["from time import monotonic", "time.time", "asyncio.sleep"]


def test_the_scanner_finds_loop_time_deadlines() -> None:
    src = (
        "import asyncio\nfrom asyncio import timeout_at\n"
        "async def f(aw):\n    async with asyncio.timeout(1):\n        await asyncio.wait_for(aw, 1)\n"
        "    async with asyncio.timeout_at(5):\n        pass\n"
        "    await asyncio.wait([aw], timeout=1)\n    loop.call_later(1, print)\n"
    )
    assert sorted(v for _, v in violations(src)) == [
        ".call_later",
        "asyncio.timeout",
        "asyncio.timeout_at",
        "asyncio.wait(timeout=)",
        "asyncio.wait_for",
        "from asyncio import timeout_at",
    ]


def test_no_module_outside_the_clock_reads_time_directly() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in ALLOWED:
            continue
        for line, what in violations(path.read_text()):
            bad.append(f"{path.relative_to(PACKAGE)}:{line}: {what}")
    assert not bad, "direct clock reads or loop-time deadlines outside brisvox.core.clock:\n" + "\n".join(bad)

"""The pure agent modules import no asyncio, sockets, threads or clocks: time comes in as an argument.

Pure: turn-taking (turn, interrupt, played), the long-call window, the flow definitions
and prompt rendering, and the tool engine's planning step with the records it fills.
Imports guarded by ``if TYPE_CHECKING:`` are annotations only and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "src" / "brisvox" / "agent"
PURE = [
    "turn.py",
    "interrupt.py",
    "played.py",
    "window.py",
    "_deadline.py",
    "flows/definition.py",
    "flows/render.py",
    "flows/example.py",
    "tools/_plan.py",
    "tools/_records.py",
    "tools/_lifecycle.py",
    "tools/spec.py",
    "tools/results.py",
    "tools/store.py",
    "tools/registry.py",
    "tools/schema.py",
    "tools/confirm.py",
    "tools/filler.py",
    "guards.py",
]
FORBIDDEN = {"asyncio", "socket", "time", "threading", "selectors", "datetime", "concurrent"}
FORBIDDEN_BRISVOX = {"brisvox.core.clock", "brisvox.core.tasks"}


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imported_modules(source: str) -> set[str]:
    """Every module a source imports at run time (``if TYPE_CHECKING:`` blocks skipped)."""
    found: set[str] = set()
    pending: list[ast.AST] = [ast.parse(source)]
    while pending:
        node = pending.pop()
        if _type_checking_only(node):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        pending.extend(ast.iter_child_nodes(node))
    return found


def forbidden_imports(source: str) -> set[str]:
    modules = imported_modules(source)
    return {m for m in modules if m.split(".")[0] in FORBIDDEN} | (modules & FORBIDDEN_BRISVOX)


def test_the_scanner_sees_plain_and_from_imports() -> None:
    assert imported_modules("import time\nfrom asyncio import sleep\nimport os.path\n") == {"time", "asyncio", "os.path"}


def test_the_scanner_flags_the_clock_and_task_modules_and_nested_imports() -> None:
    source = "from brisvox.core.clock import Clock\ndef f():\n    import asyncio\n"
    assert forbidden_imports(source) == {"brisvox.core.clock", "asyncio"}


def test_the_scanner_skips_annotation_only_imports() -> None:
    assert forbidden_imports("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import asyncio\n") == set()


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_imports_no_io_or_clock(module: str) -> None:
    assert not forbidden_imports((AGENT / module).read_text())

"""docs/AGENTS.md: every Python block runs as written (but the program marked to be started)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "AGENTS.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_doc_has_its_blocks() -> None:
    assert len(BLOCKS) == 7


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_block_runs_as_written(index: int) -> None:
    code = BLOCKS[index]
    namespace: dict[str, object] = {"__name__": "agents_doc"}
    exec(compile(code, f"AGENTS.md block {index}", "exec"), namespace)
    if code.startswith("# a program to start"):
        assert "agent" in namespace

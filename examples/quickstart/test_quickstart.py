"""The README's agent, as written, answers through brisvox.testing."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quickstart import agent

import brisvox
from brisvox.testing import AgentTest, call

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_opens_with_this_agent_and_it_checks() -> None:
    code = (Path(__file__).resolve().parent / "quickstart.py").read_text()
    assert f"```python\n{code}```" in README.read_text()
    assert len(code.splitlines()) <= 25
    assert brisvox.run(agent, ["check"]) == 0


async def test_the_readme_agent_books_after_the_callers_yes() -> None:
    llm = [[call("book_table", day="friday", party_size=2)], "Shall I book two on Friday?",
           [call("confirm_pending", call_id="t1.0")], "Done!"]
    async with AgentTest(agent, llm=llm) as test:
        await test.user_says("two people on friday")
        (await test.user_says("yes")).expect.said(equals="Done!")
    assert test.tool_runs("book_table") == 1

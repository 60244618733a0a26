from __future__ import annotations

import pytest

from brisvox import _demo


def test_the_demo_says_where_the_page_is_then_serves_the_demo_agent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []
    monkeypatch.setenv("BRISVOX_PORT", "8799")
    monkeypatch.delenv("BRISVOX_AGENT_FILE", raising=False)
    monkeypatch.setattr("brisvox.server.cli.run_serve", lambda args, tools: seen.append(args.agent_file) or 0)
    assert _demo.run_demo() == 0
    assert seen == [None]
    assert "open http://127.0.0.1:8799/" in capsys.readouterr().out

from __future__ import annotations

from typing import Any

import pytest

from brisvox import _demo
from brisvox.core.errors import ConfigError


class _Providers:
    llm_label = "scripted"

    def page_info(self, definition: Any) -> dict[str, str]:
        return {}


def test_the_demo_says_where_the_page_is_then_serves_the_demo_agent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served = []

    prefixes = []

    async def serve_with(settings: Any, parts: Any, providers: Any, tracing: Any = None, node: Any = None,
                         prefix: Any = None) -> int:
        served.append(parts.agent)
        prefixes.append(prefix)
        return 0

    monkeypatch.setenv("BRISVOX_PORT", "8799")
    monkeypatch.delenv("BRISVOX_AGENT_FILE", raising=False)
    monkeypatch.setattr("brisvox.server.call_providers.build_call_providers", lambda *a, **kw: _Providers())
    monkeypatch.setattr("brisvox.server.cli.session_runner", lambda *a: None)
    monkeypatch.setattr("brisvox.server.page.page_routes", lambda info: [])
    monkeypatch.setattr("brisvox.server.cli._serve_with", serve_with)
    assert _demo.run_demo() == 0
    assert len(served) == 1
    assert "open http://127.0.0.1:8799/" in capsys.readouterr().out
    # The local model is warmed with how every call of the demo agent begins (its prompt and tools).
    (prefix,) = prefixes
    assert "Lokanta Deniz" in prefix.messages[0].text
    # Offered at the start: the look-up only (docs/TOOLS.md, "Offered now"); the prompt describes all three.
    assert [t.name for t in prefix.tools] == ["check_availability"]
    assert [t.name for t in prefix.described] == ["book_table", "check_availability", "confirm_pending"]


def test_a_demo_whose_providers_cannot_be_built_fails_before_printing_its_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_providers(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError("openai: the 'openai' extra is not installed (pip install 'brisvox[openai]')")

    monkeypatch.setenv("BRISVOX_PORT", "8799")
    monkeypatch.delenv("BRISVOX_AGENT_FILE", raising=False)
    monkeypatch.setattr("brisvox.server.call_providers.build_call_providers", no_providers)
    assert _demo.run_demo() != 0
    out = capsys.readouterr()
    assert "http://" not in out.out and "extra is not installed" in out.err

from __future__ import annotations

from brisvox.agent.tools.spec import DEFAULT_FILLER_AFTER, DEFAULT_TOOL_TIMEOUT, ToolKind, ToolSpec


def test_a_spec_has_the_documented_defaults() -> None:
    spec = ToolSpec(name="lookup", description="find an order")
    assert spec.kind is ToolKind.READ_ONLY
    assert spec.timeout == DEFAULT_TOOL_TIMEOUT == 5.0
    assert spec.filler_after == DEFAULT_FILLER_AFTER == 0.7
    assert not spec.repeatable and not spec.confirm
    assert spec.parameters == {"type": "object", "properties": {}}


def test_builders_return_changed_copies() -> None:
    spec = ToolSpec(name="book", description="book", kind=ToolKind.SIDE_EFFECT)
    changed = spec.with_timeout(2.0).with_filler_after(None).with_repeatable().with_confirm()
    assert (changed.timeout, changed.filler_after, changed.repeatable, changed.confirm) == (2.0, None, True, True)
    assert spec.timeout == 5.0 and changed.is_side_effect
    assert changed.to_json() == {"name": "book", "description": "book", "parameters": spec.parameters}

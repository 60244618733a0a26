"""Flow state bounds and prompt placeholders."""

from __future__ import annotations

from brisvox.agent.flows import MAX_STATE_ENTRIES, MAX_STATE_KEY_BYTES, MAX_STATE_VALUE_BYTES
from brisvox.agent.flows.render import FlowState, render_text


def test_placeholders_resolve_keys_and_paths_and_unresolved_ones_stay_literal() -> None:
    state = {"name": "Ada", "slot": {"times": ["18:00", "19:00"]}, "n": 4}
    text = render_text("{name} at {slot.times.1} for {n}; {missing} {slot.nope} {slot.times.9}", state)
    assert text == "Ada at 19:00 for 4; {missing} {slot.nope} {slot.times.9}"


def test_substituted_text_is_cut_sanitized_and_never_scanned_again() -> None:
    state = {"a": "x" * 1000, "b": "line\nbreak\x07bell", "c": "{a}"}
    assert render_text("{a}", state) == "x" * 256
    assert render_text("{b}", state) == "line break bell"
    assert render_text("{c}", state) == "{a}"
    assert render_text("{l}", {"l": [1, "two"]}) == '[1, "two"]'


def test_the_state_bounds_drop_and_count_over_sized_keys_values_and_entries() -> None:
    state = FlowState()
    assert not state.set("k" * (MAX_STATE_KEY_BYTES + 1), 1)
    assert state.set("big", "ok")
    assert not state.set("big", "v" * (MAX_STATE_VALUE_BYTES + 1))
    assert "big" not in state  # an oversized value also removes the older one
    for i in range(MAX_STATE_ENTRIES):
        state.set(f"k{i}", i)
    assert len(state) == MAX_STATE_ENTRIES
    assert not state.set("one_more", 1)
    assert state.set("k0", "overwritten")  # an existing key can be overwritten
    assert state["k0"] == "overwritten"
    assert state.dropped == 3
    assert "overwritten" not in repr(state)

"""Filler policy: fixed vs per-tool delays, ties, rotation, per-tool phrases, clips, off switches."""

from __future__ import annotations

import pytest

from brisvox.agent.tools.filler import (
    DEFAULT_FILLER_DELAY,
    DEFAULT_FILLER_TEXT,
    DEFAULT_MODEL_FILLER_DELAY,
    FillerConfig,
    FillerPhrase,
    FillerPlan,
    FillerPolicy,
    StaticClips,
)
from brisvox.agent.tools.spec import ToolSpec
from brisvox.core.errors import ConfigError


def _spec(name: str, filler_after: float | None = 0.7) -> ToolSpec:
    return ToolSpec(name=name, description=name, filler_after=filler_after)


def test_the_default_is_one_fixed_delay_of_1_2_s_whatever_the_tool_says() -> None:
    p = FillerPolicy()
    assert DEFAULT_FILLER_DELAY == 1.2 and p.delay == 1.2
    assert p.delay_for(_spec("a", 0.1)) == 1.2
    assert p.delay_for(_spec("b", 5.0)) == 1.2
    assert p.with_delay(0.5).delay_for(_spec("a")) == 0.5


def test_a_tool_opts_out_with_no_filler_after() -> None:
    assert FillerPolicy().delay_for(_spec("quiet", None)) is None
    assert FillerPolicy.per_tool().delay_for(_spec("quiet", None)) is None


def test_per_tool_policy_uses_each_tools_delay_and_a_round_takes_the_smallest_first_on_ties() -> None:
    p = FillerPolicy.per_tool()
    assert p.delay is None
    specs = [_spec("slow", 2.0), _spec("fast", 0.4), _spec("fast2", 0.4), _spec("quiet", None)]
    assert p.plan(specs) == FillerPlan(0.4, "fast")
    assert FillerPolicy().plan(specs) == FillerPlan(1.2, "slow")
    assert p.plan([_spec("quiet", None)]) is None


def test_phrases_rotate_round_robin_and_only_a_chosen_filler_advances() -> None:
    p = FillerPolicy().with_phrases(["One moment.", "Let me check.", "Still on it."])
    p.plan([_spec("a")])  # planning does not advance
    got = [c.text for c in (p.choose("a"), p.choose("b"), p.choose("a"), p.choose("a")) if c is not None]
    assert got == ["One moment.", "Let me check.", "Still on it.", "One moment."]


def test_per_tool_phrases_rotate_on_their_own() -> None:
    p = FillerPolicy().with_phrases(["Generic."]).with_tool_phrases("book", ["Booking now.", "Almost done."])
    seq = [p.choose(t) for t in ("book", "look", "book", "book")]
    assert [c.text for c in seq if c] == ["Booking now.", "Generic.", "Almost done.", "Booking now."]


def test_the_default_phrase() -> None:
    c = FillerPolicy().choose("x")
    assert c is not None and c.text == DEFAULT_FILLER_TEXT == "One moment, please." and c.clip is None


def test_clip_keys_are_reported_only_when_the_cache_has_them() -> None:
    phrases = [FillerPhrase("One moment.", clip="moment"), FillerPhrase("Let me check.", clip="check")]
    p = FillerPolicy().with_phrases(phrases).with_clips(StaticClips({"moment"}))
    a, b = p.choose("t"), p.choose("t")
    assert a is not None and a.clip == "moment"
    assert b is not None and b.clip is None and b.text == "Let me check."
    no_cache = FillerPolicy().with_phrases(phrases).choose("t")
    assert no_cache is not None and no_cache.clip is None


def test_an_empty_list_or_disabling_switches_fillers_off() -> None:
    for p in (FillerPolicy().with_phrases([]), FillerPolicy().with_enabled(False), FillerPolicy.from_config(FillerConfig.OFF)):
        assert p.plan([_spec("a")]) is None
        assert p.choose("a") is None
        assert not p.enabled


def test_each_clone_of_a_policy_rotates_on_its_own() -> None:
    base = FillerPolicy().with_phrases(["A", "B"])
    s1, s2 = base.clone(), base.clone()
    assert [c.text for c in (s1.choose("t"), s1.choose("t")) if c] == ["A", "B"]
    c = s2.choose("t")
    assert c is not None and c.text == "A"


def test_config_builds_either_policy_and_rejects_combining_per_tool_with_a_delay() -> None:
    assert FillerPolicy.from_config(FillerConfig.DEFAULT).delay == 1.2
    assert FillerPolicy.from_config(FillerConfig(delay=0.8)).delay == 0.8
    per = FillerPolicy.from_config(FillerConfig.PER_TOOL)
    assert per.delay is None and per.delay_for(_spec("a", 0.3)) == 0.3
    with pytest.raises(ConfigError):
        FillerConfig(per_tool=True, delay=1.0)
    with pytest.raises(ConfigError):
        FillerConfig(delay=-1.0)


def test_config_phrases_are_what_the_policy_says_in_turn_and_name_their_clips_only_when_prerendered() -> None:
    config = FillerConfig(phrases=("One.", "Two."), prerender=True)
    assert config.clip_texts() == {"filler-0": "One.", "filler-1": "Two."}
    policy = FillerPolicy.from_config(config).with_clips(StaticClips(["filler-0", "filler-1"]))
    said = [(c.text, c.clip) for c in (policy.choose("t") for _ in range(3)) if c is not None]
    assert said == [("One.", "filler-0"), ("Two.", "filler-1"), ("One.", "filler-0")]
    plain = FillerPolicy.from_config(FillerConfig(phrases=("One.",))).with_clips(StaticClips(["filler-0"]))
    choice = plain.choose("t")
    assert choice is not None and choice.clip is None
    assert FillerConfig(phrases=("One.",)).clip_texts() == {}
    assert FillerConfig(enabled=False, prerender=True).clip_texts() == {}


def test_config_refuses_a_blank_phrase_naming_its_position() -> None:
    with pytest.raises(ConfigError, match="phrase 1"):
        FillerConfig(phrases=("One.", "  "))


def test_a_slow_model_round_fills_after_model_delay_unless_the_fillers_are_off_or_it_is_none() -> None:
    assert FillerPolicy.from_config(FillerConfig()).model_delay == DEFAULT_MODEL_FILLER_DELAY
    assert FillerPolicy.from_config(FillerConfig(model_delay=0.5, delay=None, per_tool=True)).model_delay == 0.5
    assert FillerPolicy.from_config(FillerConfig(model_delay=None)).model_delay is None
    assert FillerPolicy.from_config(FillerConfig.OFF).model_delay is None
    assert FillerPolicy.from_config(FillerConfig(model_delay=3.0)).clone().model_delay == 3.0
    for bad in (-1.0, float("nan")):
        with pytest.raises(ConfigError, match="model_delay"):
            FillerConfig(model_delay=bad)
        with pytest.raises(ConfigError, match="model_delay"):
            FillerPolicy(model_delay=bad)

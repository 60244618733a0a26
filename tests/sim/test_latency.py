from __future__ import annotations

import pytest

from brisvox.core.errors import ConfigError
from brisvox.sim.latency import LatencyProfile


def test_jitter_is_bounded_by_its_fraction_and_replays_identically_for_a_seed() -> None:
    profile = LatencyProfile(first_event=1.0, jitter=0.5, seed=7)
    a = [profile.delays().first_event() for _ in range(3)]
    d = profile.delays()
    b = [d.first_event() for _ in range(20)]
    assert a == [b[0]] * 3
    assert all(1.0 <= x <= 1.5 for x in b) and len(set(b)) > 1


def test_a_profile_without_jitter_gives_its_exact_delays() -> None:
    d = LatencyProfile(connect=0.1, first_event=0.2, per_event=0.03).delays()
    assert (d.connect(), d.first_event(), d.per_event()) == (0.1, 0.2, 0.03)


def test_negative_delays_are_refused_with_the_field_name() -> None:
    with pytest.raises(ConfigError, match="per_event"):
        LatencyProfile(per_event=-1.0)

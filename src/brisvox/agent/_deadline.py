"""Deadline arithmetic shared by the pure turn-taking modules: never raises, never overflows."""

from __future__ import annotations

import math

__all__ = ["MAX_DELAY", "clamped_after"]

_YEAR = 365.25 * 86_400.0

MAX_DELAY = 100 * _YEAR
"""The longest delay a deadline may have: about 100 years.  Longer delays are clamped."""

# Tried in order when ``at + delay`` is not a finite float; the last resort is ``at`` itself.
_FALLBACKS = (100 * _YEAR, 10 * _YEAR, 86_400.0, 3_600.0)


def clamped_after(at: float, delay: float) -> float:
    """``at + delay`` with ``delay`` clamped to :data:`MAX_DELAY` and the result kept finite.

    A delay of ``math.inf`` (or anything beyond 100 years) becomes 100 years.  If even that
    does not give a finite instant, shorter steps are tried (10 years, 1 day, 1 hour) and,
    at the very end of the float range, the input time itself is returned.
    """
    if delay <= MAX_DELAY:
        deadline = at + delay
        if math.isfinite(deadline):
            return deadline
    for step in _FALLBACKS:
        deadline = at + min(delay, step)
        if math.isfinite(deadline):
            return deadline
    return at

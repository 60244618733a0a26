"""``brisvox demo``: the local demonstration that ``make demo`` starts."""

from __future__ import annotations


def run_demo() -> int:
    print("brisvox demo: the voice agent server has not landed yet; nothing to run.")
    return 0

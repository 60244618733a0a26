"""How many objects the garbage collector tracks for each object a factory makes.

A call's objects live as long as the call, and every full collection walks each tracked
one (docs/PERFORMANCE.md, "Full garbage collections"): tests pin the count for the objects a
call makes by the dozen.
"""

from __future__ import annotations

import gc
from collections.abc import Callable


def tracked_per_object(make: Callable[[], object], n: int = 200) -> float:
    """The tracked objects that appear per ``make()`` (kept alive while counting)."""
    gc.collect()
    gc.disable()  # no collection in between: it would move the count, not the answer
    try:
        before = len(gc.get_objects())
        kept = [make() for _ in range(n)]
        after = len(gc.get_objects())
    finally:
        gc.enable()
    del kept
    return (after - before - 1) / n  # the list holding them is one

"""The server's garbage-collection policy: the start-up heap is frozen while the server runs.

CPython's full (generation 2) collection walks every tracked container object in the
process, and it runs on whichever thread allocates when the long-lived pending objects pass a
quarter of the long-lived ones: on a server that is the event loop, in the middle of every
call's pacing.  After start-up about 100 k of those objects are the server's own (modules,
the agent, the models' sessions, uvicorn, the providers) and never become garbage; the
calls add about 1 k each.  In the density bench (docs/PERFORMANCE.md) the full collection
that came while the 80 callers were connecting walked about 180 k objects and held the loop
for tens of milliseconds (100 ms of CPU on a loaded machine): one underrun in every reply
playing at that moment.

:func:`frozen_startup_heap` collects once and moves what survives into the permanent
generation (``gc.freeze``) once the server listens, so a full collection walks only what the
calls made since; the objects stay reference-counted (freed as before when their last
reference goes), only a cycle among them is never collected.  When the server stops, the
heap is given back to the collector (``gc.unfreeze``), so a process that runs the server
in-process (the tests, an embedding host) gets its collector back as it was.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["frozen_startup_heap"]

log = logging.getLogger(__name__)


@contextmanager
def frozen_startup_heap() -> Iterator[int]:
    """Collect, freeze the surviving heap for the block, unfreeze after; yields how many
    objects were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("garbage collector: %d start-up objects frozen (full collections skip them)", frozen)
    try:
        yield frozen
    finally:
        gc.unfreeze()

from __future__ import annotations

import gc
import weakref

from brisvox.server.heap import frozen_startup_heap


class _Node:
    def __init__(self) -> None:
        self.peer: _Node | None = None


def _tracked_ids() -> set[int]:
    return {id(o) for o in gc.get_objects()}


def test_the_heap_built_before_is_out_of_every_collection_inside_the_block_and_back_after() -> None:
    before = _Node()
    with frozen_startup_heap() as frozen:
        assert frozen > 0 and gc.get_freeze_count() > 0
        after = _Node()
        tracked = _tracked_ids()
        assert id(before) not in tracked  # a full collection no longer walks it
        assert id(after) in tracked  # what the calls make is collected as before
    assert gc.get_freeze_count() == 0
    assert id(before) in _tracked_ids()


def test_garbage_at_the_start_is_collected_before_the_freeze_not_kept_forever() -> None:
    a, b = _Node(), _Node()
    a.peer, b.peer = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    with frozen_startup_heap():
        assert gone() is None

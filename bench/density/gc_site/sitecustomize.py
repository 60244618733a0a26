"""The garbage-collection probe inside the server (bench only; see ../gc_lever.py).

On ``PYTHONPATH`` with ``GCPROBE_OUT`` set, it times every collection (thread CPU) per
generation, counting separately from the moment the server froze its start-up heap, and
appends a line of JSON to ``GCPROBE_OUT`` every second; SIGUSR1 appends a census of the
tracked objects (the permanent generation excluded) by type and of the live tasks by
coroutine.  ``GCPROBE_T0`` sets the generation-0 threshold (a policy to measure).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import os
import signal
import threading
import time
from typing import Any

_OUT = os.environ.get("GCPROBE_OUT")


def _install(out: str) -> None:
    if os.environ.get("GCPROBE_T0"):
        gc.set_threshold(int(os.environ["GCPROBE_T0"]), *gc.get_threshold()[1:])
    # per generation: collections, CPU s, objects collected, the longest collection's CPU s
    stats = {g: [0, 0.0, 0, 0.0] for g in range(3)}  # since the start-up heap was frozen
    started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        elif gc.get_freeze_count():
            took = time.thread_time() - started[0]
            s = stats[info["generation"]]
            s[0] += 1
            s[1] += took
            s[2] += info["collected"]
            s[3] = max(s[3], took)

    def write(extra: dict[str, Any]) -> None:
        rec = {"t": time.monotonic(), "stats": stats, "counts": gc.get_count(),
               "frozen": gc.get_freeze_count(), **extra}
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def census(_signum: int, _frame: object) -> None:
        objs = gc.get_objects()
        by_type = collections.Counter(type(o).__qualname__ for o in objs)
        tasks = collections.Counter(t.get_coro().__qualname__ for t in list(asyncio.tasks._all_tasks))  # type: ignore[attr-defined]
        write({"tracked": len(objs), "census": dict(by_type.most_common(80)), "tasks": dict(tasks)})

    def tick() -> None:
        while True:
            time.sleep(1.0)
            write({})

    gc.callbacks.append(on_gc)
    signal.signal(signal.SIGUSR1, census)
    threading.Thread(target=tick, daemon=True, name="gc-probe").start()


if _OUT:
    _install(_OUT)

"""One node's workers seen as one server: a table in shared memory.

``brisvox serve --workers N`` runs N worker processes behind one listening socket
(:mod:`brisvox.server.workers`).  Each worker admits its own calls, but ``/readyz`` and
``/metrics`` answer for the node: every worker writes its row of a :class:`NodeTable` (an
anonymous shared memory map made before the workers are forked) and reads the others'.

A row holds the worker's admission state (alive, ready, draining, active, reserved, max) and
the edge's and transport's limit counters (plain ints their owners bump at the event); the
supervisor adds a dead worker's counters to a retired row before its replacement starts, so
the node's counters never go backwards.  Writes are a single ``struct.pack_into`` per row by
the row's owner; a reader may see a row half a publish old, which is the staleness the
numbers already have (they are published every :data:`PUBLISH_INTERVAL`).

Besides the rows, each worker has a slot with its open connections, written at every accept
(and read by the other workers at theirs): the spread of new connections over the workers
(:meth:`NodeTable.over_share`, docs/SCALING.md) needs the count of now, not of the last publish.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields

from brisvox.server.edge import EdgeStats
from brisvox.server.metrics import EdgeEvent, TransportEvent
from brisvox.transport.websocket.stats import ServerStats

__all__ = ["ACCEPT_SLACK", "PUBLISH_INTERVAL", "NodeRow", "NodeSeat", "NodeTable", "NodeTotals"]

PUBLISH_INTERVAL = 0.5
"""Seconds between a worker's publications of its row (and the staleness of the node's view)."""

ACCEPT_SLACK = 2
"""Connections a worker may hold above the node's least-loaded worker and still accept more."""

_EDGE = tuple(e.value for e in EdgeEvent)
_WIRE = tuple(t.value for t in TransportEvent)


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One worker's published state."""

    pid: int = 0
    alive: int = 0
    ready: int = 0
    draining: int = 0
    active: int = 0
    reserved: int = 0
    max_calls: int = 0
    restarts: int = 0
    edge: tuple[int, ...] = (0,) * len(_EDGE)
    wire: tuple[int, ...] = (0,) * len(_WIRE)


_SCALARS = tuple(f.name for f in fields(NodeRow) if f.name not in ("edge", "wire"))
_ROW = struct.Struct(f"<{len(_SCALARS) + len(_EDGE) + len(_WIRE)}q")
_OPEN = struct.Struct("<q")
_STATE = struct.Struct("<4q")  # a row's first fields: pid, alive, ready, draining (read at every accept)
assert _SCALARS[:4] == ("pid", "alive", "ready", "draining")


def _pack(row: NodeRow) -> tuple[int, ...]:
    return (*(getattr(row, name) for name in _SCALARS), *row.edge, *row.wire)


def _unpack(values: Sequence[int]) -> NodeRow:
    n = len(_SCALARS)
    scalars = dict(zip(_SCALARS, values[:n], strict=True))
    return NodeRow(**scalars, edge=tuple(values[n:n + len(_EDGE)]), wire=tuple(values[n + len(_EDGE):]))


@dataclass(frozen=True, slots=True)
class NodeTotals:
    """The node as a whole: what ``/readyz`` and ``/metrics`` report."""

    workers: int
    alive: int
    ready: int
    draining: bool
    active: int
    reserved: int
    max_calls: int
    restarts: int
    edge: dict[str, int]
    wire: dict[str, int]
    rows: tuple[NodeRow, ...] = ()
    """Each worker's row, by index."""

    @property
    def admits(self) -> bool:
        """A call sent to the node now finds a worker with room (see docs/SCALING.md)."""
        return self.ready > 0 and not self.draining


class NodeTable:
    """``workers`` rows plus one retired row, then ``workers`` open-connection slots, in an
    anonymous shared map inherited by forked workers."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"a node has at least one worker, not {workers}")
        self.workers = workers
        self._slots = _ROW.size * (workers + 1)
        self._map = mmap.mmap(-1, self._slots + _OPEN.size * workers)

    def connections(self, index: int) -> int:
        """The connections worker ``index`` holds open now (as of its last accept or check)."""
        self._check(index)
        return int(_OPEN.unpack_from(self._map, self._slots + _OPEN.size * index)[0])

    def over_share(self, index: int, held: int, *, admits: bool, slack: int = ACCEPT_SLACK) -> bool:
        """Worker ``index``, holding ``held`` connections, records that and answers whether it
        should leave the next connection to a sibling: true when some other live worker admits
        calls (ready, not draining) and this one does not admit, or holds more than ``slack``
        connections above the least-loaded such worker.  Never true for the least-loaded
        worker, so some worker always accepts; with no such sibling every worker accepts (a
        draining node answers the new connections itself, with 503)."""
        self._check(index)
        _OPEN.pack_into(self._map, self._slots + _OPEN.size * index, held)
        least: int | None = None
        for i in range(self.workers):
            if i == index:
                continue
            _pid, alive, ready, draining = _STATE.unpack_from(self._map, _ROW.size * i)
            if alive and ready and not draining:
                n = _OPEN.unpack_from(self._map, self._slots + _OPEN.size * i)[0]
                least = n if least is None else min(least, n)
        return least is not None and (not admits or held > least + slack)

    def write(self, index: int, row: NodeRow) -> None:
        self._check(index)
        _ROW.pack_into(self._map, _ROW.size * index, *_pack(row))

    def read(self, index: int) -> NodeRow:
        self._check(index)
        return _unpack(_ROW.unpack_from(self._map, _ROW.size * index))

    def retire(self, index: int) -> None:
        """A worker died: keep its counters in the retired row, clear its row (the supervisor calls this)."""
        dead, old = self.read(index), _unpack(_ROW.unpack_from(self._map, _ROW.size * self.workers))
        kept = NodeRow(restarts=old.restarts + 1,
                       edge=tuple(a + b for a, b in zip(old.edge, dead.edge, strict=True)),
                       wire=tuple(a + b for a, b in zip(old.wire, dead.wire, strict=True)))
        _ROW.pack_into(self._map, _ROW.size * self.workers, *_pack(kept))
        self.write(index, NodeRow())
        _OPEN.pack_into(self._map, self._slots + _OPEN.size * index, 0)

    def totals(self) -> NodeTotals:
        rows = [self.read(i) for i in range(self.workers)]
        retired = _unpack(_ROW.unpack_from(self._map, _ROW.size * self.workers))
        live = [r for r in rows if r.alive]
        every = [*rows, retired]
        return NodeTotals(
            workers=self.workers, alive=len(live), ready=sum(1 for r in live if r.ready),
            draining=bool(live) and all(r.draining for r in live),
            active=sum(r.active for r in live), reserved=sum(r.reserved for r in live),
            max_calls=sum(r.max_calls for r in live), restarts=retired.restarts,
            edge={name: sum(r.edge[i] for r in every) for i, name in enumerate(_EDGE)},
            wire={name: sum(r.wire[i] for r in every) for i, name in enumerate(_WIRE)},
            rows=tuple(rows),
        )

    def close(self) -> None:
        self._map.close()

    def _check(self, index: int) -> None:
        if not 0 <= index < self.workers:
            raise IndexError(f"worker {index} is not in a node of {self.workers}")


class NodeSeat:
    """A worker's place in the table: what it publishes, and the node it reads."""

    __slots__ = ("index", "pid", "table")

    def __init__(self, table: NodeTable, index: int, pid: int) -> None:
        table.read(index)  # checks the index
        self.table = table
        self.index = index
        self.pid = pid

    def publish(self, *, alive: bool, ready: bool, draining: bool, active: int, reserved: int, max_calls: int,
                edge: EdgeStats | None, wire: ServerStats | None) -> None:
        self.table.write(self.index, NodeRow(
            pid=self.pid, alive=int(alive), ready=int(ready), draining=int(draining), active=active,
            reserved=reserved, max_calls=max_calls,
            edge=tuple(getattr(edge, n) if edge is not None else 0 for n in _EDGE),
            wire=tuple(getattr(wire, n) if wire is not None else 0 for n in _WIRE),
        ))

    def totals(self) -> NodeTotals:
        return self.table.totals()

    def over_share(self, held: int, *, admits: bool) -> bool:
        """:meth:`NodeTable.over_share` for this worker."""
        return self.table.over_share(self.index, held, admits=admits)

"""The session's epoch ledger: epochs, marks and playback positions (pure, no I/O, no clock).

One :class:`Ledger` per session.  The session's tasks call it synchronously (there is
no lock: on one event loop a method that does not await is atomic).

* **Epochs.** ``clear(epoch)`` raises the epoch and bumps ``generation``; older audio
  becomes stale.  A clear that is not newer is ignored.
* **Marks.** A mark is positioned at the count of audio frames accepted before it
  (``accept_frame``) and becomes due once that many have been released.  Due marks move
  to the *sent* set (at most ``max_marks``; the oldest is given up and cut past that).
  An echo of a sent mark is played; any other echo is ignored.  A clear cuts every mark
  that was not echoed.  Every mark ends exactly once: played, cut, or still outstanding
  when the session stops.
* **Positions.** Released audio is counted per (epoch, utterance) in samples.  A report
  is due every ``position_interval`` of audio, when another utterance takes over, for
  every cut utterance on a clear, and for everything on stop (``final_reports``).  A
  report counts as delivered only once the caller says so (``reported``), so a report
  lost to a cancellation is still in the final set.  At most ``max_counters`` counters
  are kept; the oldest is reported and forgotten past that.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from brisvox.transport.events import PlaybackPosition

__all__ = ["Ledger"]

Key = tuple[int, int]


@dataclass(slots=True)
class _Counter:
    samples: int
    rate: int
    reported: int = 0
    cut: bool = False


class Ledger:
    __slots__ = ("_counters", "_current", "_cut_marks", "_due", "_pending", "_sent", "accepted", "epoch",
                 "generation", "max_counters", "max_marks", "position_interval", "released")

    def __init__(self, *, position_interval: float = 0.1, max_marks: int = 256, max_counters: int = 256) -> None:
        if position_interval <= 0:
            raise ValueError(f"Ledger: position_interval must be positive, got {position_interval}")
        self.position_interval = position_interval
        self.max_marks = max_marks
        self.max_counters = max_counters
        self.epoch = 0
        self.generation = 0
        self.accepted = 0
        self.released = 0
        self._pending: list[tuple[int, str]] = []  # (position, id), in position order
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._cut_marks: list[str] = []
        self._counters: OrderedDict[Key, _Counter] = OrderedDict()
        self._current: Key | None = None
        self._due: dict[Key, PlaybackPosition] = {}

    # --- epochs ----------------------------------------------------------------------------

    def clear(self, epoch: int) -> bool:
        """Apply Clear{epoch}; False (nothing changes) unless it is newer than the current one."""
        if epoch <= self.epoch:
            return False
        self.epoch = epoch
        self.generation += 1
        self._cut_marks.extend(mid for _, mid in self._pending)
        self._cut_marks.extend(self._sent)
        self._pending.clear()
        self._sent.clear()
        self.accepted = self.released
        for key, c in list(self._counters.items()):
            if key[0] < epoch:
                if c.samples > c.reported:
                    c.cut = True
                    self._due[key] = self._snapshot(key, c)
                else:
                    del self._counters[key]
        if self._current is not None and self._current[0] < epoch:
            self._current = None
        return True

    def is_current(self, epoch: int) -> bool:
        return epoch == self.epoch

    # --- marks -----------------------------------------------------------------------------

    def accept_frame(self) -> None:
        self.accepted += 1

    def add_mark(self, mark_id: str) -> None:
        self._pending.append((self.accepted, mark_id))

    def cut_mark(self, mark_id: str) -> None:
        """A mark that was stale before it was registered (queued before a clear)."""
        self._cut_marks.append(mark_id)

    def due_marks(self) -> list[str]:
        """Marks whose audio has been released; they move to the sent set."""
        due: list[str] = []
        while self._pending and self._pending[0][0] <= self.released:
            mid = self._pending.pop(0)[1]
            due.append(mid)
            self._sent[mid] = None
            if len(self._sent) > self.max_marks:
                self._cut_marks.append(self._sent.popitem(last=False)[0])
        return due

    def echo(self, mark_id: str) -> bool:
        """True when the echo resolves a sent mark (it is now played)."""
        if mark_id in self._sent:
            del self._sent[mark_id]
            return True
        return False

    def has_work(self) -> bool:
        """Whether a mark is due, a report is due or a cut mark waits to be told."""
        return bool(self._due or self._cut_marks or (self._pending and self._pending[0][0] <= self.released))

    def take_cut_marks(self) -> list[str]:
        cut, self._cut_marks = self._cut_marks, []
        return cut

    def outstanding_marks(self) -> int:
        return len(self._pending) + len(self._sent)

    # --- positions -------------------------------------------------------------------------

    def release(self, epoch: int, utterance: int, samples: int, rate: int) -> None:
        """Count a released frame of the current epoch."""
        self.released += 1
        key = (epoch, utterance)
        prev = self._current
        if prev is not None and prev != key:
            pc = self._counters.get(prev)
            if pc is not None and pc.samples > pc.reported:
                self._due[prev] = self._snapshot(prev, pc)
        self._current = key
        c = self._counters.get(key)
        if c is None:
            c = _Counter(0, rate)
            self._counters[key] = c
            if len(self._counters) > self.max_counters:
                old_key, old = self._counters.popitem(last=False)
                if old.samples > old.reported:
                    self._due[old_key] = self._snapshot(old_key, old)
        else:
            self._counters.move_to_end(key)
        c.samples += samples
        if key in self._due or c.samples - c.reported >= self.position_interval * c.rate:
            self._due[key] = self._snapshot(key, c)

    def report_current(self) -> None:
        """The output went idle: the current utterance's unreported tail is due now (without
        it an utterance whose length is not a multiple of the interval never reports its end)."""
        key = self._current
        c = self._counters.get(key) if key is not None else None
        if key is not None and c is not None and c.samples > c.reported:
            self._due[key] = self._snapshot(key, c)

    def due_reports(self) -> list[PlaybackPosition]:
        return list(self._due.values())

    def reported(self, report: PlaybackPosition) -> None:
        """The report was queued for the engine."""
        key = (report.epoch, report.utterance)
        if self._due.get(key) == report:
            del self._due[key]
        c = self._counters.get(key)
        if c is not None:
            c.reported = max(c.reported, report.samples)
            if c.cut and c.reported >= c.samples:
                del self._counters[key]

    def final_reports(self) -> list[PlaybackPosition]:
        """Every counter with audio not yet reported (on stop)."""
        out = dict(self._due)
        for key, c in self._counters.items():
            if c.samples > c.reported:
                out[key] = self._snapshot(key, c)
        return list(out.values())

    @staticmethod
    def _snapshot(key: Key, c: _Counter) -> PlaybackPosition:
        return PlaybackPosition(epoch=key[0], utterance=key[1], samples=c.samples, sample_rate=c.rate)

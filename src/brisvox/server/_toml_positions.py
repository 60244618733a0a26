"""Where each key and value of a TOML document starts (line and column, both from 1).

``tomllib`` parses but keeps no positions, so agent-file errors could not point into
the file.  :func:`index_positions` scans a document that ``tomllib`` already accepted and
records, for every key path (``("agent", "tools", 2)``: table and key names, array
indices), where its key starts and where its value starts.  It understands what a
valid document can hold: comments, bare, quoted and dotted keys, ``[table]`` and
``[[array-of-tables]]`` headers, inline tables, (nested, multi-line) arrays and the four
string forms.  It is lenient: on a document ``tomllib`` would refuse it records what
it can and never raises.

:func:`excess_nesting` runs *before* ``tomllib``: ``tomllib`` parses nested arrays and
inline tables recursively, so a few hundred levels end in a ``RecursionError``; the
agent-file loader refuses a document nested deeper than its limit at the bracket that
goes too deep.  :func:`end_position` is where a document ends (``tomllib`` says "at end
of document" without a line and column).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["KeyPath", "Position", "Positions", "end_position", "excess_nesting", "index_positions"]

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Position:
    line: int
    column: int


@dataclass(slots=True)
class Positions:
    """Key and value starts by key path; lookups fall back to the nearest recorded ancestor."""

    keys: dict[KeyPath, Position] = field(default_factory=dict)
    values: dict[KeyPath, Position] = field(default_factory=dict)

    def key(self, path: KeyPath) -> Position:
        """Where the key of ``path`` starts (for an array element: the element)."""
        return self._find(path, self.keys, self.values)

    def value(self, path: KeyPath) -> Position:
        """Where the value of ``path`` starts."""
        return self._find(path, self.values, self.keys)

    def _find(self, path: KeyPath, first: dict[KeyPath, Position], second: dict[KeyPath, Position]) -> Position:
        p = tuple(path)
        while p:
            if p in first:
                return first[p]
            if p in second:
                return second[p]
            p = p[:-1]
        return Position(1, 1)


_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class _Scanner:
    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.starts = [0] + [k + 1 for k, ch in enumerate(text) if ch == "\n"]
        self.out = Positions()
        self.arrays: dict[KeyPath, int] = {}

    def pos(self, i: int) -> Position:
        line = bisect.bisect_right(self.starts, i) - 1
        return Position(line + 1, i - self.starts[line] + 1)

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def skip_blank(self, newlines: bool) -> None:
        while self.i < self.n:
            ch = self.s[self.i]
            if ch in " \t" or (newlines and ch in "\r\n"):
                self.i += 1
            elif newlines and ch == "#":
                self.skip_line()
            else:
                return

    def skip_line(self) -> None:
        j = self.s.find("\n", self.i)
        self.i = self.n if j < 0 else j + 1

    # --- keys ------------------------------------------------------------------------

    def key(self) -> list[tuple[str, int]]:
        parts: list[tuple[str, int]] = []
        while self.i < self.n:
            self.skip_blank(False)
            start = self.i
            ch = self.peek()
            if ch == '"' or ch == "'":
                name = self.string()
            else:
                j = self.i
                while j < self.n and self.s[j] in _BARE:
                    j += 1
                if j == self.i:
                    break
                name = self.s[self.i : j]
                self.i = j
            parts.append((name, start))
            self.skip_blank(False)
            if self.peek() == ".":
                self.i += 1
                continue
            break
        return parts

    def record_key(self, base: KeyPath, parts: list[tuple[str, int]]) -> KeyPath:
        path = base
        for name, start in parts:
            path = (*path, name)
            self.out.keys.setdefault(path, self.pos(start))
        return path

    # --- values ----------------------------------------------------------------------

    def string(self) -> str:
        """Consume a string starting at ``i``; returns its text (escapes left as written)."""
        q = self.peek()
        if self.s.startswith(q * 3, self.i):
            end = self.i + 3
            while True:
                j = self.s.find(q * 3, end)
                if j < 0:
                    self.i = self.n
                    return ""
                if q == '"' and _escaped(self.s, j):
                    end = j + 1
                    continue
                # A closing run may hold up to two extra quotes that belong to the content.
                while j + 3 < self.n and self.s[j + 3] == q:
                    j += 1
                text = self.s[self.i + 3 : j]
                self.i = j + 3
                return text
        j = self.i + 1
        while j < self.n and self.s[j] != "\n":
            if self.s[j] == "\\" and q == '"':
                j += 2
                continue
            if self.s[j] == q:
                text = self.s[self.i + 1 : j]
                self.i = j + 1
                return text
            j += 1
        self.i = j
        return ""

    def value(self, path: KeyPath) -> None:
        self.skip_blank(False)
        self.out.values.setdefault(path, self.pos(self.i))
        ch = self.peek()
        if ch in "\"'":
            self.string()
        elif ch == "[":
            self.array(path)
        elif ch == "{":
            self.inline_table(path)
        else:
            while self.i < self.n and self.s[self.i] not in ",]}\n#":
                self.i += 1

    def array(self, path: KeyPath) -> None:
        self.i += 1  # [
        index = 0
        while self.i < self.n:
            self.skip_blank(True)
            ch = self.peek()
            if ch == "]":
                self.i += 1
                return
            if ch == ",":
                self.i += 1
                continue
            if ch == "":
                return
            element = (*path, index)
            self.out.keys.setdefault(element, self.pos(self.i))
            self.value(element)
            index += 1

    def inline_table(self, path: KeyPath) -> None:
        self.i += 1  # {
        while self.i < self.n:
            self.skip_blank(True)
            ch = self.peek()
            if ch == "}":
                self.i += 1
                return
            if ch == ",":
                self.i += 1
                continue
            parts = self.key()
            if not parts:
                self.i += 1
                continue
            key_path = self.record_key(path, parts)
            self.skip_blank(False)
            if self.peek() == "=":
                self.i += 1
            self.value(key_path)

    # --- the document ------------------------------------------------------------------

    def document(self) -> Positions:
        table: KeyPath = ()
        while self.i < self.n:
            self.skip_blank(True)
            if self.i >= self.n:
                break
            if self.peek() == "[":
                table = self.header()
                self.skip_line()
                continue
            parts = self.key()
            if not parts:
                self.skip_line()
                continue
            path = self.record_key(table, parts)
            self.skip_blank(False)
            if self.peek() == "=":
                self.i += 1
            self.value(path)
            self.skip_blank(False)
            if self.peek() == "#":
                self.skip_line()
        return self.out

    def header(self) -> KeyPath:
        is_array = self.peek(1) == "["
        self.i += 2 if is_array else 1
        parts = self.key()
        # Resolve earlier arrays of tables on the way ([[a]] then [a.b] means a[last].b).
        path: KeyPath = ()
        for k, (name, start) in enumerate(parts):
            path = (*path, name)
            last = k == len(parts) - 1
            if not last and path in self.arrays:
                path = (*path, self.arrays[path])
            if last:
                self.out.keys.setdefault(path, self.pos(start))
                if is_array:
                    index = self.arrays.get(path, -1) + 1
                    self.arrays[path] = index
                    path = (*path, index)
                    self.out.keys.setdefault(path, self.pos(start))
            else:
                self.out.keys.setdefault(path, self.pos(start))
        return path


def _escaped(s: str, j: int) -> bool:
    backslashes = 0
    k = j - 1
    while k >= 0 and s[k] == "\\":
        backslashes += 1
        k -= 1
    return backslashes % 2 == 1


def excess_nesting(text: str, limit: int) -> Position | None:
    """Where ``text`` first opens more than ``limit`` nested arrays or inline tables (None:
    it never does).  Brackets inside strings and comments do not count; a table header
    counts as the one or two brackets it is written with."""
    sc = _Scanner(text)
    depth = 0
    while sc.i < sc.n:
        ch = sc.s[sc.i]
        if ch == '"' or ch == "'":
            sc.string()  # always moves on, also over an unterminated string
            continue
        if ch == "#":
            sc.skip_line()
            continue
        if ch in "[{":
            depth += 1
            if depth > limit:
                return sc.pos(sc.i)
        elif ch in "]}":
            depth = max(0, depth - 1)
        sc.i += 1
    return None


def end_position(text: str) -> Position:
    """The line and column just past the last character of ``text``."""
    last = text.rfind("\n")
    return Position(text.count("\n") + 1, len(text) - last)


def index_positions(text: str) -> Positions:
    """Key and value positions of every key path in ``text`` (see the module docs)."""
    return _Scanner(text).document()

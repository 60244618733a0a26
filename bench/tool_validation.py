"""Cost of planning one tool call: the argument size check plus schema validation.

Two calls are measured against the engine's real planning step (``ToolEngine._plan``,
which is what ``execute`` runs synchronously before anything starts):

* a typical valid call (a booking: strings, an integer range, an enum, a phone pattern);
* a hostile invalid call at the 16 KiB argument cap: an array of long strings, every one
  failing a regex, so the validator reports errors (the engine keeps at most 5 issues).

For the choice of validator the raw validators run side by side on the same inputs:
jsonschema-rs (draft 2020-12, remote ``$ref`` retrieval disabled) and fastjsonschema
(compiled Python code; it implements drafts 4, 6 and 7 only).  Budget (CONTRIBUTING):
a typical valid call at most 50 microseconds median.

    python bench/tool_validation.py [--repeats 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections.abc import Callable
from typing import Any

from brisvox.agent.context import ToolCall
from brisvox.agent.tools.engine import ToolEngine
from brisvox.agent.tools.registry import ToolCallContext, ToolRegistry
from brisvox.agent.tools.spec import ToolKind, ToolSpec
from brisvox.core.clock import SystemClock, monotonic_ns

BOOKING = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 80},
        "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
        "time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"},
        "phone": {"type": "string", "pattern": "^\\+?[0-9 ()-]{6,20}$"},
        "seating": {"enum": ["inside", "terrace", "bar"]},
        "notes": {"type": "string", "maxLength": 500},
    },
    "required": ["name", "party_size", "time"],
    "additionalProperties": False,
}
TYPICAL = {"name": "Kaya", "party_size": 4, "time": "19:30", "phone": "+90 555 123 4567", "seating": "terrace"}

REGEX = {
    "type": "object",
    "properties": {"codes": {"type": "array", "items": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}}},
    "required": ["codes"],
}


def _hostile(limit: int = 16 * 1024) -> dict[str, Any]:
    item = "x" * 60
    codes: list[str] = []
    while len(json.dumps({"codes": [*codes, item]}, separators=(",", ":"))) <= limit:
        codes.append(item)
    return {"codes": codes}


def _median_us(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(min(200, repeats)):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = monotonic_ns()
        fn()
        samples.append(monotonic_ns() - t0)
    return statistics.median(samples) / 1000.0


async def _noop(args: dict[str, Any], ctx: ToolCallContext) -> str:
    return "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()

    hostile = _hostile()
    size = len(json.dumps(hostile, separators=(",", ":")))
    reg = ToolRegistry()
    reg.register(ToolSpec(name="book_table", description="book", parameters=BOOKING, kind=ToolKind.SIDE_EFFECT), _noop)
    reg.register(ToolSpec(name="check_codes", description="codes", parameters=REGEX), _noop)
    engine = ToolEngine(reg, "bench", SystemClock())
    typical_call = [ToolCall(id="t1.0", name="book_table", arguments=TYPICAL)]
    hostile_call = [ToolCall(id="t1.0", name="check_codes", arguments=hostile)]
    assert engine._plan(typical_call, speculative=False)[0].answer is None
    assert engine._plan(hostile_call, speculative=False)[0].answer is not None

    plan_typical = _median_us(lambda: engine._plan(typical_call, speculative=False), args.repeats)
    plan_hostile = _median_us(lambda: engine._plan(hostile_call, speculative=False), max(50, args.repeats // 10))

    print(f"engine planning, one call (size check + schema), median of {args.repeats}:")
    print(f"  typical valid call      {plan_typical:8.1f} us   (budget 50 us: {'ok' if plan_typical <= 50 else 'OVER'})")
    print(f"  hostile invalid, {size} B {plan_hostile:8.1f} us")

    import jsonschema_rs

    rs_booking = jsonschema_rs.Draft202012Validator(BOOKING)
    rs_regex = jsonschema_rs.Draft202012Validator(REGEX)
    def rs_first() -> None:
        with contextlib.suppress(jsonschema_rs.ValidationError):
            rs_regex.validate(hostile)

    rows = [
        ("jsonschema-rs is_valid, typical", lambda: rs_booking.is_valid(TYPICAL)),
        ("jsonschema-rs first error, hostile", rs_first),
        ("jsonschema-rs iter_errors (eager), hostile", lambda: [e for _, e in zip(range(6), rs_regex.iter_errors(hostile), strict=False)]),
    ]
    try:
        import fastjsonschema

        fj_booking = fastjsonschema.compile(BOOKING)
        fj_regex = fastjsonschema.compile(REGEX)

        def fj_hostile() -> None:
            with contextlib.suppress(fastjsonschema.JsonSchemaException):
                fj_regex(hostile)

        rows += [
            ("fastjsonschema, typical", lambda: fj_booking(TYPICAL)),
            ("fastjsonschema first error, hostile", fj_hostile),
        ]
    except ImportError:
        print("  (fastjsonschema not installed: pip install fastjsonschema)")
    print("raw validators, median:")
    for label, fn in rows:
        print(f"  {label:38s} {_median_us(fn, args.repeats):8.2f} us")
    print("size check alone (compact JSON, typical):")
    print(
        f"  json.dumps + length                    "
        f"{_median_us(lambda: json.dumps(TYPICAL, ensure_ascii=False, separators=(',', ':')), args.repeats):8.2f} us"
    )


if __name__ == "__main__":
    main()

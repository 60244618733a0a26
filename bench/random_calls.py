"""Randomized whole calls against the tool contract, many more than the suite runs.

Each seed is one simulated call (``tests/engine/random_calls.py``: speculation on or
off, barge-ins, tool durations against their timeouts, hang-ups), played on virtual
time and checked: no crash, no side effect run twice, from a speculative response or
after the hang-up, every finished side effect in the final context exactly once, no
task left.  Prints the counts and the first failing seeds with what they broke.

    python bench/random_calls.py [--calls 20000] [--start 0]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests.engine.random_calls

from tests.engine.random_calls import check, run_random_call

from brisvox.core.clock import VirtualTimeLoop

KINDS = ("crashed", "error logged", "left tasks", "ran twice", "started after the hang-up",
         "was final (speculative)", "in the final context")


def _kind(problem: str) -> str:
    return next((k for k in KINDS if k in problem), problem)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    args = parser.parse_args()
    failed: dict[int, list[str]] = {}
    kinds: collections.Counter[str] = collections.Counter()
    spec_calls = spec_failed = effects = late = 0
    began = time.perf_counter()
    for seed in range(args.start, args.start + args.calls):
        loop = VirtualTimeLoop(max_time=86_400.0)
        asyncio.set_event_loop(loop)
        try:
            outcome = loop.run_until_complete(run_random_call(seed))
        finally:
            asyncio.set_event_loop(None)
            loop.close()
        problems = check(outcome)
        spec_calls += outcome.speculation
        effects += sum(1 for r in outcome.runs if r.kind.value == "side_effect" and r.finished)
        late += sum(1 for r in outcome.runs if r.kind.value == "side_effect" and r.finished
                    and r.ended is not None and r.ended > outcome.hung_up_at)
        if problems:
            failed[seed] = problems
            spec_failed += outcome.speculation
            kinds.update({_kind(p) for p in problems})
    took = time.perf_counter() - began
    print(f"{args.calls} calls ({spec_calls} with speculation) in {took:.1f} s ({1000 * took / args.calls:.1f} ms per call)")
    print(f"finished side effects: {effects}; of them finishing after the hang-up: {late}")
    print(f"failed calls: {len(failed)} ({spec_failed} with speculation)")
    for kind, n in kinds.most_common():
        print(f"  {n:6d}  {kind}")
    for seed, problems in list(failed.items())[:10]:
        print(f"seed {seed}: {problems[:3]}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

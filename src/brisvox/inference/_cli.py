"""``brisvox models``: fetch the pinned model files into the cache, or list where they are.

The argument parser is defined in ``brisvox.__main__`` so that ``--help`` imports nothing heavy.
"""

from __future__ import annotations

import argparse
import sys

from brisvox.inference.errors import ModelError
from brisvox.inference.models import fetch_models, model_dir, model_path, registered_models


def run_models_command(args: argparse.Namespace) -> int:
    if args.models_command == "fetch":
        try:
            results = fetch_models(args.names or None, cache_dir=args.dir)
        except ModelError as exc:
            print(f"brisvox models fetch: FAILED: {exc}", file=sys.stderr)
            return 1
        for r in results:
            print(f"{r.name}: {r.outcome.value} {r.path}")
        return 0
    if args.models_command == "list":
        print(f"cache: {model_dir()}")
        for m in registered_models():
            path = model_path(m)
            state = "present" if path.is_file() else "missing"
            print(f"{m.name}\t{m.licence}\t{state}\t{path}")
        return 0
    print("usage: brisvox models {fetch,list}", file=sys.stderr)
    return 2

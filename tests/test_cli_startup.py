"""The command line starts fast: building the parser imports no model code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def test_building_the_parser_imports_neither_inference_nor_the_server() -> None:
    code = (
        "import sys; from brisvox.__main__ import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith(('brisvox.inference', 'brisvox.server', 'numpy'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, env=env)
    assert out.stdout.strip() == "[]"

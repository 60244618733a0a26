"""The package layers only import downwards (docs/ARCHITECTURE.md): an import scan."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "brisvox"

BELOW: dict[str, set[str]] = {
    "core": set(),
    "audio": {"core"},
    "inference": {"core", "audio"},
    "agent": {"core", "audio", "inference"},
    "providers": {"core", "audio", "inference", "agent"},
    "transport": {"core", "audio", "inference", "agent"},
    "sim": {"core", "audio", "inference", "agent", "providers"},
    "sdk": {"core", "audio", "inference", "agent", "providers", "transport"},
    "engine": {"core", "audio", "inference", "agent", "providers", "transport"},
    "recording": {"core", "audio", "inference", "agent", "providers", "transport", "engine"},
    "server": {"core", "audio", "inference", "agent", "providers", "transport", "engine", "sdk", "recording"},
}
# The one exception to "nothing imports sim": the demo server's scripted model, used when no
# real LLM is configured (it says so on the page and in the log).
# And brisvox.testing: the test kit for users' agents runs them on the mocks; and
# server/mock_providers.py: ``provider = "mock"`` in an agent file, for capacity tests.
# And sdk/testing.py: the conformance driver for brains hands them the scripted model.
ALLOWED_EXCEPTIONS = {("server/demo_llm.py", "sim"), ("testing.py", "sim"), ("server/mock_providers.py", "sim"),
                      ("sdk/testing.py", "sim")}


def imported_layers(source: str) -> set[str]:
    layers: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "brisvox" and len(parts) > 1:
                layers.add(parts[1])
    return layers


def test_the_scan_sees_both_import_forms() -> None:
    src = "import brisvox.engine.x\nfrom brisvox.sim import mock\nfrom . import y\n"
    assert imported_layers(src) == {"engine", "sim"}


def test_every_layer_imports_only_the_layers_below_it() -> None:
    bad = []
    for layer, allowed in BELOW.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            rel = str(path.relative_to(PACKAGE))
            for used in imported_layers(path.read_text()) - allowed - {layer}:
                if used in BELOW and (rel, used) not in ALLOWED_EXCEPTIONS:
                    bad.append(f"{path.relative_to(PACKAGE)} imports brisvox.{used}")
    assert not bad, "imports against the layer direction:\n" + "\n".join(bad)


def test_nothing_in_the_package_outside_sim_imports_sim() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "sim" or (str(rel), "sim") in ALLOWED_EXCEPTIONS:
            continue
        if "sim" in imported_layers(path.read_text()):
            bad.append(str(rel))
    assert not bad, "only tests (and the demo's scripted model, the mock providers) may import brisvox.sim: " + ", ".join(bad)

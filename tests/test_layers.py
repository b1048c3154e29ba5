"""Layers read top-down (docs/ARCHITECTURE.md): no module imports a layer above its own."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "olympia"
LAYERS = {  # lower first; modules of one rank may use each other
    "exceptions": 0, "inputs": 0, "lru": 0, "_proto": 0, "storage": 1, "tree": 2, "catalog": 3,
    "versions": 4, "iceberg": 5, "spec": 6, "plan": 7, "expire": 7, "spark": 8, "ui": 8,
    "server": 9, "cli": 10,
}
ENTRY_POINTS = {PACKAGE / "expire" / "__main__.py"}  # `python -m` / spark-submit scripts


def imported_layers(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                 [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        found |= {n.split(".")[1] for n in names if n.startswith("olympia.")}
    return found


def test_no_module_imports_a_higher_layer() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if (len(parts) == 1 and parts[0] == "__init__.py") or path in ENTRY_POINTS:
            continue
        own = parts[0].removesuffix(".py")
        assert own in LAYERS, f"{path} is in no layer: add it to LAYERS and ARCHITECTURE.md"
        wrong += [f"{path.relative_to(PACKAGE.parent)} imports olympia.{other}"
                  for other in imported_layers(path) if LAYERS.get(other, -1) > LAYERS[own]]
    assert not wrong, wrong

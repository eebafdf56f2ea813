"""The simulator's house rules: no import circle, the apiserver never imports a controller, small modules."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_provider_fedsched.sim as sim

ROOT = Path(sim.__file__).parent
PACKAGE = "airflow_provider_fedsched.sim"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((PACKAGE, *(p for p in parts if p != "__init__")))


def imports() -> dict[str, set[str]]:
    """Every import inside the package (TYPE_CHECKING ones included): module -> modules it imports."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def test_no_import_circle() -> None:
    graph = imports()
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                raise AssertionError("import circle: " + " -> ".join([*path, node, target]))
            if target not in state:
                visit(target, [*path, node])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_the_apiserver_does_not_know_the_controllers() -> None:
    for module, targets in imports().items():
        if module.startswith(f"{PACKAGE}.apiserver"):
            assert not {t for t in targets if t.startswith(f"{PACKAGE}.controllers")}, module
        if module.startswith(f"{PACKAGE}.controllers"):
            # Controllers get the store, the recorder and the clock; never the cluster or the harness.
            assert not targets & {f"{PACKAGE}.cluster", f"{PACKAGE}.harness", f"{PACKAGE}.control"}, module


def test_no_module_over_500_lines() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 500} == {}

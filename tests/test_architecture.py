"""The house rules that code review alone does not keep: no import circle in the package,
``federation/`` importing only the standard library, pydantic, PyYAML and numpy (the columnar snapshot
index, imported lazily), and the provider never loading a dev tool (sim/, testbed/, replay/, the demo: the
second distribution, which a stock Airflow install does not have).

The import graph is read from the source (``ast``), not by importing anything. Every ``import`` statement
counts: at module level, inside a function (a lazy import still makes the two modules depend on each
other) and under ``if TYPE_CHECKING:`` (a type-only import is a dependency of the design, as when a
helper's annotations name the object that builds it). ``from pkg import name`` reads the package's
namespace, so it is an edge to the package's ``__init__``, and when ``name`` is a submodule, to that
submodule as well (``pkg/__init__`` importing a module that says ``from pkg import sibling`` is a circle:
the module runs while the package is half built). Importing a submodule by its full name (``from pkg.sub
import x``, ``import pkg.sub as sub``) is an edge to the submodule only: the parents' ``__init__`` run
first, but a package that re-exports its modules would otherwise be a circle with each of them. Circles
are looked for twice: between modules, and between the package's top-level parts (``cli``,
``federation``, ``operators``, ...), where two layers must not lean on each other.

``KNOWN_CIRCLES`` lists what other branches are taking apart: each entry must still be true (so that it
is removed as soon as its fix lands), and nothing else may appear. There is no line limit: a module holds
one role, however long that is (issue 28 withdrew the 500-line rule, which had split classes by length).
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "airflow_provider_fedsched"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# Each strongly connected component of the import graph, as its sorted module names, with who fixes it.
KNOWN_CIRCLES: dict[tuple[str, ...], str] = {}
# The same between the package's top-level parts (sorted full names), with who fixes it.
KNOWN_PART_CIRCLES: dict[tuple[str, ...], str] = {}

FEDERATION_ALLOWED = {"pydantic", "yaml", "numpy"}

DEV_TOOLS = {f"{PACKAGE}.{part}" for part in ("sim", "testbed", "replay", "demo")}
"""The parts the provider's wheel leaves to the dev tools' distribution (tests/test_distributions.py checks
the two wheels against this list)."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    module: str = ""
    """The importing module, when ``source`` is a part of the package rather than the module itself."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    return (node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom))


def _loaded_with_the_module(tree: ast.Module) -> set[int]:
    """Lines of the imports that run when the module is loaded: at module level or in a class body, not
    inside a function and not under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                lines.add(statement.lineno)
            elif isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
                visit(statement.orelse)
            elif not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    children = getattr(statement, field, None) or []
                    visit([c for c in children if isinstance(c, ast.stmt)])
                    for child in children:
                        if isinstance(child, ast.ExceptHandler | ast.match_case):
                            visit(child.body)

    visit(tree.body)
    return lines


def _absolute(node: ast.ImportFrom, source: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in ``path``, package modules and third-party alike."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
            continue
        target = _absolute(node, name, path.name == "__init__.py")
        yield target, node.lineno
        for alias in node.names:
            submodule = f"{target}.{alias.name}"
            if submodule in known:
                yield submodule, node.lineno


def import_graph() -> list[Edge]:
    known = modules()
    edges = []
    for name, path in known.items():
        for target, line in imports_of(name, path, known):
            if target in known and target != name:
                edges.append(Edge(name, target, line))
    return edges


def strongly_connected(edges: list[Edge]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module (each holds at least one circle)."""
    graph: dict[str, list[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, []).append(edge.target)
        graph.setdefault(edge.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(components)


def shortest_circle(component: list[str], edges: list[Edge]) -> list[Edge]:
    """A shortest circle through the component's first module, as the import edges (with lines) it uses."""
    members = set(component)
    start = component[0]
    outgoing: dict[str, list[Edge]] = {}
    for edge in edges:
        if edge.source in members and edge.target in members:
            outgoing.setdefault(edge.source, []).append(edge)
    paths: dict[str, list[Edge]] = {start: []}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in sorted(outgoing.get(node, []), key=lambda e: (e.target, e.line)):
                if edge.target == start:
                    return [*paths[node], edge]
                if edge.target not in paths:
                    paths[edge.target] = [*paths[node], edge]
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no circle through {start}")  # pragma: no cover - a component always has one


def describe(component: list[str], edges: list[Edge]) -> str:
    def short(name: str) -> str:
        return name.removeprefix(PACKAGE + ".")

    steps = [
        f"{short(e.source)} ({short(e.module) + ' ' if e.module else ''}line {e.line}) -> {short(e.target)}"
        for e in shortest_circle(component, edges)
    ]
    return f"{[short(m) for m in component]}: e.g. " + ", ".join(steps)


def part_of(module: str) -> str:
    """The top-level part of the package a module belongs to (``airflow_provider_fedsched.sim.api`` ->
    ``airflow_provider_fedsched.sim``); the package's own ``__init__`` is a part of its own."""
    return ".".join(module.split(".")[:2])


def part_graph(edges: list[Edge]) -> list[Edge]:
    """The import edges between top-level parts, one per importing module and line."""
    return [
        Edge(part_of(e.source), part_of(e.target), e.line, e.source)
        for e in edges
        if part_of(e.source) != part_of(e.target)
    ]


def check_circles(edges: list[Edge], known: dict[tuple[str, ...], str], level: str) -> None:
    found = {tuple(component): describe(component, edges) for component in strongly_connected(edges)}
    new = [text for component, text in found.items() if component not in known]
    assert not new, f"import circle(s) between {level}:\n" + "\n".join(new)
    gone = [f"{list(c)} ({owner})" for c, owner in known.items() if c not in found]
    assert not gone, f"circles between {level} fixed since: remove them from the known list:\n" + "\n".join(
        gone
    )


def test_no_import_circle_between_modules() -> None:
    check_circles(import_graph(), KNOWN_CIRCLES, "modules")


def test_no_import_circle_between_the_packages_parts() -> None:
    check_circles(part_graph(import_graph()), KNOWN_PART_CIRCLES, "parts of the package")


def test_federation_imports_only_the_standard_library_pydantic_yaml_and_numpy() -> None:
    known = modules()
    foreign = []
    for name, path in known.items():
        if not name.startswith(f"{PACKAGE}.federation"):
            continue
        for target, line in imports_of(name, path, known):
            top = target.split(".")[0]
            if target.startswith(f"{PACKAGE}.federation") or top in FEDERATION_ALLOWED:
                continue
            if top == PACKAGE or top not in sys.stdlib_module_names:
                foreign.append(f"{name} (line {line}) imports {target}")
    assert not foreign, "\n".join(foreign)


def test_the_provider_never_loads_a_dev_tool() -> None:
    """A stock Airflow install has the provider's wheel only: no module of it imports sim/, testbed/,
    replay/ or the demo, except the ``fedsched`` verbs that drive them, inside the functions that run them
    (after the check that says what to install when they are missing, cli/_common.require_dev_tools)."""
    known = modules()
    found = []
    for name, path in known.items():
        if part_of(name) in DEV_TOOLS:
            continue
        loaded = _loaded_with_the_module(ast.parse(path.read_text(encoding="utf-8")))
        for target, line in imports_of(name, path, known):
            if part_of(target) not in DEV_TOOLS:
                continue
            if part_of(name) != f"{PACKAGE}.cli":
                found.append(f"{name} (line {line}) imports the dev tool {target}")
            elif line in loaded:
                found.append(f"{name} (line {line}) imports the dev tool {target} when it is loaded")
    assert not found, "\n".join(found)


# The checker itself, on a small made-up graph.
@pytest.mark.parametrize(
    ("pairs", "components"),
    [
        ([("a", "b"), ("b", "c")], []),
        ([("a", "b"), ("b", "a"), ("b", "c")], [["a", "b"]]),
        ([("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("e", "d")], [["a", "b", "c"], ["d", "e"]]),
    ],
)
def test_circles_are_found_and_described(pairs: list[tuple[str, str]], components: list[list[str]]) -> None:
    edges = [Edge(source, target, line) for line, (source, target) in enumerate(pairs, start=1)]
    assert strongly_connected(edges) == components
    for component in components:
        circle = shortest_circle(component, edges)
        assert circle[0].source == circle[-1].target == component[0]
        assert all(a.target == b.source for a, b in itertools.pairwise(circle))


def test_lazy_and_type_only_imports_count() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import only_for_types\n"
        "def f():\n    import lazily_used\n"
    )
    imported = sorted(
        node.module or "" if isinstance(node, ast.ImportFrom) else node.names[0].name
        for node in _imports(tree)
    )
    assert imported == ["lazily_used", "only_for_types", "typing"]


def test_imports_loaded_with_the_module_are_told_from_lazy_and_type_only_ones() -> None:
    tree = ast.parse(
        "import top\n"
        "if TYPE_CHECKING:\n    import only_for_types\nelse:\n    import otherwise\n"
        "try:\n    import tried\nexcept ImportError:\n    import fallback\n"
        "class C:\n    import in_class_body\n"
        "def f():\n    import lazily_used\n"
    )
    loaded = _loaded_with_the_module(tree)
    names = {node.lineno: node.names[0].name for node in _imports(tree) if isinstance(node, ast.Import)}
    assert sorted(names[line] for line in loaded) == [
        "fallback",
        "in_class_body",
        "otherwise",
        "top",
        "tried",
    ]


def test_from_a_package_import_a_module_depends_on_the_package_too(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE / "part"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from airflow_provider_fedsched.part.b import thing\n")
    (package / "a.py").write_text("from airflow_provider_fedsched.part import b\n")
    (package / "b.py").write_text("import airflow_provider_fedsched.part.a as a\n")
    known = {
        f"{PACKAGE}.part": package / "__init__.py",
        **{f"{PACKAGE}.part.{m}": package / f"{m}.py" for m in "ab"},
    }
    edges = [Edge(name, t, line) for name, path in known.items() for t, line in imports_of(name, path, known)]
    targets = {name: sorted(e.target for e in edges if e.source == name) for name in known}
    assert targets == {
        f"{PACKAGE}.part": [f"{PACKAGE}.part.b"],
        f"{PACKAGE}.part.a": [f"{PACKAGE}.part", f"{PACKAGE}.part.b"],
        f"{PACKAGE}.part.b": [f"{PACKAGE}.part.a"],
    }
    assert strongly_connected(edges) == [sorted(known)]


PROCESS_STATE_HOLDERS = {f"{PACKAGE}.state.process", f"{PACKAGE}.kube.clients"}
"""The modules that may hold process-wide mutable state: what one process keeps for itself, and the
Kubernetes client cache (issue 28: no process-wide mutable globals anywhere else)."""
CORE_MEMOS = {f"{PACKAGE}.federation.plugins.fragmentation", f"{PACKAGE}.federation.snapshot"}
"""The pure core cannot import ``state/``: its memos of values derived from immutable inputs (keyed by
the inputs, so that no answer depends on them) stay with the plugin or model that owns them."""
_SYNC_PRIMITIVES = {"Lock", "RLock", "Event", "Condition", "Semaphore", "BoundedSemaphore", "local"}
_CONTAINERS = {
    "dict",
    "set",
    "list",
    "OrderedDict",
    "defaultdict",
    "deque",
    "Counter",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "WeakSet",
}


def _starts_mutable_state(value: ast.expr) -> bool:
    """An empty container or a synchronization primitive: state that grows or changes while the process
    runs (a filled dict or tuple at module level is a table of constants)."""
    if (isinstance(value, ast.Dict) and not value.keys) or (
        isinstance(value, ast.List | ast.Set) and not value.elts
    ):
        return True
    if isinstance(value, ast.Call):
        function = value.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        return name in _SYNC_PRIMITIVES or (name in _CONTAINERS and not value.args)
    return False


def _target(node: ast.Assign | ast.AnnAssign) -> ast.expr:
    return node.targets[0] if isinstance(node, ast.Assign) else node.target


def process_state(name: str, path: Path) -> list[str]:
    """Module-level mutable state of one module, and functions that rebind a module global."""
    tree = ast.parse(path.read_text(), str(path))
    found = [
        f"{name}:{node.lineno} {ast.unparse(_target(node))}"
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and node.value is not None
        and _starts_mutable_state(node.value)
    ]
    found += [
        f"{name}:{node.lineno} global {', '.join(node.names)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Global)
    ]
    return found


def test_process_wide_state_lives_in_state_process_and_the_client_cache() -> None:
    provider = {
        name: path
        for name, path in modules().items()
        if not any(name == tool or name.startswith(tool + ".") for tool in DEV_TOOLS)
    }
    found = [
        line
        for name, path in provider.items()
        if name not in PROCESS_STATE_HOLDERS | CORE_MEMOS
        for line in process_state(name, path)
    ]
    assert found == [], "move process-wide state into state/process.py:\n" + "\n".join(found)
    assert all(name in provider for name in PROCESS_STATE_HOLDERS | CORE_MEMOS)
    assert process_state(f"{PACKAGE}.state.process", ROOT / "state" / "process.py")  # the rule sees it


def test_process_state_is_recognised(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import threading\nfrom collections import OrderedDict\n"
        "TABLE = {'a': 1}\nNAMES = ('x',)\n_cache: dict[str, int] = {}\n_seen = OrderedDict()\n"
        "_lock = threading.Lock()\n_client = None\n\n\ndef f():\n    global _client\n    _client = 1\n"
    )
    assert [line.split(" ", 1)[1] for line in process_state("m", module)] == [
        "_cache",
        "_seen",
        "_lock",
        "global _client",
    ]


# Shared state has one writer API, state/, and outside hooks/ it is reached through the hook's verbs
# (issue 28, item 4): an operator, trigger, CLI command or page never holds a store of its own.
STATE_REACHERS = {f"{PACKAGE}.hooks", f"{PACKAGE}.state"}


def _names_a_hook(value: ast.expr) -> bool:
    """``hook``, ``self.federation_hook``, ``self._hook()``: an expression that names a hook."""
    if isinstance(value, ast.Call):
        value = value.func
    name = value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else ""
    return "hook" in name.lower()


def state_reached_through_a_hook(name: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{name}:{node.lineno} {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "state" and _names_a_hook(node.value)
    ]


def test_only_hooks_and_state_reach_into_the_hook_s_state() -> None:
    found = [
        line
        for name, path in modules().items()
        if part_of(name) not in STATE_REACHERS
        for line in state_reached_through_a_hook(name, path)
    ]
    assert found == [], "call a verb of FederationHook instead:\n" + "\n".join(found)


def test_reaching_into_the_hook_s_state_is_recognised(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f(self, hook, app):\n"
        "    hook.state.deferred.add(1)\n"
        "    self.federation_hook.state.orphans.forget(2)\n"
        "    self._hook().state.snapshots.newest([])\n"
        "    app.state.signed_in = True\n"
        "    return hook.swept_success('a', 'b', 'c')\n"
    )
    assert [line.split(" ", 1)[1] for line in state_reached_through_a_hook("m", module)] == [
        "hook.state",
        "self.federation_hook.state",
        "self._hook().state",
    ]

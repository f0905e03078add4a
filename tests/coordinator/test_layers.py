"""The coordinator package's layers: the classic group protocol's rules and data are sans-IO (no
Trio, directly or through what they import), the Trio shell drives them, and no module circle
exists anywhere in the package, not even through imports under ``TYPE_CHECKING``. Nor does a class
declare other classes' state in a ``TYPE_CHECKING`` stub block (the mixin pattern the shell
replaced)."""

from __future__ import annotations

import ast
from pathlib import Path

import trio_broker.coordinator

COORDINATOR = Path(trio_broker.coordinator.__file__).parent
PACKAGE = "trio_broker.coordinator"
#: Modules that must not import Trio, directly or through the package modules they import: the
#: data and every ``classic_*`` rule module.
SANS_IO = {"group"} | {p.stem for p in COORDINATOR.glob("classic_*.py")}


def module_name(path: Path) -> str:
    parts = path.relative_to(COORDINATOR).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path, name: str | None = None) -> tuple[set[str], set[str]]:
    """``(package modules, outside top-level names)`` imported anywhere in ``path`` (the module
    ``name`` of the package): at module level, in function bodies and under ``TYPE_CHECKING``."""
    name = module_name(path) if name is None else name
    is_package = path.name == "__init__.py"
    here = name.split(".") if name else []
    if not is_package:
        here = here[:-1]
    inside: set[str] = set()
    outside: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                module = node.module or ""
                if module == PACKAGE or module.startswith(PACKAGE + "."):
                    inside.add(module[len(PACKAGE) + 1:])
                else:
                    outside.add(module.split(".")[0])
                continue
            base = here[:len(here) - (node.level - 1)] if node.level > 1 else list(here)
            if node.level - 1 > len(here):
                outside.add("trio_broker")  # above the package: another part of the broker
                continue
            target = ".".join(base + ([node.module] if node.module else []))
            if node.module:
                inside.add(target)
            else:
                inside.update(".".join(base + [alias.name]) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    inside.add(alias.name[len(PACKAGE) + 1:])
                else:
                    outside.add(alias.name.split(".")[0])
    return inside, outside


def package_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in COORDINATOR.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        inside, _ = imports(path)
        # ``from .x import y`` may name a module x.y or a value y of x: keep what exists.
        graph[name] = {t for t in inside if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_in_the_package() -> None:
    assert cycles(package_graph()) == []


def test_the_rules_and_the_data_import_no_trio() -> None:
    assert {"classic_state", "classic_join", "classic_offsets"} <= SANS_IO
    graph = package_graph()
    offenders = []
    for start in sorted(SANS_IO):
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            path = COORDINATOR / (name.replace(".", "/") + ".py")
            _, outside = imports(path)
            if outside & {"trio", "trio_typing", "anyio"}:
                offenders.append(f"{start} -> {name}" if name != start else name)
            todo.extend(graph.get(name, ()))
    assert offenders == []


def test_no_class_declares_others_state_under_type_checking() -> None:
    stubs = []
    for path in sorted(COORDINATOR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, ast.If) and "TYPE_CHECKING" in ast.unparse(item.test):
                    stubs.append(f"{module_name(path)}.{node.name}")
    assert stubs == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The checks cannot pass vacuously: a circle, imports hidden under TYPE_CHECKING or in a
    function body, and relative imports from a subpackage are all found."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    fake = tmp_path / "join.py"
    fake.write_text("from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n"
                    "    from .coordinator import GroupCoordinator\n"
                    "def later():\n"
                    "    import trio\n"
                    "    from . import group\n", encoding="utf-8")
    assert imports(fake, "join") == ({"coordinator", "group"}, {"typing", "trio"})
    assert imports(fake, "transaction.join")[0] == {"transaction.coordinator",
                                                    "transaction.group"}
    graph = package_graph()
    assert "classic_state" in graph["coordinator"]
    assert "coordinator" in graph["transaction.coordinator"]

"""The network package's imports follow the data: socket server → acceptor → processor →
connection → response writer → request channel (→ the handler pool, outside the package). A lower layer tells a
higher one things through the small ``typing.Protocol`` classes it declares, never by importing
it, not even under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

import trio_broker.network

NETWORK = Path(trio_broker.network.__file__).parent
#: Highest first. A module may import only modules after it.
LAYERS = ["socket_server", "acceptor", "processor", "connection", "response_writer",
          "request_channel"]
#: Building blocks any layer may use; they import no other network module.
LEAVES = {"memory_pool", "mute", "quotas", "turns"}


def network_imports(path: Path) -> set[str]:
    """Network modules imported anywhere in ``path`` (function bodies and TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from .x import y
                found.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import x
                found.update(alias.name for alias in node.names)
            elif node.level == 2 and node.module and node.module.startswith("network"):
                found.add(node.module.split(".")[1] if "." in node.module else "")
            elif node.level == 0 and node.module and node.module.startswith(
                    "trio_broker.network."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("trio_broker.network."):
                    found.add(alias.name.split(".")[2])
    return found


def test_every_network_module_has_a_place() -> None:
    modules = {p.stem for p in NETWORK.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS) | LEAVES


def test_imports_only_point_down() -> None:
    upward = []
    for path in sorted(NETWORK.glob("*.py")):
        module = path.stem
        imported = network_imports(path) - {module}
        if module in LEAVES:
            upward += [f"{module} -> {target}" for target in sorted(imported)]
            continue
        if module == "__init__":
            continue
        rank = LAYERS.index(module)
        for target in sorted(imported):
            if target in LEAVES:
                continue
            if target not in LAYERS or LAYERS.index(target) <= rank:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_the_checker_sees_type_checking_imports(tmp_path: Path) -> None:
    """The check cannot pass vacuously: an import hidden under TYPE_CHECKING is found."""
    source = tmp_path / "connection.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n"
                      "    from .processor import Processor\n"
                      "    from trio_broker.network.socket_server import SocketServer\n"
                      "from . import mute\n", encoding="utf-8")
    assert network_imports(source) == {"processor", "socket_server", "mute"}

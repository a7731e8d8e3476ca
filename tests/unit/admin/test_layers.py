"""The tools' layering: the CLI and the console both stand on ``strom.admin``; neither
imports the other, the admin layer imports neither, the testing kit does not import the CLI,
and no import circle joins their modules. Read from the sources (every import, also those
inside functions), so a lazy import cannot hide an edge."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in (SRC / "strom").rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The strom modules ``name`` imports (a ``from package import module`` counts as the
    module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize(("importer", "imported"), [
    ("strom.cli", "strom.console"),
    ("strom.console", "strom.cli"),
    ("strom.admin", "strom.cli"),
    ("strom.admin", "strom.console"),
    ("strom.testing", "strom.cli"),
    ("strom.testing", "strom.console"),
])  # fmt: skip
def test_forbidden_imports(importer: str, imported: str) -> None:
    edges = [(a, b) for a, targets in graph().items() if _in(a, importer)
             for b in sorted(targets) if _in(b, imported)]  # fmt: skip
    assert edges == []


def test_the_cli_and_the_console_stand_on_the_admin_layer() -> None:
    g = graph()
    for package in ("strom.cli", "strom.console"):
        assert any(_in(b, "strom.admin") for a, t in g.items() if _in(a, package) for b in t)


def test_no_import_circle_among_the_tools() -> None:
    """Tarjan's strongly connected components over the tools' modules: each is one module."""
    g = graph()
    tools = {m for m in g if any(_in(m, p) for p in ("strom.cli", "strom.console", "strom.admin"))}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(g[v] & tools):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(tools):
        if v not in index:
            visit(v)
    assert circles == []

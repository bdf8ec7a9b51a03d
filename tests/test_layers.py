"""The import graph points one way: down the layers of docs/api.md, with no circle.

Every ``import`` of every module of ``collectors``, ``tracekit`` and ``dashboards`` (module level,
inside functions and under ``TYPE_CHECKING`` alike: each is a dependency of the code) is read with
``ast``; the layer table is parsed from docs/api.md, the one place it is written.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("collectors", "tracekit", "dashboards")
_ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")


def layer_table() -> dict[str, int]:
    """Package or module name -> layer, from the table under docs/api.md's "## Layers"."""
    text = (REPO_ROOT / "docs" / "api.md").read_text().split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, int] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            for name in re.findall(r"`([\w.]+)`", match.group(2)):
                table[name] = int(match.group(1))
    assert table, "docs/api.md has no layer table"
    return table


def modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package's own module is ``pkg.__init__``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            found[".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` (at ``path``) imports."""

    def resolve(target: str) -> str | None:
        if target in known:
            return target
        return target + ".__init__" if target + ".__init__" in known else None

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {hit for alias in node.names if (hit := resolve(alias.name))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: -node.level]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                hit = resolve(f"{base}.{alias.name}") or resolve(base)
                if hit:
                    found.add(hit)
    return found - {name}


@functools.cache
def graph() -> dict[str, set[str]]:
    """Module -> the modules it imports."""
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def owner(module: str, table: dict[str, int]) -> str | None:
    """The table row naming ``module``: the longest name that is it or a package holding it."""
    bare = module.removesuffix(".__init__")
    rows = [row for row in table if module == row or bare == row or bare.startswith(row + ".")]
    # ``tracekit`` itself is a row only as ``tracekit.__init__``: a new module must find its own row.
    return max(rows, key=len, default=None)


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def violations(edges: dict[str, set[str]], table: dict[str, int]) -> list[str]:
    """Each import that points up a layer or sideways within one, and each module without a row."""
    problems = []
    for module in sorted(edges):
        row = owner(module, table)
        if row is None:
            problems.append(f"{module}: no row of docs/api.md's layer table names it")
            continue
        for target in sorted(edges[module]):
            other = owner(target, table)
            if other is None or other == row:
                continue
            if table[other] > table[row]:
                problems.append(f"{module} (layer {table[row]}) imports {target} (layer {table[other]}): upward")
            elif table[other] == table[row]:
                problems.append(f"{module} imports {target}: both on layer {table[row]}, which never import each other")
    return problems


def test_no_import_points_up_or_sideways() -> None:
    assert violations(graph(), layer_table()) == []


def test_no_import_circle() -> None:
    assert circles(graph()) == []


FORMATTING_MAY_NOT_IMPORT = ("tracekit.schedule", "tracekit.whatif", "tracekit.analysis", "tracekit.stragglers")
"""What computes below ``RunAnalysis``: the dashboards read it only through ``tracekit.run_analysis``."""


def test_dashboards_read_only_the_analysis() -> None:
    edges = graph()
    reached = {
        f"{module} imports {target}"
        for module, targets in edges.items()
        if module.startswith("dashboards.")
        for target in targets
        if target.startswith(FORMATTING_MAY_NOT_IMPORT)
    }
    assert sorted(reached) == []


@pytest.mark.parametrize(
    ("edges", "problem"),
    [
        ({"tracekit.analysis.x": {"tracekit.whatif.y"}, "tracekit.whatif.y": set()}, "upward"),
        ({"tracekit.whatif.y": {"tracekit.planner.z"}, "tracekit.planner.z": set()}, "never import each other"),
        ({"tracekit.newthing": set()}, "no row"),
        ({"collectors.job": {"tracekit.errors"}, "tracekit.errors": set()}, "upward"),
    ],
)
def test_the_check_catches(edges: dict[str, set[str]], problem: str) -> None:
    assert any(problem in line for line in violations(edges, layer_table()))


def test_circle_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]

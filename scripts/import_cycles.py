"""Import cycles in include/sluice, imports inside functions included.

    .venv/bin/python scripts/import_cycles.py [--root include] [--package sluice]

Reads every module's imports with ``ast`` (module level, inside functions and classes, inside
``try``), leaves out those under ``if TYPE_CHECKING:`` (they never run), resolves each to the
module of this tree it names and prints the import cycles at two grains:

* modules (``sluice.protocol.process`` -> ``sluice.sinks.files``);
* first-level packages and modules (``sluice.protocol``, ``sluice.windows``, ``sluice.spark``).

Exit status 1 when either grain has a cycle. ``lint-imports`` checks the layers; this checks
what it cannot: imports made inside functions count here too.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """Every module name this module's code imports (relative imports resolved)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def graph(root: Path, package: str) -> dict[str, set[str]]:
    files = sorted((root / package).rglob("*.py"))
    modules = {module_name(root, f): f for f in files}
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for target in imported(tree, name, path.name == "__init__.py"):
            # the longest module of this tree the name starts with (a.b.c may be a.b's name c)
            parts = target.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts:
                dest = ".".join(parts)
                if dest != name:
                    edges[name].add(dest)
        edges.setdefault(name, set())
    return dict(edges)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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


def coarse(edges: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    depth = len(package.split(".")) + 1

    def top(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    out: dict[str, set[str]] = defaultdict(set)
    for src, dests in edges.items():
        if src == package:
            continue
        out[top(src)].update(top(d) for d in dests if top(d) != top(src) and d != package)
    return dict(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default="include")
    parser.add_argument("--package", default="sluice")
    args = parser.parse_args()
    edges = graph(Path(args.root), args.package)
    failed = False
    for grain, g in (("modules", edges), ("first-level packages", coarse(edges, args.package))):
        found = cycles(g)
        print(f"{grain}: {len(g)} nodes, {sum(map(len, g.values()))} imports, {len(found)} cycles")
        for component in found:
            failed = True
            print(f"  cycle of {len(component)}: {', '.join(component)}")
            for node in component:
                inside = sorted(d for d in g[node] if d in component)
                print(f"    {node} -> {', '.join(inside)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

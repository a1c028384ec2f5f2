"""The import graph scripts/lib/archcheck.py checks, and the cycles in it (standard library only).

Two halves: which file of a tree an import statement imports (as Python would resolve it, read
with `ast`, never run), and graph theory on the graph those imports make: its strongly connected
parts, its simple cycles and the shortest cycle through one edge, and a cycle's spelling for the
baseline and for a message. archcheck.py reads the trees and judges them against the baseline.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Site:
    """Where an import statement is: a file relative to the repository and a line."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Graph:
    """A directed graph whose edges remember the import statements that make them."""

    edges: dict[str, dict[str, list[Site]]] = field(default_factory=dict)

    def add(self, source: str, target: str, site: Site) -> None:
        """Record that `source` imports `target` at `site` (self-imports are ignored)."""
        if source != target:
            self.edges.setdefault(source, {}).setdefault(target, []).append(site)
            self.edges.setdefault(target, {})

    def targets(self, node: str) -> list[str]:
        """The nodes `node` imports, sorted."""
        return sorted(self.edges.get(node, {}))


@dataclass(frozen=True)
class ModuleFile:
    """One .py file of the tree: its dotted name, its path for messages, whether it is a package, and
    whether its folder is a folder of scripts (no `__init__.py`: its siblings are importable by name)."""

    name: str
    path: Path
    shown: str
    is_package: bool
    in_script_folder: bool = False


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in `tree`, at any depth, except inside `if TYPE_CHECKING:` bodies."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the `else:` branch does run
            continue
        stack.extend(ast.iter_child_nodes(node))


def _resolve_from(module: ModuleFile, node: ast.ImportFrom) -> str:
    """The absolute dotted name `from <...> import` refers to."""
    if node.level == 0:
        return node.module or ""
    package = module.name.split(".")
    if not module.is_package:
        package.pop()
    if node.level > 1:
        package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, *([node.module] if node.module else [])])


def _nearest(name: str, modules: dict[str, ModuleFile]) -> str | None:
    """`name` if it is a file of the tree, else its longest prefix that is (for `import a.b.func`)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _local(module: ModuleFile, name: str, modules: dict[str, ModuleFile]) -> str:
    """`name` as the tree spells it: in a folder of scripts a bare name may be a sibling module.

    Python puts a script's own folder first on sys.path, so `import archgraph` in scripts/lib/ is
    scripts/lib/archgraph.py (a sibling is looked for before the name itself).
    """
    folder = module.name.rpartition(".")[0]
    if module.in_script_folder and name and f"{folder}.{name.split('.')[0]}" in modules:
        return f"{folder}.{name}"
    return name


def imported_modules(
    module: ModuleFile, node: ast.Import | ast.ImportFrom, modules: dict[str, ModuleFile]
) -> set[str]:
    """The files of the tree that one import statement imports.

    `from pkg import name` imports the module `pkg.name` when that is a file, else `pkg` itself.
    Parent packages' `__init__` files, which Python also runs, are not counted: nearly every module
    would otherwise depend on its own package's `__init__`, a cycle of no interest.
    """
    found: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            target = _nearest(_local(module, alias.name, modules), modules)
            if target:
                found.add(target)
        return found
    base = _resolve_from(module, node)
    if node.level == 0:
        base = _local(module, base, modules)
    for alias in node.names:
        if alias.name != "*" and f"{base}.{alias.name}" in modules:
            found.add(f"{base}.{alias.name}")
        elif base in modules:
            found.add(base)
    return found


def strongly_connected(graph: Graph) -> list[set[str]]:
    """Tarjan's components with more than one node (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for start in sorted(graph.edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(graph.targets(start)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: set[str] = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph.targets(child))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


class TooManyCycles(Exception):
    """The graph has more simple cycles than the caller's limit: listing them would not help anyone."""


def elementary_cycles(graph: Graph, limit: int) -> list[tuple[str, ...]]:
    """Every simple cycle of `graph`, each rotated to start at its smallest node, sorted.

    A depth-first search from each node that only visits larger nodes of the same strongly
    connected component finds each cycle exactly once (from its smallest node). The graphs here
    are small (tens of packages, a few tangled files); `limit` guards against a tangle that is not.
    """
    cycles: list[tuple[str, ...]] = []
    for component in strongly_connected(graph):
        for start in sorted(component):
            path = [start]
            work: list[Iterator[str]] = [iter(graph.targets(start))]
            while work:
                child = next(work[-1], None)
                if child is None:
                    work.pop()
                    path.pop()
                elif child == start:
                    cycles.append(tuple(path))
                    if len(cycles) > limit:
                        raise TooManyCycles(f"more than {limit} simple cycles")
                elif child in component and child > start and child not in path:
                    path.append(child)
                    work.append(iter(graph.targets(child)))
    return sorted(cycles, key=lambda cycle: (len(cycle), cycle))


def chain(cycle: Iterable[str]) -> str:
    """`a -> b -> a`: the baseline's spelling of a cycle."""
    nodes = list(cycle)
    return " -> ".join([*nodes, nodes[0]])


def describe(graph: Graph, cycle: tuple[str, ...]) -> list[str]:
    """The import statements along a cycle, one line per edge (the first site, and how many more)."""
    lines = []
    for source, target in zip(cycle, (*cycle[1:], cycle[0]), strict=True):
        sites = graph.edges[source][target]
        more = f" (and {len(sites) - 1} more)" if len(sites) > 1 else ""
        lines.append(f"    {source} -> {target}  at {sites[0]}{more}")
    return lines


def canonical(nodes: list[str]) -> tuple[str, ...]:
    """A cycle rotated to start at its smallest node: one spelling for each cycle."""
    first = nodes.index(min(nodes))
    return tuple(nodes[first:] + nodes[:first])


def shortest_cycle(graph: Graph, source: str, target: str) -> tuple[str, ...] | None:
    """The shortest cycle that takes the edge source -> target (breadth-first from target back)."""
    previous: dict[str, str] = {target: target}
    queue = [target]
    for node in queue:
        if node == source:
            path = [source]
            while path[-1] != target:
                path.append(previous[path[-1]])
            return (source, *reversed(path[1:]))
        for child in graph.targets(node):
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return None

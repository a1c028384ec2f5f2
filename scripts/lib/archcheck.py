#!/usr/bin/env python3
"""Architecture checks over app/, benchmarks/ and scripts/: no import cycles, no oversized files or
functions (standard library only).

It lives in scripts/lib/ beside lockcheck.py rather than in app/: it is tooling that reads the trees
as text (`ast`), never imports them, so it runs before any install and cannot be skewed by
import-time side effects; tests/unit/test_archcheck.py loads it by path and runs it on small fake
trees. The import graph (which file an import statement imports, the cycles) is archgraph.py's.

What fails, in every tree:
- a cycle between modules (files): `a.py` imports `b.py` imports `a.py`, at any depth, counting
  imports inside functions and relative ones, but not those under `if TYPE_CHECKING:`; a module in
  a folder without `__init__.py` (scripts/lib/) imports its siblings by bare name, as Python lets a
  script do;
- a file over MAX_FILE_LINES lines, a function or method over MAX_FUNCTION_LINES lines
  (`end_lineno - lineno + 1`: from `def` to its last line, decorators not counted).

What fails in app/ only (its layers; benchmarks/ and scripts/ are collections of tools, not layers):
- a cycle between packages: each `app/<pkg>/` is one node (evidence search's inner packages and its
  settings module are nodes of their own, see SPLIT_PACKAGES) and each top-level module (config,
  deps, main, ...) is one node;
- a router (a module of app/api/) that imports app/store/ or calls `.acquire(`: routers call
  services, SQL and connections stay below them (no baseline: there is nothing to tolerate).

What exists today is listed in a baseline file (scripts/lib/arch-baseline.txt), which can only
shrink: a cycle or offender missing from it fails, an offender larger than its listed size fails, and
so does a line that no longer matches anything (delete it). Each cycle is printed as a chain with the
file:line of every import along it.

    python3 scripts/lib/archcheck.py                        # check the three trees against the baseline
    python3 scripts/lib/archcheck.py --write-baseline       # print a baseline of what exists now
    python3 scripts/lib/archcheck.py --root DIR [--root DIR ...] --baseline FILE

One baseline serves every tree: a line belongs to the tree its path or module name starts with
(package cycles to app/), and a check of some trees leaves the other trees' lines alone.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # loaded by path (the tests) rather than run: archgraph.py beside it
    sys.path.insert(0, str(HERE))

from archgraph import (  # noqa: E402
    Graph,
    ModuleFile,
    Site,
    TooManyCycles,
    canonical,
    chain,
    describe,
    elementary_cycles,
    import_nodes,
    imported_modules,
    shortest_cycle,
    strongly_connected,
)

REPO = HERE.parents[1]
DEFAULT_ROOT = REPO / "app"
# the trees `scripts/lint` checks; the layer rules (package cycles, routers) are app/'s alone
DEFAULT_ROOTS = (DEFAULT_ROOT, REPO / "benchmarks", REPO / "scripts")
LAYERED = "app"
DEFAULT_BASELINE = HERE / "arch-baseline.txt"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
# sub-packages that count as packages of their own in the package graph (dotted, below the root)
# (evidence.settings is read by config, below everything else of evidence: a node of its own)
SPLIT_PACKAGES = ("evidence.query", "evidence.index", "evidence.store", "evidence.settings")
ROUTERS, STORE = "api", "store"  # routers import nothing of the store and open no connection

# baseline line kinds
MODULE_CYCLE = "module-cycle"
PACKAGE_CYCLE = "package-cycle"
FILE_LINES = "file-lines"
FUNCTION_LINES = "function-lines"
MAX_CYCLES = 5000


def shown_path(path: Path, shown_base: Path) -> str:
    """A path as messages and the baseline write it: relative to `shown_base` when it lies below it."""
    return path.relative_to(shown_base).as_posix() if path.is_relative_to(shown_base) else str(path)


def discover(root: Path, shown_base: Path) -> dict[str, ModuleFile]:
    """Every .py file under `root`, keyed by dotted module name (`app.store.db`, `app.search`)."""
    modules: dict[str, ModuleFile] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        script_folder = not (path.parent / "__init__.py").is_file()
        name = ".".join(parts)
        modules[name] = ModuleFile(name, path, shown_path(path, shown_base), is_package, script_folder)
    return modules


def package_of(name: str, root_name: str) -> str:
    """The package-graph node of a module: `search`, `evidence.query`, `config` (names below the root)."""
    parts = name.split(".")[1:]
    if not parts:
        return root_name
    for split in sorted(SPLIT_PACKAGES, key=len, reverse=True):
        split_parts = split.split(".")
        if parts[: len(split_parts)] == split_parts:
            return split
    return parts[0]


@dataclass
class Tree:
    """What the check reads from a source tree."""

    modules: dict[str, ModuleFile]
    module_graph: Graph
    package_graph: Graph
    file_lines: dict[str, int]
    function_lines: dict[str, int]
    errors: list[str]
    router_acquires: list[Site] = field(default_factory=list)
    layered: bool = True  # app/: the package graph and the routers' rule apply


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, length in lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            qualified = f"{prefix}{node.name}"
            assert node.end_lineno is not None
            yield qualified, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{qualified}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def read_tree(root: Path, shown_base: Path | None = None) -> Tree:
    """Parse every file under `root` into the module and package graphs and the size tables.

    The package graph and the routers' calls are read for the layered tree (app/) only.
    """
    shown_base = shown_base or root.parent
    layered = root.name == LAYERED
    modules = discover(root, shown_base)
    modules_graph, packages_graph = Graph(), Graph()
    file_lines: dict[str, int] = {}
    function_lines: dict[str, int] = {}
    errors: list[str] = []
    acquires: list[Site] = []
    for module in modules.values():
        text = module.path.read_text(encoding="utf-8")
        file_lines[module.shown] = len(text.splitlines())
        try:
            tree = ast.parse(text, filename=module.shown)
        except SyntaxError as exc:
            errors.append(f"{module.shown}:{exc.lineno}: cannot parse: {exc.msg}")
            continue
        for name, length in _functions(tree):
            key = f"{module.shown}:{name}"
            # a name defined twice (a conditional definition): the longer one counts
            function_lines[key] = max(length, function_lines.get(key, 0))
        source_package = package_of(module.name, root.name)
        if layered and source_package == ROUTERS:
            acquires.extend(Site(module.shown, node.lineno) for node in _acquire_calls(tree))
        modules_graph.edges.setdefault(module.name, {})
        if layered:
            packages_graph.edges.setdefault(source_package, {})
        for node in import_nodes(tree):
            site = Site(module.shown, node.lineno)
            for target in imported_modules(module, node, modules):
                modules_graph.add(module.name, target, site)
                if layered:
                    packages_graph.add(source_package, package_of(target, root.name), site)
    return Tree(modules, modules_graph, packages_graph, file_lines, function_lines, errors, acquires, layered)


def _acquire_calls(tree: ast.AST) -> Iterator[ast.Call]:
    """Every call of a method named `acquire` (a pool connection, whatever the pool is called)."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "acquire"
        ):
            yield node


def router_problems(tree: Tree, root_name: str) -> list[str]:
    """Routers that import the store (each import site) or acquire a connection (each call)."""
    problems: list[str] = []
    for source, targets in sorted(tree.module_graph.edges.items()):
        if package_of(source, root_name) != ROUTERS:
            continue
        for target, sites in sorted(targets.items()):
            if package_of(target, root_name) == STORE:
                problems.extend(
                    f"{site}: router {source} imports {target}: routers call a service; "
                    f"SQL and its records stay in {root_name}/{STORE}/ and the services"
                    for site in sites
                )
    problems.extend(
        f"{site}: a router acquires a database connection: call a service that does"
        for site in tree.router_acquires
    )
    return problems


@dataclass(frozen=True)
class Entry:
    """One baseline line: a cycle (`size` None) or a size offender, keyed by (kind, name)."""

    kind: str
    name: str
    size: int | None
    line: int


def parse_entry(raw: str, number: int) -> Entry | str | None:
    """A baseline line as an Entry, None for a blank or comment line, or an error message."""
    line = raw.split("#", 1)[0].strip()
    if not line:
        return None
    kind, _, rest = line.partition(" ")
    rest = rest.strip()
    if kind in (MODULE_CYCLE, PACKAGE_CYCLE):
        nodes = [part.strip() for part in rest.split("->")]
        if len(nodes) < 3 or nodes[0] != nodes[-1] or not all(nodes):
            return f"line {number}: a cycle is written `{kind} a -> b -> a`: {raw!r}"
        return Entry(kind, chain(canonical(nodes[:-1])), None, number)
    if kind in (FILE_LINES, FUNCTION_LINES):
        name, _, size = rest.rpartition(" ")
        if not name or not size.isdigit():
            return f"line {number}: a size is written `{kind} NAME LINES`: {raw!r}"
        return Entry(kind, name.strip(), int(size), number)
    return f"line {number}: unknown entry {kind!r}: {raw!r}"


@dataclass(frozen=True)
class Baseline:
    """The allow-list, by (kind, name), and the lines that could not be read."""

    entries: dict[tuple[str, str], Entry]
    errors: list[str]


def read_baseline(path: Path) -> Baseline:
    """Parse the baseline file (missing: empty); `#` starts a comment."""
    entries: dict[tuple[str, str], Entry] = {}
    errors: list[str] = []
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    for number, raw in enumerate(text.splitlines(), start=1):
        parsed = parse_entry(raw, number)
        if isinstance(parsed, str):
            errors.append(f"{path.name} {parsed}")
        elif parsed is not None:
            entries[(parsed.kind, parsed.name)] = parsed
    return Baseline(entries, errors)


@dataclass(frozen=True)
class Findings:
    """What exists now: every cycle (size None) and every file and function over its limit.

    `tangled` names the graphs with too many cycles to list: their cycles are not in `found`.
    """

    found: dict[tuple[str, str], int | None]
    cycles: dict[tuple[str, str], tuple[str, tuple[str, ...]]]
    tangled: frozenset[str]


def findings(tree: Tree) -> Findings:
    """The cycles of both graphs and the size offenders of a parsed tree."""
    found: dict[tuple[str, str], int | None] = {}
    cycles: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
    tangled: set[str] = set()
    for kind, graph in ((MODULE_CYCLE, tree.module_graph), (PACKAGE_CYCLE, tree.package_graph)):
        try:
            listed = elementary_cycles(graph, MAX_CYCLES)
        except TooManyCycles:
            tangled.add(kind)
            continue
        for cycle in listed:
            found[(kind, chain(cycle))] = None
            cycles[(kind, chain(cycle))] = (kind, cycle)
    for path, lines in sorted(tree.file_lines.items()):
        if lines > MAX_FILE_LINES:
            found[(FILE_LINES, path)] = lines
    for name, lines in sorted(tree.function_lines.items()):
        if lines > MAX_FUNCTION_LINES:
            found[(FUNCTION_LINES, name)] = lines
    return Findings(found, cycles, frozenset(tangled))


def tangle(kind: str, graph: Graph, baseline: Baseline, shown: int = 5) -> list[str]:
    """For a graph with too many cycles to list: the imports most of them go through.

    For each import on a cycle that no baseline cycle takes, the shortest cycle through it; the
    imports those cycles share most are where a new tangle starts (one new import into a low module
    usually closes hundreds), so they are listed first, with the shortest cycles through the first.
    """
    allowed: set[tuple[str, str]] = set()
    for entry in baseline.entries.values():
        if entry.kind == kind:
            allowed.update(itertools.pairwise(part.strip() for part in entry.name.split("->")))
    cycles: set[tuple[str, ...]] = set()
    for component in strongly_connected(graph):
        for source in sorted(component):
            for target in graph.targets(source):
                if target in component and (source, target) not in allowed:
                    cycle = shortest_cycle(graph, source, target)
                    if cycle is not None:
                        cycles.add(canonical(list(cycle)))
    through: Counter[tuple[str, str]] = Counter()
    for cycle in cycles:
        through.update(
            edge for edge in zip(cycle, (*cycle[1:], cycle[0]), strict=True) if edge not in allowed
        )
    messages = [
        f"import cycles between {NOUNS[kind]}: more than {MAX_CYCLES}, too many to list; "
        f"the imports most of the {len(cycles)} shortest new ones go through:"
    ]
    for (source, target), count in sorted(through.items(), key=lambda item: (-item[1], item[0]))[:shown]:
        messages.append(f"    {source} -> {target}  at {graph.edges[source][target][0]}  ({count} cycles)")
    if through:
        top = min(through, key=lambda edge: (-through[edge], edge))
        examples = sorted((c for c in cycles if top[0] in c and top[1] in c), key=lambda c: (len(c), c))[:3]
        for cycle in examples:
            messages.append(f"  for example {chain(cycle)}\n" + "\n".join(describe(graph, cycle)))
    return ["\n".join(messages)]


LIMITS = {FILE_LINES: MAX_FILE_LINES, FUNCTION_LINES: MAX_FUNCTION_LINES}
NOUNS = {FILE_LINES: "file", FUNCTION_LINES: "function", MODULE_CYCLE: "modules", PACKAGE_CYCLE: "packages"}


Roots = Path | Sequence[Path]


def _trees(roots: Roots, shown_base: Path | None) -> list[tuple[Tree, str]]:
    """Each root parsed, with its path as the baseline writes it (`app`, `benchmarks`, ...)."""
    paths = [roots] if isinstance(roots, Path) else list(roots)
    return [(read_tree(path, shown_base), shown_path(path, shown_base or path.parent)) for path in paths]


def _owns(tree: Tree, shown: str, entry: Entry) -> bool:
    """Whether a baseline line is about this tree: its path or module name starts with the tree's."""
    if entry.kind == PACKAGE_CYCLE:
        return tree.layered
    if entry.kind == MODULE_CYCLE:
        return entry.name.startswith(f"{Path(shown).name}.")
    return entry.name.startswith(f"{shown}/")


def _offences(tree: Tree, now: Findings, baseline: Baseline, baseline_path: Path) -> list[str]:
    """The cycles and sizes of one tree that its baseline lines do not allow."""
    problems: list[str] = []
    graphs = {MODULE_CYCLE: tree.module_graph, PACKAGE_CYCLE: tree.package_graph}
    for kind in sorted(now.tangled):
        problems.extend(tangle(kind, graphs[kind], baseline))
    for key, size in now.found.items():
        kind, name = key
        listed = baseline.entries.get(key)
        if size is None and listed is None:
            cycle = now.cycles[key][1]
            problems.append(
                f"import cycle between {NOUNS[kind]}: {name}\n" + "\n".join(describe(graphs[kind], cycle))
            )
        elif size is not None and listed is None:
            problems.append(f"{NOUNS[kind]} {name} has {size} lines, over the limit of {LIMITS[kind]}")
        elif size is not None and listed is not None and listed.size is not None and size > listed.size:
            problems.append(
                f"{NOUNS[kind]} {name} has grown to {size} lines ({baseline_path.name}:{listed.line} allows "
                f"{listed.size}, the limit is {LIMITS[kind]}): make it smaller, not larger"
            )
    return problems


def check(roots: Roots, baseline_path: Path, shown_base: Path | None = None) -> list[str]:
    """Every problem of the trees against the baseline, as messages (empty: all is well).

    Lines of the baseline that belong to no tree checked here are left alone.
    """
    baseline = read_baseline(baseline_path)
    problems = list(baseline.errors)
    for tree, shown in _trees(roots, shown_base):
        now = findings(tree)
        problems.extend(tree.errors)
        if tree.layered:
            problems.extend(router_problems(tree, Path(shown).name))
        problems.extend(_offences(tree, now, baseline, baseline_path))
        problems.extend(_stale(tree, shown, now, baseline, baseline_path))
    return problems


def _stale(tree: Tree, shown: str, now: Findings, baseline: Baseline, baseline_path: Path) -> list[str]:
    """The tree's baseline lines that match nothing any more (a tangled graph's cycles cannot tell)."""
    problems: list[str] = []
    for key, entry in sorted(baseline.entries.items(), key=lambda item: item[1].line):
        if _owns(tree, shown, entry) and key not in now.found and entry.kind not in now.tangled:
            gone = (
                "no longer occurs" if entry.size is None else f"is no longer over {LIMITS[entry.kind]} lines"
            )
            problems.append(
                f"{baseline_path.name}:{entry.line}: `{entry.kind} {entry.name}` {gone}: delete that line "
                "(archcheck.py --prune does)"
            )
    return problems


def _everything_now(roots: Roots, shown_base: Path | None, doing: str) -> list[tuple[Tree, str, Findings]]:
    """Each tree with its findings, refusing a tree too tangled to list (`doing`: for the message)."""
    found = [(tree, shown, findings(tree)) for tree, shown in _trees(roots, shown_base)]
    if any(now.tangled for _, _, now in found):
        raise SystemExit(f"archcheck: too many import cycles to {doing}: run the check first")
    return found


def baseline_text(roots: Roots, shown_base: Path | None = None) -> str:
    """A baseline listing everything that exists now (to start one, never to grow one)."""
    lines = [
        "# What scripts/lib/archcheck.py tolerates today. The list may only shrink: when an entry is fixed,",
        "# delete its line (the check fails while a line matches nothing; `archcheck.py --prune` deletes",
        "# such lines and lowers sizes that shrank). Never add a line: fix the new cycle or size instead.",
        "# Each cycle line is one simple cycle; removing one import often ends many of them.",
    ]
    for _, _, now in _everything_now(roots, shown_base, "write a baseline"):
        for (kind, name), size in now.found.items():
            lines.append(f"{kind} {name}" + ("" if size is None else f" {size}"))
    return "\n".join(lines) + "\n"


def prune(roots: Roots, baseline_path: Path, shown_base: Path | None = None) -> list[str]:
    """Delete the baseline lines that match nothing and lower sizes that shrank; returns what changed.

    It never adds an entry nor raises a size, so running it cannot hide a new problem; lines of
    trees not given are kept as they are.
    """
    trees = _everything_now(roots, shown_base, "prune against")
    kept: list[str] = []
    changes: list[str] = []
    for number, raw in enumerate(baseline_path.read_text(encoding="utf-8").splitlines(), start=1):
        entry = parse_entry(raw, number)
        owners = [
            now.found for tree, shown, now in trees if isinstance(entry, Entry) and _owns(tree, shown, entry)
        ]
        if not isinstance(entry, Entry) or not owners:
            kept.append(raw)
            continue
        owner = owners[0]
        key = (entry.kind, entry.name)
        if key not in owner:
            changes.append(f"deleted line {number}: {raw.strip()}")
            continue
        size = owner[key]
        if entry.size is not None and size is not None and size < entry.size:
            kept.append(f"{entry.kind} {entry.name} {size}")
            changes.append(f"lowered line {number}: {entry.kind} {entry.name} {entry.size} -> {size}")
            continue
        kept.append(raw)
    baseline_path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return changes


def main(argv: list[str]) -> int:
    """Check the trees against the baseline (exit 1 on any problem), or write or prune a baseline."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--root", type=Path, action="append", help="a tree to check, repeatable (app/, benchmarks/, scripts/)"
    )
    parser.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write-baseline", action="store_true", help="print a baseline of today's state")
    action.add_argument("--prune", action="store_true", help="delete baseline lines that match nothing")
    args = parser.parse_args(argv[1:])
    roots = [path.resolve() for path in (args.root or DEFAULT_ROOTS)]
    shown_base = REPO if all(root.is_relative_to(REPO) for root in roots) else roots[0].parent
    if args.write_baseline:
        sys.stdout.write(baseline_text(roots, shown_base))
        return 0
    if args.prune:
        for change in prune(roots, args.baseline, shown_base):
            print(change)
        return 0
    problems = check(roots, args.baseline, shown_base)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(
            f"archcheck: {len(problems)} problem(s). The cycles and sizes tolerated today are listed in "
            f"{args.baseline}; that list may only shrink.",
            file=sys.stderr,
        )
        return 1
    names = ", ".join(f"{root.name}/" for root in roots)
    print(f"archcheck: {names}: no import cycle, file or function size beyond {args.baseline.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
